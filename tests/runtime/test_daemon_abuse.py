"""Abuse by other local users (issue 18): real processes, real sockets, an unprivileged uid, the simulated GPU.

The suite runs as root in CI; the hostile sender drops to `nobody` in a subprocess. Tests that need that skip when
not root. Every loop is bounded in count and time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpoeo_rt.bench.spoofing import SpoofedMarkerFeed
from gpoeo_rt.controller import Controller, ControllerConfig, State
from gpoeo_rt.daemon.control import ControlError, ControlServer, request
from gpoeo_rt.daemon.marker_check import CheckedSampler, marker_disagreement
from gpoeo_rt.daemon.markers import MarkerAdmission, MarkerBoard, MarkerServer
from gpoeo_rt.device import AnalyticWorkload, SimConfig, SimulatedGPU, SimulatedStepMarkers, preset_workload
from gpoeo_rt.sampling.markers import FloatArray, IntArray
from gpoeo_rt.sampling.sampler import Sampler
from tests.bundles import write_bundle

NOBODY = 65534
WORKLOAD = "resnet50"  # compute-bound: a lower SM clock slows it, so a lie about the period shows
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="dropping to another uid needs root")


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A folder another uid can reach (pytest's tmp_path is 0700)."""
    path = Path(tempfile.mkdtemp(prefix="gpoeo-abuse-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _as_nobody() -> dict[str, object]:
    return {"user": NOBODY, "group": NOBODY, "extra_groups": []}


def _unprivileged_python() -> str:
    """A stdlib Python `nobody` may run (the test's own interpreter may live under /root)."""
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        probe = subprocess.run([candidate, "-c", "pass"], capture_output=True, check=False, **_as_nobody())  # type: ignore[call-overload]
        if probe.returncode == 0:
            return candidate
    pytest.skip("no Python interpreter that nobody may run")


# --- markers: admission with real processes on a real socket ---------------------------------------------------

_SENDER = textwrap.dedent(
    """
    import socket, sys, time
    path, count, interval = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    sys.stdin.readline()  # wait until the test knows our pid
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    t0 = time.time() - count * interval
    for k in range(1, count + 1):
        s.sendto(f"gpoeo-mark1 {k} {t0 + k * interval:.6f} 0".encode(), path)
    print(k, flush=True)
    """
)


@root_only
def test_markers_from_a_process_not_on_the_gpu_are_refused(shared_dir: Path) -> None:
    """A job on the GPU (in its process list) is heard; `nobody` spoofing from elsewhere is not, whatever it sends."""
    on_gpu: set[int] = set()
    admission = MarkerAdmission(lambda index: frozenset(on_gpu), min_refresh_s=0.0, refresh_s=0.0)
    board = MarkerBoard([(0, "GPU-aaaa")], __import__("time").time, admission=admission)
    server = MarkerServer(shared_dir, board)
    server.open()
    socket_path = str(shared_dir / "markers.sock")
    procs = []
    python = _unprivileged_python()
    try:
        for _ in range(2):
            procs.append(
                subprocess.Popen(
                    [python, "-c", _SENDER, socket_path, "8", "0.1"],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                    **_as_nobody(),  # type: ignore[arg-type]
                )
            )
        job, _spoofer = procs
        on_gpu.add(job.pid)  # what NVML's process list would say: the job has a CUDA context there
        stored = 0
        for proc in procs:  # one at a time: the kernel queues only a few datagrams
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
            assert proc.stdout.readline().strip() == "8"
            stored += server.drain()
            proc.wait(timeout=10)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
        server.close()
    assert stored == 8
    summary = board.summary([0])
    assert summary["senders"] == [job.pid]
    assert board.rejected == {"not_on_gpu": 8}
    on_gpu.clear()  # the job left the GPU: its markers no longer time anything
    t, _ = board.markers_between([0], 0.0, math.inf)
    assert len(t) == 0


def test_allowed_uids_and_groups_are_heard_without_being_on_the_gpu() -> None:
    admission = MarkerAdmission(lambda index: frozenset(), allowed_uids={1234}, allowed_gid=777, min_refresh_s=0.0)
    assert admission.admits(0, pid=10, uid=0, gid=0)  # root
    assert admission.admits(0, pid=10, uid=1234, gid=1)
    assert admission.admits(0, pid=10, uid=4321, gid=777)
    assert not admission.admits(0, pid=10, uid=4321, gid=1)


def test_admission_looks_up_a_stranger_at_most_once_per_interval_and_survives_a_failing_lookup() -> None:
    calls = []
    now = [0.0]

    def pids_on(index: int) -> frozenset[int]:
        calls.append(index)
        raise RuntimeError("NVML timed out")

    admission = MarkerAdmission(pids_on, min_refresh_s=0.5, refresh_s=5.0, clock=lambda: now[0])
    for _ in range(1000):  # a flood from a stranger
        assert not admission.admits(0, pid=99, uid=4321, gid=4321)
    assert len(calls) == 1 and admission.lookup_errors == 1
    now[0] = 0.6
    admission.admits(0, pid=99, uid=4321, gid=4321)
    assert len(calls) == 2


# --- markers: a lying sender cannot move the decisions beyond the bound (simulated time) ----------------------


def _spoofed_run(
    *,
    spoofer_admitted: bool,
    checked: bool,
    bundles: Path,
    workload: str = WORKLOAD,
    job_s: float = 0.257,
    spoof_s: float = 0.1,
) -> tuple[float, dict[str, int], int]:
    """True slowdown of the config the controller ends up holding (by default job 257 ms/step at reference,
    spoofer 100 ms)."""
    from gpoeo_rt.prediction.bundle import verify_bundle
    from gpoeo_rt.prediction.predictor import Predictor

    preset = preset_workload(workload)
    assert isinstance(preset, AnalyticWorkload)
    gpu = SimulatedGPU(
        dataclasses.replace(preset, iteration_s=job_s), seed=3, allow_clock_writes=True, config=SimConfig()
    )
    job_pid, spoof_pid = 1000, 2000
    allowed = {job_pid, spoof_pid} if spoofer_admitted else {job_pid}
    admission = MarkerAdmission(lambda index: frozenset(allowed), clock=gpu.clock.now_s)
    board = MarkerBoard([(0, gpu.uuid)], gpu.clock.now_s, admission=admission, max_skew_s=60.0)
    feed = SpoofedMarkerFeed(
        board, SimulatedStepMarkers(gpu, seed=3), spoof_s=spoof_s, job_pid=job_pid, spoofer=(spoof_pid, NOBODY)
    )
    config = ControllerConfig(max_slowdown=0.05)
    sampler: Sampler
    sampler = CheckedSampler(gpu, feed) if checked else Sampler(gpu, markers=feed)
    predictor = Predictor(verify_bundle(bundles / "generic"))
    ctrl = Controller(gpu, predictor=predictor, config=config, sampler=sampler)
    reference = gpu.truth.operating_point(gpu.now_s()).iteration_s
    while gpu.now_s() < 200.0 and ctrl.state is not State.STOPPED:
        ctrl.step()
    held = gpu.truth.operating_point(gpu.now_s()).iteration_s
    ctrl.stop("end of test")
    drops = sampler.dropped if isinstance(sampler, CheckedSampler) else 0
    return held / reference - 1.0, dict(board.rejected), drops


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bundles")
    write_bundle(root / "generic", name="generic")
    return root


def test_a_spoofer_moves_no_decision_beyond_the_bound(bundles: Path) -> None:
    bound_pts = 5.0 + 0.5
    # Without admission and without the signal check, the 100 ms spoofer times the windows: the check can fail.
    blind, _, _ = _spoofed_run(spoofer_admitted=True, checked=False, bundles=bundles)
    assert blind * 100 > bound_pts, f"the unprotected run should break the bound, got {blind:.1%}"
    # A stranger (not on the GPU): refused at the socket.
    refused, rejected, _ = _spoofed_run(spoofer_admitted=False, checked=True, bundles=bundles)
    assert rejected.get("not_on_gpu", 0) > 100
    assert refused * 100 <= bound_pts
    # Worst case: the spoofer runs on the same GPU (admitted); the power signal contradicts its period.
    admitted, _, drops = _spoofed_run(spoofer_admitted=True, checked=True, bundles=bundles)
    assert drops > 0
    assert admitted * 100 <= bound_pts


@pytest.mark.parametrize(("workload", "job_s"), [("membound", 0.045), ("gpt", 0.020)])
def test_an_admitted_imitator_within_the_tolerance_hides_no_slowdown(
    bundles: Path, workload: str, job_s: float
) -> None:
    # A sender on the same GPU marking 2% slower than the job: where the signal confirms both (45 ms), the one
    # nearer the signal's period times the windows; where it can check neither (20 ms steps, one per sample), two
    # senders that disagree time nothing. Before: 7.0% and 15.2% true slowdown at a 5% bound.
    held, _, _ = _spoofed_run(
        spoofer_admitted=True, checked=True, bundles=bundles, workload=workload, job_s=job_s, spoof_s=1.02 * job_s
    )
    assert held * 100 <= 5.0 + 0.5


def test_marker_check_accepts_multiples_and_refuses_strangers() -> None:
    gpu = SimulatedGPU(
        dataclasses.replace(preset_workload("membound"), iteration_s=0.2),  # type: ignore[type-var]
        seed=1,
        config=SimConfig(),
    )
    window = Sampler(gpu).collect(6.0)

    def marks(period_s: float) -> tuple[FloatArray, IntArray]:
        t = np.arange(window.start_s + 0.01, window.end_s, period_s)
        return t, np.arange(1, len(t) + 1, dtype=np.int64)

    assert marker_disagreement(window, *marks(0.2)) is None
    assert marker_disagreement(window, *marks(0.4)) is None  # a step of two power cycles
    why = marker_disagreement(window, *marks(0.1 * 2.57))
    assert why is not None and "no whole multiple" in why
    fast = marker_disagreement(window, *marks(0.03))  # beyond the samples' resolution: checked by its alias
    assert fast is not None and "leaves no alias" in fast


def test_nvml_lists_the_processes_on_a_gpu_for_the_admission() -> None:
    from gpoeo_rt.device.nvml import NVMLGPU
    from tests.runtime.fake_nvml import FakeDevice, FakeNVML

    fake = FakeNVML([FakeDevice(pids=[4242, 77])])
    with NVMLGPU(0, nvml=fake, clock=fake) as gpu:
        assert gpu.running_pids() == frozenset({4242, 77})


# --- the control channel: bounded whatever a client sends ------------------------------------------------------


def _ask(path: Path, payload: bytes, timeout_s: float = 3.0) -> dict[str, Any]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout_s)
    try:
        sock.connect(str(path))
        sock.sendall(payload)
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    finally:
        sock.close()
    assert data.count(b"\n") == 1, data  # one line, always
    reply: dict[str, Any] = json.loads(data)
    return reply


def test_the_client_waits_out_a_full_listen_queue_and_names_the_socket_when_it_stays_full(tmp_path: Path) -> None:
    """Another user may fill the listen queue: the client retries until its deadline rather than failing at once
    (EAGAIN), gets its answer once the daemon drains the queue, and ends in a one-line error if it never does."""
    import threading

    path = tmp_path / "status.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(0)
    flood = []
    while True:  # fill the queue as a hostile user would
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.connect(str(path))
        except BlockingIOError:
            s.close()
            break
        flood.append(s)
    try:
        with pytest.raises(ControlError, match=r"status\.sock within 0\.05 s"):
            request(tmp_path, {"cmd": "status"}, timeout_s=0.05)

        def drain_then_answer() -> None:
            time.sleep(0.2)  # the client meets the full queue first
            while True:
                conn, _ = listener.accept()
                conn.settimeout(0.2)
                with conn, contextlib.suppress(TimeoutError):
                    if conn.recv(4096).startswith(b'{"cmd"'):  # the flood sends nothing; the client does
                        conn.sendall(b'{"ok": true}\n')
                        return

        server = threading.Thread(target=drain_then_answer)
        server.start()
        assert request(tmp_path, {"cmd": "status"}, timeout_s=5.0) == {"ok": True}
        server.join(timeout=5.0)
    finally:
        for s in flood:
            s.close()
        listener.close()


def test_bad_requests_get_a_one_line_answer_and_the_channel_lives(tmp_path: Path) -> None:
    seen: list[dict[str, Any]] = []

    def handler(request: dict[str, Any]) -> dict[str, Any]:
        seen.append(request)
        return {"ok": True}

    server = ControlServer(tmp_path, handler)
    server.start()
    status, control = tmp_path / "status.sock", tmp_path / "control.sock"
    bad = {
        b"[" * 30_000 + b"]" * 30_000 + b"\n": "longer than",
        b'{"cmd": "status", "x": ' + b"[" * 1000 + b"]" * 1000 + b"}\n": "nested deeper",
        b'{"cmd": "set", "max_slowdown": false}\n': "must be a number",
        b'{"cmd": "set", "max_slowdown": "0.1"}\n': "must be a number",
        b'{"cmd": "set", "max_slowdown": NaN}\n': "must be a number",
        b'{"cmd": "set", "objective": 3}\n': "must be a string",
        b'{"cmd": "status", "verbose": true}\n': "unknown field",
        b'{"cmd": 5}\n': '"cmd" string',
        b"null\n": '"cmd" string',
        b"\xff\xfe\x00garbage\n": "bad request",
        b'{"cmd": "reboot"}\n': "unknown command",
    }
    try:
        for payload, why in bad.items():
            reply = _ask(control if b'"set"' in payload else status, payload)
            assert reply["ok"] is False and why in reply["error"], (payload[:60], reply)
        assert seen == []  # nothing bad reached the daemon
        assert _ask(status, b'{"cmd": "status"}\n') == {"ok": True}
        assert _ask(control, b'{"cmd": "set", "max_slowdown": 0.1}\n') == {"ok": True}
        assert seen == [{"cmd": "status"}, {"cmd": "set", "max_slowdown": 0.1}]
    finally:
        server.close()


def _closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:  # closed with our unread bytes in it
        return True


def test_idle_clients_are_closed_and_a_cap_bounds_them(tmp_path: Path) -> None:
    server = ControlServer(tmp_path, lambda r: {"ok": True}, max_clients=4, max_clients_per_uid=2, idle_timeout_s=0.3)
    server.start()
    path = str(tmp_path / "status.sock")
    idle = []
    try:
        for _ in range(6):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(3.0)
            sock.connect(path)
            with contextlib.suppress(BrokenPipeError):  # one over the cap may be closed already
                sock.sendall(b'{"cmd": ')  # half a request, then nothing
            idle.append(sock)
        replies = [json.loads(s.recv(4096)) for s in idle]  # all answered: 4 "busy" at once, 2 time out
        errors = sorted(r["error"].split(":")[0] for r in replies)
        assert errors == ["busy"] * 4 + ["timed out waiting for a request line"] * 2
        assert all(_closed(s) for s in idle)  # and closed by the server
        assert server.refused == 4 and server.timed_out == 2
    finally:
        for sock in idle:
            sock.close()
        server.close()


_HOLDER = textwrap.dedent(
    """
    import socket, sys, time
    path, n = sys.argv[1], int(sys.argv[2])
    socks, deadline = [], time.monotonic() + 60
    while len(socks) < n and time.monotonic() < deadline:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.connect(path)
        except (BlockingIOError, InterruptedError):
            s.close()
            time.sleep(0.001)
            continue
        socks.append(s)
    print(len(socks), flush=True)
    sys.stdin.readline()  # hold them all until told
    """
)


def _start_cli_daemon(folder: Path, bundles: Path, *extra: str) -> tuple[subprocess.Popen[str], Path]:
    run = folder / "run"
    args = ["start", "--simulate", "membound", "--sim-speed", "20", "--sim-seconds", "100000"]
    args += ["--run-dir", str(run), "--state-dir", str(folder / "state"), "--bundles", str(bundles), *extra]
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpoeo_rt", *args],
        stdout=subprocess.PIPE,
        stderr=(folder / "daemon.err").open("w"),
        text=True,
        env={**os.environ, "PYTHONPATH": "runtime", "GPOEO_RT_SIM_GPUS": "2"},
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, AssertionError, ValueError):
            if _ask(run / "status.sock", b'{"cmd": "status"}\n')["ok"]:
                return proc, run
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    raise AssertionError(f"the daemon did not come up: {(folder / 'daemon.err').read_text()[-2000:]}")


def _stop_cli_daemon(proc: subprocess.Popen[str], run: Path) -> int:
    with contextlib.suppress(OSError, AssertionError, ValueError):
        _ask(run / "control.sock", b'{"cmd": "stop"}\n')
    try:
        return proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise


def _vm_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@root_only
def test_ten_thousand_idle_connections_leave_the_daemon_unaffected(shared_dir: Path, bundles: Path) -> None:
    """`nobody` opens and holds 10,000 connections to status.sock: the daemon keeps deciding and answering, keeps
    its memory and open files bounded, and logs no traceback."""
    python = _unprivileged_python()
    limits = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (12_000, max(12_000, limits[1])))  # the holder inherits it
    proc, run = _start_cli_daemon(shared_dir, bundles)
    holder = None
    try:
        before = _ask(run / "status.sock", b'{"cmd": "status"}\n')["status"]["gpus"][0]["decisions"]
        holder = subprocess.Popen(
            [python, "-c", _HOLDER, str(run / "status.sock"), "10000"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            **_as_nobody(),  # type: ignore[arg-type]
        )
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline().strip() == "10000"
        answers = []
        for k in range(40):  # while they are all held: at least 5 answers, until a new decision came
            t0 = time.monotonic()
            answers.append(request(run, {"cmd": "status"}, timeout_s=3.0)["status"])  # the real client's way
            assert time.monotonic() - t0 < 2.0
            if k >= 4 and answers[-1]["gpus"][0]["decisions"] > before:
                break
            time.sleep(0.2)
        rss_mb = _vm_rss_mb(proc.pid)
        open_fds = len(os.listdir(f"/proc/{proc.pid}/fd"))
        threads = len(os.listdir(f"/proc/{proc.pid}/task"))
        assert answers[-1]["gpus"][0]["decisions"] > before  # the controller kept going
        assert answers[-1]["gpus"][0]["error"] is None
        assert rss_mb < 200.0 and open_fds < 150 and threads < 20, (rss_mb, open_fds, threads)
        print(f"10,000 held connections: daemon RSS {rss_mb:.0f} MB, {open_fds} open files, {threads} threads")
        holder.stdin.write("done\n")
        holder.stdin.flush()
        holder.wait(timeout=30)
    finally:
        if holder is not None and holder.poll() is None:
            holder.kill()
            holder.wait()
        code = _stop_cli_daemon(proc, run)
        resource.setrlimit(resource.RLIMIT_NOFILE, limits)
    assert code == 0
    assert "Traceback" not in (shared_dir / "daemon.err").read_text()


# --- one daemon per GPU on the host, one per run dir -----------------------------------------------------------


def test_a_second_daemon_with_other_dirs_is_refused_and_touches_nothing(tmp_path: Path, bundles: Path) -> None:
    """A live daemon holds GPU 0 (its host-wide lock and its clock state file in its own dirs); a second one with
    a different run dir and state dir neither resets that GPU nor deletes the state file."""
    from gpoeo_rt.daemon.config import DaemonConfig
    from gpoeo_rt.daemon.daemon import Daemon
    from gpoeo_rt.daemon.safety import AlreadyRunningError, ClockStateStore, GPULock
    from gpoeo_rt.device.nvml import NVMLGPU
    from tests.runtime.fake_nvml import FakeDevice, FakeNVML

    fake = FakeNVML([FakeDevice(uuid="GPU-live-0000")], root=True)
    first_state = tmp_path / "first-state"
    gpu = NVMLGPU(0, nvml=fake, clock=fake, allow_clock_writes=True)  # the live daemon's, left open
    live = GPULock(DaemonConfig(state_dir=str(first_state)).resolved_lock_dir(), gpu.uuid, 0, run_dir="/a")
    live.acquire()
    ClockStateStore(first_state).record_lock(gpu, 1500, 3201)
    gpu.lock_clocks(1500, 3201)
    state_file = ClockStateStore(first_state).path_for("GPU-live-0000")
    calls_before = len(fake.writes())
    second = DaemonConfig(
        run_dir=str(tmp_path / "other-run"), state_dir=str(tmp_path / "other-state"), bundles=str(bundles)
    )
    daemon = Daemon(
        second,
        open_device=lambda i, w: NVMLGPU(i, nvml=fake, clock=fake, allow_clock_writes=w),
        device_count=lambda: 1,
        is_root=lambda: True,
        say=lambda s: None,
        install_signals=False,
    )
    try:
        with pytest.raises(AlreadyRunningError, match=r"GPU 0 \(GPU-live-0000\) is already managed .*run dir /a"):
            daemon.run()
        assert state_file.exists() and len(fake.writes()) == calls_before  # nothing reset, nothing deleted
        assert fake.devices[0].locked_sm_mhz == (1500, 1500)
    finally:
        live.release()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpoeo_rt", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env={**os.environ, "PYTHONPATH": "runtime", "GPOEO_RT_SIM_GPUS": "2"},
    )


def test_two_cli_daemons_cannot_share_a_gpu_or_a_run_dir(tmp_path: Path, bundles: Path) -> None:
    """Daemon A manages simulated GPU 0 from run dir A. B on GPU 0 from another run dir: refused (the lock is the
    GPU's, not the run dir's). C on GPU 1 from A's run dir: refused (A's sockets stay A's). `stop` stops A."""
    proc, run = _start_cli_daemon(tmp_path, bundles, "--gpus", "0")  # two simulated GPUs (GPOEO_RT_SIM_GPUS)
    try:
        common = ["--simulate", "membound", "--state-dir", str(tmp_path / "state")]
        common += ["--bundles", str(bundles)]
        other = _cli("start", *common, "--gpus", "0", "--run-dir", str(tmp_path / "run-b"))
        assert other.returncode == 3, other.stderr
        assert "already managed by another gpoeo-rt" in other.stderr and f"run dir {run}" in other.stderr
        same_dir = _cli("start", *common, "--gpus", "1", "--run-dir", str(run))
        assert same_dir.returncode == 3, same_dir.stderr
        assert f"run dir {run} is in use by another gpoeo-rt (pid {proc.pid})" in same_dir.stderr
        for result in (other, same_dir):
            assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
        status = _ask(run / "status.sock", b'{"cmd": "status"}\n')["status"]
        assert status["pid"] == proc.pid and status["gpus"][0]["gpus"] == [0]
    finally:
        code = _stop_cli_daemon(proc, run)
    assert code == 0


@root_only
def test_a_lock_folder_planted_by_another_user_is_not_trusted(tmp_path: Path) -> None:
    from gpoeo_rt.daemon.safety import GPULock, LockDirError

    planted = tmp_path / "planted"
    planted.mkdir()
    os.chown(planted, NOBODY, NOBODY)
    with pytest.raises(LockDirError, match="not a directory owned by uid 0"):
        GPULock(planted, "GPU-x", 0).acquire()
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / "link").symlink_to(target)
    with pytest.raises(LockDirError):
        GPULock(tmp_path / "link", "GPU-x", 0).acquire()
    (target / "gpu-GPU-y.lock").symlink_to(tmp_path / "victim")
    with pytest.raises(OSError):  # O_NOFOLLOW: a symlinked lock file is never followed
        GPULock(target, "GPU-y", 0).acquire()
    assert not (tmp_path / "victim").exists()


# --- resets that always work -----------------------------------------------------------------------------------


def _fake_host(n: int) -> Any:
    from tests.runtime.fake_nvml import FakeDevice, FakeNVML

    return FakeNVML([FakeDevice(uuid=f"GPU-fake-{i}") for i in range(n)], root=True)


def _lock_and_record(fake: Any, index: int, state_dir: Path) -> None:
    from gpoeo_rt.daemon.safety import ClockStateStore
    from gpoeo_rt.device.nvml import NVMLGPU

    gpu = NVMLGPU(index, nvml=fake, clock=fake, allow_clock_writes=True)  # a daemon killed while holding a lock
    ClockStateStore(state_dir).record_lock(gpu, 1500, 3201)
    gpu.lock_clocks(1500, 3201)


def _reset(fake: Any, state_dir: Path, *, gpus: str = "all", force: bool = False) -> tuple[int, list[str]]:
    from gpoeo_rt.daemon.config import DaemonConfig
    from gpoeo_rt.daemon.daemon import reset_gpus
    from gpoeo_rt.device.nvml import NVMLGPU

    lines: list[str] = []
    code = reset_gpus(
        DaemonConfig(gpus=gpus, state_dir=str(state_dir)),
        force=force,
        open_device=lambda i, w: NVMLGPU(i, nvml=fake, clock=fake, allow_clock_writes=w),
        device_count=lambda: len(fake.devices),
        say=lines.append,
    )
    return code, lines


def test_one_unreadable_state_file_blocks_no_other_reset(tmp_path: Path) -> None:
    from gpoeo_rt.daemon.safety import ClockStateStore

    fake, state = _fake_host(3), tmp_path / "state"
    for index in range(3):
        _lock_and_record(fake, index, state)
    store = ClockStateStore(state)
    store.path_for("GPU-fake-1").write_bytes(b"\x00\xffnot json")  # GPU 1's file is garbage
    (state / "clocks-stray.json").mkdir()  # and something that is not even a file
    code, lines = _reset(fake, state, gpus="0")  # what the old error message recommended
    assert code == 1
    assert [d.locked_sm_mhz for d in fake.devices] == [None, (1500, 1500), None]  # 0 asked, 2 recorded: restored
    assert any("clocks-GPU-fake-1.json: unreadable clock state file" in line for line in lines)
    assert any("clocks-stray.json: unreadable" in line for line in lines)
    code, lines = _reset(fake, state, gpus="1")  # the GPU of the unreadable file, by index
    assert [d.locked_sm_mhz for d in fake.devices] == [None, None, None]
    assert any("its unreadable state file" in line and "was removed" in line for line in lines)
    assert not store.path_for("GPU-fake-1").exists() and not store.path_for("GPU-fake-0").exists()
    assert all("\n" not in line for line in lines)


def test_reset_leaves_a_gpu_a_live_daemon_holds_unless_forced(tmp_path: Path) -> None:
    from gpoeo_rt.daemon.config import DaemonConfig
    from gpoeo_rt.daemon.safety import GPULock

    fake, state = _fake_host(1), tmp_path / "state"
    _lock_and_record(fake, 0, state)
    live = GPULock(DaemonConfig().resolved_lock_dir(), "GPU-fake-0", 0, run_dir="/run/x")
    live.acquire()
    try:
        code, lines = _reset(fake, state)
        assert code == 1 and fake.devices[0].locked_sm_mhz == (1500, 1500)
        assert "skipped" in lines[0] and "--force" in lines[0]
        code, lines = _reset(fake, state, force=True)
        assert code == 0 and fake.devices[0].locked_sm_mhz is None
    finally:
        live.release()
    # No state file at all: --gpus N still restores the defaults.
    fake.devices[0].locked_sm_mhz = (1500, 1500)
    assert _reset(fake, tmp_path / "empty", gpus="0")[0] == 0 and fake.devices[0].locked_sm_mhz is None


def test_reset_without_nvml_says_so_in_one_line_per_problem(tmp_path: Path) -> None:
    """No driver here (or, on a GPU host, clock writes forbidden by the test session): one line each, no traceback."""
    state = tmp_path / "state"
    state.mkdir()
    (state / "clocks-GPU-gone.json").write_text(
        json.dumps({"uuid": "GPU-gone", "index": 0, "name": "x", "pid": 1, "locked": [1500, 3201], "since_unix_s": 0})
    )
    result = _cli("reset", "--state-dir", str(state), "--lock-dir", str(tmp_path / "locks"))
    assert result.returncode == 1
    out = result.stdout + result.stderr
    assert "Traceback" not in out and out.strip()
    assert all(line.startswith(("gpoeo-rt: ", "error: ")) for line in out.strip().splitlines()), out


# --- degraded start-up: a broken bundle refuses only the GPUs that would use it -------------------------------


def _corrupt(bundle: Path, how: str) -> None:
    if how == "garbage onnx, matching sha256":  # and a valid seal: only loading the model can tell
        from gpoeo_rt.prediction.bundle import SEAL_KEY, manifest_seal, sha256_file

        (bundle / "time.onnx").write_bytes(os.urandom(2000))
        manifest = json.loads((bundle / "manifest.json").read_text())
        manifest["sha256"]["time.onnx"] = sha256_file(bundle / "time.onnx")
        manifest[SEAL_KEY] = manifest_seal(manifest)
        (bundle / "manifest.json").write_text(json.dumps(manifest))
    elif how == "flipped byte":
        data = bytearray((bundle / "power.onnx").read_bytes())
        data[len(data) // 2] ^= 0xFF
        (bundle / "power.onnx").write_bytes(bytes(data))
    elif how == "manifest not utf-8":
        (bundle / "manifest.json").write_bytes(b"\xff\xfe{")


@pytest.mark.parametrize("how", ["garbage onnx, matching sha256", "flipped byte"])
def test_a_broken_bundle_refuses_only_its_gpus(tmp_path: Path, how: str) -> None:
    from gpoeo_rt.daemon.config import DaemonConfig
    from gpoeo_rt.daemon.daemon import Daemon
    from gpoeo_rt.device.nvml import NVMLGPU
    from tests.runtime.fake_nvml import FakeDevice, FakeNVML

    root = tmp_path / "bundles"
    write_bundle(root / "generic", name="generic")
    write_bundle(root / "tesla-v100", name="tesla-v100", nvml_names=("Tesla V100",))
    _corrupt(root / "tesla-v100", how)
    fake = FakeNVML(
        [FakeDevice(name="Tesla V100-SXM2-16GB", uuid="GPU-v100"), FakeDevice(name="NVIDIA H200", uuid="GPU-h200")],
        root=True,
    )
    cfg = DaemonConfig(run_dir=str(tmp_path / "run"), state_dir=str(tmp_path / "state"), bundles=str(root))
    lines: list[str] = []
    daemon = Daemon(
        cfg,
        open_device=lambda i, w: NVMLGPU(i, nvml=fake, clock=fake, allow_clock_writes=w),
        device_count=lambda: 2,
        is_root=lambda: True,
        say=lines.append,
        install_signals=False,
        serve=False,
        run_for_s=30.0,
    )
    assert daemon.run() == 0  # the H200 ran its course
    v100, h200 = daemon.status()["gpus"]
    assert v100["state"] == "refused" and "tesla-v100" in v100["error"] and v100["decisions"] == 0
    assert h200["state"] != "refused" and h200["bundle"] == "generic" and h200["decisions"] > 0
    assert not [args for _, args in fake.writes() if args[0].uuid == "GPU-v100"]  # no clock write on the V100
    assert any("gpu0 (Tesla V100-SXM2-16GB): not started" in line for line in lines)


def test_a_broken_bundle_no_gpu_uses_stops_nothing(tmp_path: Path, bundles: Path) -> None:
    """The issue's case: a corrupt tesla-v100 bundle on a host of other GPUs; and `bundles verify` names it."""
    root = tmp_path / "bundles"
    shutil.copytree(bundles, root)
    write_bundle(root / "tesla-v100", name="tesla-v100", nvml_names=("Tesla V100",))
    _corrupt(root / "tesla-v100", "garbage onnx, matching sha256")
    result = _cli(
        "start", "--simulate", "membound", "--sim-seconds", "60", "--run-dir", str(tmp_path / "run"),
        "--state-dir", str(tmp_path / "state"), "--bundles", str(root),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    verify = _cli("bundles", "verify", "--bundles", str(root))
    assert verify.returncode == 1 and "Traceback" not in verify.stdout + verify.stderr
    assert "tesla-v100/time.onnx: not a loadable ONNX model" in verify.stdout


# --- every bad input: one line naming the key or the file, never a traceback --------------------------------------

_BAD_TOML = {
    "array": ("max_slowdown = [0.1, 0.2]", "max_slowdown = a list: expected a number"),
    "table": ("max_slowdown = {a = 1}", "max_slowdown = a dict: expected a number"),
    "date": ("max_slowdown = 1979-05-27", "max_slowdown = a date: expected a number"),
    "int for text": ("gpus = 3", "gpus = 3: expected a string"),
    "text for bool": ('advise = "maybe"', "advise = 'maybe': expected true or false"),
    "float for int": ("sim_gpus = 1.5", "sim_gpus = 1.5: expected an integer"),
    "bool for number": ("max_slowdown = true", "max_slowdown = True: expected a number"),
    "nan": ("max_slowdown = nan", "max_slowdown = nan: expected a finite number"),
    "out of range": ("max_slowdown = 5", "max_slowdown 5.0: expected a fraction"),
    "unknown key": ("max_slowdwn = 0.1", "unknown setting 'max_slowdwn'"),
}


def _one_error_line(result: Any) -> str:
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), result.exception
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return str(lines[0])


@pytest.mark.parametrize("case", list(_BAD_TOML))
def test_config_errors_are_one_line_naming_key_and_file(tmp_path: Path, case: str) -> None:
    from typer.testing import CliRunner

    from gpoeo_rt.cli import app

    text, expected = _BAD_TOML[case]
    path = tmp_path / "bad.toml"
    path.write_text(f"[gpoeo-rt]\n{text}\n")
    result = CliRunner().invoke(app, ["start", "--config", str(path), "--simulate", "membound"], env={})
    assert result.exit_code == 2
    line = _one_error_line(result)
    assert str(path) in line and expected in line, line


def test_non_utf8_config_and_stray_variables(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from gpoeo_rt.cli import app

    runner = CliRunner()
    path = tmp_path / "latin1.toml"
    path.write_bytes('[gpoeo-rt]\nsocket_group = "gr\xfcn"\n'.encode("latin-1"))
    line = _one_error_line(runner.invoke(app, ["start", "--config", str(path)], env={}))
    assert str(path) in line and "not UTF-8" in line
    # A stray or bad GPOEO_RT_* variable, or a setting for `start` alone, never blocks status, stop or reset.
    env = {"GPOEO_RT_FOO": "1", "GPOEO_RT_MAX_SLOWDOWN": "lots"}
    good = tmp_path / "good.toml"
    good.write_text("[gpoeo-rt]\nmax_slowdwn = 0.1\n")
    status = runner.invoke(app, ["status", "--run-dir", str(tmp_path / "none"), "--config", str(good)], env=env)
    assert status.exit_code == 1 and "no gpoeo-rt daemon is running here" in _one_error_line(status)
    reset = runner.invoke(
        app, ["reset", "--simulate", "membound", "--state-dir", str(tmp_path / "s"), "--config", str(good)], env=env
    )
    assert reset.exit_code == 0 and "default clocks restored" in reset.output, reset.output
    start = runner.invoke(app, ["start", "--simulate", "membound"], env=env)
    assert start.exit_code == 2 and "GPOEO_RT_FOO: unknown setting" in _one_error_line(start)


def test_bad_sweeps_and_impossible_power_are_one_line(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from gpoeo_rt.cli import app

    runner = CliRunner()
    noise = np.random.default_rng(0).bytes(3000)
    for suffix in (".csv", ".parquet"):
        path = tmp_path / f"noise{suffix}"
        path.write_bytes(noise)
        result = runner.invoke(app, ["bench", "--sweeps", str(path)])
        if suffix == ".parquet" and "needs pyarrow" in result.output:
            continue
        assert result.exit_code == 2 and str(path) in _one_error_line(result)
    trace = tmp_path / "trace"
    trace.mkdir()
    (trace / "nvml_buffered.csv").write_text("signal,t_s,value\npower_mw,1.0,300000\npower_mw,1.02,-1e9\n")
    result = runner.invoke(app, ["trace", "detect", str(trace)])
    assert result.exit_code == 2
    line = _one_error_line(result)
    assert "nvml_buffered.csv, line 3: power -1e+09 mW is not physically possible" in line


# --- a hung GPU stays contained ---------------------------------------------------------------------------------


def _paced(fake: Any) -> Any:
    """Fake time that passes a little real time per sleep, so a daemon on it neither spins nor races ahead."""
    advance = fake.advance
    fake.sleep = lambda dt: (time.sleep(0.004), advance(max(dt, 0.0)))
    fake.advance(1.0)
    return fake


def test_a_hung_gpu_stays_contained_and_is_reset_when_nvml_answers(tmp_path: Path, bundles: Path) -> None:
    from gpoeo_rt.daemon.config import DaemonConfig
    from gpoeo_rt.daemon.daemon import Daemon
    from gpoeo_rt.device.nvml import NVMLGPU
    from tests.runtime.fake_nvml import FakeDevice, FakeNVML
    from tests.runtime.test_daemon_faults import _training_waveform

    def device(uuid: str) -> FakeDevice:
        return FakeDevice(uuid=uuid, waveform=_training_waveform, buffer_capacity=200)

    fakes = {0: _paced(FakeNVML([device("GPU-a")], root=True)), 1: _paced(FakeNVML([device("-"), device("GPU-b")]))}
    fakes[1].root = True
    cfg = DaemonConfig(
        run_dir=str(tmp_path / "run"),
        state_dir=str(tmp_path / "state"),
        bundles=str(bundles),
        nvml_timeout_s=0.5,
        restart_backoff_s=0.5,
    )
    daemon = Daemon(
        cfg,
        open_device=lambda i, w: NVMLGPU(i, nvml=fakes[i], clock=fakes[i], allow_clock_writes=w),
        device_count=lambda: 2,
        is_root=lambda: True,
        say=lambda s: None,
        install_signals=False,
    )
    result: list[int] = []
    thread = __import__("threading").Thread(target=lambda: result.append(daemon.run()))
    thread.start()
    status_sock = tmp_path / "run" / "status.sock"

    def status() -> list[dict[str, Any]]:
        t0 = time.monotonic()
        gpus: list[dict[str, Any]] = _ask(status_sock, b'{"cmd": "status"}\n')["status"]["gpus"]
        assert time.monotonic() - t0 < 1.0  # the sockets answer whatever a GPU does
        return gpus

    def wait_for(what: Any, limit_s: float = 30.0) -> None:
        deadline = time.monotonic() + limit_s
        while not what():
            assert time.monotonic() < deadline and thread.is_alive(), "timed out"
            time.sleep(0.05)

    gpu_a = fakes[0].devices[0]
    try:
        wait_for(lambda: status_sock.exists() and gpu_a.locked_sm_mhz is not None)  # GPU 0 tuned and locked
        release = fakes[0].hang("nvmlDeviceGetSamples")
        wait_for(lambda: status()[0]["state"] == "stuck")
        stuck, healthy = status()
        assert stuck["stuck"]["call"] == "read power samples" and "NVML" in (stuck["error"] or "")
        before = healthy["decisions"]
        wait_for(lambda: status()[1]["decisions"] > before + 2)  # the other GPU keeps deciding
        assert status()[1]["state"] not in ("stuck", "failed")
        assert gpu_a.locked_sm_mhz is not None  # hung while locked: nothing can reset it yet
        release.set()  # NVML answers again
        wait_for(lambda: gpu_a.locked_sm_mhz is None, limit_s=5.0)  # reset at once, not after a backoff
        wait_for(lambda: status()[0]["state"] != "stuck")
    finally:
        fakes[0]._hangs.clear()
        daemon.request_stop()
        thread.join(timeout=30)
    assert result == [0] and gpu_a.locked_sm_mhz is None and fakes[1].devices[1].locked_sm_mhz is None


# --- decision logs: bounded, and a full disk is "not logging", never a stop ----------------------------------------


def test_decision_logs_rotate_at_their_cap(tmp_path: Path) -> None:
    from gpoeo_rt.daemon.decisionlog import DecisionLog

    log = DecisionLog(tmp_path / "decisions-gpu0.jsonl", max_bytes=1000, keep=2)
    for k in range(200):
        assert log.write({"k": k, "reason": "x" * 40})
    log.close()
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["decisions-gpu0.jsonl", "decisions-gpu0.jsonl.1", "decisions-gpu0.jsonl.2"]
    assert all(p.stat().st_size <= 1000 for p in tmp_path.iterdir())
    last = [json.loads(line)["k"] for line in (tmp_path / "decisions-gpu0.jsonl").read_text().splitlines()]
    assert last[-1] == 199 and log.rotations > 10


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_full_disk_is_not_logging_with_the_clocks_still_managed(tmp_path: Path, bundles: Path) -> None:
    """The decision log is on a full disk (/dev/full: every write fails with ENOSPC) for the whole run."""
    state = tmp_path / "state"
    state.mkdir()
    (state / "decisions-gpu0.jsonl").symlink_to("/dev/full")
    result = _cli(
        "start", "--simulate", "membound", "--sim-seconds", "300", "--run-dir", str(tmp_path / "run"),
        "--state-dir", str(state), "--bundles", str(bundles),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.count("not logging decisions (No space left on device)") == 1
    sim_lock = json.loads((state / "simulated-gpu0.json").read_text())["locked"]
    assert sim_lock is None and not list(state.glob("clocks-*.json"))  # clocks given back as always


def test_a_manifest_edit_outside_the_model_files_is_refused(tmp_path: Path) -> None:
    from gpoeo_rt.prediction.bundle import SEAL_KEY, BundleError, verify_bundle
    from gpoeo_rt.prediction.selection import select_bundle

    root = tmp_path / "bundles"
    write_bundle(root / "generic", name="generic")
    bundle = write_bundle(root / "sim", name="sim", nvml_names=("Sim GPU",))
    assert verify_bundle(bundle, sealed=True).name == "sim"
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["nvml_names"] = ["NVIDIA H200"]  # claim another GPU; the model files and their sha256 untouched
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match="changed after it was sealed"):
        verify_bundle(bundle)
    del manifest[SEAL_KEY]  # and without a seal at all
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match="not sealed"):
        select_bundle(root, "NVIDIA H200")
    verify = _cli("bundles", "verify", "--bundles", str(root))
    assert verify.returncode == 1 and "sim/manifest.json: manifest is not sealed" in verify.stdout
    shipped = _cli("bundles", "verify", "--bundles", "models")
    assert shipped.returncode == 0, shipped.stdout  # every shipped bundle is sealed


@pytest.mark.parametrize("workload", ["membound_fast", "membound", "resnet50", "gpt", "gpt,membound@300"])
def test_honest_markers_are_never_dropped(tmp_path: Path, bundles: Path, workload: str) -> None:
    """The cross-check's false alarms: a job that marks its real steps keeps them in every window."""
    from gpoeo_rt.daemon.config import DaemonConfig
    from gpoeo_rt.daemon.daemon import Daemon

    cfg = DaemonConfig(
        simulate=workload,
        sim_seconds=600.0,
        sim_markers=True,
        run_dir=str(tmp_path / "run"),
        state_dir=str(tmp_path / "state"),
        bundles=str(bundles),
    )
    daemon = Daemon(cfg, say=lambda s: None, install_signals=False, serve=False)
    assert daemon.run() == 0
    gpu = daemon.status()["gpus"][0]
    assert gpu["timing"] == "markers" and gpu["decisions"] > 20
    assert gpu["markers"]["dropped_windows"] == 0, gpu["markers"]["last_drop"]


def test_fast_markers_must_leave_their_alias_in_the_signal() -> None:
    def window_of(iteration_s: float) -> Any:
        preset = preset_workload("membound")
        assert isinstance(preset, AnalyticWorkload)
        gpu = SimulatedGPU(dataclasses.replace(preset, iteration_s=iteration_s), seed=2, config=SimConfig())
        markers = SimulatedStepMarkers(gpu, seed=2, min_interval_s=0.0)
        window = Sampler(gpu, markers=markers).collect(6.0)
        return window

    fast = window_of(0.012)  # 12 ms steps: the 50 Hz samples show their 60 ms beat
    assert marker_disagreement(fast, fast.marker_t_s, fast.marker_seq) is None
    slow = window_of(0.257)
    t = np.arange(slow.start_s + 0.005, slow.end_s, 0.012)  # a sender claiming 12 ms steps on a 257 ms job
    why = marker_disagreement(slow, t, np.arange(1, len(t) + 1, dtype=np.int64))
    assert why is not None and "leaves no alias" in why


def test_damaged_decision_logs_are_one_line(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from gpoeo_rt.cli import app

    keys = '"t_s": 1, "state": "profiling", "event": "probe", "sm_clock_mhz": 1, "mem_clock_mhz": 1'
    cases = {
        np.random.default_rng(1).bytes(4000): "not UTF-8",
        b"5\n": "a JSON int",
        b'{"t_s": 1}\n': "missing state",
        ("{" + keys.replace('"t_s": 1', '"t_s": "x"') + "}\n").encode(): "wrong type: t_s",
        ("{" + keys + ', "measured_energy_ratio": [1]}\n').encode(): "wrong type: measured_energy_ratio",
    }
    for k, (data, why) in enumerate(cases.items()):
        log = tmp_path / f"log{k}.jsonl"
        log.write_bytes(data)
        result = CliRunner().invoke(app, ["report", str(log)])
        assert result.exit_code == 2 and why in _one_error_line(result), result.output


@pytest.mark.parametrize("hangs", ["nvmlDeviceResetGpuLockedClocks", "nvmlDeviceGetHandleByIndex"])
def test_reset_of_a_hung_gpu_is_bounded_and_the_others_are_restored(tmp_path: Path, hangs: str) -> None:
    """`reset` (also the unit's ExecStopPost) with one GPU whose NVML hangs, resetting it or opening it."""
    from gpoeo_rt.daemon.config import DaemonConfig
    from gpoeo_rt.daemon.daemon import reset_gpus
    from gpoeo_rt.device.nvml import NVMLGPU
    from tests.runtime.fake_nvml import FakeDevice, FakeNVML

    fakes = {i: FakeNVML([FakeDevice(uuid=f"GPU-{i}a"), FakeDevice(uuid=f"GPU-{i}b")], root=True) for i in (0, 1)}
    state = tmp_path / "state"
    for index, fake in fakes.items():
        _lock_and_record(fake, index, state)
    release = fakes[0].hang(hangs)
    lines: list[str] = []
    t0 = time.monotonic()
    try:
        code = reset_gpus(
            DaemonConfig(state_dir=str(state), nvml_timeout_s=0.3),
            open_device=lambda i, w: NVMLGPU(i, nvml=fakes[i], clock=fakes[i], allow_clock_writes=w),
            device_count=lambda: 2,
            say=lines.append,
        )
    finally:
        release.set()
    assert time.monotonic() - t0 < 5.0  # bounded: not the fake's 60 s
    assert code == 1 and fakes[1].devices[1].locked_sm_mhz is None  # GPU 1 restored regardless
    assert any(line.startswith("gpoeo-rt: GPU 0: ") and "did not return within 0.3 s" in line for line in lines)
    assert any("GPU 1 (NVIDIA H200): default clocks restored" in line for line in lines)
