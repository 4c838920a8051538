"""DVC stage `train` (one per bundle, via foreach): the final time and power models of one bundle.

A bundle is a SKU with a sweep of its own (inputs: counters, clock ratios and absolute MHz), or `generic`, trained
on several SKUs with normalized inputs only (counters and clock ratios), for GPUs without a sweep.

Usage: python -m gpoeo_pipeline.train <bundle-name>
Outputs: data/models/<name>/time.json, power.json (XGBoost boosters with exactly the early-stopped rounds) and
train_info.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from gpoeo_pipeline.modeling import GENERIC, FittedModel, bundle_params, fit_targets, frame_digest, grid_axes
from gpoeo_pipeline.params import load_section
from gpoeo_rt.features import FEATURE_NAMES

MODEL_TARGETS: dict[str, str] = {"time": "time_ratio", "power": "power_ratio"}


def untrainable_reason(rows: pd.DataFrame, min_groups: int) -> str | None:
    """Why a model cannot be trained on one SKU's rows of the features table (None: it can): no counters at any
    reference row (a model could not tell its workloads apart), or too few workload groups to cross-validate."""
    if not rows.loc[rows["ref"], list(FEATURE_NAMES)].notna().any(axis=None):
        return "no counters at its reference rows: a model could not tell its workloads apart"
    n_groups = rows["group"].nunique()
    if n_groups < min_groups:
        return f"{n_groups} workload groups, fewer than models.min_groups={min_groups} needed to cross-validate"
    return None


def select_training_rows(table: pd.DataFrame, name: str, models_params: dict[str, Any]) -> pd.DataFrame:
    """The rows a bundle is trained and evaluated on. A SKU that cannot be trained (`untrainable_reason`:
    no counters, or fewer than `min_groups` workload groups) is refused with a message, never trained silently."""
    if name == GENERIC:
        skus = list(models_params["generic_train_skus"])
        frame = table.loc[table["sku"].isin(skus)]
        absent = sorted(set(skus) - set(frame["sku"].unique()))
        if absent:
            raise ValueError(f"params.yaml models.generic_train_skus: no sweep rows for {absent}")
        if len(skus) < 2:
            raise ValueError("params.yaml models.generic_train_skus: leave-one-SKU-out needs at least 2 SKUs")
    else:
        frame = table.loc[table["sku"] == name]
        if frame.empty:
            raise ValueError(f"params.yaml models.bundles: no sweep rows for SKU {name!r}")
        reason = untrainable_reason(frame, int(models_params["min_groups"]))
        if reason is not None:
            raise ValueError(f"params.yaml models.bundles: SKU {name!r} cannot be trained ({reason}); remove it")
    return frame.reset_index(drop=True)


def model_info(fitted: FittedModel) -> dict[str, Any]:
    """What train_info.json records of one model: the target, the chosen hyperparameters and rounds, and the
    validation loss of every candidate the choice compared (on the training rows only)."""
    return {
        "target": fitted.target,
        "transform": "log",
        "rounds": fitted.best_rounds,
        "chosen": fitted.settings,
        "candidates": [
            {"settings": trial.settings, "validation_rmse": trial.loss, "rounds": trial.rounds}
            for trial in fitted.trials
        ],
    }


def main() -> None:
    name = sys.argv[1]
    models_params = load_section("models")
    xgb_params = bundle_params(load_section("xgb"), name)
    schema = json.loads(Path("data/processed/feature_schema.json").read_text())
    table = pd.read_parquet("data/processed/features.parquet")
    frame = select_training_rows(table, name, models_params)
    inputs = list(schema["generic_inputs"] if name == GENERIC else schema["sku_inputs"])

    out_dir = Path(f"data/models/{name}")
    out_dir.mkdir(parents=True, exist_ok=True)
    info: dict[str, Any] = {
        "bundle": name,
        "inputs": inputs,
        "rows": len(frame),
        "skus": sorted(frame["sku"].unique().tolist()),
        "workloads": int(frame["workload"].nunique()),
        "groups": int(frame["group"].nunique()),
        "training_data_sha256": frame_digest(frame),
        "models": {},
    }
    fitted_models = fit_targets([(frame, target) for target in MODEL_TARGETS.values()], inputs, xgb_params)
    for model_name, fitted in zip(MODEL_TARGETS, fitted_models, strict=True):
        fitted.model.get_booster().save_model(out_dir / f"{model_name}.json")
        info["models"][model_name] = model_info(fitted)
    (out_dir / "train_info.json").write_text(json.dumps(info, indent=2) + "\n")
    axes = grid_axes(xgb_params)
    chosen = {
        model: {**{k: m["chosen"][k] for k in axes}, "rounds": m["rounds"]} for model, m in info["models"].items()
    }
    print(f"train {name}: {len(frame)} rows, chosen {chosen}")


if __name__ == "__main__":
    main()
