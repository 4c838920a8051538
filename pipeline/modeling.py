"""Pure model-fitting helpers shared by the train and evaluate stages.

Targets are learned in log space (log of the ratio to the reference), which makes relative errors symmetric and
keeps predictions positive; `predict_ratio` undoes the transform.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import xgboost as xgb


@dataclass(frozen=True)
class FittedModel:
    """An XGBoost regressor of log(target) and the number of boosting rounds that early stopping chose."""

    model: xgb.XGBRegressor
    inputs: tuple[str, ...]
    target: str
    best_rounds: int


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


def early_stopping_rounds(frame: pd.DataFrame, inputs: list[str], y: np.ndarray, params: dict[str, Any]) -> int:
    """Boosting rounds chosen on held-out workload groups: the minimum of the validation loss averaged over
    `early_stopping_splits` seeded group splits (one split's curve is too noisy with a few dozen programs). Each
    split's probe stops once its own loss has not improved for `early_stopping_rounds` rounds; the curves are
    averaged over the rounds they all reached."""
    groups = frame["group"].to_numpy()
    x = frame[inputs].to_numpy(np.float32)
    patience = int(params["early_stopping_rounds"])
    curves = []
    for split in range(int(params["early_stopping_splits"])):
        held_out = validation_groups(groups, float(params["validation_fraction"]), int(params["seed"]) + split)
        val = np.isin(groups, held_out)
        probe = _regressor(params, int(params["n_estimators"]))
        probe.set_params(eval_metric="rmse", early_stopping_rounds=patience)
        probe.fit(x[~val], y[~val], eval_set=[(x[val], y[val])], verbose=False)
        curves.append(np.asarray(probe.evals_result()["validation_0"]["rmse"]))
    reached = min(len(curve) for curve in curves)
    mean_curve = np.mean([curve[:reached] for curve in curves], axis=0)
    return int(np.argmin(mean_curve)) + 1


def fit_target(frame: pd.DataFrame, inputs: list[str], target: str, params: dict[str, Any]) -> FittedModel:
    """Fit log(target) on `inputs`: choose the round count by early stopping on held-out workload groups, then
    refit on every group with that many rounds (so no group's data is wasted)."""
    y = np.log(frame[target].to_numpy(np.float64))
    best_rounds = early_stopping_rounds(frame, inputs, y, params)
    final = _regressor(params, best_rounds)
    final.fit(frame[inputs].to_numpy(np.float32), y, verbose=False)
    return FittedModel(model=final, inputs=tuple(inputs), target=target, best_rounds=best_rounds)


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
