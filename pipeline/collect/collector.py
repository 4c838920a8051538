"""The measurement loop of `gpoeo-collect`: each workload at each config of the grid (or at the current clocks only).

Per config: lock the clocks (sweep only), let them settle, warm the workload up at them, then measure `repeats`
windows; each window gives a time per iteration (step markers, else the runtime's period detector on the buffered
power), a mean power and the counters. The row (means, and the spread across repeats) is appended durably.

Clock safety: a sweep writes clock-lock.json before its first lock and removes it only after a successful reset;
every exit path (return, exception, SIGTERM/SIGINT/SIGHUP) resets the clocks in a `finally` with those signals
blocked, and a run that finds the file (the previous one was SIGKILLed) restores the clocks before anything else.
A reference-only collection never calls a clock-setting method: it opens the device read-only.
"""

from __future__ import annotations

import contextlib
import json
import math
import platform
import signal
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

import numpy as np

from gpoeo_pipeline.collect.plan import clock_grid, reference_config
from gpoeo_pipeline.collect.rawformat import (
    FORMAT,
    LOCK_FILE,
    META_FILE,
    README_FILE,
    RECOVERY_FILE,
    RESULTS_FILE,
    ConfigKey,
    ResultRow,
)
from gpoeo_pipeline.collect.runs import ProcessRun, SimRun, WorkloadRun
from gpoeo_pipeline.collect.store import ClockLockState, CollectError, ResultStore, TornLine, now_iso
from gpoeo_rt.detection import Verdict, detect_period
from gpoeo_rt.device import GPU, GPUSpec, SimClock, SimConfig, SimulatedGPU, open_gpu, preset_workload
from gpoeo_rt.features import FEATURE_NAMES
from gpoeo_rt.sampling import Sampler


class MeasurementError(Exception):
    """One config could not be measured (too few iterations, no period); the collection goes on without it."""


class CollectionInterrupted(KeyboardInterrupt):
    """SIGTERM, SIGINT or SIGHUP arrived: unwinds like Ctrl-C so every `finally` (clock reset) runs."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum


HANDLED_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """Turn SIGTERM/SIGINT/SIGHUP into CollectionInterrupted for the duration (main thread only; elsewhere the
    process's own handlers stay and the `finally` blocks still cover exceptions)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise CollectionInterrupted(signum)

    previous = {sig: signal.signal(sig, handler) for sig in HANDLED_SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold those signals while clocks are being restored, so a second Ctrl-C cannot cut a restore short; a
    signal that arrived meanwhile is delivered (and raises) right after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, HANDLED_SIGNALS)


@dataclass(frozen=True)
class MeasureParams:
    settle_s: float = 1.0  # after a clock lock, before anything is measured
    warmup_s: float = 5.0  # the workload runs at the new clocks before the first window
    window_s: float = 10.0  # one repeat
    repeats: int = 3
    timing: str = "auto"  # markers | period | auto (markers when the workload writes them)
    min_iterations: int = 5  # per window, with markers

    def __post_init__(self) -> None:
        if self.timing not in ("markers", "period", "auto"):
            raise ValueError(f"timing must be markers, period or auto, got {self.timing!r}")
        if self.settle_s < 0 or self.warmup_s < 0 or self.window_s <= 0 or self.repeats < 1:
            raise ValueError("settle_s and warmup_s must be >= 0, window_s > 0 and repeats >= 1")


class Backend(Protocol):
    """Where workloads run: the GPU that identifies the collection (clock table, uuid; used to restore clocks)
    and, per workload, the device it runs on and the running workload."""

    def device(self) -> GPU: ...

    def start(self, workload: str) -> tuple[GPU, WorkloadRun]: ...

    def close(self) -> None: ...


class DeviceBackend:
    """One GPU (NVML, or an injected one) running workloads as processes (`commands`: workload -> argv)."""

    def __init__(
        self,
        gpu: GPU,
        commands: dict[str, list[str]],
        work_dir: Path | None = None,
        *,
        marker_workloads: frozenset[str] = frozenset(),
        startup_s: float = 300.0,
    ) -> None:
        self._gpu = gpu
        self._commands = commands
        self._marker_workloads = marker_workloads  # these write markers (built-ins): start-up ends at the first
        self._startup_s = startup_s
        self._tmp = tempfile.TemporaryDirectory(prefix="gpoeo-collect-") if work_dir is None else None
        self._work_dir = work_dir if work_dir is not None else Path(self._tmp.name)  # type: ignore[union-attr]

    def device(self) -> GPU:
        return self._gpu

    def start(self, workload: str) -> tuple[GPU, WorkloadRun]:
        run = ProcessRun(
            workload,
            self._commands[workload],
            self._work_dir,
            clock=self._gpu.clock,
            startup_s=self._startup_s,
            wait_for_marker=workload in self._marker_workloads,
        )
        return self._gpu, run

    def close(self) -> None:
        try:
            self._gpu.close()
        finally:
            if self._tmp is not None:
                self._tmp.cleanup()


class SimBackend:
    """Simulated GPUs (one per workload, all on one SimClock: no real sleeping) running analytic presets.
    `markers=False` times iterations from power alone. Every GPU built is kept in `gpus` for tests."""

    def __init__(
        self,
        *,
        seed: int = 0,
        allow_clock_writes: bool = False,
        markers: bool = True,
        spec: GPUSpec | None = None,
        config: SimConfig | None = None,
        clock: SimClock | None = None,
    ) -> None:
        self.clock = clock if clock is not None else SimClock()
        self._seed = seed
        self._allow = allow_clock_writes
        self._markers = markers
        self._spec = spec
        self._config = config
        self.gpus: list[SimulatedGPU] = []

    def _gpu(self, preset: str) -> SimulatedGPU:
        gpu = open_gpu(
            simulate=[(0.0, preset_workload(preset, self._spec))],
            allow_clock_writes=self._allow,
            seed=self._seed,
            spec=self._spec,
            sim_config=self._config,
            clock=self.clock,
        )
        assert isinstance(gpu, SimulatedGPU)
        self.gpus.append(gpu)
        return gpu

    def device(self) -> GPU:
        return self.gpus[0] if self.gpus else self._gpu("idle")

    def start(self, workload: str) -> tuple[GPU, WorkloadRun]:
        gpu = self._gpu(workload)
        return gpu, SimRun(workload, gpu, markers=self._markers)

    def close(self) -> None:
        return None


@dataclass
class CollectSummary:
    out_dir: Path
    measured: list[ConfigKey] = field(default_factory=list)
    already_done: int = 0
    failed: list[tuple[ConfigKey, str]] = field(default_factory=list)
    restored_stale_lock: bool = False
    torn: TornLine | None = None


class Progress(Protocol):
    def start(self, total: int) -> None: ...

    def advance(self, description: str) -> None: ...


def _rel_std(values: Sequence[float]) -> float:
    arr = np.asarray(values, dtype=np.float64)
    if len(arr) < 2:
        return 0.0
    return float(arr.std(ddof=1) / arr.mean())


def _longer_window(
    window_s: float, params: MeasureParams, iteration_s: float | None, suggested_s: float | None = None
) -> float | None:
    """A window long enough for min_iterations + 2 iterations (or the detector's suggestion), at most 10x the
    configured one; None when no longer window would help."""
    need = suggested_s if suggested_s is not None else None
    if iteration_s is not None:
        need = (params.min_iterations + 2) * iteration_s
    if need is None or need <= window_s:
        return None
    return min(float(math.ceil(need)), 10.0 * params.window_s)


def measure(
    gpu: GPU,
    run: WorkloadRun,
    workload: str,
    config: tuple[int, int] | None,
    reference: tuple[int, int],
    params: MeasureParams,
) -> ResultRow:
    """Settle, warm up and measure `params.repeats` windows of the running workload at the clocks now set."""
    clock = gpu.clock
    clock.sleep(params.settle_s + params.warmup_s)
    sampler = Sampler(gpu)
    times: list[float] = []
    powers: list[float] = []
    iterations = 0
    counters: list[list[float]] = []
    clocks: list[tuple[int, int]] = []
    timing = "markers"
    window_s = params.window_s
    extended = False
    repeat = 0
    while repeat < params.repeats:
        window = sampler.collect(window_s)
        ends = run.iteration_ends(window.start_s, window.end_s) if params.timing != "period" else None
        where = f"{workload} at {config or 'current clocks'}, repeat {repeat + 1}"
        power_mask = np.ones(len(window.t_s), dtype=bool)
        if ends is not None and len(ends) > params.min_iterations:
            # Mean time over whole iterations between the first and the last marker in the window.
            n = len(ends) - 1
            time_s = float(ends[-1] - ends[0]) / n
            power_mask = (window.t_s > ends[0]) & (window.t_s <= ends[-1])  # power over the same whole iterations
        elif params.timing == "markers" or (ends is not None and len(ends)):
            found = 0 if ends is None else len(ends)
            mean_gap = float(np.diff(ends).mean()) if ends is not None and found >= 2 else None
            longer = _longer_window(window_s, params, mean_gap)
            if repeat == 0 and not extended and longer is not None:
                window_s, extended = longer, True  # slow iterations at this config: all repeats get longer windows
                continue
            raise MeasurementError(
                f"{where}: {found} step marker(s) in a {window_s:g} s window, need more than "
                f"{params.min_iterations}: lengthen --window"
            )
        else:
            estimate = detect_period(window.t_s, window.power_w)
            if estimate.verdict != Verdict.OK or estimate.period_s is None:
                longer = _longer_window(window_s, params, None, estimate.suggested_window_s)
                if repeat == 0 and not extended and longer is not None:
                    window_s, extended = longer, True
                    continue
                raise MeasurementError(f"{where}: no iteration period in the power signal: {estimate.message}")
            timing = "period"
            time_s = estimate.period_s
            n = int(window.duration_s / estimate.period_s)
        times.append(time_s)
        iterations += n
        clocks.append(gpu.current_clocks())
        if power_mask.sum() >= 2:
            powers.append(float(window.power_w[power_mask].mean()))
        elif math.isfinite(window.counter_power_w) and window.counter_power_w > 0:
            powers.append(window.counter_power_w)  # no buffered samples: the energy counter's mean
        else:
            raise MeasurementError(f"{where}: no power samples and no energy counter in the window")
        repeat += 1
        snap = window.counters
        fresh = snap.interval_s > 0
        counters.append([snap.features[name] if fresh else math.nan for name in FEATURE_NAMES])
    with warnings.catch_warnings():  # a counter NaN in every window (unsupported) stays NaN, quietly
        warnings.simplefilter("ignore", RuntimeWarning)
        feature_means = np.nanmean(np.asarray(counters, dtype=np.float64), axis=0)
    time_s, power_w = float(np.mean(times)), float(np.mean(powers))
    sm_seen, mem_seen = np.median(np.asarray(clocks, dtype=np.float64), axis=0).tolist()
    return ResultRow(
        workload=workload,
        mode="sweep" if config is not None else "reference",
        config_sm_mhz=None if config is None else config[0],
        config_mem_mhz=None if config is None else config[1],
        sm_clock_mhz=float(sm_seen),
        mem_clock_mhz=float(mem_seen),
        ref=config is None or config == reference,
        timing=timing,
        repeats=params.repeats,
        iterations=iterations,
        window_s=window_s,
        time_s=time_s,
        time_rel_std=_rel_std(times),
        power_w=power_w,
        power_rel_std=_rel_std(powers),
        energy_j=time_s * power_w,
        features=dict(zip(FEATURE_NAMES, feature_means.tolist(), strict=True)),
        measured_at=now_iso(),
    )


def restore_stale_lock(lock: ClockLockState, gpu: GPU) -> bool:
    """If a previous run died with clocks locked, reset them (on the same GPU only) and clear the record."""
    stale = lock.read()
    if stale is None:
        return False
    if stale.get("gpu_uuid") not in (None, gpu.uuid):
        raise CollectError(
            f"{lock.path}: clocks were left locked on GPU {stale.get('gpu_uuid')}, not this one ({gpu.uuid}); "
            "run the collection on that GPU first so it restores them"
        )
    with signals_deferred():
        gpu.reset_clocks()
        lock.clear()
    return True


def _check_meta(path: Path, meta: dict[str, Any]) -> None:
    """A resumed collection must measure the same way on the same kind of GPU; workloads and grid may grow."""
    old = json.loads(path.read_text(encoding="utf-8"))
    if old.get("format") != FORMAT:
        raise CollectError(f"{path}: format {old.get('format')!r}, this collector writes {FORMAT!r}")
    for key in ("sku", "mode", "gpu_name", "params", "reference"):
        if old.get(key) != meta.get(key):
            raise CollectError(
                f"{path}: {key} was {old.get(key)!r} when this collection started, now {meta.get(key)!r}; resume "
                "with the same settings or collect into a new folder"
            )
    meta["workloads"] = sorted(set(old.get("workloads", [])) | set(meta["workloads"]))
    meta["started_at"] = old.get("started_at", meta["started_at"])
    meta["command_lines"] = [*old.get("command_lines", []), *meta["command_lines"]]


def _write_json(path: Path, value: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(value, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)


def write_readme(out_dir: Path, meta: dict[str, Any], rows: int, summary: CollectSummary | None) -> None:
    params = meta["params"]
    reference = meta["reference"]
    status = (
        "in progress or interrupted"
        if summary is None
        else (
            f"last run measured {len(summary.measured)}, skipped {summary.already_done} already measured, "
            f"failed {len(summary.failed)}"
            + (": " + "; ".join(f"{k}: {r}" for k, r in summary.failed[:10]) if summary.failed else "")
        )
    )
    mode = (
        "reference only: every workload at the clocks the GPU ran at by itself (no clock was set)"
        if meta["mode"] == "reference"
        else f"sweep over {meta['grid_size']} (SM, memory) clock pairs (every {meta['sm_stride']}th supported SM "
        f"clock of memory clocks {meta['mem_clocks']} MHz); reference = default clocks {reference} MHz"
    )
    text = f"""# {meta["sku"]}: clock sweep collected by gpoeo-collect

Written by `gpoeo-collect` (format `{FORMAT}`); raw data: never edit by hand, re-run the collector to extend it.

- GPU: {meta["gpu_name"]} (uuid {meta["gpu_uuid"]}), host {meta["host"]}
- Collected: {meta["started_at"]} to {now_iso()}; {rows} result rows; {status}
- Mode: {mode}
- Workloads: {", ".join(meta["workloads"])}
- Per config: settle {params["settle_s"]} s after the clock change, warm-up {params["warmup_s"]} s, then
  {params["repeats"]} windows of {params["window_s"]} s; timing `{params["timing"]}` (step markers written by the
  workload when present, else the iteration period detected in NVML's 50 Hz buffered power)
- Command lines: {"; ".join("`" + c + "`" for c in meta["command_lines"])}

## Files
- `{RESULTS_FILE}`: one row per (workload, config). `config_sm_mhz`/`config_mem_mhz`: the locked clocks (empty in
  reference mode); `sm_clock_mhz`/`mem_clock_mhz`: median of the clocks read during the windows; `time_s`: mean time
  per iteration over the repeats, `time_rel_std` its relative std across repeats; `power_w`: mean board power over
  whole iterations (buffered samples), `power_rel_std` likewise; `energy_j` = time_s x power_w (per iteration);
  `feat_*`: NVML GPM counters as fractions (empty where unavailable); `ref`: the workload's reference row.
- `{META_FILE}`: the collection's settings. `{RECOVERY_FILE}` (if present): torn last lines cut off on restart.
- `pipeline/sources/gpoeo_collect.py` reads this folder into the sweeps schema when it is listed in
  `ingest.sweep_sources`.
"""
    (out_dir / README_FILE).write_text(text, encoding="utf-8")


def collect(
    backend: Backend,
    workloads: Sequence[str],
    out_dir: Path,
    *,
    sku: str,
    params: MeasureParams | None = None,
    reference_only: bool = False,
    sm_stride: int = 8,
    mem_clocks: Sequence[int] | None = None,
    progress: Progress | None = None,
    on_config: Callable[[ConfigKey], None] | None = None,
    command_line: str | None = None,
) -> CollectSummary:
    """Measure every (workload, config) not yet in out_dir/results.csv; see the module docstring.

    `on_config` is called before each config is measured (tests use it to interrupt a run at a chosen point).
    """
    params = params or MeasureParams()
    if not workloads:
        raise CollectError("no workloads to collect")
    if len(set(workloads)) != len(workloads):
        raise CollectError(f"workload names repeat: {list(workloads)}")
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = CollectSummary(out_dir)
    lock = ClockLockState(out_dir / LOCK_FILE)
    device = backend.device()
    if reference_only:
        if lock.read() is not None:
            raise CollectError(
                f"{lock.path}: an interrupted sweep may have left clocks locked, and --reference-only never sets "
                "clocks: restore them first with `gpoeo-collect --restore-clocks --allow-clock-writes --out "
                f"{out_dir}`"
            )
    else:
        summary.restored_stale_lock = restore_stale_lock(lock, device)
    store = ResultStore(out_dir / RESULTS_FILE)
    summary.torn = store.torn
    table = device.supported_clocks()
    reference = reference_config(table)
    configs: list[tuple[int, int] | None] = [None] if reference_only else list(clock_grid(table, sm_stride, mem_clocks))
    meta: dict[str, Any] = {
        "format": FORMAT,
        "sku": sku,
        "mode": "reference" if reference_only else "sweep",
        "gpu_name": device.name,
        "gpu_uuid": device.uuid,
        "host": platform.node(),
        "reference": list(reference),
        "params": asdict(params),
        "sm_stride": sm_stride,
        "mem_clocks": sorted({c[1] for c in configs if c is not None}, reverse=True),
        "grid_size": len(configs),
        "workloads": list(workloads),
        "started_at": now_iso(),
        "command_lines": [command_line or " ".join(sys.argv)],
    }
    meta_path = out_dir / META_FILE
    if meta_path.exists():
        _check_meta(meta_path, meta)
    _write_json(meta_path, meta)
    write_readme(out_dir, meta, len(store.done), None)

    todo = [(w, c) for w in workloads for c in configs if (w, *(c or (None, None))) not in store.done]
    summary.already_done = len(workloads) * len(configs) - len(todo)
    if progress is not None:
        progress.start(len(todo))
    with signals_raise():
        for workload in workloads:
            pending = [c for w, c in todo if w == workload]
            if pending:
                _collect_workload(
                    backend,
                    workload,
                    pending,
                    reference,
                    params,
                    store,
                    lock,
                    summary,
                    progress,
                    on_config,
                    reference_only,
                )
    write_readme(out_dir, meta, len(store.done), summary)
    return summary


def _collect_workload(
    backend: Backend,
    workload: str,
    pending: list[tuple[int, int] | None],
    reference: tuple[int, int],
    params: MeasureParams,
    store: ResultStore,
    lock: ClockLockState,
    summary: CollectSummary,
    progress: Progress | None,
    on_config: Callable[[ConfigKey], None] | None,
    reference_only: bool,
) -> None:
    gpu, run = backend.start(workload)
    locked = False
    try:
        for config in pending:
            key: ConfigKey = (workload, *(config or (None, None)))
            if on_config is not None:
                on_config(key)
            run.ensure_running()
            if config is not None and not reference_only:
                lock.mark(gpu.uuid, gpu.index, *config)  # durable before the lock, so a SIGKILL is recoverable
                locked = True
                gpu.lock_clocks(*config)
            try:
                row = measure(gpu, run, workload, config, reference, params)
            except MeasurementError as exc:
                summary.failed.append((key, str(exc)))
            else:
                store.append(row)
                summary.measured.append(key)
            if progress is not None:
                progress.advance(f"{workload} @ {'current clocks' if config is None else f'{config[0]}/{config[1]}'}")
    finally:
        try:
            if locked:
                with signals_deferred():
                    gpu.reset_clocks()
                    lock.clear()
        finally:
            run.stop()
