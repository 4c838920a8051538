"""The headline metrics files: few figures per stage under shared names, so `dvc metrics show` (one table whose
columns are every file's keys) stays within 160 characters; the full figures stay in files dvc does not list."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from gpoeo_pipeline import headline as h
from gpoeo_rt.bench.report import headline as bench_headline
from gpoeo_rt.bench.suite import HEADLINE_STEMS

REPO = Path(__file__).resolve().parents[2]


def _model_report(mape: float, regret: float, violation_rate: float) -> dict[str, object]:
    at5 = {"mean_regret_pts": regret, "violation_rate": violation_rate, "max_regret_pts": 99.0}
    return {"bundle": "x", "overall": {"xgboost": {"mape_energy_pct": mape, "energy_at_5pct": at5}}}


def test_model_headline_rounds_to_what_the_figures_mean() -> None:
    head = h.model_headline(_model_report(3.2248892966504794, 1.4215782729966466, 0.0379746835443038))
    assert head == {"mape_energy_pct": 3.22, "regret_pts": 1.42, "over_bound_pct": 3.8}


def test_source_holdout_headline_weights_by_held_out_workloads() -> None:
    report = {
        "a/s1": {"held_out_workloads": 30, "mape_energy_pct": 10.0},
        "a/s2": {"held_out_workloads": 10, "mape_energy_pct": 20.0},
    }
    assert h.source_holdout_headline(report) == {"mape_energy_pct": 12.5}


def test_small_stage_headlines() -> None:
    assert h.ingest_headline({"sweeps": {"rows": 6720}, "powerlimit": {"rows": 1}}) == {"rows": 6720}
    coverage = {"a": {"trainable": True}, "b": {"trainable": False}, "c": {"trainable": True}}
    assert h.features_headline(coverage) == {"skus": 2}
    shift = {"profiles": {"h200": {"share_outside_training_range": 0.1429}, "x": {"share_outside_training_range": 0.0}}}
    assert h.domain_shift_headline(shift) == {"outside_pct": 14.3}


def _bench_summary(of_oracle: float) -> list[dict[str, object]]:
    row = {"sku": "all", "policy": "gpoeo-rt", "pct_of_oracle": of_oracle, "mean_slowdown_pct": 104.123}
    return [row | {"violations_pct": 100.0}]


@pytest.mark.skipif(shutil.which("dvc") is None, reason="needs dvc (the pipeline extra)")
def test_dvc_metrics_show_fits_160_columns(tmp_path: Path) -> None:
    """Every headline file the repository's dvc.yaml lists, written by its writer with the widest plausible
    values (3-digit percentages, 6-digit row counts), then `dvc metrics show` itself."""
    shutil.copy(REPO / "dvc.yaml", tmp_path / "dvc.yaml")
    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    subprocess.run(["dvc", "init", "--no-scm", "-q"], cwd=tmp_path, check=True)
    out = tmp_path / "metrics" / "headline"
    bundles = yaml.safe_load((REPO / "params.yaml").read_text())["models"]["bundles"]
    for name in bundles:
        h.write_headline(name, h.model_headline(_model_report(100.123, 100.123, 0.99999)), out)
    h.write_headline(
        "source_holdout", h.source_holdout_headline({"a/b": {"held_out_workloads": 1, "mape_energy_pct": 100.12}}), out
    )
    h.write_headline("ingest", h.ingest_headline({"sweeps": {"rows": 999999}}), out)
    h.write_headline("features", h.features_headline({str(i): {"trainable": True} for i in range(99)}), out)
    h.write_headline(
        "domain_shift", h.domain_shift_headline({"profiles": {"a": {"share_outside_training_range": 1.0}}}), out
    )
    for name in ("bench", "bench_fine", "bench_fine_counters"):
        h.write_headline(name, bench_headline(_bench_summary(100.123)), out)
    for stem in HEADLINE_STEMS.values():
        h.write_headline(f"suite-{stem}", bench_headline(_bench_summary(100.123)), out)
    listed = subprocess.run(["dvc", "metrics", "show"], cwd=tmp_path, capture_output=True, text=True, check=True)
    lines = listed.stdout.splitlines()
    assert len(lines) == 1 + len(list(out.glob("*.json")))  # every headline file listed, nothing else
    assert all("headline/" in line for line in lines[1:])
    widest = max(map(len, lines))
    assert widest <= 160, f"dvc metrics show is {widest} characters wide:\n{listed.stdout}"
