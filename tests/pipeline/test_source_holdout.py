"""The source_holdout stage's checks: which pairs it accepts and which splits it refuses, by name."""

from __future__ import annotations

import pandas as pd
import pytest

from gpoeo_pipeline.source_holdout import held_out_pairs, split
from gpoeo_rt.features import FEATURE_NAMES


def _table() -> pd.DataFrame:
    rows = []
    for source, groups in (("lab-a", ["p1", "p2", "p3", "p4", "p5", "p6"]), ("lab-b", ["q1", "q2"])):
        for group in groups:
            for sm in (1000.0, 1500.0):
                rows.append(
                    {
                        "sku": "gpu-x",
                        "source": source,
                        "workload": f"{group}/k/input0",
                        "group": group,
                        "ref": sm == 1500.0,
                        **dict.fromkeys(FEATURE_NAMES, 0.5),
                    }
                )
    return pd.DataFrame(rows)


def test_pairs_must_be_a_list_of_sku_source_pairs() -> None:
    assert held_out_pairs([["gpu-x", "lab-b"]]) == [("gpu-x", "lab-b")]
    for bad in (None, "gpu-x", [["gpu-x"]], [["gpu-x", 3]]):
        with pytest.raises(ValueError, match=r"source_holdout\.held_out"):
            held_out_pairs(bad)


def test_a_source_is_held_out_only_when_the_others_can_be_trained_on() -> None:
    train, test = split(_table(), "gpu-x", "lab-b", min_groups=5)
    assert set(train["source"]) == {"lab-a"} and set(test["source"]) == {"lab-b"}
    with pytest.raises(ValueError, match=r"\[gpu-x, lab-a\].*2 workload groups"):
        split(_table(), "gpu-x", "lab-a", min_groups=5)
    with pytest.raises(ValueError, match=r"\[gpu-x, lab-c\].*no rows of source"):
        split(_table(), "gpu-x", "lab-c", min_groups=5)
