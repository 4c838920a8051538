from typing import Any

import numpy as np
import pandas as pd
import pytest

from gpoeo_pipeline import modeling
from gpoeo_pipeline.evaluate import (
    choice_summary,
    cross_validate,
    decision_metrics,
    error_metrics,
    workload_decisions,
)
from gpoeo_pipeline.features import build_training_table
from gpoeo_pipeline.modeling import grouped_folds, leave_one_group_out
from gpoeo_rt.search.objectives import Objective
from tests.pipeline.synthetic import synthetic_sweeps


def _perfect_predictions() -> pd.DataFrame:
    table = build_training_table(synthetic_sweeps(), "^([^/]+)")
    table["pred_time_ratio"] = table["time_ratio"]
    table["pred_power_ratio"] = table["power_ratio"]
    return table


def test_perfect_predictions_have_zero_error_and_zero_regret() -> None:
    predictions = _perfect_predictions()
    errors = error_metrics(predictions, "pred_time_ratio", "pred_power_ratio")
    assert errors["mape_time_pct"] == pytest.approx(0.0, abs=1e-9)
    assert errors["mape_energy_pct"] == pytest.approx(0.0, abs=1e-9)
    decisions = workload_decisions(predictions, "pred_time_ratio", "pred_power_ratio", Objective.ENERGY, 0.05)
    summary = decision_metrics(decisions)
    assert summary["mean_regret_pts"] == pytest.approx(0.0, abs=1e-9)
    assert summary["violation_rate"] == 0.0
    assert summary["mean_saving_pct"] == pytest.approx(summary["oracle_saving_pct"])
    assert summary["workloads"] == predictions["workload"].nunique()


def test_optimistic_time_predictions_are_counted_as_violations_with_regret_on_measured_energy() -> None:
    predictions = _perfect_predictions()
    # A model that thinks every clock is free: it picks the lowest clock, whose measured slowdown is large.
    predictions["pred_time_ratio"] = 1.0
    decisions = workload_decisions(predictions, "pred_time_ratio", "pred_power_ratio", Objective.ENERGY, 0.05)
    assert (decisions["pick_sm_clock_mhz"] == 600).all()
    low = predictions.loc[predictions["sm_clock_mhz"] == 600].set_index("workload")
    expected_violations = (low["time_ratio"] > 1.05).mean()
    assert decision_metrics(decisions)["violation_rate"] == pytest.approx(expected_violations)
    assert expected_violations > 0.5
    assert (decisions["regret"] >= -1e-12).all()


def test_mape_ignores_reference_rows() -> None:
    predictions = _perfect_predictions()
    predictions.loc[predictions["ref"], "pred_time_ratio"] = 5.0  # reference rows are 1 by definition
    assert error_metrics(predictions, "pred_time_ratio", "pred_power_ratio")["mape_time_pct"] == pytest.approx(0.0)
    assert np.isfinite(error_metrics(predictions, "pred_time_ratio", "pred_power_ratio")["mape_power_pct"])


LEAK_XGB = {
    "n_estimators": 80,
    "early_stopping_splits": 2,
    "early_stopping_rounds": 10,
    "validation_fraction": 0.25,
    "early_stopping_key": "workload",
    "max_depth": 2,
    "max_depth_choices": [1, 2, 4],
    "learning_rate": 0.2,
    "subsample": 1.0,
    "colsample_bytree": 1.0,
    "min_child_weight": 1,
    "reg_lambda": 1.0,
    "n_jobs": 1,
    "seed": 0,
}
LEAK_INPUTS = ["feat_sm_active", "feat_dram_active", "sm_ratio"]


def _leak_table() -> tuple[pd.DataFrame, pd.Series]:
    table = build_training_table(synthetic_sweeps(n_programs=6, variants=3, seed=5), "^([^/]+)")
    return table, grouped_folds(table["workload"], 3, seed=0)


def test_fold_choice_never_sees_the_held_out_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every hyperparameter/rounds choice in cross-validation is made on rows of the fold's training part only."""
    table, folds = _leak_table()
    seen: list[set[str]] = []
    real = modeling.select_hyperparameters

    def spy(frame: pd.DataFrame, inputs: list[str], y: np.ndarray, params: dict[str, Any]) -> modeling.Selection:
        seen.append(set(frame["workload"]))
        return real(frame, inputs, y, params)

    monkeypatch.setattr(modeling, "select_hyperparameters", spy)
    choices: dict[str, list[dict[str, Any]]] = {}
    cross_validate(table, LEAK_INPUTS, folds, LEAK_XGB, choices=choices)
    assert len(seen) == 2 * folds.nunique()  # time and power model of every fold
    for fold_index, (_, train, test) in enumerate(leave_one_group_out(folds)):
        held_out = set(table.loc[test, "workload"])
        for workloads in seen[2 * fold_index : 2 * fold_index + 2]:
            assert workloads == set(table.loc[train, "workload"])
            assert not workloads & held_out
    assert [len(v) for v in choices.values()] == [folds.nunique()] * 2
    summary = choice_summary(choices, ["max_depth"])
    assert sum(summary["time"]["chosen"].values()) == folds.nunique()


def test_held_out_predictions_do_not_depend_on_the_held_out_targets() -> None:
    """Scrambling the measured targets of one fold's workloads must leave that fold's predictions bit-identical:
    neither the fit nor the hyperparameter and round choice may look at them."""
    table, folds = _leak_table()
    target_fold = sorted(folds.unique())[0]
    clean = cross_validate(table, LEAK_INPUTS, folds, LEAK_XGB)
    scrambled_table = table.copy()
    rows = folds == target_fold
    factors = np.random.default_rng(7).uniform(0.3, 3.0, int(rows.sum()))
    for column in ("time_ratio", "power_ratio"):
        scrambled_table.loc[rows, column] = table.loc[rows, column] * factors
    scrambled = cross_validate(scrambled_table, LEAK_INPUTS, folds, LEAK_XGB)
    for column in ("pred_time_ratio", "pred_power_ratio"):
        assert np.array_equal(clean.loc[rows, column].to_numpy(), scrambled.loc[rows, column].to_numpy())
    # The scrambled rows do train the other folds, whose predictions change: the check above is not vacuous.
    assert not np.array_equal(clean.loc[~rows, "pred_time_ratio"], scrambled.loc[~rows, "pred_time_ratio"])
