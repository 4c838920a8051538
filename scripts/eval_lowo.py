#!/usr/bin/env python3
"""Leave-one-workload-out evaluation of one SKU's models: issue 3's targets as the issue words them.

`dvc repro` evaluates with grouped 10-fold CV by workload (`params.yaml: evaluate.workload_folds: 10`), because
leave-one-workload-out (158 folds on the V100, each choosing its hyperparameters on its own training rows) does not
fit the 10-minute budget of a clean `dvc repro`. This script runs the same procedure (`evaluate.cross_validate`,
the same params, the same per-fold choice) with one fold per workload, and prints the same summary. It writes
nothing but its JSON (optional). The V100 took 221 s on 2 cores (2026-12-04).

Usage: python scripts/eval_lowo.py [SKU] [--json OUT]   (after `dvc repro features`; default SKU tesla-v100)
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import pandas as pd

from gpoeo_pipeline.evaluate import cross_validate, summarize
from gpoeo_pipeline.modeling import bundle_params, grouped_folds
from gpoeo_pipeline.params import load_section
from gpoeo_pipeline.train import GENERIC, select_training_rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("sku", nargs="?", default="tesla-v100")
    ap.add_argument("--json", type=Path, help="write the summary here")
    args = ap.parse_args()
    if args.sku == GENERIC:
        raise SystemExit("the generic model is evaluated leave-one-SKU-out by `dvc repro`; pass a SKU bundle")
    xgb_params = bundle_params(load_section("xgb"), args.sku)
    bounds = [float(b) for b in load_section("evaluate")["bounds"]]
    schema = json.loads(Path("data/processed/feature_schema.json").read_text())
    frame = select_training_rows(pd.read_parquet("data/processed/features.parquet"), args.sku, load_section("models"))
    started = time.monotonic()
    folds = grouped_folds(frame["workload"], 0, int(xgb_params["seed"]))  # 0: one fold per workload
    predictions = cross_validate(frame, list(schema["sku_inputs"]), folds, xgb_params)
    report = {
        "bundle": args.sku,
        "cv": "leave-one-workload-out",
        "folds": int(predictions["fold"].nunique()),
        "wall_s": time.monotonic() - started,
        "overall": summarize(predictions, bounds),
    }
    xgb = report["overall"]["xgboost"]
    print(
        f"{args.sku}, leave-one-workload-out ({report['folds']} folds, {report['wall_s']:.0f} s): "
        f"MAPE time {xgb['mape_time_pct']:.2f}%, power {xgb['mape_power_pct']:.2f}%, "
        f"energy {xgb['mape_energy_pct']:.2f}%"
    )
    for bound in bounds:
        d = xgb[f"energy_at_{round(bound * 100)}pct"]
        print(f"  at the {bound:.0%} bound: {json.dumps(d)}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
