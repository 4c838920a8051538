import numpy as np
import pandas as pd
import pytest

from gpoeo_pipeline.features import build_training_table
from gpoeo_pipeline.modeling import (
    fit_target,
    frame_digest,
    grouped_folds,
    leave_one_group_out,
    predict_ratio,
    validation_groups,
)
from tests.pipeline.synthetic import synthetic_sweeps

XGB = {
    "n_estimators": 200,
    "early_stopping_splits": 2,
    "early_stopping_rounds": 20,
    "validation_fraction": 0.25,
    "max_depth": 3,
    "learning_rate": 0.1,
    "subsample": 1.0,
    "colsample_bytree": 1.0,
    "min_child_weight": 1,
    "reg_lambda": 1.0,
    "n_jobs": 1,
    "seed": 0,
}


def test_validation_split_takes_whole_groups_and_leaves_training_groups() -> None:
    groups = np.array(["a", "a", "b", "b", "c", "c", "d"])
    chosen = validation_groups(groups, 0.5, seed=1)
    assert 1 <= len(chosen) < 4
    assert set(chosen) <= {"a", "b", "c", "d"}
    with pytest.raises(ValueError, match="at least 2"):
        validation_groups(np.array(["a", "a"]), 0.5, seed=1)


def test_leave_one_group_out_tests_every_row_exactly_once() -> None:
    groups = pd.Series(["x", "y", "x", "z", "y"])
    tested = np.zeros(len(groups), dtype=int)
    for held_out, train, test in leave_one_group_out(groups):
        assert not (train & test).any()
        assert set(groups[test]) == {held_out}
        tested += test
    assert (tested == 1).all()


def test_fit_predicts_held_out_workloads_of_known_physics() -> None:
    table = build_training_table(synthetic_sweeps(n_programs=8, variants=3, seed=2), "^([^/]+)")
    held_out = table["group"] == "prog0"
    inputs = ["feat_sm_active", "feat_dram_active", "sm_ratio"]
    fitted = fit_target(table.loc[~held_out], inputs, "time_ratio", XGB)
    assert 1 <= fitted.best_rounds <= XGB["n_estimators"]
    predicted = predict_ratio(fitted, table.loc[held_out])
    measured = table.loc[held_out, "time_ratio"].to_numpy()
    assert np.all(predicted > 0)
    # Time ratios span 1..2.4 here; a model that learned nothing would be off by ~30%.
    assert np.mean(np.abs(predicted - measured) / measured) < 0.12


def test_frame_digest_changes_with_content() -> None:
    frame = pd.DataFrame({"a": [1.0, 2.0]})
    assert frame_digest(frame) == frame_digest(frame.copy())
    assert frame_digest(frame) != frame_digest(pd.DataFrame({"a": [1.0, 2.5]}))


def test_grouped_folds_keep_each_key_in_one_fold_and_spread_keys() -> None:
    keys = pd.Series([f"w{i // 3}" for i in range(60)])  # 20 workloads, 3 rows each
    folds = grouped_folds(keys, 5, seed=0)
    assert (folds.groupby(keys).nunique() == 1).all()
    assert sorted(folds.value_counts().to_list()) == [12] * 5
    assert grouped_folds(keys, 5, seed=0).equals(folds)
    leave_one_out = grouped_folds(keys, 0, seed=0)
    assert leave_one_out.nunique() == 20
