"""The step-marker channel: the client (cheap, never raises), the daemon's socket and board (validation, rate
limit, GPU mapping), the daemon timing a fast simulated job by markers, and the framework callbacks."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpoeo_rt.client import markers as client_markers
from gpoeo_rt.client.markers import MarkerClient, mark_step, marker_stats, step
from gpoeo_rt.daemon.config import DaemonConfig
from gpoeo_rt.daemon.daemon import Daemon
from gpoeo_rt.daemon.markers import MarkerBoard, MarkerServer
from tests.bundles import write_bundle

NOW = 1_700_000_000.0


def _board(gpus: list[tuple[int, str]] | None = None, **kw: Any) -> MarkerBoard:
    return MarkerBoard(gpus or [(0, "GPU-aaaa-0000")], lambda: NOW, **kw)


def _datagram(step_no: int, t_s: float, gpus: str = "-") -> bytes:
    return f"gpoeo-mark1 {step_no} {t_s:.6f} {gpus}".encode()


# --- the daemon's board ---------------------------------------------------------------------------------------


def test_board_keeps_valid_markers_and_says_why_it_drops_the_others() -> None:
    board = _board()
    for k in range(1, 21):
        assert board.offer(_datagram(k, NOW - 1 + 0.01 * k), pid=42) is None
    t, seq = board.markers_between([0], NOW - 2, NOW)
    assert len(t) == 20 and list(seq) == list(range(1, 21))
    assert board.offer(b"hello", pid=42) == "malformed"
    assert board.offer(b"gpoeo-mark1 1 nan -", pid=42) == "malformed"
    assert board.offer(_datagram(5, NOW) + b"x" * 300, pid=42) == "malformed"
    assert board.offer(_datagram(30, NOW + 60), pid=42) == "clock_skew"
    assert board.offer(_datagram(31, NOW - 5), pid=42) == "out_of_order"
    assert board.offer(_datagram(32, NOW, "7"), pid=42) == "unmapped"
    assert board.rejected == {"malformed": 3, "clock_skew": 1, "out_of_order": 1, "unmapped": 1}
    summary = board.summary([0])
    assert summary == {"senders": [42], "received": 20, "rejected": board.rejected, "last_marker_age_s": 0.0}


def test_board_maps_indices_and_uuids_and_guesses_only_with_one_gpu() -> None:
    board = _board([(0, "GPU-aaaa-0000"), (1, "GPU-bbbb-1111")])
    assert board.offer(_datagram(1, NOW, "-"), pid=1) == "unmapped"  # two GPUs: the sender must say which
    assert board.offer(_datagram(1, NOW, "1"), pid=1) is None
    assert board.offer(_datagram(1, NOW, "bbbb-1111"), pid=2) is None  # torch's UUID form, without GPU-
    assert board.offer(_datagram(1, NOW, "GPU-AAAA-0000"), pid=3) is None
    assert board.summary([1])["senders"] == [1, 2] and board.summary([0])["senders"] == [3]


def test_board_rate_limits_each_sender_and_bounds_the_senders() -> None:
    board = _board(max_rate_hz=10.0, max_senders=3)
    stored = [board.offer(_datagram(k, NOW), pid=9) for k in range(1, 31)]
    assert stored.count(None) == 10 and stored.count("rate_limited") == 20
    for pid in range(100, 110):
        board.offer(_datagram(1, NOW), pid=pid)
    assert len(board.summary([0])["senders"]) == 3  # type: ignore[arg-type]


def test_board_times_a_window_by_the_busiest_sender_and_restarts_a_reset_counter() -> None:
    board = _board()
    for k in range(1, 101):
        board.offer(_datagram(k, NOW - 2 + 0.01 * k), pid=5)
    for k in range(1, 11):
        board.offer(_datagram(k, NOW - 2 + 0.1 * k), pid=4)
    t, _ = board.markers_between([0], NOW - 3, NOW)
    assert len(t) == 100
    board.offer(_datagram(1, NOW), pid=5)  # the counter went back: a new job under that pid
    t, _ = board.source([0]).markers_between(NOW - 3, NOW)
    assert len(t) == 10  # pid 4 now has the most markers


# --- client and socket -----------------------------------------------------------------------------------------


def test_client_reaches_a_daemon_socket_and_the_kernel_names_the_sender(tmp_path: Path) -> None:
    board = MarkerBoard([(0, "GPU-aaaa-0000")], time.time)
    server = MarkerServer(tmp_path, board)
    server.open()
    try:
        assert oct((tmp_path / "markers.sock").stat().st_mode & 0o777) == "0o666"
        client = MarkerClient(tmp_path, gpu=0, min_interval_s=0.0)
        t0 = time.time()
        stored = 0
        for _ in range(10):  # the kernel queues few datagrams (net.unix.max_dgram_qlen): drain as the daemon does
            for _ in range(5):
                client.mark()
            stored += server.drain()
        assert stored == 50 and client.sent == 50
        for _ in range(100):  # a daemon that does not keep up: the overflow is dropped, never blocks or raises
            client.mark()
        assert 0 < server.drain() < 100 and client.steps == 150
        t, seq = board.markers_between([0], t0 - 1, time.time() + 1)
        assert list(seq[:50]) == list(range(1, 51)) and np.all(np.diff(t) >= 0)
        assert seq[-1] > seq[50]  # the steps tell which markers were lost
        assert board.summary([0])["senders"] == [os.getpid()]
        with pytest.raises(ValueError, match="gpu="):
            MarkerClient(tmp_path, gpu="0; rm -rf")
    finally:
        server.close()
    assert not (tmp_path / "markers.sock").exists()


def test_client_without_a_daemon_is_silent_cheap_and_reconnects(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    clock = [1000.0]
    monkeypatch.setattr(client_markers.time, "monotonic", lambda: clock[0])
    client = MarkerClient(tmp_path, gpu=0)
    with caplog.at_level(logging.WARNING, "gpoeo_rt.client"):
        for _ in range(1000):
            client.mark()
    assert client.steps == 1000 and client.sent == 0 and not caplog.records
    board = MarkerBoard([(0, "u")], time.time)
    server = MarkerServer(tmp_path, board)
    server.open()
    try:
        client.mark()  # within the retry interval: not even a connect
        assert server.drain() == 0
        clock[0] += 1.5
        client.mark()
        assert server.drain() == 1
    finally:
        server.close()
    client.mark()  # the daemon went away: swallowed
    assert client.sent == 1


def test_client_sends_at_most_one_datagram_per_interval_and_the_steps_keep_the_period_exact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [5000.0]
    monkeypatch.setattr(client_markers.time, "monotonic", lambda: clock[0])
    board = MarkerBoard([(0, "u")], lambda: NOW)
    server = MarkerServer(tmp_path, board)
    server.open()
    client = MarkerClient(tmp_path, gpu=0)  # the default 50 ms interval
    stored = 0
    try:
        for k in range(200):  # 10 ms steps
            clock[0] += 0.01
            monkeypatch.setattr(client_markers.time, "time", lambda k=k: NOW - 2.0 + 0.01 * k)
            client.mark()
            stored += server.drain()
    finally:
        server.close()
    assert client.steps == 200 and client.sent == stored and 38 <= stored <= 41
    t, seq = board.markers_between([0], NOW - 3, NOW)
    assert np.all(np.diff(seq) == 5)  # every 5th step, numbered
    assert (t[-1] - t[0]) / (seq[-1] - seq[0]) == pytest.approx(0.01)


def test_client_logs_an_unexpected_error_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    client = MarkerClient(tmp_path / ("x" * 200), gpu=0)  # longer than a Unix socket path may be
    with caplog.at_level(logging.WARNING, "gpoeo_rt.client"):
        for _ in range(5):
            client._next_s = -1.0  # as if the retry interval had passed
            client.mark()
    assert len(caplog.records) == 1 and "step markers" in caplog.records[0].getMessage()


def test_mark_step_and_step_use_the_run_dir_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPOEO_RT_RUN_DIR", str(tmp_path))
    monkeypatch.setattr(client_markers, "_default", None)
    board = MarkerBoard([(0, "u")], time.time)
    server = MarkerServer(tmp_path, board)
    server.open()
    try:
        mark_step()
        assert client_markers._default is not None
        client_markers._default._min_interval_s = 0.0  # count every step's datagram
        client_markers._default._next_s = -1.0

        @step()
        def train_one() -> None:
            pass

        train_one()
        with step():
            pass
        with pytest.raises(RuntimeError), step():
            raise RuntimeError("a failed step is not marked")
        assert marker_stats()["sent"] == 3 and server.drain() == 3
    finally:
        server.close()


def test_client_finds_the_gpu_from_torch_or_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.SimpleNamespace(
        cuda=types.SimpleNamespace(
            is_initialized=lambda: True,
            current_device=lambda: 1,
            get_device_properties=lambda i: types.SimpleNamespace(uuid=f"abcd-{i}"),
        )
    )
    monkeypatch.setitem(sys.modules, "torch", fake)
    assert client_markers._detected_gpu() == b"GPU-abcd-1"
    fake.cuda.get_device_properties = lambda i: types.SimpleNamespace()  # an old torch without uuid
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert client_markers._detected_gpu() == b"5"
    monkeypatch.delitem(sys.modules, "torch")
    assert client_markers._detected_gpu() == b"-"  # two visible GPUs and no torch: cannot tell
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-1234")
    assert client_markers._detected_gpu() == b"GPU-1234"


def test_the_client_imports_without_numpy() -> None:
    code = "import sys, gpoeo_rt.client; assert 'numpy' not in sys.modules, sorted(sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": "runtime"})


def test_the_readme_callback_path_works_after_a_plain_import() -> None:
    """README: `Trainer(callbacks=[gpoeo_rt.client.lightning.GpoeoStepMarker()])` after `import gpoeo_rt.client`."""
    code = (
        "import sys, gpoeo_rt.client; "
        "assert 'gpoeo_rt.client.lightning' not in sys.modules; "
        "m = gpoeo_rt.client.lightning; h = gpoeo_rt.client.huggingface; "
        "assert m.__name__ == 'gpoeo_rt.client.lightning' and h.__name__ == 'gpoeo_rt.client.huggingface'; "
        "assert not hasattr(gpoeo_rt.client, 'torch')"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": "runtime"})


# --- the daemon ------------------------------------------------------------------------------------------------


def test_the_daemon_times_a_12ms_job_by_its_markers_and_says_so(tmp_path: Path) -> None:
    bundles = tmp_path / "bundles"
    write_bundle(bundles / "generic", name="generic")

    def run(markers: bool) -> dict[str, Any]:
        folder = tmp_path / ("with" if markers else "without")
        config = DaemonConfig(
            simulate="membound_fast",
            sim_seconds=150.0,
            sim_markers=markers,
            run_dir=str(folder / "run"),
            state_dir=str(folder / "state"),
            bundles=str(bundles),
        )
        daemon = Daemon(config, say=lambda s: None, install_signals=False, serve=False)
        assert daemon.run() == 0
        status = daemon.status()["gpus"][0]
        log = [json.loads(x) for x in (folder / "state" / "decisions-gpu0.jsonl").read_text().splitlines()]
        return {"status": status, "log": log}

    marked, blind = run(True), run(False)
    assert marked["status"]["timing"] == "markers"
    assert {r["timing"] for r in marked["log"] if r["period_s"] is not None} == {"markers"}
    assert any(r["event"] == "baseline" for r in marked["log"])
    assert any(r["locked"] for r in marked["log"])  # it tuned the job
    marked_base = [r["period_s"] for r in marked["log"] if r["event"] == "baseline"]
    assert marked_base and all(p == pytest.approx(0.012, rel=0.01) for p in marked_base)
    # 12 ms is beyond the 50 Hz power signal: what it reports is an alias (here the 60 ms beat of 12 and 20 ms).
    assert blind["status"]["timing"] in (None, "signal")
    blind_periods = [r["period_s"] for r in blind["log"] if r["period_s"] is not None]
    assert all(p > 0.03 for p in blind_periods)


# --- framework callbacks (stand-in base classes: neither framework is installed for the tests) ----------------


class _LightningCallback:
    """What Lightning's Callback looks like to a subclass: no-op hooks."""

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        raise AssertionError("the subclass must override this")


class _TrainerCallback:
    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        raise AssertionError("the subclass must override this")


def test_callbacks_mark_one_step_per_batch_and_import_without_their_framework(tmp_path: Path) -> None:
    from gpoeo_rt.client import huggingface, lightning

    board = MarkerBoard([(0, "u")], time.time)
    server = MarkerServer(tmp_path, board)
    server.open()
    try:
        on_lightning = lightning.make_callback(_LightningCallback)(gpu=0, run_dir=tmp_path)
        on_hf = huggingface.make_callback(_TrainerCallback)(gpu=0, run_dir=tmp_path)
        on_lightning.marker._min_interval_s = on_hf.marker._min_interval_s = 0.0  # count every step's datagram
        for batch in range(3):
            on_lightning.on_train_batch_end(None, None, None, None, batch)
            assert on_hf.on_step_end(None, None, None, model=None) is None  # control flow untouched
        assert server.drain() == 6
        assert isinstance(on_lightning, _LightningCallback) and isinstance(on_hf, _TrainerCallback)
    finally:
        server.close()
    for module in (lightning, huggingface):
        try:
            import_error = None
            module.GpoeoStepMarker  # noqa: B018 - the attribute access is the test
        except ImportError as exc:
            import_error = exc
        framework_present = any(name in sys.modules for name in ("lightning", "pytorch_lightning", "transformers"))
        assert import_error is not None or framework_present
        if import_error is not None:
            assert "pip install" in str(import_error)


def test_the_plain_pytorch_example_compiles() -> None:
    import py_compile

    py_compile.compile("examples/train_with_markers.py", doraise=True)
