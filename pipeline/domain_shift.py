"""DVC stage `domain_shift`: how a new GPU's counters compare with what the models were trained on.

The generic bundle serves GPUs without a sweep of their own (an H200, say) from counters measured at that GPU's
reference clocks. Trees extrapolate flat, so a counter outside the range the models saw is a warning sign. For each
profile folder written by `gpoeo-collect --reference-only` (or a sweep's reference rows) listed in
`params.yaml: domain_shift.profiles`, this compares every workload's `feat_*` values with the reference rows of the
training SKUs: the percentile of each value within the training distribution and whether it lies outside the
training range. Writes `metrics/domain_shift.json` and `plots/domain_shift.png`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # headless
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from gpoeo_pipeline.headline import domain_shift_headline, write_headline
from gpoeo_pipeline.params import load_section
from gpoeo_pipeline.sources.gpoeo_collect import parse
from gpoeo_rt.features import FEATURE_NAMES


def _round(value: float) -> float | None:
    return None if value is None or not math.isfinite(value) else round(float(value), 4)


def feature_shift(training: pd.DataFrame, target: pd.DataFrame) -> dict[str, Any]:
    """Per counter: the training distribution (reference rows of the training SKUs) and where each target workload
    falls in it. A counter the training rows never report is `unseen`: the models treat it as missing."""
    features: dict[str, Any] = {}
    outside = 0
    compared = 0
    for name in FEATURE_NAMES:
        train = training[name].dropna().to_numpy(dtype=float)
        entry: dict[str, Any] = {
            "training_rows": int(train.size),
            "training_missing_share": _round(1.0 - train.size / max(len(training), 1)),
        }
        if train.size:
            q = np.quantile(train, [0.0, 0.05, 0.5, 0.95, 1.0])
            entry.update({k: _round(v) for k, v in zip(("min", "p05", "median", "p95", "max"), q, strict=True)})
        workloads: dict[str, Any] = {}
        for _, row in target.iterrows():
            value = float(row[name]) if pd.notna(row[name]) else math.nan
            if not math.isfinite(value):
                workloads[str(row["workload"])] = {"value": None, "note": "not measured on this GPU"}
                continue
            if not train.size:
                workloads[str(row["workload"])] = {"value": _round(value), "note": "unseen in training"}
                continue
            compared += 1
            out_of_range = bool(value < train.min() or value > train.max())
            outside += out_of_range
            workloads[str(row["workload"])] = {
                "value": _round(value),
                "percentile": _round(100.0 * float(np.mean(train <= value))),
                "outside_training_range": out_of_range,
            }
        entry["workloads"] = workloads
        features[name] = entry
    return {
        "features": features,
        "values_compared": compared,
        "values_outside_training_range": outside,
        "share_outside_training_range": _round(outside / compared) if compared else None,
    }


def plot_shift(training: pd.DataFrame, targets: dict[str, pd.DataFrame], out: Path) -> None:
    """One column per counter: training reference rows by SKU (grey, jittered), target workloads (coloured)."""
    fig, ax = plt.subplots(figsize=(12, 5))
    rng = np.random.default_rng(0)
    skus = sorted(training["sku"].unique())
    for j, name in enumerate(FEATURE_NAMES):
        values = training[name].dropna()
        ax.scatter(j + rng.uniform(-0.3, 0.0, len(values)), values, s=6, color="0.6", alpha=0.5)
        for k, (label, frame) in enumerate(targets.items()):
            vals = frame[name].dropna()
            ax.scatter(
                np.full(len(vals), j + 0.15), vals, s=30, marker="D", color=f"C{k}", label=label if j == 0 else None
            )
    ax.set_xticks(range(len(FEATURE_NAMES)), [n.removeprefix("feat_") for n in FEATURE_NAMES])
    ax.set_ylabel("counter at the reference clocks (fraction)")
    ax.set_title(f"Counters of new GPUs (diamonds) vs the training SKUs' reference rows (grey: {', '.join(skus)})")
    ax.legend(loc="upper right")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main() -> None:
    params = load_section("domain_shift")
    skus = list(load_section("models")["generic_train_skus"])
    sweeps = pd.read_parquet(params.get("sweeps", "data/processed/sweeps.parquet"))
    training = sweeps.loc[sweeps["ref"] & sweeps["sku"].isin(skus)]
    report: dict[str, Any] = {"training_skus": skus, "training_reference_rows": len(training), "profiles": {}}
    targets: dict[str, pd.DataFrame] = {}
    for folder in params["profiles"]:
        frame = parse(Path(folder)).frame
        frame = frame.loc[frame["ref"]]
        label = f"{frame['sku'].iloc[0]} ({Path(folder).name})"
        targets[label] = frame
        report["profiles"][label] = feature_shift(training, frame)
    Path("metrics").mkdir(exist_ok=True)
    Path("metrics/domain_shift.json").write_text(json.dumps(report, indent=2) + "\n")
    write_headline("domain_shift", domain_shift_headline(report))
    plot_shift(training, targets, Path("plots/domain_shift.png"))
    for label, shift in report["profiles"].items():
        print(
            f"domain_shift: {label}: {shift['values_outside_training_range']} of {shift['values_compared']} counter "
            "values outside the training SKUs' range"
        )


if __name__ == "__main__":
    main()
