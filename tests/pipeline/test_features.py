import numpy as np
import pandas as pd
import pytest

from gpoeo_pipeline.features import build_training_table, feature_schema, workload_group
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
