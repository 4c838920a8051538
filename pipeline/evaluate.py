"""DVC stage `evaluate`: grouped cross-validation of one bundle's models, against measured sweeps.

Per SKU: grouped K-fold by workload (`evaluate.workload_folds`; 0 = leave-one-workload-out; every workload is
predicted by a model that never saw any of its configs) as the primary figure and, stricter, grouped K-fold by
program (`evaluate.program_folds`; every input-size variant of a program held out together).
For the generic model: leave-one-SKU-out.
Reports MAPE of time, power and energy ratios and the decision quality that matters: pick the config the model
says is best (energy within 5% and 2% slowdown, and ED2P), look up its MEASURED energy and time, and compare
with the measured optimum. The physics baseline is scored the same way.

Usage: python -m gpoeo_pipeline.evaluate <bundle-name>
Outputs: metrics/<name>.json, data/eval/<name>/predictions.parquet, data/eval/<name>/folds/ (one verified bundle per
fold, with index.json: held-out key -> fold), plots/<name>/*.png
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpoeo_pipeline.baseline import PhysicsBaseline
from gpoeo_pipeline.bundle import clock_facts, write_verified_bundle
from gpoeo_pipeline.export import booster_to_onnx, verify
from gpoeo_pipeline.headline import model_headline, write_headline
from gpoeo_pipeline.modeling import (
    FittedModel,
    bundle_params,
    fit_targets,
    grid_axes,
    grouped_folds,
    leave_one_group_out,
    predict_ratio,
)
from gpoeo_pipeline.params import load_section
from gpoeo_pipeline.train import GENERIC, MODEL_TARGETS, select_training_rows
from gpoeo_rt.figures import rounded
from gpoeo_rt.prediction.bundle import SCHEMA_VERSION
from gpoeo_rt.search.objectives import Objective, objective_values, pick_config

PREDICTORS: dict[str, tuple[str, str]] = {
    "xgboost": ("pred_time_ratio", "pred_power_ratio"),
    "physics": ("base_time_ratio", "base_power_ratio"),
}


FoldSink = Callable[[str, FittedModel, FittedModel, pd.DataFrame], None]


def cross_validate(
    frame: pd.DataFrame,
    inputs: list[str],
    folds: pd.Series,
    xgb_params: dict[str, Any],
    on_fold: FoldSink | None = None,
    choices: dict[str, list[dict[str, Any]]] | None = None,
) -> pd.DataFrame:
    """Out-of-fold predictions for every row: each fold's models never saw the rows they predict (nor, since folds
    hold whole workloads, any other config of the same workload). Hyperparameters and rounds are chosen inside
    each fold, from its training rows only (`fit_target`); the folds' models are fitted `xgb_params["workers"]` at
    a time. `choices`, when given, collects per model the fold's choice."""
    out = frame.copy()
    for column in ("pred_time_ratio", "pred_power_ratio", "base_time_ratio", "base_power_ratio"):
        out[column] = np.nan
    out["fold"] = ""
    splits = list(leave_one_group_out(folds))
    jobs = [(frame.loc[train], MODEL_TARGETS[model]) for _, train, _ in splits for model in ("time", "power")]
    fitted_models = fit_targets(jobs, inputs, xgb_params)
    for index, (held_out, train, test) in enumerate(splits):
        train_rows = frame.loc[train]
        test_rows = frame.loc[test]
        time_model, power_model = fitted_models[2 * index], fitted_models[2 * index + 1]
        if choices is not None:
            for model_name, fitted in (("time", time_model), ("power", power_model)):
                choices.setdefault(model_name, []).append(
                    {"fold": held_out, "settings": fitted.settings, "rounds": fitted.best_rounds}
                )
        out.loc[test, "pred_time_ratio"] = predict_ratio(time_model, test_rows)
        out.loc[test, "pred_power_ratio"] = predict_ratio(power_model, test_rows)
        if on_fold is not None:
            on_fold(held_out, time_model, power_model, test_rows)
        base_time, base_power = PhysicsBaseline.fit(train_rows).predict(test_rows)
        out.loc[test, "base_time_ratio"] = base_time
        out.loc[test, "base_power_ratio"] = base_power
        out.loc[test, "fold"] = held_out
    for prefix in ("pred", "base"):
        out[f"{prefix}_energy_ratio"] = out[f"{prefix}_time_ratio"] * out[f"{prefix}_power_ratio"]
    return out


def error_metrics(predictions: pd.DataFrame, time_col: str, power_col: str) -> dict[str, float]:
    """MAPE (percent) of the ratios over the non-reference rows (reference rows are 1 by definition)."""
    rows = predictions.loc[~predictions["ref"]]
    energy_pred = rows[time_col] * rows[power_col]

    def mape(pred: pd.Series, measured: pd.Series) -> float:
        return float(np.mean(np.abs(pred.to_numpy() - measured.to_numpy()) / measured.to_numpy()) * 100.0)

    return {
        "mape_time_pct": mape(rows[time_col], rows["time_ratio"]),
        "mape_power_pct": mape(rows[power_col], rows["power_ratio"]),
        "mape_energy_pct": mape(energy_pred, rows["energy_ratio"]),
    }


def workload_decisions(
    predictions: pd.DataFrame, time_col: str, power_col: str, objective: Objective, max_slowdown: float
) -> pd.DataFrame:
    """One row per (sku, workload): the model's pick, the measured optimum, and the measured outcome of the pick."""
    records = []
    for (sku, workload), rows in predictions.groupby(["sku", "workload"], observed=True, sort=True):
        measured_time = rows["time_ratio"].to_numpy()
        measured_energy = rows["energy_ratio"].to_numpy()
        predicted_time = rows[time_col].to_numpy()
        predicted_energy = predicted_time * rows[power_col].to_numpy()
        pick = pick_config(objective, predicted_time, predicted_energy, max_slowdown)
        best = pick_config(objective, measured_time, measured_energy, max_slowdown)
        measured_values = objective_values(objective, measured_time, measured_energy)
        violation = bool(objective is Objective.ENERGY and measured_time[pick] > 1.0 + max_slowdown)
        regret = float(measured_values[pick] / measured_values[best] - 1.0)
        if violation:
            # A pick that breaks the bound may use less energy than the feasible optimum; it earns no credit
            # for that (negative regret would flatter the mean); it is counted as a violation instead.
            regret = max(regret, 0.0)
        records.append(
            {
                "sku": sku,
                "workload": workload,
                "pick_sm_clock_mhz": float(rows["sm_clock_mhz"].iloc[pick]),
                "pick_mem_clock_mhz": float(rows["mem_clock_mhz"].iloc[pick]),
                "best_sm_clock_mhz": float(rows["sm_clock_mhz"].iloc[best]),
                "best_mem_clock_mhz": float(rows["mem_clock_mhz"].iloc[best]),
                "pick_time_ratio": float(measured_time[pick]),
                "pick_energy_ratio": float(measured_energy[pick]),
                "best_energy_ratio": float(measured_energy[best]),
                "regret": regret,
                "violation": violation,
            }
        )
    return pd.DataFrame.from_records(records)


def decision_metrics(decisions: pd.DataFrame) -> dict[str, float]:
    return {
        "mean_regret_pts": float(decisions["regret"].mean() * 100.0),
        "max_regret_pts": float(decisions["regret"].max() * 100.0),
        "violation_rate": float(decisions["violation"].mean()),
        "mean_saving_pct": float((1.0 - decisions["pick_energy_ratio"]).mean() * 100.0),
        "oracle_saving_pct": float((1.0 - decisions["best_energy_ratio"]).mean() * 100.0),
        "workloads": len(decisions),
    }


def summarize(predictions: pd.DataFrame, bounds: list[float]) -> dict[str, Any]:
    """The metrics JSON: per predictor, errors and decision quality at each bound and for ED2P."""
    report: dict[str, Any] = {}
    for name, (time_col, power_col) in PREDICTORS.items():
        entry: dict[str, Any] = error_metrics(predictions, time_col, power_col)
        for bound in bounds:
            decisions = workload_decisions(predictions, time_col, power_col, Objective.ENERGY, bound)
            entry[f"energy_at_{round(bound * 100)}pct"] = decision_metrics(decisions)
        decisions = workload_decisions(predictions, time_col, power_col, Objective.ED2P, 0.0)
        entry["ed2p"] = decision_metrics(decisions)
        report[name] = entry
    return report


def choice_summary(choices: dict[str, list[dict[str, Any]]], varied: list[str]) -> dict[str, Any]:
    """Per model: how many folds chose each value of the settings the grid varies (`varied`; "fixed" without a
    grid) and the range of the chosen rounds. What the fold-internal choice did, for the metrics report."""
    summary: dict[str, Any] = {}
    for model_name, folds in choices.items():
        counts: dict[str, int] = {}
        for fold in folds:
            label = ",".join(f"{key}={fold['settings'][key]}" for key in varied) or "fixed"
            counts[label] = counts.get(label, 0) + 1
        rounds = [int(fold["rounds"]) for fold in folds]
        summary[model_name] = {"chosen": dict(sorted(counts.items())), "rounds": [min(rounds), max(rounds)]}
    return summary


class FoldBundleWriter:
    """Writes each cross-validation fold's models as a full bundle under `root/<fold>/`, plus `root/index.json`
    mapping every held-out key (workload, or SKU for `generic`) to the fold whose models never saw it. Benchmarks
    use these so that a model-guided policy is never tested on a workload its model was trained on."""

    def __init__(self, root: Path, name: str, inputs: list[str], table: pd.DataFrame, key: str, opset: int) -> None:
        self.root, self.name, self.inputs, self.table, self.key, self.opset = root, name, inputs, table, key, opset
        self.index: dict[str, str] = {}
        if root.exists():
            shutil.rmtree(root)

    def __call__(self, fold: str, time_model: FittedModel, power_model: FittedModel, test_rows: pd.DataFrame) -> None:
        fold_dir = f"fold{len({*self.index.values()})}"
        models = {}
        x = test_rows[self.inputs].to_numpy(np.float32)
        for model_name, fitted in (("time", time_model), ("power", power_model)):
            booster = fitted.model.get_booster()
            models[model_name] = booster_to_onnx(booster, len(self.inputs), self.opset)
            verify(booster, models[model_name], x, 1e-4, f"{self.name}/{fold_dir}/{model_name}")
        skus = sorted(test_rows["sku"].unique().tolist())
        reference, clock_table = clock_facts(self.table, skus[0]) if len(skus) == 1 else (None, [])
        manifest = {
            "schema_version": SCHEMA_VERSION,
            "name": f"{self.name}/{fold_dir}",
            "nvml_names": [],  # never chosen for a GPU: these exist only for honest benchmarks
            "feature_names": self.inputs,
            "target_transform": "log",
            "reference_clocks": reference,
            "clock_table": clock_table,
            "held_out": sorted(test_rows[self.key].unique().tolist()),
        }
        write_verified_bundle(self.root / fold_dir, models, manifest)
        for key in manifest["held_out"]:
            self.index[str(key)] = fold_dir

    def write_index(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "index.json").write_text(json.dumps({"key": self.key, "folds": self.index}, indent=2) + "\n")


def main() -> None:
    name = sys.argv[1]
    models_params = load_section("models")
    xgb_params = bundle_params(load_section("xgb"), name)
    eval_params = load_section("evaluate")
    schema = json.loads(Path("data/processed/feature_schema.json").read_text())
    table = pd.read_parquet("data/processed/features.parquet")
    frame = select_training_rows(table, name, models_params)
    inputs = list(schema["generic_inputs"] if name == GENERIC else schema["sku_inputs"])
    bounds = [float(b) for b in eval_params["bounds"]]
    report: dict[str, Any] = {"bundle": name}
    seed = int(xgb_params["seed"])
    out_dir = Path(f"data/eval/{name}")
    out_dir.mkdir(parents=True, exist_ok=True)
    fold_key = "sku" if name == GENERIC else "workload"
    table = pd.read_parquet("data/processed/sweeps.parquet")
    writer = FoldBundleWriter(out_dir / "folds", name, inputs, table, fold_key, int(load_section("export")["opset"]))
    choices: dict[str, list[dict[str, Any]]] = {}
    if name == GENERIC:
        report["cv"] = "leave-one-sku-out"
        predictions = cross_validate(frame, inputs, frame["sku"], xgb_params, on_fold=writer, choices=choices)
        report["per_held_out_sku"] = {
            sku: summarize(rows, bounds) for sku, rows in predictions.groupby("sku", observed=True, sort=True)
        }
    else:
        n_folds = int(eval_params["workload_folds"])
        report["cv"] = f"grouped {n_folds}-fold by workload" if n_folds else "leave-one-workload-out"
        folds = grouped_folds(frame["workload"], n_folds, seed)
        predictions = cross_validate(frame, inputs, folds, xgb_params, on_fold=writer, choices=choices)
        # Stricter: hold out every input-size variant of a program at once (no sibling inputs in training).
        program_folds = grouped_folds(frame["group"], int(eval_params["program_folds"]), seed)
        strict = cross_validate(frame, inputs, program_folds, xgb_params)
        report["program_holdout"] = summarize(strict, bounds)
    report["folds"] = int(predictions["fold"].nunique())
    report["fold_choices"] = choice_summary(choices, grid_axes(xgb_params))
    report["overall"] = summarize(predictions, bounds)
    Path("metrics").mkdir(exist_ok=True)
    Path(f"metrics/{name}.json").write_text(json.dumps(rounded(report), indent=2) + "\n")
    write_headline(name, model_headline(report))
    writer.write_index()
    predictions.to_parquet(out_dir / "predictions.parquet", index=False)

    from gpoeo_pipeline.plots import plot_pareto, plot_pred_vs_measured

    plot_dir = Path(f"plots/{name}")
    plot_dir.mkdir(parents=True, exist_ok=True)
    plot_pred_vs_measured(predictions, plot_dir / "pred_vs_measured.png", title=name)
    decisions = workload_decisions(predictions, "pred_time_ratio", "pred_power_ratio", Objective.ENERGY, bounds[0])
    plot_pareto(predictions, decisions, plot_dir / "pareto.png", int(eval_params["plot_workloads"]), bounds[0])
    overall = report["overall"]["xgboost"]
    print(
        f"evaluate {name}: MAPE time {overall['mape_time_pct']:.2f}% energy {overall['mape_energy_pct']:.2f}%, "
        f"regret@{bounds[0]:.0%} {overall[f'energy_at_{round(bounds[0] * 100)}pct']['mean_regret_pts']:.2f} pts"
    )


if __name__ == "__main__":
    main()
