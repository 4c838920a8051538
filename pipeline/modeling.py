"""Pure model-fitting helpers shared by the train and evaluate stages.

Targets are learned in log space (log of the ratio to the reference), which makes relative errors symmetric and
keeps predictions positive; `predict_ratio` undoes the transform.
"""

from __future__ import annotations

import functools
import itertools
import multiprocessing
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import xgboost as xgb

from gpoeo_rt.progress import Bars

GENERIC = "generic"

# Hyperparameters that `xgb.<name>_choices: [...]` may turn into a grid, chosen inside each training set.
TUNABLE: tuple[str, ...] = (
    "max_depth",
    "min_child_weight",
    "reg_lambda",
    "learning_rate",
    "subsample",
    "colsample_bytree",
)
# Keys with a default, valid in `xgb` and `xgb.generic` even where the base section leaves them out.
OPTIONAL: tuple[str, ...] = ("early_stopping_key", "n_jobs", "workers")
# Sections of the xgb parameters that are not hyperparameters of one model.
_OVERRIDE_SECTIONS: tuple[str, ...] = (GENERIC,)


@dataclass(frozen=True)
class Trial:
    """One candidate of the hyperparameter grid: its settings, its best mean validation loss (RMSE of the log
    ratio over the early-stopping splits, which hold out part of the TRAINING rows only) and the rounds there."""

    settings: dict[str, float]
    loss: float
    rounds: int


@dataclass(frozen=True)
class Selection:
    """The chosen candidate (the lowest validation loss; the first listed on a tie) and every candidate tried."""

    settings: dict[str, float]
    rounds: int
    trials: tuple[Trial, ...]


@dataclass(frozen=True)
class FittedModel:
    """An XGBoost regressor of log(target), the hyperparameters and round count chosen for it, and the
    candidates that choice compared."""

    model: xgb.XGBRegressor
    inputs: tuple[str, ...]
    target: str
    best_rounds: int
    settings: dict[str, float] = field(default_factory=dict)
    trials: tuple[Trial, ...] = ()


def bundle_params(xgb_params: dict[str, Any], bundle: str) -> dict[str, Any]:
    """The xgb parameters of one bundle: params.yaml `xgb`, with the `xgb.generic` section's overrides applied for
    the generic (cross-SKU) bundle. An override of `k` without its own `k_choices` replaces an inherited grid of
    `k` (a fixed value means fixed). Unknown override keys are an error, not silently ignored."""
    base = {k: v for k, v in xgb_params.items() if k not in _OVERRIDE_SECTIONS}
    if bundle != GENERIC:
        return base
    overrides = xgb_params.get(GENERIC) or {}
    if not isinstance(overrides, dict):
        raise TypeError(f"params.yaml xgb.{GENERIC} must be a mapping, got {type(overrides).__name__}")
    allowed = set(base) | set(OPTIONAL) | {f"{k}_choices" for k in TUNABLE}
    unknown = sorted(set(overrides) - allowed)
    if unknown:
        raise KeyError(f"params.yaml xgb.{GENERIC}: unknown keys {unknown} (allowed: {sorted(allowed)})")
    merged = dict(base)
    for key, value in overrides.items():
        if key in TUNABLE and f"{key}_choices" not in overrides:
            merged.pop(f"{key}_choices", None)
        merged[key] = value
    return merged


def candidate_grid(params: dict[str, Any]) -> list[dict[str, float]]:
    """Every combination of the `<name>_choices` lists (a name without choices keeps its single value), in the
    order listed: the first candidate wins ties."""
    axes: list[list[tuple[str, float]]] = []
    for name in TUNABLE:
        values = params.get(f"{name}_choices")
        if values is None:
            values = [params[name]]
        if not isinstance(values, list) or not values:
            raise ValueError(f"params.yaml xgb.{name}_choices must be a non-empty list, got {values!r}")
        axes.append([(name, value) for value in values])
    return [dict(combo) for combo in itertools.product(*axes)]


def grid_axes(params: dict[str, Any]) -> list[str]:
    """The hyperparameters the grid varies (those with more than one choice)."""
    return [name for name in TUNABLE if len(params.get(f"{name}_choices") or []) > 1]


def _regressor(params: dict[str, Any], n_estimators: int) -> xgb.XGBRegressor:
    return xgb.XGBRegressor(
        n_estimators=n_estimators,
        max_depth=int(params["max_depth"]),
        learning_rate=float(params["learning_rate"]),
        subsample=float(params["subsample"]),
        colsample_bytree=float(params["colsample_bytree"]),
        min_child_weight=float(params["min_child_weight"]),
        reg_lambda=float(params["reg_lambda"]),
        objective="reg:squarederror",
        tree_method="hist",
        n_jobs=int(params.get("n_jobs", 2)),
        random_state=int(params["seed"]),
    )


def validation_groups(groups: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """A seeded choice of whole workload groups for early stopping (never a split by row)."""
    unique = np.unique(groups)
    n_val = max(1, round(fraction * len(unique)))
    if len(unique) < 2:
        raise ValueError(f"need at least 2 workload groups for a validation split, got {len(unique)}")
    rng = np.random.default_rng(seed)
    return rng.choice(unique, size=min(n_val, len(unique) - 1), replace=False)


def validation_splits(frame: pd.DataFrame, params: dict[str, Any]) -> list[np.ndarray]:
    """Boolean masks of the validation rows of each early-stopping split, all within `frame`. Each split holds out
    whole values of `early_stopping_key` (a column: `group` = program, the default; `workload`; `sku`):
    `early_stopping_splits` seeded draws of `validation_fraction` of them, or, with `early_stopping_splits: 0`, one
    split per value (leave-one-out, for a key with few values such as the SKUs of the generic model)."""
    key = str(params.get("early_stopping_key", "group"))
    if key not in frame.columns:
        raise KeyError(f"params.yaml xgb.early_stopping_key: no column {key!r} in the training rows")
    keys = frame[key].astype(str).to_numpy()
    n_splits = int(params["early_stopping_splits"])
    if n_splits <= 0:
        unique = np.unique(keys)
        if len(unique) < 2:
            raise ValueError(
                f"params.yaml xgb.early_stopping_key: need at least 2 values of {key!r} in the training rows for a "
                f"leave-one-out validation split, got {len(unique)}"
            )
        return [keys == value for value in unique]
    seed = int(params["seed"])
    return [
        np.isin(keys, validation_groups(keys, float(params["validation_fraction"]), seed + split))
        for split in range(n_splits)
    ]


def _mean_validation_curve(
    x: np.ndarray, y: np.ndarray, splits: list[np.ndarray], params: dict[str, Any]
) -> np.ndarray:
    """Validation RMSE per round averaged over the splits. Each split's probe stops once its own loss has not
    improved for `early_stopping_rounds` rounds; the curves are averaged over the rounds they all reached."""
    patience = int(params["early_stopping_rounds"])
    curves = []
    for val in splits:
        probe = _regressor(params, int(params["n_estimators"]))
        probe.set_params(eval_metric="rmse", early_stopping_rounds=patience)
        probe.fit(x[~val], y[~val], eval_set=[(x[val], y[val])], verbose=False)
        curves.append(np.asarray(probe.evals_result()["validation_0"]["rmse"]))
    reached = min(len(curve) for curve in curves)
    return np.asarray(np.mean([curve[:reached] for curve in curves], axis=0))


def select_hyperparameters(frame: pd.DataFrame, inputs: list[str], y: np.ndarray, params: dict[str, Any]) -> Selection:
    """Choose the hyperparameters and boosting rounds from `frame` ALONE (the training rows of a fold, or all rows
    for a shipped model): every candidate of the grid is scored on the same early-stopping splits, which hold out
    whole workload groups of `frame`; the candidate with the lowest mean validation loss wins, with the rounds at
    that minimum. Nothing outside `frame` is seen, so held-out evaluation stays held out."""
    x = frame[inputs].to_numpy(np.float32)
    splits = validation_splits(frame, params)
    trials = []
    for settings in candidate_grid(params):
        curve = _mean_validation_curve(x, y, splits, {**params, **settings})
        best = int(np.argmin(curve))
        trials.append(Trial(settings=settings, loss=float(curve[best]), rounds=best + 1))
    chosen = min(trials, key=lambda trial: trial.loss)  # min keeps the first of equal losses
    return Selection(settings=chosen.settings, rounds=chosen.rounds, trials=tuple(trials))


def fit_target(frame: pd.DataFrame, inputs: list[str], target: str, params: dict[str, Any]) -> FittedModel:
    """Fit log(target) on `inputs`: choose the hyperparameters and round count by early stopping on held-out
    workload groups of `frame`, then refit on every row of `frame` with them (so no group's data is wasted)."""
    y = np.log(frame[target].to_numpy(np.float64))
    selection = select_hyperparameters(frame, inputs, y, params)
    final = _regressor({**params, **selection.settings}, selection.rounds)
    final.fit(frame[inputs].to_numpy(np.float32), y, verbose=False)
    return FittedModel(
        model=final,
        inputs=tuple(inputs),
        target=target,
        best_rounds=selection.rounds,
        settings=selection.settings,
        trials=selection.trials,
    )


FitJob = tuple[pd.DataFrame, str]


FitFunction = Callable[[pd.DataFrame, list[str], str, dict[str, Any]], FittedModel]


def _fit_job(job: FitJob, inputs: list[str], params: dict[str, Any], fit: FitFunction) -> FittedModel:
    frame, target = job
    return fit(frame, inputs, target, params)


def fit_targets(
    jobs: list[FitJob], inputs: list[str], params: dict[str, Any], fit: FitFunction = fit_target
) -> list[FittedModel]:
    """`fit` (default `fit_target`; another must be picklable, e.g. a module-level function) for every (rows,
    target) job, in job order. `params["workers"]` (default 1) jobs run at once, each in its own spawned process
    with `n_jobs` XGBoost threads: small tables keep one thread busy better than several, so the folds or models of
    a stage spread over the cores instead. Every job sees only its own rows and its result does not depend on which
    process ran it."""
    workers = min(int(params.get("workers", 1)), len(jobs))
    run = functools.partial(_fit_job, inputs=inputs, params=params, fit=fit)
    fitted: list[FittedModel] = []
    with Bars() as bars:  # a bar while a terminal watches (a stage fits for up to minutes); nothing in a log
        advance = bars.task(f"fitting {len(jobs)} models")
        if workers <= 1:
            for job in jobs:
                fitted.append(run(job))
                advance(len(fitted), len(jobs))
            return fitted
        # Spawned, not forked: a fork of a process whose OpenMP runtime (XGBoost's) has started can hang.
        with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            for model in pool.map(run, jobs):
                fitted.append(model)
                advance(len(fitted), len(jobs))
    return fitted


def predict_ratio(fitted: FittedModel, frame: pd.DataFrame) -> np.ndarray:
    """Predicted ratio (not log) for each row of `frame`."""
    x = frame[list(fitted.inputs)].to_numpy(np.float32)
    return np.exp(fitted.model.predict(x).astype(np.float64))


def grouped_folds(keys: pd.Series, n_folds: int, seed: int) -> pd.Series:
    """Assign every distinct key (workload, program or SKU) to one of `n_folds` folds, seeded; rows of one key always
    share a fold. `n_folds` = 0, or at least the number of keys, gives one fold per key (leave-one-out)."""
    unique = np.array(sorted(pd.unique(keys.to_numpy())))
    if n_folds <= 0 or n_folds >= len(unique):
        fold_of = {key: str(key) for key in unique}
    else:
        order = np.random.default_rng(seed).permutation(len(unique))
        fold_of = {unique[i]: f"fold{rank % n_folds}" for rank, i in enumerate(order)}
    return keys.map(fold_of)


def leave_one_group_out(groups: pd.Series) -> Iterator[tuple[str, np.ndarray, np.ndarray]]:
    """Yield (held-out group, train mask, test mask) for every group, in a stable order."""
    values = groups.to_numpy()
    for group in sorted(pd.unique(values)):
        test = values == group
        yield str(group), ~test, test


def frame_digest(frame: pd.DataFrame) -> str:
    """A content hash of a dataframe (row order included), recorded in bundle manifests."""
    import hashlib

    hashed = pd.util.hash_pandas_object(frame.reset_index(drop=True), index=False).to_numpy()
    return hashlib.sha256(hashed.tobytes()).hexdigest()
