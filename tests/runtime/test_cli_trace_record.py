"""`gpoeo-rt trace record`: simulated recordings in the shared trace layout, and the real path against a fake NVML."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from gpoeo_rt.cli import app
from gpoeo_rt.sampling import POLLED_COLUMNS
from gpoeo_rt.tracefile import read_polled, read_trace
from tests.runtime.fake_nvml import FakeNVML

runner = CliRunner()


def _record(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["trace", "record", *args])
    return result.exit_code, result.output


def test_simulated_recording_is_readable(tmp_path: Path) -> None:
    out = tmp_path / "rec"
    code, output = _record(str(out), "--seconds", "12", "--simulate", "resnet50")
    assert code == 0, output
    assert "600 buffered power samples" in output and "120 polls" in output
    trace = read_trace(out)
    assert trace.power.source == "buffered" and len(trace.power.t_s) == 600
    np.testing.assert_allclose(np.diff(trace.power.t_s), 0.02, atol=1e-6)
    assert 300.0 < float(np.mean(trace.power.power_w)) < 700.0
    assert trace.iterations is not None
    (phase,) = trace.iterations.phases()
    assert phase.period_s == pytest.approx(0.1042, rel=0.02)
    with (out / "nvml_polled.csv").open() as fh:
        header = next(csv.reader(fh))
    assert tuple(header) == POLLED_COLUMNS
    polled = read_polled(out, ("energy_mj", "sm_clk", "gpm_sm_util", "p_inst_mw"))
    assert np.all(np.diff(polled["energy_mj"]) >= 0) and np.all(polled["sm_clk"] == 1980)
    gpm = polled["gpm_sm_util"]
    assert np.isnan(gpm[0]) and np.all((gpm[1:] > 50) & (gpm[1:] <= 100))  # percent, like GPM


def test_simulated_schedule_records_two_phases(tmp_path: Path) -> None:
    out = tmp_path / "rec"
    code, output = _record(str(out), "--seconds", "10", "--simulate", "gpt,membound@5", "--poll-ms", "200")
    assert code == 0, output
    trace = read_trace(out)
    assert trace.iterations is not None
    periods = [p.period_s for p in trace.iterations.phases()]
    assert periods == pytest.approx([0.2568, 0.08], rel=0.02)
    assert len(read_polled(out, ("p_inst_mw",))["t_s"]) == 50


def test_same_seed_same_trace(tmp_path: Path) -> None:
    for name in ("a", "b"):
        assert _record(str(tmp_path / name), "--seconds", "3", "--simulate", "gpt", "--seed", "4")[0] == 0
    for file in ("nvml_buffered.csv", "nvml_polled.csv", "iterations.csv"):
        assert (tmp_path / "a" / file).read_text() == (tmp_path / "b" / file).read_text()


def test_bad_simulate_value(tmp_path: Path) -> None:
    code, output = _record(str(tmp_path / "x"), "--simulate", "nope")
    assert code == 2 and "unknown simulated workload" in output and "resnet50" in output


def test_no_driver_exits_non_zero_with_a_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("gpoeo_rt.device.nvml._import_pynvml", lambda: FakeNVML(driver_loaded=False))
    code, output = _record(str(tmp_path / "x"), "--seconds", "1")
    assert code == 1 and "no NVIDIA driver or GPU" in output


def test_real_path_only_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The real backend, over a fake NVML that would accept writes (root): recording must not make any.
    fake = FakeNVML(root=True)
    fake.devices[0].power_w = 350.0
    monkeypatch.setattr("gpoeo_rt.device.nvml._import_pynvml", lambda: fake)
    monkeypatch.setattr("gpoeo_rt.device.nvml.WallClock", lambda: fake)  # fake time: no real sleeping
    out = tmp_path / "real"
    code, output = _record(str(out), "--seconds", "2")
    assert code == 0, output
    assert fake.writes() == []
    assert fake.initialised == 0
    trace = read_trace(out)
    assert len(trace.power.t_s) == 100 and np.allclose(trace.power.power_w, 350.0)
    assert trace.iterations is None and not (out / "iterations.csv").exists()
