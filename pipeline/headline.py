"""The headline metrics each stage writes for `dvc metrics show`: a few figures per file, rounded to what they
mean, under key names shared across files (dvc prints one table whose columns are every file's keys, so shared
names keep it within 160 characters). The full figures stay in the stage's detail JSON (metrics/<name>.json,
a DVC out that `dvc metrics show` does not list).

Keys (one vocabulary; the bench's are the runtime's, gpoeo_rt.bench.report.headline):
- `mape_energy_pct`: cross-validated error of the predicted energy ratio (held-out workloads; generic: held-out SKUs);
- `regret_pts`: mean energy points the model's pick loses to the measured optimum at the 5% bound;
- `over_bound_pct`: share of held-out workloads (bench: jobs) whose measured slowdown breaks the 5% bound;
- `rows`: rows kept by ingest; `skus`: SKUs a model can be trained on; `outside_pct`: share of a new GPU's
  counter values outside the training SKUs' range.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HEADLINE_DIR = Path("metrics/headline")


def _r(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(float(value), digits)


def model_headline(report: dict[str, Any]) -> dict[str, Any]:
    """evaluate@<bundle>: energy MAPE, regret and runs over the bound at 5% (the learned model, overall)."""
    xgb = report["overall"]["xgboost"]
    at5 = xgb.get("energy_at_5pct") or {}
    return {
        "mape_energy_pct": _r(xgb["mape_energy_pct"]),
        "regret_pts": _r(at5.get("mean_regret_pts")),
        "over_bound_pct": _r(None if at5.get("violation_rate") is None else 100 * at5["violation_rate"], 1),
    }


def source_holdout_headline(report: dict[str, Any]) -> dict[str, Any]:
    """source_holdout: the energy MAPE on held-out sources, weighted by held-out workloads."""
    pairs = [v for v in report.values() if isinstance(v, dict) and "mape_energy_pct" in v]
    weight = sum(v["held_out_workloads"] for v in pairs)
    mape = sum(v["mape_energy_pct"] * v["held_out_workloads"] for v in pairs) / weight if weight else None
    return {"mape_energy_pct": _r(mape)}


def ingest_headline(summary: dict[str, Any]) -> dict[str, Any]:
    """ingest: sweep rows kept."""
    return {"rows": int(summary["sweeps"]["rows"])}


def features_headline(coverage: dict[str, Any]) -> dict[str, Any]:
    """features: SKUs a model can be trained on."""
    return {"skus": sum(1 for v in coverage.values() if v.get("trainable"))}


def domain_shift_headline(report: dict[str, Any]) -> dict[str, Any]:
    """domain_shift: the largest share of a new GPU's counter values outside the training range."""
    shares = [p["share_outside_training_range"] for p in report.get("profiles", {}).values()]
    return {"outside_pct": _r(100 * max(shares), 1) if shares else None}


def write_headline(name: str, figures: dict[str, Any], root: Path = HEADLINE_DIR) -> Path:
    path = root / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(figures, indent=1) + "\n")
    return path
