"""Reading trace folders: the shared H200 layout, the polled fallback, tolerance and clear errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpoeo_rt.tracefile import (
    TraceError,
    read_buffered_power,
    read_iterations,
    read_polled,
    read_polled_energy,
    read_power,
    read_trace,
)

TRACES = Path(__file__).resolve().parents[2] / "data" / "traces" / "h200"


def test_buffered_folder() -> None:
    tr = read_trace(TRACES / "resnet_512")
    assert tr.power.source == "buffered"
    assert len(tr.power.t_s) == len(tr.power.power_w) == 2365  # power_mw rows only, not the utilization ones
    assert 70 < float(np.min(tr.power.power_w)) < float(np.max(tr.power.power_w)) < 900  # watts, not mW
    assert np.all(np.diff(tr.power.t_s) > 0)
    assert tr.iterations is not None and tr.energy is not None
    (phase,) = tr.iterations.phases()
    assert phase.period_s * 1e3 == pytest.approx(104.2, abs=0.05)
    assert phase.n_iterations == 346


def test_two_phase_ground_truth() -> None:
    its = read_iterations(TRACES / "gpt_16-mlp_65536")
    assert its is not None
    p0, p1 = its.phases()
    assert (p0.phase, p1.phase) == (0, 1)
    assert p0.period_s * 1e3 == pytest.approx(72.0, abs=0.1)
    assert p1.period_s * 1e3 == pytest.approx(9.8, abs=0.1)
    assert p0.end_s < p1.start_s


def test_polled_fallback_says_so() -> None:
    tr = read_trace(TRACES / "polled10ms-gpt_16")
    assert tr.power.source == "polled"
    assert any("no buffered power samples" in n for n in tr.notes)
    assert float(np.median(np.diff(tr.power.t_s))) == pytest.approx(0.01, rel=0.05)
    assert read_buffered_power(TRACES / "polled10ms-gpt_16") is None


def test_energy_counter_in_joules_and_increasing() -> None:
    e = read_polled_energy(TRACES / "gpt_64")
    assert e is not None
    assert np.all(np.diff(e.energy_j) >= 0)
    # ~690 W of training for the ~36 s of the phase: some tens of kJ over the whole trace
    assert 5e3 < e.energy_j[-1] - e.energy_j[0] < 5e4


def test_read_polled_columns() -> None:
    cols = read_polled(TRACES / "resnet_512", ("p_inst_mw", "sm_clk"))
    assert set(cols) == {"t_s", "p_inst_mw", "sm_clk"}
    assert np.nanmax(cols["sm_clk"]) == 1980


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_extra_columns_and_signals_are_ignored_bad_cells_become_nan(tmp_path: Path) -> None:
    _write(
        tmp_path / "nvml_buffered.csv",
        "signal,t_s,value,extra\npower_mw,1.00,500000,x\ngpu_util_pct,1.01,90,x\npower_mw,1.02,oops,x\n"
        "power_mw,1.04,520000,x\npower_mw,1.06\n",
    )
    p = read_buffered_power(tmp_path)
    assert p is not None
    assert len(p.t_s) == 3
    assert np.isnan(p.power_w[1]) and p.power_w[0] == pytest.approx(500.0)
    assert any("unparseable" in n for n in p.notes) and any("short row" in n for n in p.notes)


def test_missing_column_names_the_file_and_line(tmp_path: Path) -> None:
    _write(tmp_path / "nvml_polled.csv", "t_s,p_avg_mw\n1.0,2.0\n")
    with pytest.raises(TraceError, match=r"nvml_polled.csv, line 1: missing column\(s\) p_inst_mw"):
        read_power(tmp_path)


def test_missing_or_empty_folder(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no such trace folder"):
        read_trace(tmp_path / "nope")
    with pytest.raises(TraceError, match=r"neither nvml_buffered\.csv"):
        read_trace(tmp_path)
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(TraceError, match="not a folder"):
        read_trace(tmp_path / "file.txt")


def test_empty_file(tmp_path: Path) -> None:
    _write(tmp_path / "nvml_polled.csv", "")
    with pytest.raises(TraceError, match="empty file"):
        read_power(tmp_path)


def test_buffered_file_without_power_rows_falls_back_to_polled(tmp_path: Path) -> None:
    _write(tmp_path / "nvml_buffered.csv", "signal,t_s,value\ngpu_util_pct,1.0,50\n")
    _write(tmp_path / "nvml_polled.csv", "t_s,p_inst_mw,energy_mj\n1.0,100000,5\n1.01,100000,6\n")
    p = read_power(tmp_path)
    assert p.source == "polled"
    assert p.power_w.tolist() == [100.0, 100.0]


def test_iterations_without_phase_column(tmp_path: Path) -> None:
    _write(tmp_path / "iterations.csv", "t_s,iteration\n1.0,1\n1.1,2\n1.2,3\n")
    its = read_iterations(tmp_path)
    assert its is not None
    (ph,) = its.phases()
    assert ph.phase == 0 and ph.period_s == pytest.approx(0.1)
