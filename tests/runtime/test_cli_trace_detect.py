"""`gpoeo-rt trace detect`: JSON phases, the plot, and clear failures."""

from __future__ import annotations

import builtins
import itertools
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpoeo_rt.cli import app

TRACES = Path(__file__).resolve().parents[2] / "data" / "traces" / "h200"
runner = CliRunner()


def _json(folder: Path | str) -> dict:
    result = runner.invoke(app, ["trace", "detect", str(folder), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_json_for_the_two_phase_trace() -> None:
    out = _json(TRACES / "gpt_16-mlp_65536")
    assert out["source"] == "buffered" and out["bundle"]
    phases = out["phases"]
    assert all(
        set(ph) >= {"start_s", "end_s", "period_s", "confidence", "timing", "conclusion", "reason"} for ph in phases
    )
    assert all(a["end_s"] == pytest.approx(b["start_s"]) for a, b in itertools.pairwise(phases))
    with_period = [ph for ph in phases if ph["period_s"] is not None]
    assert len(with_period) == 1
    assert with_period[0]["period_s"] == pytest.approx(0.0720, rel=0.02)
    assert 0.0 < with_period[0]["confidence"] <= 1.0 and with_period[0]["timing"] == "signal"
    last = phases[-1]
    assert last["period_s"] is None and last["reason"]  # the 9.8 ms MLP: not resolvable, and why


def test_json_for_a_polled_only_trace_is_null_and_says_why() -> None:
    out = _json(TRACES / "polled10ms-gpt_16")
    assert out["source"] == "polled"
    assert any("no buffered power samples" in n for n in out["notes"])
    assert all(ph["period_s"] is None for ph in out["phases"])
    (fallback,) = [ph for ph in out["phases"] if ph["conclusion"] == "fallback"]
    assert "no trustworthy period" in fallback["reason"]


def test_human_output_fits_80_columns() -> None:
    result = runner.invoke(app, ["trace", "detect", str(TRACES / "gpt_16-mlp_65536")])
    assert result.exit_code == 0, result.output
    assert "buffered power" in result.stdout
    assert "72." in result.stdout and "null" in result.stdout
    assert all(len(line) <= 80 for line in result.stdout.splitlines()[1:])


def test_plot(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "det.png"
    result = runner.invoke(app, ["trace", "detect", str(TRACES / "resnet_128_20"), "--plot", str(out)])
    assert result.exit_code == 0, result.output
    assert out.stat().st_size > 10_000
    assert out.read_bytes()[:4] == b"\x89PNG"


def test_plot_without_matplotlib_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_matplotlib(name: str, *args: object, **kwargs: object) -> object:
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError("No module named 'matplotlib'")
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    result = runner.invoke(app, ["trace", "detect", str(TRACES / "resnet_512"), "--plot", str(tmp_path / "x.png")])
    assert result.exit_code == 1
    assert "pipeline extra" in result.stderr
    assert not (tmp_path / "x.png").exists()


def test_missing_folder_fails_clearly(tmp_path: Path) -> None:
    result = runner.invoke(app, ["trace", "detect", str(tmp_path / "nope")])
    assert result.exit_code == 2
    assert "no such trace folder" in result.stderr


def test_folder_without_trace_files_fails_clearly(tmp_path: Path) -> None:
    result = runner.invoke(app, ["trace", "detect", str(tmp_path), "--json"])
    assert result.exit_code == 2
    assert "neither nvml_buffered.csv" in result.stderr


def test_broken_csv_fails_clearly(tmp_path: Path) -> None:
    (tmp_path / "nvml_polled.csv").write_text("t_s,other\n1,2\n")
    result = runner.invoke(app, ["trace", "detect", str(tmp_path)])
    assert result.exit_code == 2
    assert "missing column(s) p_inst_mw" in result.stderr


def test_unusable_samples_fail_clearly(tmp_path: Path) -> None:
    (tmp_path / "nvml_polled.csv").write_text("t_s,p_inst_mw\nnan,1\nnan,2\n")
    result = runner.invoke(app, ["trace", "detect", str(tmp_path)])
    assert result.exit_code == 1
    assert "no power samples" in result.stderr


def test_missing_bundles_fail_clearly(tmp_path: Path) -> None:
    """trace detect runs the daemon's controller, which needs the model bundle the daemon would pick."""
    result = runner.invoke(app, ["trace", "detect", str(TRACES / "resnet_512"), "--bundles", str(tmp_path / "none")])
    assert result.exit_code == 1
    assert "bundle directory not found" in result.stderr and "Traceback" not in result.output
