import numpy as np
import pandas as pd
import pytest

from gpoeo_pipeline.evaluate import decision_metrics, error_metrics, workload_decisions
from gpoeo_pipeline.features import build_training_table
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
