"""The `gpoeo-collect` command line (simulated GPU only), the built-in workloads and the user-command runner."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpoeo_pipeline.collect.cli import app
from gpoeo_pipeline.collect.runs import MARKERS_ENV, ProcessRun
from gpoeo_pipeline.collect.store import CollectError
from gpoeo_pipeline.collect.workloads import BUILTINS, parse_spec, run, workload_id
from gpoeo_pipeline.sources import gpoeo_collect
from gpoeo_rt.device import NVMLGPU, SimClock
from tests.runtime.fake_nvml import FakeNVML

FAST = ["--settle", "0.5", "--warmup", "1", "--window", "3", "--repeats", "2", "--no-progress"]


def test_cli_simulated_sweep_then_resume(tmp_path: Path) -> None:
    out = tmp_path / "sim"
    args = ["--simulate", "gpt,membound", "--out", str(out), "--sm-stride", "40", *FAST]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "12 config(s) measured, 0 already done, 0 failed" in result.output
    frame = gpoeo_collect.parse(out).frame
    assert len(frame) == 12 and set(frame["sku"]) == {"simulated-h200"}
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0 and "0 config(s) measured, 12 already done" in again.output


def test_cli_reference_only_on_the_simulated_gpu(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["--simulate", "resnet50", "--reference-only", "--out", str(tmp_path), *FAST])
    assert result.exit_code == 0, result.output
    frame = gpoeo_collect.parse(tmp_path).frame
    assert len(frame) == 1 and bool(frame["ref"].iloc[0]) and frame["sm_clock_mhz"].iloc[0] == 1980


def test_cli_refuses_a_real_sweep_without_the_write_flag_before_opening_the_gpu(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["--out", str(tmp_path / "o"), "--", "python", "train.py"])
    assert result.exit_code == 2 and "--allow-clock-writes" in result.output
    assert not (tmp_path / "o").exists()


def test_cli_rejects_bad_input_by_name(tmp_path: Path) -> None:
    bad_preset = CliRunner().invoke(app, ["--simulate", "nope", "--out", str(tmp_path)])
    assert bad_preset.exit_code == 2 and "nope" in bad_preset.output
    bad_size = CliRunner().invoke(app, ["--reference-only", "--workloads", "cnn:depth=3", "--out", str(tmp_path)])
    assert bad_size.exit_code == 2 and "depth=3" in bad_size.output
    bad_timing = CliRunner().invoke(app, ["--simulate", "gpt", "--timing", "sometimes", "--out", str(tmp_path)])
    assert bad_timing.exit_code == 2 and "sometimes" in bad_timing.output


def test_listing_and_collecting_import_neither_torch_nor_pandas(tmp_path: Path) -> None:
    code = (
        "import sys; from typer.testing import CliRunner; from gpoeo_pipeline.collect.cli import app;"
        "r = CliRunner().invoke(app, ['--list-workloads']);"
        f"s = CliRunner().invoke(app, ['--simulate', 'gpt', '--reference-only', '--out', {str(tmp_path)!r}, "
        "'--window', '3', '--no-progress']);"
        "print(r.exit_code, s.exit_code, 'torch' in sys.modules, 'pandas' in sys.modules); print(r.output)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("0 0 False False")
    assert all(name in out for name in ("cnn", "transformer", "mlp", "gnn"))


def test_workload_specs() -> None:
    name, sizes = parse_spec("cnn:batch=8,width=4")
    assert name == "cnn" and sizes["batch"] == 8 and sizes["image"] == BUILTINS["cnn"].sizes["image"]
    assert workload_id(name, sizes).startswith("cnn/batch=8,")
    for bad, message in (("resnet", "unknown workload"), ("mlp:batch=0", ">= 1"), ("mlp:batch=x", "not an integer")):
        with pytest.raises(ValueError, match=message):
            parse_spec(bad)


TINY = {
    "cnn": "batch=2,width=4,layers=2,image=16",
    "transformer": "batch=2,seq=8,d_model=64,layers=1,vocab=50",
    "mlp": "batch=16,width=8,layers=2",
    "gnn": "nodes=50,edges=200,features=8,hidden=8",
}


@pytest.mark.parametrize("name", sorted(BUILTINS))
def test_builtin_workloads_train_and_log_step_markers(name: str, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    markers = tmp_path / "m.txt"
    _, sizes = parse_spec(f"{name}:{TINY[name]}")
    assert run(name, sizes, str(markers), "cpu", steps=3) == 3
    stamps = [float(line) for line in markers.read_text().splitlines()]
    assert len(stamps) == 3 and stamps == sorted(stamps)


def test_a_user_command_is_timed_by_the_markers_it_writes(tmp_path: Path) -> None:
    script = (
        "import os\n"
        f"with open(os.environ['{MARKERS_ENV}'], 'a') as f:\n"
        "    for i in range(10):\n"
        "        f.write(f'{100.0 + 0.25 * i}\\n')\n"
    )
    proc_run = ProcessRun("cmd/train.py", [sys.executable, "-c", script], tmp_path, clock=SimClock(), startup_s=0)
    proc_run.ensure_running()
    assert proc_run._proc is not None
    assert proc_run._proc.wait(timeout=60) == 0
    ends = proc_run.iteration_ends(100.1, 101.0)
    assert ends is not None and ends.tolist() == [100.25, 100.5, 100.75, 101.0]
    proc_run.ensure_running()  # it ended on its own with status 0: started again
    assert proc_run.starts == 2
    proc_run.stop()


def test_a_failing_user_command_is_reported_with_its_output(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"]
    proc_run = ProcessRun("cmd/x", argv, tmp_path, clock=SimClock(), startup_s=0)
    proc_run.ensure_running()
    assert proc_run._proc is not None
    proc_run._proc.wait(timeout=60)
    with pytest.raises(CollectError, match=r"(?s)status 3.*boom"):
        proc_run.ensure_running()


def test_a_workload_that_never_writes_a_marker_is_reported(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "print('no markers here')"]
    proc_run = ProcessRun("cnn/x", argv, tmp_path, clock=SimClock(), startup_s=5, wait_for_marker=True)
    with pytest.raises(CollectError, match="no step marker within 5 s"):
        proc_run.ensure_running()
    proc_run.stop()


def test_cli_reference_only_opens_the_real_gpu_read_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNVML(root=True)  # root: a clock write would go through, so none may be attempted
    opened: list[dict[str, object]] = []

    def fake_open_gpu(index: int = 0, **kwargs: object) -> NVMLGPU:
        opened.append({"index": index, **kwargs})
        allow = bool(kwargs.get("allow_clock_writes", False))
        return NVMLGPU(index, allow_clock_writes=allow, nvml=fake, clock=fake, monotonic_s=fake.now_s)

    monkeypatch.setattr("gpoeo_rt.device.open_gpu", fake_open_gpu)
    out = tmp_path / "h200-reference"
    args = ["--reference-only", "--sku", "h200", "--out", str(out), "--startup", "0", "--timing", "markers", *FAST]
    result = CliRunner().invoke(app, [*args, "--", sys.executable, "-c", "pass"])
    # The command writes no step markers, so its one config fails (exit 3); what matters is what NVML saw.
    assert result.exit_code == 3, result.output
    assert "0 step marker(s)" in result.output
    assert opened == [{"index": 0, "allow_clock_writes": False}]
    assert fake.writes() == [] and fake.initialised == 0
    assert (out / "collect.json").exists() and not (out / "clock-lock.json").exists()


def test_cli_progress_bar_counts_configs_and_shows_an_eta(tmp_path: Path) -> None:
    args = ["--simulate", "gpt", "--out", str(tmp_path), "--sm-stride", "60", "--window", "3", "--repeats", "1"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "4/4" in result.output and "ETA" in result.output


def test_builtin_runner_takes_the_markers_file_from_the_collectors_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The collector starts built-ins with $GPOEO_STEP_MARKERS only (no --markers flag): they must honour it."""
    from gpoeo_pipeline.collect import workloads

    seen: dict[str, object] = {}

    def fake_run(name: str, sizes: object, markers: str | None, device: str, steps: int | None = None) -> int:
        seen["markers"] = markers
        return 0

    monkeypatch.setattr(workloads, "run", fake_run)
    monkeypatch.setenv(MARKERS_ENV, str(tmp_path / "m.txt"))
    workloads.main(["mlp", "--device", "cpu", "--steps", "1"])
    assert seen["markers"] == str(tmp_path / "m.txt")


def test_dash_h_is_help() -> None:
    result = CliRunner().invoke(app, ["-h"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output
