#!/usr/bin/env python3
"""Model variants tried for issue 3 on 2026-12-04 (none shipped): reproduces the figures of docs/model.md,
"Anchoring, machine balance, seed bagging and pooled training".

Every variant is scored the way `dvc repro evaluate` scores the shipped models (same folds, same per-fold choice of
hyperparameters on the fold's training rows, same `evaluate.summarize`), and printed with the selection criteria:
(a) = mean time and energy MAPE of gtx-1080ti, gtx-980 and tesla-p100 (per-SKU models), (b) = mean energy MAPE of the
four held-out SKUs other than the RTX 8000 (generic model), plus the same SKUs' mean regret and violations at the 5%
bound. V100 and RTX 8000 rows are printed too; they are the targets, reported and never chosen by.

  anchor   divide each model's predictions by its own prediction at the workload's reference config (post hoc, on
           data/eval/<bundle>/predictions.parquet of the last `dvc repro`; no refitting)
  balance  generic model + input bytes_per_sm_cycle (DRAM bytes per SM clock cycle across the GPU at the config)
  bag      every model refitted with 5 seeds at its chosen settings and rounds; the mean of the log predictions
  l1       both models trained with the absolute error of the log ratio (reg:absoluteerror; early stopping and the
           choice on validation MAE), the loss that matches MAPE
  pooled   per-SKU models trained on every generic_train_sku's rows (held-out workloads' programs dropped on the other
           SKUs): P1 no extra input, P2 + is_target_sku, P3 own-or-pooled chosen per fold by inner validation

Usage: python scripts/model_variants.py {anchor,balance,bag,l1,pooled} [--variant P1|P2|P3] [--bundles ...]
(after `dvc repro evaluate`). Wall time on 2 cores (2026-12-04): anchor 4 s, balance 25 s, bag 106 s, l1 2 min, pooled
133-177 s per variant.
"""

from __future__ import annotations

import argparse
import functools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import gpoeo_pipeline.evaluate as evaluate
import gpoeo_pipeline.modeling as modeling
from gpoeo_pipeline.params import load_section
from gpoeo_pipeline.train import GENERIC, select_training_rows

SELECTION_SKUS = ("gtx-1080ti", "gtx-980", "tesla-p100")
TARGET_SKUS = ("tesla-v100", "quadro-rtx-8000")
GENERIC_SELECTION_SKUS = ("gtx-1080ti", "gtx-980", "tesla-p100", "tesla-v100")
# (SM count, memory bus width in bits) from the vendors' specifications; the runtime would read both from NVML.
GPU_SPECS: dict[str, tuple[int, int]] = {
    "tesla-v100": (80, 4096),
    "quadro-rtx-8000": (72, 384),
    "gtx-1080ti": (28, 352),
    "gtx-980": (16, 256),
    "tesla-p100": (56, 4096),
}
BAG_SEEDS = 5


def figures(predictions: pd.DataFrame) -> dict[str, float]:
    entry = evaluate.summarize(predictions, [0.05])["xgboost"]
    return {
        "time": entry["mape_time_pct"],
        "energy": entry["mape_energy_pct"],
        "regret": entry["energy_at_5pct"]["mean_regret_pts"],
        "violations": entry["energy_at_5pct"]["violation_rate"] * 100.0,
    }


def report(label: str, per_sku: dict[str, pd.DataFrame], generic: bool) -> None:
    """Print each SKU's figures and the criterion of its family over the selection SKUs."""
    rows = {sku: figures(p) for sku, p in per_sku.items()}
    for sku, f in rows.items():
        role = "target, not chosen by" if sku == "quadro-rtx-8000" or (sku == "tesla-v100" and not generic) else ""
        print(
            f"{label:>10} {sku:<16} time {f['time']:6.2f}%  energy {f['energy']:6.2f}%  regret@5% {f['regret']:5.2f}"
            f"  violations {f['violations']:5.1f}%  {role}"
        )
    chosen_by = GENERIC_SELECTION_SKUS if generic else SELECTION_SKUS
    sel = [rows[s] for s in chosen_by if s in rows]
    if len(sel) == len(chosen_by):
        crit = np.mean([f["energy"] for f in sel]) if generic else np.mean([[f["time"], f["energy"]] for f in sel])
        name = "(b)" if generic else "(a)"
        print(
            f"{label:>10} {name} {crit:.2f}%  mean regret@5% {np.mean([f['regret'] for f in sel]):.2f}"
            f"  mean violations {np.mean([f['violations'] for f in sel]):.1f}%"
        )


def anchored(predictions: pd.DataFrame) -> pd.DataFrame:
    """Each prediction divided by the same fold model's prediction for that workload at its reference config."""
    out = predictions.copy()
    keys = pd.MultiIndex.from_frame(out[["sku", "workload"]])
    for column in ("pred_time_ratio", "pred_power_ratio"):
        at_reference = out.loc[out["ref"]].set_index(["sku", "workload"])[column]
        if not at_reference.index.is_unique:
            raise ValueError(f"{column}: more than one reference row for a workload")
        out[column] = out[column].to_numpy() / keys.map(at_reference).to_numpy()
    out["pred_energy_ratio"] = out["pred_time_ratio"] * out["pred_power_ratio"]
    return out


def by_sku(predictions: pd.DataFrame) -> dict[str, pd.DataFrame]:
    return {str(sku): rows for sku, rows in predictions.groupby("sku", sort=True)}


def run_anchor(bundles: list[str]) -> None:
    for label, transform in (("shipped", lambda p: p), ("anchor", anchored)):
        per_sku = {s: transform(pd.read_parquet(f"data/eval/{s}/predictions.parquet")) for s in bundles if s != GENERIC}
        if per_sku:
            report(label, per_sku, generic=False)
        if GENERIC in bundles:
            report(label, by_sku(transform(pd.read_parquet(f"data/eval/{GENERIC}/predictions.parquet"))), generic=True)


def training_frame(bundle: str) -> tuple[pd.DataFrame, list[str], dict[str, Any]]:
    schema = json.loads(Path("data/processed/feature_schema.json").read_text())
    frame = select_training_rows(pd.read_parquet("data/processed/features.parquet"), bundle, load_section("models"))
    inputs = list(schema["generic_inputs"] if bundle == GENERIC else schema["sku_inputs"])
    return frame, inputs, modeling.bundle_params(load_section("xgb"), bundle)


def workload_folds(frame: pd.DataFrame, params: dict[str, Any]) -> pd.Series:
    return modeling.grouped_folds(
        frame["workload"], int(load_section("evaluate")["workload_folds"]), int(params["seed"])
    )


def run_balance() -> None:
    frame, inputs, params = training_frame(GENERIC)
    sm_count = frame["sku"].map(lambda sku: GPU_SPECS[sku][0])
    bus_bits = frame["sku"].map(lambda sku: GPU_SPECS[sku][1])
    # DDR: two transfers per memory clock (the NVML memory clock of these SKUs, HBM2 and GDDR5/5X/6 alike).
    frame["bytes_per_sm_cycle"] = bus_bits / 8 * 2 * frame["mem_clock_mhz"] / (sm_count * frame["sm_clock_mhz"])
    predictions = evaluate.cross_validate(frame, [*inputs, "bytes_per_sm_cycle"], frame["sku"], params)
    report("balance", by_sku(predictions), generic=True)


class SeedBag:
    """The mean log prediction of several boosters (the interface `modeling.predict_ratio` uses)."""

    def __init__(self, members: list[Any]) -> None:
        self.members = members

    def predict(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(np.mean([m.predict(x) for m in self.members], axis=0))


def _fit_bagged(frame: pd.DataFrame, inputs: list[str], target: str, params: dict[str, Any]) -> modeling.FittedModel:
    y = np.log(frame[target].to_numpy(np.float64))
    selection = modeling.select_hyperparameters(frame, inputs, y, params)
    x = frame[inputs].to_numpy(np.float32)
    members = []
    for offset in range(BAG_SEEDS):
        member = modeling._regressor(
            {**params, **selection.settings, "seed": int(params["seed"]) + offset}, selection.rounds
        )
        member.fit(x, y, verbose=False)
        members.append(member)
    return modeling.FittedModel(SeedBag(members), tuple(inputs), target, selection.rounds, selection.settings)  # type: ignore[arg-type]


def _use_l1_loss() -> None:
    """Train on the absolute error of the log ratio, and stop early and choose on validation MAE. Patched in the
    process that fits (the spawned workers import this module afresh)."""
    if getattr(modeling, "_l1_loss", False):
        return
    squared_error_regressor = modeling._regressor

    def regressor(params: dict[str, Any], n_estimators: int) -> Any:
        model = squared_error_regressor(params, n_estimators)
        model.set_params(objective="reg:absoluteerror")
        return model

    def validation_curve(x: np.ndarray, y: np.ndarray, splits: list[np.ndarray], params: dict[str, Any]) -> np.ndarray:
        curves = []
        for val in splits:
            probe = regressor(params, int(params["n_estimators"]))
            probe.set_params(eval_metric="mae", early_stopping_rounds=int(params["early_stopping_rounds"]))
            probe.fit(x[~val], y[~val], eval_set=[(x[val], y[val])], verbose=False)
            curves.append(np.asarray(probe.evals_result()["validation_0"]["mae"]))
        reached = min(len(c) for c in curves)
        return np.asarray(np.mean([c[:reached] for c in curves], axis=0))

    modeling._regressor = regressor  # type: ignore[assignment]
    modeling._mean_validation_curve = validation_curve
    modeling._l1_loss = True  # type: ignore[attr-defined]


def _fit_l1(frame: pd.DataFrame, inputs: list[str], target: str, params: dict[str, Any]) -> modeling.FittedModel:
    _use_l1_loss()
    return modeling.fit_target(frame, inputs, target, params)


def run_refitted(label: str, fit: modeling.FitFunction, bundles: list[str]) -> None:
    """The evaluate stage's own cross-validation loop, each model fitted by `fit` instead of `fit_target`."""
    evaluate.fit_targets = functools.partial(modeling.fit_targets, fit=fit)
    per_sku: dict[str, pd.DataFrame] = {}
    for bundle in bundles:
        frame, inputs, params = training_frame(bundle)
        folds = frame["sku"] if bundle == GENERIC else workload_folds(frame, params)
        predictions = evaluate.cross_validate(frame, inputs, folds, params)
        if bundle == GENERIC:
            report(label, by_sku(predictions), generic=True)
        else:
            per_sku[bundle] = predictions
    if per_sku:
        report(label, per_sku, generic=False)


def run_bag(bundles: list[str]) -> None:
    run_refitted("bag5", _fit_bagged, bundles)


def _fit_own_or_pooled(
    pool: pd.DataFrame, inputs: list[str], target: str, params: dict[str, Any], *, sku: str
) -> modeling.FittedModel:
    """P3: own rows or pooled rows, and the depth, chosen on validation splits that hold out 25% of the target
    SKU's own training workloads (pooled candidates also lose the other SKUs' rows of those programs); the loss is
    measured on the target SKU's held-out rows only."""
    own = (pool["sku"] == sku).to_numpy()
    x = pool[inputs].to_numpy(np.float32)
    y = np.log(pool[target].to_numpy(np.float64))
    workloads = pool.loc[own, "workload"].astype(str).to_numpy()
    splits = []
    for offset in range(int(params["early_stopping_splits"])):
        held = modeling.validation_groups(workloads, float(params["validation_fraction"]), int(params["seed"]) + offset)
        val = own & pool["workload"].isin(held).to_numpy()
        others_dropped = ~own & pool["group"].isin(set(pool.loc[val, "group"])).to_numpy()
        splits.append((val, others_dropped))
    trials = []
    for source in ("own", "pooled"):
        for settings in modeling.candidate_grid(params):
            merged = {**params, **settings}
            curves = []
            for val, others_dropped in splits:
                train = ~val & (own if source == "own" else ~others_dropped)
                probe = modeling._regressor(merged, int(merged["n_estimators"]))
                probe.set_params(eval_metric="rmse", early_stopping_rounds=int(merged["early_stopping_rounds"]))
                probe.fit(x[train], y[train], eval_set=[(x[val], y[val])], verbose=False)
                curves.append(np.asarray(probe.evals_result()["validation_0"]["rmse"]))
            reached = min(len(c) for c in curves)
            curve = np.mean([c[:reached] for c in curves], axis=0)
            trials.append((float(curve.min()), source, settings, int(np.argmin(curve)) + 1))
    _, source, settings, rounds = min(trials, key=lambda trial: trial[0])
    rows = own if source == "own" else np.ones(len(pool), dtype=bool)
    final = modeling._regressor({**params, **settings}, rounds)
    final.fit(x[rows], y[rows], verbose=False)
    return modeling.FittedModel(final, tuple(inputs), target, rounds, {**settings, "source": source})


def run_pooled(bundles: list[str], variant: str) -> None:
    schema = json.loads(Path("data/processed/feature_schema.json").read_text())
    # The generic model's rows: every SKU of models.generic_train_skus.
    table = pd.read_parquet("data/processed/features.parquet")
    pooled_rows = select_training_rows(table, GENERIC, load_section("models"))
    per_sku: dict[str, pd.DataFrame] = {}
    for sku in bundles:
        params = modeling.bundle_params(load_section("xgb"), sku)
        pool = pooled_rows.copy()
        pool["is_target_sku"] = (pool["sku"] == sku).astype(float)
        inputs = list(schema["sku_inputs"]) + ([] if variant == "P1" else ["is_target_sku"])
        is_own = pool["sku"] == sku
        own = pool.loc[is_own]
        folds = workload_folds(own, params)
        splits = []
        for fold in sorted(folds.unique()):
            test = own.index[folds == fold]
            held_workloads, held_groups = set(own.loc[test, "workload"]), set(own.loc[test, "group"])
            train = (is_own & ~pool["workload"].isin(held_workloads)) | (~is_own & ~pool["group"].isin(held_groups))
            splits.append((fold, train, test))
        jobs = [
            (pool.loc[train].reset_index(drop=True), t) for _, train, _ in splits for t in ("time_ratio", "power_ratio")
        ]
        fit = functools.partial(_fit_own_or_pooled, sku=sku) if variant == "P3" else modeling.fit_target
        fitted = modeling.fit_targets(jobs, inputs, params, fit=fit)
        predictions = own.copy()
        for index, (fold, _, test) in enumerate(splits):
            predictions.loc[test, "pred_time_ratio"] = modeling.predict_ratio(fitted[2 * index], pool.loc[test])
            predictions.loc[test, "pred_power_ratio"] = modeling.predict_ratio(fitted[2 * index + 1], pool.loc[test])
            predictions.loc[test, "fold"] = fold
        # summarize scores the physics baseline too; it is not part of this comparison, so it mirrors the model.
        predictions["base_time_ratio"] = predictions["pred_time_ratio"]
        predictions["base_power_ratio"] = predictions["pred_power_ratio"]
        if variant == "P3":
            sources = [m.settings["source"] for m in fitted]
            print(f"{variant} {sku}: pooled chosen by {sources.count('pooled')} of {len(sources)} fold models")
        per_sku[sku] = predictions
    report(variant, per_sku, generic=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("experiment", choices=["anchor", "balance", "bag", "l1", "pooled"])
    ap.add_argument("--variant", choices=["P1", "P2", "P3"], default="P2", help="pooled only")
    ap.add_argument("--bundles", nargs="+", help="default: every per-SKU bundle (and generic where it applies)")
    args = ap.parse_args()
    skus = [*SELECTION_SKUS, *TARGET_SKUS]
    if args.experiment == "anchor":
        run_anchor(args.bundles or [*skus, GENERIC])
    elif args.experiment == "balance":
        run_balance()
    elif args.experiment == "bag":
        run_bag(args.bundles or [*skus, GENERIC])
    elif args.experiment == "l1":
        run_refitted("l1", _fit_l1, args.bundles or [*skus, GENERIC])
    else:
        run_pooled(args.bundles or skus, args.variant)


if __name__ == "__main__":
    main()
