"""The daemon's settings, single-instance lock, control channel, advise mode, lockstep groups and CLI commands."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpoeo_rt.cli import app
from gpoeo_rt.daemon.config import OBJECTIVES, POLICIES, ConfigError, DaemonConfig, load_config
from gpoeo_rt.daemon.control import ControlError, may_control, request
from gpoeo_rt.daemon.daemon import Daemon
from gpoeo_rt.daemon.safety import AlreadyRunningError, GPULock
from gpoeo_rt.device import GPU, GroupGPU, SimClock, open_gpu
from gpoeo_rt.device.nvml import NVMLGPU
from tests.bundles import write_bundle
from tests.runtime.fake_nvml import FakeDevice, FakeNVML
from tests.runtime.sweep_rows import sweep_rows, write_sweep_csv
from tests.runtime.test_daemon_faults import _training_waveform

runner = CliRunner()


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bundles")
    write_bundle(root / "generic", name="generic")
    return root


def _cfg(tmp: Path, bundles: Path, **extra: Any) -> DaemonConfig:
    values: dict[str, Any] = {
        "simulate": "membound",
        "sim_seconds": 300.0,
        "run_dir": str(tmp / "run"),
        "state_dir": str(tmp / "state"),
        "bundles": str(bundles),
    }
    values.update(extra)
    return DaemonConfig(**values)


# --- settings -------------------------------------------------------------------------------------------------


def test_settings_precedence_file_env_flags(tmp_path: Path) -> None:
    file = tmp_path / "gpoeo-rt.toml"
    file.write_text('[gpoeo-rt]\nmax_slowdown = 0.03\nobjective = "edp"\ngpus = "0,2"\nadvise = true\n')
    assert load_config(file, environ={}).max_slowdown == 0.03
    cfg = load_config(file, environ={"GPOEO_RT_MAX_SLOWDOWN": "0.04", "GPOEO_RT_ADVISE": "no"})
    assert (cfg.max_slowdown, cfg.advise, cfg.objective, cfg.gpus) == (0.04, False, "edp", "0,2")
    cfg = load_config(file, environ={"GPOEO_RT_MAX_SLOWDOWN": "0.04"}, overrides={"max_slowdown": 0.02, "gpus": None})
    assert (cfg.max_slowdown, cfg.gpus) == (0.02, "0,2")


@pytest.mark.parametrize(
    ("text", "env", "message"),
    [
        ("max_slowdwn = 0.1\n", {}, "unknown setting 'max_slowdwn'"),
        ("max_slowdown = 'lots'\n", {}, "max_slowdown = 'lots'"),
        ("max_slowdown = 1.5\n", {}, "max_slowdown 1.5"),
        ('objective = "speed"\n', {}, "objective 'speed'"),
        ('gpus = "0,x"\n', {}, "gpus '0,x'"),
        ('group = "3"\n', {}, "at least two GPUs"),
        ("max_slowdown = [\n", {}, "not valid TOML"),
        ("", {"GPOEO_RT_NOPE": "1"}, "GPOEO_RT_NOPE: unknown setting"),
        ("", {"GPOEO_RT_ADVISE": "maybe"}, "GPOEO_RT_ADVISE: advise = 'maybe'"),
    ],
)
def test_bad_settings_name_the_setting_and_source(tmp_path: Path, text: str, env: dict[str, str], message: str) -> None:
    file = tmp_path / "bad.toml"
    file.write_text(text)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("[", r"\[")) as info:
        load_config(file, environ=env)
    if not env and "TOML" not in message and "unknown" in message:
        assert str(file) in str(info.value)


def test_gpu_selection() -> None:
    assert DaemonConfig().gpu_indices(4) == [0, 1, 2, 3]
    assert DaemonConfig(gpus="2,0").gpu_indices(4) == [2, 0]
    assert DaemonConfig(group="0,1").gpu_indices(4) == [0, 1]
    with pytest.raises(ConfigError, match="GPU index 5 does not exist: 2 GPU"):
        DaemonConfig(gpus="5").gpu_indices(2)


# --- one instance per GPU -------------------------------------------------------------------------------------


def test_second_lock_on_a_gpu_refuses_with_the_holder(tmp_path: Path) -> None:
    with GPULock(tmp_path, "GPU-abc", 0):
        with pytest.raises(AlreadyRunningError, match=rf"GPU 0 \(GPU-abc\) is already managed .*pid {os.getpid()}"):
            GPULock(tmp_path, "GPU-abc", 0).acquire()
        GPULock(tmp_path, "GPU-other", 1).acquire()  # another GPU is fine
    GPULock(tmp_path, "GPU-abc", 0).acquire()  # released: free again


def test_two_concurrent_starts_on_one_gpu(tmp_path: Path, bundles: Path) -> None:
    """The second `start` on the same GPU refuses clearly and changes nothing; the first runs on."""
    first = Daemon(_cfg(tmp_path, bundles, sim_speed=50.0), say=lambda s: None, install_signals=False)
    thread = threading.Thread(target=first.run)
    thread.start()
    try:
        _wait_until_serving(tmp_path)
        result = runner.invoke(
            app,
            [
                "start",
                "--simulate",
                "membound",
                "--run-dir",
                str(tmp_path / "run"),
                "--state-dir",
                str(tmp_path / "state"),
                "--bundles",
                str(bundles),
            ],
        )
        assert result.exit_code == 3
        assert "already managed by another gpoeo-rt" in result.output
        assert request(tmp_path / "run", {"cmd": "status"})["status"]["gpus"][0]["state"] != "failed"
    finally:
        first.request_stop()
        thread.join()


def _wait_until_serving(tmp: Path) -> None:
    for _ in range(2000):
        try:
            request(tmp / "run", {"cmd": "status"}, timeout_s=1.0)
            return
        except ControlError:
            threading.Event().wait(0.005)
    raise AssertionError("the daemon never served its status socket")


# --- control channel ------------------------------------------------------------------------------------------


def test_status_stop_and_set_over_the_sockets(tmp_path: Path, bundles: Path) -> None:
    daemon = Daemon(
        _cfg(tmp_path, bundles, sim_speed=100.0, sim_seconds=1e6), say=lambda s: None, install_signals=False
    )
    thread = threading.Thread(target=daemon.run)
    thread.start()
    try:
        _wait_until_serving(tmp_path)
        run = tmp_path / "run"
        assert oct((run / "status.sock").stat().st_mode & 0o777) == "0o666"
        assert oct((run / "control.sock").stat().st_mode & 0o777) == "0o660"
        status = request(run, {"cmd": "status"})["status"]
        assert status["pid"] == os.getpid() and status["gpus"][0]["mode"] == "control"
        assert oct((run / "markers.sock").stat().st_mode & 0o777) == "0o666"
        assert status["gpus"][0]["timing"] in (None, "signal")  # membound's 80 ms steps: timed by the power signal
        markers = status["gpus"][0]["markers"]
        assert (markers["senders"], markers["received"], markers["last_marker_age_s"]) == ([], 0, None)
        assert status["rss_mb"] > 0
        # Control commands are refused on the world-readable socket, whoever asks.
        with pytest.raises(ControlError):
            _raw(run / "status.sock", {"cmd": "stop"})
        assert not request(run, {"cmd": "set", "max_slowdown": 3.0})["ok"]
        assert request(run, {"cmd": "set", "max_slowdown": 0.02})["ok"]
        assert request(run, {"cmd": "status"})["status"]["max_slowdown"] == 0.02
        assert not request(run, {"cmd": "bogus"})["ok"]
        assert request(run, {"cmd": "stop"})["ok"]
    finally:
        daemon.request_stop()
        thread.join()
    assert not (tmp_path / "run" / "control.sock").exists()
    assert not (tmp_path / "run" / "markers.sock").exists()


def _raw(path: Path, payload: dict[str, Any]) -> None:
    import socket

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(str(path))
        sock.sendall(json.dumps(payload).encode() + b"\n")
        reply = json.loads(sock.makefile().readline())
    if not reply["ok"]:
        raise ControlError(reply["error"])


def test_may_control_rules() -> None:
    assert may_control(1, 0, 0, owner_uid=0, control_gid=None)
    assert may_control(1, 1000, 1000, owner_uid=1000, control_gid=None)  # the daemon's own user
    assert not may_control(1, 1001, 1001, owner_uid=0, control_gid=None)
    assert may_control(1, 1001, 4242, owner_uid=0, control_gid=4242)
    assert not may_control(1, 1001, 1001, owner_uid=0, control_gid=4242)


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to an unprivileged uid needs root")
def test_unprivileged_user_cannot_change_settings(tmp_path: Path, bundles: Path) -> None:
    """A forked child that drops to uid/gid 65534 (nobody) can read the status but neither stop nor reconfigure."""
    import shutil
    import tempfile

    tmp_path = Path(tempfile.mkdtemp(prefix="gpoeo-rt-test-"))  # pytest's own tmp is not reachable by nobody
    os.chmod(tmp_path, 0o755)
    daemon = Daemon(
        _cfg(tmp_path, bundles, sim_speed=100.0, sim_seconds=1e6), say=lambda s: None, install_signals=False
    )
    thread = threading.Thread(target=daemon.run)
    thread.start()
    try:
        _wait_until_serving(tmp_path)
        os.chmod(tmp_path / "run", 0o755)
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:
            outcome: dict[str, Any] = {}
            try:
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
                outcome["status"] = request(tmp_path / "run", {"cmd": "status"})["ok"]
                for payload in ({"cmd": "stop"}, {"cmd": "set", "max_slowdown": 0.5}):
                    try:
                        outcome[payload["cmd"]] = request(tmp_path / "run", payload)
                    except ControlError as exc:
                        outcome[payload["cmd"]] = {"refused": str(exc)}
            except Exception as exc:
                outcome["child_error"] = repr(exc)
            finally:
                os.write(write_fd, json.dumps(outcome).encode())
                os._exit(0)
        os.close(write_fd)
        os.waitpid(pid, 0)
        outcome = json.loads(os.read(read_fd, 65536))
        os.close(read_fd)
        assert "child_error" not in outcome, outcome
        assert outcome["status"] is True
        for cmd in ("stop", "set"):
            assert "permission denied" in outcome[cmd]["refused"]
        status = request(tmp_path / "run", {"cmd": "status"})["status"]
        assert status["max_slowdown"] == 0.05 and status["gpus"][0]["state"] != "stopped"
    finally:
        daemon.request_stop()
        thread.join()
        shutil.rmtree(tmp_path)


# --- advise mode, privileges, groups --------------------------------------------------------------------------


def test_advise_mode_never_writes_and_logs_a_recommendation(tmp_path: Path, bundles: Path) -> None:
    fake = FakeNVML([FakeDevice(waveform=_training_waveform, buffer_capacity=200)], root=False)
    fake.advance(1.0)
    lines: list[str] = []
    daemon = Daemon(
        _cfg(tmp_path, bundles, simulate=None),
        open_device=lambda i, writes: NVMLGPU(i, allow_clock_writes=writes, nvml=fake, clock=fake),
        device_count=lambda: 1,
        is_root=lambda: False,
        say=lines.append,
        install_signals=False,
        serve=False,
        run_for_s=120.0,
    )
    assert daemon.run() == 0
    assert sum("needs root" in line for line in lines) == 1  # said once, plainly
    assert fake.writes() == []
    records = [json.loads(x) for x in (tmp_path / "state" / "decisions-gpu0.jsonl").read_text().splitlines()]
    advice = [r for r in records if r["event"] == "advise"]
    assert advice and advice[0]["advised_sm_clock_mhz"] is not None
    assert all(not r["locked"] for r in records)


def test_lockstep_group_applies_one_decision_to_every_gpu(tmp_path: Path, bundles: Path) -> None:
    clock = SimClock()
    devices: list[GPU] = []

    def open_device(index: int, writes: bool) -> GPU:
        gpu = open_gpu(index, simulate="membound", allow_clock_writes=writes, clock=clock, seed=index)
        devices.append(gpu)
        return gpu

    daemon = Daemon(
        _cfg(tmp_path, bundles, group="0,1,2"),
        open_device=open_device,
        device_count=lambda: 3,
        say=lambda s: None,
        install_signals=False,
        serve=False,
    )
    assert daemon.run() == 0
    assert len(daemon.workers) == 1 and isinstance(daemon.workers[0].device, GroupGPU)
    writes = [[(sm, mem) for _, sm, mem in gpu.clock_writes] for gpu in devices]  # type: ignore[attr-defined]
    assert writes[0] == writes[1] == writes[2] and len(writes[0]) > 2
    assert all(gpu.locked_clocks is None for gpu in devices)  # type: ignore[attr-defined]


def test_group_refuses_mixed_gpu_models(tmp_path: Path) -> None:
    a = open_gpu(0, simulate="membound")
    sweeps = write_sweep_csv(tmp_path / "sweeps.csv", sweep_rows())
    b = open_gpu(1, simulate=f"{sweeps}:v100:bert")
    with pytest.raises(ValueError, match="different clock table"):
        GroupGPU([a, b])


# --- CLI ------------------------------------------------------------------------------------------------------


def test_cli_start_simulated_then_report(tmp_path: Path, bundles: Path) -> None:
    args = ["--run-dir", str(tmp_path / "run"), "--state-dir", str(tmp_path / "state"), "--bundles", str(bundles)]
    result = runner.invoke(app, ["start", "--simulate", "membound", "--sim-seconds", "300", *args])
    assert result.exit_code == 0, result.output
    assert "saving" in result.output
    log = tmp_path / "state" / "decisions-gpu0.jsonl"
    png = tmp_path / "timeline.png"
    result = runner.invoke(app, ["report", str(log), "--plot", str(png), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output[: result.output.rindex("}") + 1])
    assert summary["events"]["stop"] == 1 and summary["final_locked"] is False
    assert png.stat().st_size > 10_000


def test_cli_report_names_a_bad_line(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    log.write_text('{"t_s": 1}\n{"t_s": 2\n')
    result = runner.invoke(app, ["report", str(log)])
    assert result.exit_code == 2
    assert f"{log}:1: not a gpoeo-rt decision" in result.output


def test_cli_status_and_stop_without_a_daemon(tmp_path: Path) -> None:
    for cmd in ("status", "stop"):
        result = runner.invoke(app, [cmd, "--run-dir", str(tmp_path)])
        assert result.exit_code == 1
        assert "no gpoeo-rt daemon is running here" in result.output


def test_cli_bundles_verify_flags_a_corrupt_bundle(tmp_path: Path, bundles: Path) -> None:
    result = runner.invoke(app, ["bundles", "verify", "--bundles", str(bundles)])
    assert result.exit_code == 0 and "ok" in result.output
    broken = tmp_path / "b"
    write_bundle(broken / "generic", name="generic")
    (broken / "generic" / "time.onnx").write_bytes(b"not a model")
    result = runner.invoke(app, ["bundles", "verify", "--bundles", str(broken)])
    assert result.exit_code == 1 and "FAILED" in result.output and "sha256" in result.output
    result = runner.invoke(app, ["bundles", "list", "--bundles", str(bundles)])
    assert result.exit_code == 0 and "generic" in result.output
    result = runner.invoke(app, ["bundles", "list", "--bundles", str(bundles), "--json"])
    listed = json.loads(result.output)
    assert result.exit_code == 0 and [b["name"] for b in listed["bundles"]] == ["generic"]
    assert listed["bundles"][0]["nvml_names"] == ["Sim GPU"]  # as the test bundle's manifest says


def test_cli_start_rejects_bad_settings(tmp_path: Path) -> None:
    result = runner.invoke(app, ["start", "--simulate", "membound", "--max-slowdown", "2", "--run-dir", str(tmp_path)])
    assert result.exit_code == 2 and "max_slowdown 2.0" in result.output


def test_setting_vocabularies_match_the_runtime() -> None:
    from gpoeo_rt.controller.state import Policy
    from gpoeo_rt.search.objectives import Objective

    assert set(OBJECTIVES) == {o.value for o in Objective}
    assert set(POLICIES) == {p.value for p in Policy}


def test_status_command_imports_no_numpy() -> None:
    """`gpoeo-rt status` must answer fast: its imports stay clear of numpy and onnxruntime."""
    import subprocess
    import sys

    code = (
        "import sys; import gpoeo_rt.cli, gpoeo_rt.daemon.config, gpoeo_rt.daemon.control; "
        "bad = [m for m in ('numpy', 'onnxruntime') if m in sys.modules]; sys.exit(', '.join(bad) or None)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_prometheus_endpoint_is_off_by_default_and_loopback_when_on(tmp_path: Path, bundles: Path) -> None:
    import urllib.request

    assert DaemonConfig().prometheus_port is None and DaemonConfig().prometheus_addr == "127.0.0.1"
    daemon = Daemon(
        _cfg(tmp_path, bundles, sim_speed=100.0, sim_seconds=1e6, prometheus_port=0),
        say=lambda s: None,
        install_signals=False,
    )
    thread = threading.Thread(target=daemon.run)
    thread.start()
    try:
        _wait_until_serving(tmp_path)
        for _ in range(2000):
            if daemon.prometheus_port:
                break
            threading.Event().wait(0.005)
        with urllib.request.urlopen(f"http://127.0.0.1:{daemon.prometheus_port}/metrics", timeout=5) as reply:
            text = reply.read().decode()
        assert daemon._exporter.server_address[0] == "127.0.0.1"
    finally:
        daemon.request_stop()
        thread.join()
    _check_exposition(text)


def _check_exposition(text: str) -> None:
    """Prometheus conventions: totals are counters, stable labels (gpus, uuid) on every series, the state as a
    state set; and `promtool check metrics` passes where promtool is installed."""
    import shutil
    import subprocess

    from prometheus_client.parser import text_string_to_metric_families

    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["gpoeo_decisions"].type == "counter" and families["gpoeo_restarts"].type == "counter"
    assert families["gpoeo_locked"].type == "gauge"
    # Joules as counters (used, and at reference for the same work), the saved joules beside them as a gauge.
    assert families["gpoeo_energy_used_joules"].type == families["gpoeo_energy_reference_joules"].type == "counter"
    assert families["gpoeo_energy_saved_joules"].type == "gauge"
    states = families["gpoeo_state"]
    # A state set (one series per possible state, 1 for the current one), a gauge in the text format.
    assert {s.labels["gpoeo_state"] for s in states.samples} >= {"profiling", "holding", "refused"}
    assert sum(s.value for s in states.samples) == 1.0  # one state at a time
    for family in families.values():
        for sample in family.samples:
            assert {"gpus", "uuid"} <= set(sample.labels), sample
            assert sample.labels["uuid"].startswith("GPU-"), sample
            assert family.name == "gpoeo_state" or "gpoeo_state" not in sample.labels, sample
    promtool = shutil.which("promtool")
    if promtool is not None:
        checked = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
        assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_grafana_dashboard_queries_only_metrics_the_exporter_serves() -> None:
    import re

    from gpoeo_rt.daemon.metrics import _COUNTERS, _GAUGES

    dashboard = json.loads((Path(__file__).resolve().parents[2] / "packaging/grafana/gpoeo-rt.json").read_text())
    served = {name for name, _, _ in _GAUGES} | {f"{name}_total" for name, _, _ in _COUNTERS}
    served |= {"gpoeo_state", "gpoeo_mode"}
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    exprs += [v["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    used = {m for expr in exprs for m in re.findall(r"\bgpoeo_[a-z_]+", expr)}
    assert used and used <= served, used - served


def test_the_energy_counters_export_the_meters_joules() -> None:
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from gpoeo_rt.daemon.metrics import _StatusCollector

    energy = {"used_j": 800.0, "reference_j": 1000.0, "saved_j": 200.0}
    gpu = {"gpus": [0], "uuid": "GPU-1", "state": "holding", "mode": "control", "decisions": 9, "restarts": 0}
    gpu |= {"energy": energy, "coverage": {"counted": 0.9}}
    gpu |= {"split": {"held_saving_pct": 25.0, "exploration_cost_pct": 1.5}}
    registry = CollectorRegistry()
    registry.register(_StatusCollector(lambda: {"gpus": [gpu]}))  # type: ignore[arg-type]
    text = generate_latest(registry).decode()
    values = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
    assert values["gpoeo_energy_used_joules_total"] == 800.0
    assert values["gpoeo_energy_reference_joules_total"] == 1000.0
    assert values["gpoeo_energy_saved_joules"] == 200.0 and values["gpoeo_counted_ratio"] == 0.9
    assert values["gpoeo_held_saving_ratio"] == 0.25 and values["gpoeo_exploration_cost_ratio"] == 0.015
    _check_exposition(text)
