"""The runtime and the pipeline build the same model inputs, derived ones included, for the same rows."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gpoeo_pipeline.features import add_derived_inputs, build_training_table, feature_schema
from gpoeo_rt.features import FEATURE_NAMES
from gpoeo_rt.inputs import CLOCK_INPUTS, DERIVED_INPUTS
from gpoeo_rt.prediction.bundle import Manifest
from gpoeo_rt.prediction.predictor import design_matrix
from tests.pipeline.synthetic import synthetic_sweeps

PATTERN = "^([^/]+)"
EVERY_INPUT = [*FEATURE_NAMES, *CLOCK_INPUTS, *DERIVED_INPUTS]


def _sweeps() -> pd.DataFrame:
    """Synthetic sweeps with a second memory clock (so the memory terms vary) and one workload without counters."""
    sweeps = synthetic_sweeps(n_programs=3, variants=2)
    low_mem = sweeps.loc[~sweeps["ref"]].assign(mem_clock_mhz=705.0)
    sweeps = pd.concat([sweeps, low_mem], ignore_index=True)
    sweeps.loc[sweeps["workload"] == "prog2/v1", ["feat_sm_active", "feat_dram_active"]] = np.nan
    return sweeps


def _manifest(names: list[str], path: Path) -> Manifest:
    return Manifest(
        path=path,
        name="parity",
        nvml_names=(),
        feature_names=tuple(names),
        target_transform="log",
        reference_sm_clock_mhz=None,
        reference_mem_clock_mhz=None,
        clock_table=(),
        sha256={},
        raw={},
    )


@pytest.mark.parametrize("names", [EVERY_INPUT, list(reversed(EVERY_INPUT)), ["roofline_time", "sm_ratio"]])
def test_runtime_and_pipeline_input_matrices_are_identical(names: list[str], tmp_path: Path) -> None:
    table = add_derived_inputs(build_training_table(_sweeps(), PATTERN), names)
    manifest = _manifest(names, tmp_path)
    checked = 0
    for _, rows in table.groupby("workload", sort=True):
        ref = rows.loc[rows["ref"]].iloc[0]
        # What the runtime has: the counters measured at the reference (None when unreadable) and the clock grid.
        counters = {name: (None if pd.isna(ref[name]) else float(ref[name])) for name in FEATURE_NAMES}
        runtime = design_matrix(
            manifest,
            counters,
            rows["sm_clock_mhz"].to_numpy(),
            rows["mem_clock_mhz"].to_numpy(),
            float(ref["sm_clock_mhz"]),
            float(ref["mem_clock_mhz"]),
        )
        pipeline = rows[names].to_numpy(np.float32)  # what train/evaluate/export feed the models
        np.testing.assert_array_equal(runtime, pipeline)  # bit-identical; NaN where NaN
        checked += len(rows)
    assert checked == len(table)
    assert np.isnan(table.loc[table["workload"] == "prog2/v1", "roofline_time"]).all()
    if "memory_term" in names:
        assert table["memory_term"].abs().max() > 0  # the second memory clock reaches the memory terms


def test_derived_formulas() -> None:
    table = add_derived_inputs(build_training_table(_sweeps(), PATTERN), list(DERIVED_INPUTS))
    row = table.loc[
        (table["workload"] == "prog0/v0") & (table["sm_clock_mhz"] == 600) & (table["mem_clock_mhz"] == 705)
    ]
    r = row.iloc[0]
    sm, dram, s, m = r["feat_sm_active"], r["feat_dram_active"], 600 / 1500, 705 / 877
    assert r["inv_sm_ratio"] == pytest.approx(1 / s)
    assert r["inv_mem_ratio"] == pytest.approx(1 / m)
    assert r["compute_term"] == pytest.approx(sm * (1 / s - 1))
    assert r["memory_term"] == pytest.approx(dram * (1 / m - 1))
    assert r["roofline_time"] == pytest.approx(max(sm / s, dram / m) + 1 - max(sm, dram))
    assert r["sm_ratio_sq"] == pytest.approx(s**2)
    refs = table.loc[table["ref"] & table["feat_sm_active"].notna()]
    assert np.allclose(refs[["compute_term", "memory_term"]], 0.0) and np.allclose(refs["roofline_time"], 1.0)


def test_schema_appends_derived_inputs_per_family_and_records_formulas() -> None:
    params = {
        "generic_inputs": ["feat_sm_active", "sm_ratio"],
        "sku_extra_inputs": ["sm_clock_mhz"],
        "derived_inputs": {"generic": ["roofline_time"], "sku": ["compute_term", "inv_sm_ratio"]},
        "group_pattern": PATTERN,
    }
    schema = feature_schema(params)
    assert schema["generic_inputs"] == ["feat_sm_active", "sm_ratio", "roofline_time"]
    assert schema["sku_inputs"] == ["feat_sm_active", "sm_ratio", "sm_clock_mhz", "compute_term", "inv_sm_ratio"]
    assert schema["derived_inputs"] == {
        k: DERIVED_INPUTS[k].formula for k in ("roofline_time", "compute_term", "inv_sm_ratio")
    }


@pytest.mark.parametrize(
    ("derived", "message"),
    [
        ({"sku": ["bogus_term"]}, r"params.yaml features.derived_inputs.sku: model input 'bogus_term'"),
        ({"generic": ["sm_ratio"]}, r"derived_inputs.generic: \['sm_ratio'\] are not derived inputs"),
        ({"sku": ["compute_term", "compute_term"]}, "lists an input twice"),
        ({"other": ["compute_term"]}, "keys generic and sku"),
    ],
)
def test_unknown_or_misplaced_derived_inputs_are_errors_naming_them(
    derived: dict[str, list[str]], message: str
) -> None:
    params = {
        "generic_inputs": ["feat_sm_active", "sm_ratio"],
        "sku_extra_inputs": ["sm_clock_mhz"],
        "derived_inputs": derived,
        "group_pattern": PATTERN,
    }
    with pytest.raises(ValueError, match=message):
        feature_schema(params)
