"""The domain-shift report places a new GPU's counters within the training SKUs' reference rows."""

import math

import pandas as pd

from gpoeo_pipeline.domain_shift import feature_shift
from gpoeo_rt.features import FEATURE_NAMES


def _frame(rows: list[dict[str, float]], workloads: list[str]) -> pd.DataFrame:
    frame = pd.DataFrame([{name: row.get(name, math.nan) for name in FEATURE_NAMES} for row in rows])
    frame["workload"] = workloads
    return frame


def test_values_are_placed_and_out_of_range_ones_counted() -> None:
    training = _frame(
        [{"feat_sm_active": v, "feat_dram_active": 0.5} for v in (0.2, 0.4, 0.6, 0.8)], ["a", "b", "c", "d"]
    )
    target = _frame([{"feat_sm_active": 0.5, "feat_dram_active": 0.9, "feat_tensor_active": 0.3}], ["new/x"])
    shift = feature_shift(training, target)
    sm = shift["features"]["feat_sm_active"]
    assert sm["min"] == 0.2 and sm["max"] == 0.8
    assert sm["workloads"]["new/x"] == {"value": 0.5, "percentile": 50.0, "outside_training_range": False}
    assert shift["features"]["feat_dram_active"]["workloads"]["new/x"]["outside_training_range"] is True
    # Never reported by the training SKUs: not compared, flagged as unseen.
    assert shift["features"]["feat_tensor_active"]["workloads"]["new/x"]["note"] == "unseen in training"
    assert shift["features"]["feat_fp16_active"]["workloads"]["new/x"]["note"] == "not measured on this GPU"
    assert (shift["values_compared"], shift["values_outside_training_range"]) == (2, 1)
    assert shift["share_outside_training_range"] == 0.5
