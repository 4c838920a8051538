"""`gpoeo-rt start`: one controller per GPU (or per lockstep group) in one process, each on its own thread, with a
local control channel, and the clocks given back on every way out.

Ways out and what restores the clocks:
- SIGTERM / SIGINT / SIGHUP, `gpoeo-rt stop`, the end of a simulated job: the stop event ends each controller's
  current sleep at once (StoppableClock), the controller resets its clocks and logs "stop".
- An exception in a controller (NVML errors included): the controller resets before re-raising; the daemon logs
  it, waits restart_backoff_s and starts a fresh controller (up to max_restarts times in a row).
- The GPU becoming unreachable: the reset fails too, so the clock state file stays; the daemon retries the reset
  on each restart and at exit, and the next `start` or `gpoeo-rt reset` (systemd's ExecStopPost) restores it.
- SIGKILL or a host crash: the state file written before every lock tells the next `start`/`reset` to restore.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import FrameType
from typing import Any

from gpoeo_rt import __version__
from gpoeo_rt.controller.controller import Controller, ControllerConfig
from gpoeo_rt.controller.state import Policy, State
from gpoeo_rt.daemon.accounting import SavingsMeter
from gpoeo_rt.daemon.config import DaemonConfig
from gpoeo_rt.daemon.control import ControlServer, resolve_group, resolve_users
from gpoeo_rt.daemon.decisionlog import DecisionLog
from gpoeo_rt.daemon.marker_check import CheckedSampler
from gpoeo_rt.daemon.markers import MarkerAdmission, MarkerBoard, MarkerServer
from gpoeo_rt.daemon.safety import (
    AlreadyRunningError,
    ClockStateStore,
    GPULock,
    LockDirError,
    ManagedGPU,
    RunDirLock,
)
from gpoeo_rt.daemon.watchdog import GPUHungError, WatchdogGPU, call_bounded
from gpoeo_rt.device.base import GPU
from gpoeo_rt.device.clock import SimClock, SleepInterruptedError
from gpoeo_rt.device.errors import GPUError, GPUNoPermissionError
from gpoeo_rt.device.group import GroupGPU
from gpoeo_rt.sampling.markers import MarkerSource
from gpoeo_rt.search.objectives import Objective

OpenDevice = Callable[[int, bool], GPU]  # (index, allow_clock_writes) -> device
Say = Callable[[str], None]


def _rss_mb() -> float:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


@dataclass
class Worker:
    """One controller thread: one GPU, or one lockstep group."""

    label: str
    managed: list[ManagedGPU]
    device: GPU  # what the controller drives: the managed GPU, or a GroupGPU of them
    predictor: Any
    bundle: str | None
    bundle_reason: str
    advise: bool
    log_path: Path
    markers: MarkerSource | None = None  # where this job's step markers arrive
    sampler: CheckedSampler | None = None  # the controller's sampler: markers checked against the power signal
    distrusted: dict[int, str] = field(default_factory=dict)  # marker senders the power signal contradicted
    log: DecisionLog | None = None  # the decision log (bounded; a failing disk drops records, never the worker)
    timing: str | None = None  # the last measured period's source: "markers" or "signal"
    meter: SavingsMeter = field(default_factory=SavingsMeter)
    controller: Controller | None = None
    thread: threading.Thread | None = None
    decisions: int = 0
    last_reason: str = ""
    error: str | None = None
    restarts: int = 0
    failed: bool = False
    refused: str | None = None  # why this GPU was not started (its bundle is unusable): it stays at default clocks
    restart_requested: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def indices(self) -> list[int]:
        return [gpu.index for gpu in self.managed]

    def clocks_restored(self) -> bool:
        return not any(gpu.clocks_recorded_locked for gpu in self.managed)


class Daemon:
    """Runs until stopped; `run()` returns the process exit code (0: every clock given back)."""

    def __init__(
        self,
        config: DaemonConfig,
        *,
        open_device: OpenDevice | None = None,
        device_count: Callable[[], int] | None = None,
        is_root: Callable[[], bool] = lambda: os.geteuid() == 0,
        say: Say = print,
        install_signals: bool = True,
        serve: bool = True,
        run_for_s: float | None = None,
    ) -> None:
        """`open_device`/`device_count` replace the NVML or simulated backends (tests inject a fake NVML);
        `run_for_s` stops after that much device time (a simulated job's length is `sim_seconds`)."""
        self.config = config
        self._say = say
        self._install_signals = install_signals
        self._serve = serve
        self.stop_event = threading.Event()
        self._wake = threading.Event()  # set on stop and when a worker ends: the main loop looks again
        self._signalled = False  # a stop signal arrived: the main loop stops (see _on_signal)
        self._store = ClockStateStore(config.state_dir)
        self._locks: list[GPULock | RunDirLock] = []
        self.workers: list[Worker] = []
        self._server: ControlServer | None = None
        self._exporter: Any = None
        self.prometheus_port: int | None = None
        self._marker_server: MarkerServer | None = None
        self.marker_board: MarkerBoard | None = None
        self._started_unix_s = time.time()
        self._sim_clock: SimClock | None = None
        self._sim_end_s: float | None = None
        self._run_for_s = run_for_s
        self.advise = config.advise
        if config.simulate is not None:
            self._sim_clock = SimClock()
            self._sim_end_s = config.sim_seconds
            self._open_device = open_device or self._open_simulated
            self._device_count = device_count or (lambda: config.sim_gpus)
        else:
            self._open_device = open_device or self._open_nvml
            self._device_count = device_count or _nvml_count
            if not self.advise and not is_root():
                self._say(
                    "gpoeo-rt: setting GPU clocks needs root; running in advise mode (decisions are logged, "
                    "clocks are never changed)"
                )
                self.advise = True

    # --- devices ------------------------------------------------------------------------------------------------

    def _open_simulated(self, index: int, allow_clock_writes: bool) -> GPU:
        from gpoeo_rt.device import open_gpu

        assert self.config.simulate is not None and self._sim_clock is not None
        return open_gpu(
            index,
            simulate=self.config.simulate,
            allow_clock_writes=allow_clock_writes,
            seed=index,
            clock=self._sim_clock,
            lock_state_path=Path(self.config.state_dir) / f"simulated-gpu{index}.json",
        )

    @staticmethod
    def _open_nvml(index: int, allow_clock_writes: bool) -> GPU:
        from gpoeo_rt.device.nvml import NVMLGPU

        return NVMLGPU(index, allow_clock_writes=allow_clock_writes)

    def _restore_stale(self, gpu: GPU) -> None:
        """A state file for this GPU means an earlier gpoeo-rt may have left it locked: reset it first. An unreadable
        one is treated the same way (the lock it recorded is unknown; a reset undoes any)."""
        record = self._store.record_for(gpu.uuid)
        if record is None:
            return
        if isinstance(record, str):
            what = f"GPU {gpu.index}'s clock state file {self._store.path_for(gpu.uuid)} is unreadable ({record})"
        else:
            what = f"GPU {gpu.index} was left locked at SM {record.sm_clock_mhz} / memory {record.mem_clock_mhz} MHz "
            what += f"by gpoeo-rt pid {record.pid}"
        if self.advise:
            self._say(f"gpoeo-rt: warning: {what}; advise mode cannot reset it: run `gpoeo-rt reset` as root")
            return
        gpu.reset_clocks()
        self._store.record_reset(gpu)
        self._say(f"gpoeo-rt: {what}: restored the default clocks")

    def _open_bounded(self, index: int, allow_clock_writes: bool) -> GPU:
        """Open a GPU; an NVML one opens within nvml_timeout_s (else GPUHungError) and gets its watchdog."""
        if self.config.simulate is not None:  # NVML can hang; the simulator cannot
            return self._open_device(index, allow_clock_writes)
        timeout_s = self.config.nvml_timeout_s
        gpu = call_bounded(lambda: self._open_device(index, allow_clock_writes), timeout_s, f"opening GPU {index}")
        return WatchdogGPU(gpu, timeout_s=timeout_s)

    # --- set-up -------------------------------------------------------------------------------------------------

    def _predictor_for(self, gpu: GPU) -> tuple[Any, str | None, str]:
        if Policy(self.config.policy) is Policy.SEARCH and not self.advise:
            return None, None, "policy 'search' uses no model"
        from gpoeo_rt.prediction.predictor import Predictor
        from gpoeo_rt.prediction.selection import default_bundle_dirs, select_bundle

        if self.config.bundles is not None:
            root = Path(self.config.bundles)
        else:
            root = next((d for d in default_bundle_dirs() if d.is_dir()), default_bundle_dirs()[0])
        choice = select_bundle(root, gpu.name)
        return Predictor(choice.manifest), choice.manifest.name, choice.reason

    def _controller_config(self, advise: bool) -> ControllerConfig:
        policy = Policy(self.config.policy)
        if advise and policy is Policy.SEARCH:
            policy = Policy.HYBRID  # advice is the model's pick
        return ControllerConfig(
            policy=policy,
            objective=Objective(self.config.objective),
            max_slowdown=self.config.max_slowdown,
            advise=advise,
        )

    def _setup(self) -> None:
        cfg = self.config
        indices = cfg.gpu_indices(self._device_count())
        opened: list[GPU] = []
        try:
            for index in indices:
                gpu = self._open_bounded(index, not self.advise)
                opened.append(gpu)
                lock = GPULock(cfg.resolved_lock_dir(), gpu.uuid, index, run_dir=cfg.run_dir)
                lock.acquire()
                self._locks.append(lock)
            for gpu in opened:
                self._restore_stale(gpu)
        except BaseException:
            for gpu in opened:
                with contextlib.suppress(Exception):
                    gpu.close()
            raise
        clock = self._sim_clock.now_s if self._sim_clock is not None else time.time  # markers carry time.time()
        raw = {gpu.index: gpu for gpu in opened}
        admission = MarkerAdmission(
            lambda index: raw[index].running_pids(),
            allowed_uids=resolve_users(cfg.marker_users),
            allowed_gid=resolve_group(cfg.marker_group, "marker_group"),
        )
        self.marker_board = MarkerBoard([(gpu.index, gpu.uuid) for gpu in opened], clock, admission=admission)
        speed = cfg.sim_speed if cfg.simulate is not None else None
        managed = [ManagedGPU(gpu, self._store, self.stop_event, speed=speed) for gpu in opened]
        groups: list[list[ManagedGPU]] = [managed] if cfg.group is not None else [[m] for m in managed]
        log_dir = Path(cfg.state_dir)
        log_dir.mkdir(parents=True, exist_ok=True)
        for members in groups:
            device: GPU = members[0] if len(members) == 1 else GroupGPU(members)
            label = "gpu" + "-".join(str(m.index) for m in members)
            refused = None
            try:
                predictor, bundle, reason = self._predictor_for(device)
            except Exception as exc:  # BundleError, or onnxruntime refusing a model: this GPU only
                predictor, bundle, reason = None, None, f"{exc}"
                refused = f"not started: its model bundle is unusable: {exc}"
            markers: MarkerSource = self.marker_board.source([m.index for m in members])
            if cfg.simulate is not None and cfg.sim_markers:
                from gpoeo_rt.device.simulated import SimulatedGPU, SimulatedStepMarkers

                simulated = raw[members[0].index]
                assert isinstance(simulated, SimulatedGPU)
                markers = SimulatedStepMarkers(simulated, seed=members[0].index)  # the simulated job marks its steps
            self.workers.append(
                Worker(
                    label=label,
                    managed=members,
                    device=device,
                    predictor=predictor,
                    bundle=bundle,
                    bundle_reason=reason,
                    advise=self.advise,
                    log_path=log_dir / f"decisions-{label}.jsonl",
                    log=DecisionLog(
                        log_dir / f"decisions-{label}.jsonl",
                        max_bytes=int(cfg.log_max_mb * (1 << 20)),
                        keep=cfg.log_keep,
                        say=self._say,
                    ),
                    markers=markers,
                    refused=refused,
                    error=refused,
                )
            )

    # --- running ------------------------------------------------------------------------------------------------

    def _sink(self, worker: Worker) -> Callable[[dict[str, object]], None]:
        def write(record: dict[str, object]) -> None:
            if worker.log is not None:
                worker.log.write({"gpus": worker.indices, **record})
            with worker.lock:
                worker.decisions += 1
                worker.last_reason = str(record.get("reason", ""))
                if record.get("timing") is not None:
                    worker.timing = str(record["timing"])
                worker.meter.feed(dict(record))

        return write

    def _retry_reset(self, worker: Worker) -> None:
        for gpu in worker.managed:
            if gpu.clocks_recorded_locked and not worker.advise:
                try:
                    gpu.reset_clocks()
                except Exception as exc:
                    worker.error = f"{worker.error}; reset of GPU {gpu.index} failed: {exc}"

    def _run_worker(self, worker: Worker) -> None:
        try:
            self._work(worker)
        except Exception as exc:  # anything _work did not expect: one line, never a thread traceback
            worker.failed = True
            worker.error = f"{type(exc).__name__}: {exc}"
            self._say(f"gpoeo-rt: GPU {worker.indices}: stopped by an unexpected error: {worker.error}")
        finally:
            self._wake.set()

    def _work(self, worker: Worker) -> None:
        end_s = self._sim_end_s
        if self._run_for_s is not None:
            end_s = worker.device.now_s() + self._run_for_s
        try:
            self._work_logged(worker, end_s)
        finally:
            if worker.log is not None:
                worker.log.close()

    def _work_logged(self, worker: Worker, end_s: float | None) -> None:
        sink = self._sink(worker)
        consecutive = 0
        while not self.stop_event.is_set():
            worker.restart_requested.clear()
            config = self._controller_config(worker.advise)
            sampler = None
            if worker.markers is not None:
                sampler = CheckedSampler(
                    worker.device,
                    worker.markers,
                    min_intervals=config.min_marker_intervals,
                    min_coverage=config.marker_coverage,
                    max_period_s=config.max_period_s,
                )
                worker.sampler = sampler
            try:
                ctrl = Controller(  # inside the try: building one reads the GPU, which may fail or hang
                    worker.device,
                    predictor=worker.predictor,
                    config=config,
                    log=sink,
                    keep_decisions=200,
                    sampler=sampler,
                )
                worker.controller = ctrl
                while ctrl.state is not State.STOPPED and not self.stop_event.is_set():
                    if worker.restart_requested.is_set():
                        ctrl.stop("settings changed: restarting the controller")
                        break
                    if end_s is not None and worker.device.now_s() >= end_s:
                        self.stop_event.set()
                        break
                    ctrl.step()
                    if ctrl.state is State.HOLDING:
                        consecutive = 0
                ctrl.stop("gpoeo-rt is stopping")
                if worker.restart_requested.is_set() and not self.stop_event.is_set():
                    continue
                return
            except GPUHungError as exc:
                worker.error = str(exc)
                self._say(f"gpoeo-rt: GPU {worker.indices}: {exc}; waiting for NVML to answer again")
                if not self._wait_responsive(worker):
                    return
                self._retry_reset(worker)  # at once: it may have been left locked
                self._say(f"gpoeo-rt: GPU {worker.indices}: NVML answers again; clocks reset, restarting")
                continue  # a hang is not the controller's fault: no backoff, not counted towards giving up
            except GPUNoPermissionError as exc:
                if not worker.advise:
                    self._say(
                        f"gpoeo-rt: GPU {worker.indices}: no permission to set clocks ({exc}); continuing in "
                        "advise mode"
                    )
                    worker.advise = True
                    continue
                worker.error = str(exc)
            except Exception as exc:
                worker.error = f"{type(exc).__name__}: {exc}"
            consecutive += 1
            worker.restarts += 1
            self._retry_reset(worker)
            if consecutive > self.config.max_restarts:
                worker.failed = True
                self._say(f"gpoeo-rt: GPU {worker.indices}: giving up after {consecutive} errors: {worker.error}")
                return
            self._say(
                f"gpoeo-rt: GPU {worker.indices}: controller error ({worker.error}); restarting in "
                f"{self.config.restart_backoff_s:g} s"
            )
            try:
                worker.device.clock.sleep(self.config.restart_backoff_s)
            except SleepInterruptedError:
                return
            self._retry_reset(worker)

    def _wait_responsive(self, worker: Worker) -> bool:
        """Wait until every watchdog of this worker's GPUs answers again; False when the daemon stops first."""
        for gpu in worker.managed:
            watchdog = gpu.inner
            if isinstance(watchdog, WatchdogGPU):
                while not watchdog.responsive.wait(0.1):
                    if self.stop_event.is_set():
                        return False
        return not self.stop_event.is_set()

    def request_stop(self) -> None:
        self.stop_event.set()
        self._wake.set()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        # Only a flag: the handler runs on the main thread between bytecodes, possibly inside _wake.wait() with the
        # event's lock held, and that lock is not re-entrant (setting the event here hung the daemon on SIGTERM).
        self._signalled = True

    @contextlib.contextmanager
    def _signals(self) -> Iterator[None]:
        if not self._install_signals:
            yield
            return
        handled = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
        previous = {s: signal.signal(s, self._on_signal) for s in handled}
        try:
            yield
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)

    def run(self) -> int:
        """Set up, run every worker until stopped, give every clock back. Exit code 0 when all were restored."""
        with self._signals():
            try:
                self._setup()
                if self._serve:
                    assert self.marker_board is not None
                    run_lock = RunDirLock(self.config.run_dir)  # after the GPU locks: their refusal says more
                    run_lock.acquire()
                    self._locks.append(run_lock)
                    # Markers first: once status answers, every socket is there.
                    self._marker_server = MarkerServer(self.config.run_dir, self.marker_board)
                    self._marker_server.start()
                    self._server = ControlServer(
                        self.config.run_dir, self.handle, socket_group=self.config.socket_group
                    )
                    self._server.start()
                if self.config.prometheus_port is not None:
                    from gpoeo_rt.daemon.metrics import start_exporter

                    self._exporter, self.prometheus_port = start_exporter(
                        self.status, self.config.prometheus_port, self.config.prometheus_addr
                    )
                    self._say(
                        f"gpoeo-rt: Prometheus metrics on http://{self.config.prometheus_addr}:{self.prometheus_port}/"
                    )
                if self._signalled:  # a stop signal during the setup: the workers stop before they start
                    self.request_stop()
                for worker in self.workers:
                    if worker.refused is not None:
                        self._say(f"gpoeo-rt: {worker.label} ({worker.device.name}): {worker.refused}")
                        continue
                    mode = "advise" if worker.advise else "control"
                    self._say(
                        f"gpoeo-rt: {worker.label} ({worker.device.name}): {mode} mode, bundle {worker.bundle} "
                        f"({worker.bundle_reason}); decisions -> {worker.log_path}"
                    )
                    worker.thread = threading.Thread(target=self._run_worker, args=(worker,), name=worker.label)
                    worker.thread.start()
                while any(w.thread is not None and w.thread.is_alive() for w in self.workers):
                    # Wake up regularly so signal handlers run (they run on the main thread, between waits).
                    self._wake.wait(0.2)
                    self._wake.clear()
                    if self._signalled:
                        self.request_stop()
                    if all(w.failed or w.refused is not None for w in self.workers):
                        break
            finally:
                self.stop_event.set()
                for worker in self.workers:
                    if worker.thread is not None:
                        worker.thread.join()
                    self._retry_reset(worker)
                if self._server is not None:
                    self._server.close()
                if self._exporter is not None:
                    self._exporter.shutdown()
                    self._exporter.server_close()
                if self._marker_server is not None:
                    self._marker_server.close()
                for worker in self.workers:
                    for gpu in worker.managed:
                        with contextlib.suppress(Exception):
                            gpu.close()
                for lock in self._locks:
                    lock.release()
        unrestored = [w for w in self.workers if not w.clocks_restored()]
        for worker in unrestored:
            self._say(
                f"gpoeo-rt: GPU {worker.indices}: could not restore the default clocks ({worker.error}); the state "
                f"file stays in {self.config.state_dir}: run `gpoeo-rt reset` once the GPU is reachable"
            )
        if unrestored or (self.workers and all(w.failed or w.refused is not None for w in self.workers)):
            return 1
        return 0

    # --- control channel ----------------------------------------------------------------------------------------

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        cmd = request["cmd"]
        if cmd == "status":
            return {"ok": True, "status": self.status()}
        if cmd == "stop":
            self.request_stop()
            return {"ok": True, "message": "stopping: clocks are being restored"}
        if cmd == "set":
            return self._set(request)
        return {"ok": False, "error": f"unknown command {cmd!r}"}

    def _set(self, request: dict[str, Any]) -> dict[str, Any]:
        changes = {k: request[k] for k in ("objective", "max_slowdown") if k in request}
        unknown = set(request) - {"cmd", "objective", "max_slowdown"}
        if unknown or not changes:
            return {"ok": False, "error": "set accepts objective and/or max_slowdown"}
        try:
            self.config = replace(self.config, **changes)
        except ValueError as exc:
            return {"ok": False, "error": str(exc)}
        for worker in self.workers:
            worker.restart_requested.set()
        return {"ok": True, "message": f"applied {changes}: controllers re-profile and re-search"}

    def _marker_summary(self, worker: Worker) -> dict[str, Any] | None:
        if self.marker_board is None:
            return None
        summary: dict[str, Any] = self.marker_board.summary(worker.indices)
        sampler = worker.sampler
        summary["dropped_windows"] = sampler.dropped if sampler else 0
        summary["last_drop"] = sampler.last_drop if sampler else None
        summary["ambiguous_windows"] = sampler.ambiguous if sampler else 0
        summary["distrusted"] = sorted(worker.distrusted)
        return summary

    def status(self) -> dict[str, Any]:
        gpus = []
        for w in self.workers:
            ctrl = w.controller
            with w.lock:
                meter = w.meter
                entry: dict[str, Any] = {
                    "gpus": w.indices,
                    "uuid": w.device.uuid,
                    "name": w.device.name,
                    "mode": "advise" if w.advise else "control",
                    "simulated": self.config.simulate is not None,
                    # Where the last measured period came from: "markers" (the job's step markers), "signal"
                    # (the power samples), None (nothing measured yet).
                    "timing": w.timing,
                    "markers": self._marker_summary(w),
                    "state": _worker_state(w),
                    "bundle": w.bundle,
                    "bundle_reason": w.bundle_reason,
                    "clocks": list(ctrl.clocks) if ctrl else None,
                    "locked": bool(ctrl and ctrl.clocks != ctrl.reference),
                    "reference_clocks": list(ctrl.reference) if ctrl else None,
                    "advised_clocks": list(ctrl.advised or ctrl.reference)
                    if ctrl and w.advise and meter.advised_predicted
                    else None,
                    "advised_predicted": meter.advised_predicted,
                    "baseline": meter.baseline,
                    "now": meter.now(),
                    "saving_so_far_pct": meter.saving_pct,
                    "slowdown_so_far_pct": meter.slowdown_pct,
                    # Joules over the counted time (used, at reference for the same work, saved), what share of
                    # the time the figures cover, and the energy counter's witness (accounting.py).
                    "bound_pct": meter.bound_pct,
                    "bound_verdict": meter.verdict(),  # within / at the bound (within the claim's noise) / over
                    "split": meter.split(),  # held decisions' saving, exploration's cost
                    "energy": meter.energy(),
                    "coverage": meter.total.coverage(),
                    "witness": meter.total.witness(),
                    "decisions": w.decisions,
                    "last_reason": w.last_reason,
                    "restarts": w.restarts,
                    "error": w.error,
                    # An NVML call that has not returned within nvml_timeout_s: {"call": ..., "for_s": ...}
                    "stuck": next((s for g in w.managed if (s := _stuck(g)) is not None), None),
                    "decision_log": str(w.log_path),
                    "logging": w.log.summary() if w.log is not None else None,
                }
            gpus.append(entry)
        return {
            "pid": os.getpid(),
            "version": __version__,
            "uptime_s": time.time() - self._started_unix_s,
            "rss_mb": round(_rss_mb(), 1),
            "objective": self.config.objective,
            "max_slowdown": self.config.max_slowdown,
            "advise": self.advise,
            "simulated": self.config.simulate,
            "gpus": gpus,
        }


def _stuck(gpu: ManagedGPU) -> dict[str, Any] | None:
    return gpu.inner.stuck() if isinstance(gpu.inner, WatchdogGPU) else None


def _worker_state(worker: Worker) -> str:
    if worker.refused is not None:
        return "refused"
    if any(_stuck(g) is not None for g in worker.managed):
        return "stuck"
    if worker.failed:
        return "failed"
    return worker.controller.state.value if worker.controller else "starting"


def _nvml_count() -> int:
    from gpoeo_rt.device.nvml import nvml_device_count

    return nvml_device_count()


def reset_gpus(
    config: DaemonConfig,
    *,
    force: bool = False,
    open_device: OpenDevice | None = None,
    device_count: Callable[[], int] | None = None,
    say: Say = print,
) -> int:
    """`gpoeo-rt reset`: restore the default clocks now on the chosen GPUs (default all) and on every GPU a state
    file names. Each GPU and each state file is handled on its own: one that fails is reported in one line and the
    others are still restored. A GPU a running gpoeo-rt holds is left to it unless `force`. Returns the exit code
    (1 when anything could not be restored or read)."""
    from gpoeo_rt.daemon.config import ConfigError, parse_gpu_list

    store = ClockStateStore(config.state_dir)
    daemon = Daemon(
        config,
        open_device=open_device,
        device_count=device_count,
        is_root=lambda: True,  # reset tries regardless; NVML says plainly if it lacks the permission
        say=say,
        install_signals=False,
        serve=False,
    )
    status = 0
    records, unreadable = store.scan()
    try:
        count = call_bounded(daemon._device_count, config.nvml_timeout_s, "counting the GPUs")
        wanted = set(config.gpu_indices(count))
    except (GPUError, ConfigError) as exc:
        say(f"gpoeo-rt: cannot list the GPUs: {exc}")
        status = 1
        wanted = set(parse_gpu_list(config.gpus, "gpus", allow_all=True) or [])
    wanted |= {r.index for r in records}
    handled: set[Path] = set()
    for index in sorted(wanted):
        try:
            gpu = daemon._open_bounded(index, True)  # each GPU bounded on its own: a hung one stops no other
        except (GPUError, OSError, ValueError) as exc:
            say(f"gpoeo-rt: GPU {index}: cannot open it to reset the clocks: {exc}")
            status = 1
            continue
        path = store.path_for(gpu.uuid)
        handled.add(path)
        try:
            holder = GPULock(config.resolved_lock_dir(), gpu.uuid, index)
            try:
                holder.acquire()
                holder.release()
            except AlreadyRunningError as exc:
                if not force:
                    say(f"gpoeo-rt: GPU {index}: skipped: {exc}; or reset it anyway with --force")
                    status = 1
                    continue
                say(f"gpoeo-rt: warning: {exc}; resetting anyway (--force)")
            gpu.reset_clocks()
            store.record_reset(gpu)
            note = f" (its unreadable state file {path} was removed)" if path in unreadable else ""
            say(f"gpoeo-rt: GPU {index} ({gpu.name}): default clocks restored{note}")
        except (GPUError, LockDirError, OSError) as exc:
            say(f"gpoeo-rt: GPU {index}: reset failed: {exc}")
            status = 1
        finally:
            with contextlib.suppress(Exception):
                gpu.close()
    for path, why in sorted(unreadable.items()):
        if path not in handled:
            say(f"gpoeo-rt: {path}: unreadable clock state file ({why}); skipped: reset its GPU with --gpus N")
            status = 1
    return status
