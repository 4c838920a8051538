import numpy as np
import pandas as pd
import pytest

from gpoeo_pipeline.features import build_training_table
from gpoeo_pipeline.modeling import (
    GENERIC,
    TUNABLE,
    bundle_params,
    candidate_grid,
    fit_target,
    fit_targets,
    frame_digest,
    grid_axes,
    grouped_folds,
    leave_one_group_out,
    predict_ratio,
    select_hyperparameters,
    validation_groups,
    validation_splits,
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


def test_bundle_params_apply_the_generic_overrides_only_to_the_generic_bundle() -> None:
    params = {**XGB, "max_depth_choices": [3, 5], "generic": {"max_depth": 2, "early_stopping_key": "sku"}}
    per_sku = bundle_params(params, "tesla-v100")
    assert "generic" not in per_sku
    assert per_sku["max_depth_choices"] == [3, 5]
    generic = bundle_params(params, GENERIC)
    assert generic["early_stopping_key"] == "sku"
    # A fixed value replaces the inherited grid: `max_depth: 2` means depth 2, not a choice of 3 or 5.
    assert generic["max_depth"] == 2
    assert "max_depth_choices" not in generic
    assert candidate_grid(generic) == [candidate_grid(XGB)[0] | {"max_depth": 2}]
    regrid = bundle_params({**params, "generic": {"max_depth": 2, "max_depth_choices": [2, 4]}}, GENERIC)
    assert [c["max_depth"] for c in candidate_grid(regrid)] == [2, 4]
    with pytest.raises(KeyError, match="max_dept"):
        bundle_params({**XGB, "generic": {"max_dept": 4}}, GENERIC)


def test_candidate_grid_is_the_product_of_the_choices_in_order() -> None:
    grid = candidate_grid({**XGB, "max_depth_choices": [6, 8], "min_child_weight_choices": [1, 5]})
    assert [(c["max_depth"], c["min_child_weight"]) for c in grid] == [(6, 1), (6, 5), (8, 1), (8, 5)]
    assert all(c["learning_rate"] == XGB["learning_rate"] for c in grid)
    assert candidate_grid(XGB) == [{name: XGB[name] for name in TUNABLE}]
    assert grid_axes({**XGB, "max_depth_choices": [6, 8], "reg_lambda_choices": [1.0]}) == ["max_depth"]
    with pytest.raises(ValueError, match="non-empty list"):
        candidate_grid({**XGB, "max_depth_choices": []})


def test_validation_splits_hold_out_whole_values_of_the_key() -> None:
    table = build_training_table(synthetic_sweeps(n_programs=6, variants=3, seed=4), "^([^/]+)")
    for key in ("workload", "group"):
        splits = validation_splits(table, {**XGB, "early_stopping_key": key, "early_stopping_splits": 3})
        assert len(splits) == 3
        for val in splits:
            assert 0 < val.sum() < len(table)
            held = set(table.loc[val, key])
            assert not held & set(table.loc[~val, key])  # no value on both sides
    leave_one_out = validation_splits(table, {**XGB, "early_stopping_key": "group", "early_stopping_splits": 0})
    assert len(leave_one_out) == 6
    assert (np.sum(leave_one_out, axis=0) == 1).all()  # every row validates exactly once
    with pytest.raises(KeyError, match="early_stopping_key"):
        validation_splits(table, {**XGB, "early_stopping_key": "nope"})
    with pytest.raises(ValueError, match="at least 2 values of 'sku'"):
        validation_splits(table, {**XGB, "early_stopping_key": "sku", "early_stopping_splits": 0})


def test_hyperparameters_are_chosen_by_the_lowest_validation_loss_and_recorded() -> None:
    table = build_training_table(synthetic_sweeps(n_programs=8, variants=3, seed=2), "^([^/]+)")
    inputs = ["feat_sm_active", "feat_dram_active", "sm_ratio"]
    params = {**XGB, "early_stopping_key": "workload", "max_depth_choices": [1, 4]}
    y = np.log(table["time_ratio"].to_numpy())
    selection = select_hyperparameters(table, inputs, y, params)
    assert [t.settings["max_depth"] for t in selection.trials] == [1, 4]
    best = min(selection.trials, key=lambda t: t.loss)
    assert selection.settings == best.settings and selection.rounds == best.rounds
    fitted = fit_target(table, inputs, "time_ratio", params)
    assert fitted.settings == selection.settings and fitted.best_rounds == selection.rounds
    assert fitted.model.get_params()["max_depth"] == selection.settings["max_depth"]
    assert fitted.model.get_params()["n_estimators"] == selection.rounds


def test_fit_targets_gives_the_same_models_in_worker_processes_as_in_process() -> None:
    table = build_training_table(synthetic_sweeps(n_programs=6, variants=2, seed=3), "^([^/]+)")
    inputs = ["feat_sm_active", "feat_dram_active", "sm_ratio"]
    params = {**XGB, "n_estimators": 60, "max_depth_choices": [2, 3]}
    jobs = [(table.loc[table["group"] != "prog0"], "time_ratio"), (table, "power_ratio")]
    in_process = fit_targets(jobs, inputs, {**params, "workers": 1})
    spawned = fit_targets(jobs, inputs, {**params, "workers": 2})
    assert [m.target for m in spawned] == ["time_ratio", "power_ratio"]  # job order, whichever finished first
    for a, b in zip(in_process, spawned, strict=True):
        assert (a.settings, a.best_rounds) == (b.settings, b.best_rounds)
        assert np.array_equal(predict_ratio(a, table), predict_ratio(b, table))
