import numpy as np
import pandas as pd
import pytest

from gpoeo_pipeline.features import build_training_table, feature_schema, sku_coverage, workload_group
from gpoeo_rt.features import FEATURE_NAMES
from tests.pipeline.synthetic import synthetic_sweeps

PATTERN = "^([^/]+)"


def test_ratios_are_relative_to_each_workloads_reference_row() -> None:
    sweeps = synthetic_sweeps()
    table = build_training_table(sweeps, PATTERN)
    assert len(table) == len(sweeps)
    refs = table.loc[table["ref"]]
    assert np.allclose(refs[["time_ratio", "power_ratio", "energy_ratio", "sm_ratio", "mem_ratio"]].to_numpy(), 1.0)
    row = sweeps.loc[(sweeps["workload"] == "prog1/v0") & (sweeps["sm_clock_mhz"] == 600)].iloc[0]
    ref = sweeps.loc[(sweeps["workload"] == "prog1/v0") & sweeps["ref"]].iloc[0]
    got = table.loc[(table["workload"] == "prog1/v0") & (table["sm_clock_mhz"] == 600)].iloc[0]
    assert got["time_ratio"] == pytest.approx(row["time_s"] / ref["time_s"])
    assert got["energy_ratio"] == pytest.approx(row["energy_j"] / ref["energy_j"])
    assert got["sm_ratio"] == pytest.approx(600 / 1500)
    # Counters come from the reference row, not from the row's own config.
    assert got["feat_sm_active"] == pytest.approx(ref["feat_sm_active"])
    assert got["group"] == "prog1"


def test_missing_reference_row_is_an_error_naming_the_workload() -> None:
    sweeps = synthetic_sweeps()
    sweeps.loc[(sweeps["workload"] == "prog2/v1") & sweeps["ref"], "ref"] = False
    with pytest.raises(ValueError, match="prog2/v1"):
        build_training_table(sweeps, PATTERN)


def test_group_pattern_that_does_not_match_names_pattern_and_workload() -> None:
    with pytest.raises(ValueError, match="weird-name"):
        workload_group("weird-name", "^(x+)/")


def test_feature_schema_orders_generic_inputs_first() -> None:
    params = {
        "generic_inputs": ["feat_sm_active", "sm_ratio"],
        "sku_extra_inputs": ["sm_clock_mhz"],
        "group_pattern": PATTERN,
    }
    schema = feature_schema(params)
    assert schema["sku_inputs"] == ["feat_sm_active", "sm_ratio", "sm_clock_mhz"]
    assert schema["generic_inputs"] == ["feat_sm_active", "sm_ratio"]


def test_table_keeps_every_row_once() -> None:
    sweeps = synthetic_sweeps(n_programs=3, variants=3)
    table = build_training_table(sweeps, PATTERN)
    keys = table[["sku", "workload", "sm_clock_mhz", "mem_clock_mhz"]]
    assert not keys.duplicated().any()
    assert set(map(tuple, keys.to_numpy().tolist())) == set(
        map(tuple, sweeps[["sku", "workload", "sm_clock_mhz", "mem_clock_mhz"]].to_numpy().tolist())
    )
    assert isinstance(table, pd.DataFrame)


def _three_skus() -> pd.DataFrame:
    """sim-a: 6 programs with counters; sim-b: 2 programs with counters; sim-c: 6 programs without counters."""
    no_counters = synthetic_sweeps(sku="sim-c", seed=3)
    no_counters[list(FEATURE_NAMES)] = np.nan
    sweeps = pd.concat(
        [synthetic_sweeps(sku="sim-a"), synthetic_sweeps(n_programs=2, sku="sim-b", seed=2), no_counters]
    )
    return build_training_table(sweeps, PATTERN)


def test_coverage_lists_every_sku_and_why_the_untrainable_ones_are_skipped() -> None:
    models = {"bundles": ["sim-a", "generic"], "generic_train_skus": ["sim-a", "sim-b"], "min_groups": 3}
    coverage = sku_coverage(_three_skus(), models)
    assert sorted(coverage) == ["sim-a", "sim-b", "sim-c"]
    assert coverage["sim-a"]["trainable"] and coverage["sim-a"]["skipped_because"] is None
    assert coverage["sim-a"]["bundled"] and coverage["sim-a"]["generic_training"]
    assert coverage["sim-a"]["workloads"] == 12 and coverage["sim-a"]["workloads_with_counters"] == 12
    assert not coverage["sim-b"]["trainable"]
    assert "2 workload groups, fewer than models.min_groups=3" in coverage["sim-b"]["skipped_because"]
    assert coverage["sim-b"]["generic_training"]  # few groups still teach the cross-SKU model
    assert not coverage["sim-c"]["trainable"] and "no counters" in coverage["sim-c"]["skipped_because"]
    assert coverage["sim-c"]["workloads_with_counters"] == 0 and not coverage["sim-c"]["bundled"]


@pytest.mark.parametrize(
    ("models", "message"),
    [
        (
            {"bundles": ["sim-c"], "generic_train_skus": ["sim-a"], "min_groups": 3},
            r"models\.bundles: SKU 'sim-c' cannot be trained \(no counters",
        ),
        (
            {"bundles": ["sim-b"], "generic_train_skus": ["sim-a"], "min_groups": 3},
            r"models\.bundles: SKU 'sim-b' cannot be trained \(2 workload groups",
        ),
        (
            {"bundles": ["sim-a"], "generic_train_skus": ["sim-a", "sim-c"], "min_groups": 3},
            r"models\.generic_train_skus: SKU 'sim-c' has no counters",
        ),
    ],
)
def test_a_listed_sku_that_cannot_be_trained_is_an_error_naming_it(models: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        sku_coverage(_three_skus(), models)
