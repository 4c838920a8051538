"""DVC stage `features`: one training row per (sku, workload, config), with inputs measured at the reference.

Inputs are the workload's `feat_*` counters at its reference row plus the config as ratios to the reference clocks
(and absolute MHz, used by per-SKU models only). Targets are time, power and energy ratios to the reference. The
input order is explicit and written to a schema file that the export and bundle stages (and so the runtime) follow.

Outputs: data/processed/features.parquet, data/processed/feature_schema.json.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

from gpoeo_pipeline.params import load_section
from gpoeo_rt.features import FEATURE_NAMES

TARGETS: tuple[str, ...] = ("time_ratio", "power_ratio", "energy_ratio")
ID_COLUMNS: tuple[str, ...] = ("sku", "source", "workload", "group", "sm_clock_mhz", "mem_clock_mhz", "ref")


def workload_group(workload: str, pattern: str) -> str:
    """The cross-validation group of a workload: variants of one program (input sizes) share a group, so a
    held-out program is never seen through a sibling input. `pattern`'s first capture group names it."""
    match = re.match(pattern, workload)
    if match is None or not match.group(1):
        raise ValueError(f"params.yaml features.group_pattern {pattern!r} does not match workload {workload!r}")
    return match.group(1)


def build_training_table(sweeps: pd.DataFrame, group_pattern: str) -> pd.DataFrame:
    """Join every sweep row with its workload's reference row; return ids, inputs and ratio targets."""
    ref_columns = [
        "sku",
        "workload",
        "sm_clock_mhz",
        "mem_clock_mhz",
        "time_s",
        "power_w",
        "energy_j",
        *FEATURE_NAMES,
    ]
    refs = sweeps.loc[sweeps["ref"], ref_columns].rename(
        columns={
            "sm_clock_mhz": "ref_sm_clock_mhz",
            "mem_clock_mhz": "ref_mem_clock_mhz",
            "time_s": "ref_time_s",
            "power_w": "ref_power_w",
            "energy_j": "ref_energy_j",
        }
    )
    if refs.duplicated(["sku", "workload"]).any():
        raise ValueError("sweeps: more than one ref row for some (sku, workload); run ingest's validation")
    rows = sweeps.drop(columns=list(FEATURE_NAMES)).merge(refs, on=["sku", "workload"], how="left", validate="m:1")
    missing_ref = rows["ref_time_s"].isna()
    if missing_ref.any():
        first = rows.loc[missing_ref].iloc[0]
        raise ValueError(f"sweeps: no ref row for sku={first['sku']} workload={first['workload']}")
    table = pd.DataFrame(
        {
            "sku": rows["sku"].astype("string"),
            "source": rows["source"].astype("string"),
            "workload": rows["workload"].astype("string"),
            "group": rows["workload"].map(lambda w: workload_group(str(w), group_pattern)).astype("string"),
            "sm_clock_mhz": rows["sm_clock_mhz"],
            "mem_clock_mhz": rows["mem_clock_mhz"],
            "ref": rows["ref"].astype(bool),
            "ref_sm_clock_mhz": rows["ref_sm_clock_mhz"],
            "ref_mem_clock_mhz": rows["ref_mem_clock_mhz"],
            "sm_ratio": rows["sm_clock_mhz"] / rows["ref_sm_clock_mhz"],
            "mem_ratio": rows["mem_clock_mhz"] / rows["ref_mem_clock_mhz"],
            **{name: rows[name] for name in FEATURE_NAMES},
            "time_ratio": rows["time_s"] / rows["ref_time_s"],
            "power_ratio": rows["power_w"] / rows["ref_power_w"],
            "energy_ratio": rows["energy_j"] / rows["ref_energy_j"],
        }
    )
    return table.sort_values(["sku", "workload", "sm_clock_mhz", "mem_clock_mhz"]).reset_index(drop=True)


def feature_schema(params: dict[str, object]) -> dict[str, object]:
    """The explicit input order of each model family; ONNX inputs f0..fN follow these lists."""
    generic_inputs = list(params["generic_inputs"])  # type: ignore[call-overload]
    sku_inputs = generic_inputs + list(params["sku_extra_inputs"])  # type: ignore[call-overload]
    return {
        "schema_version": 1,
        "sku_inputs": sku_inputs,
        "generic_inputs": generic_inputs,
        "targets": {"time": "time_ratio", "power": "power_ratio"},
        "target_transform": "log",
        "group_pattern": params["group_pattern"],
    }


def main() -> None:
    params = load_section("features")
    sweeps = pd.read_parquet(params.get("sweeps", "data/processed/sweeps.parquet"))
    table = build_training_table(sweeps, str(params["group_pattern"]))
    out = Path("data/processed")
    out.mkdir(parents=True, exist_ok=True)
    table.to_parquet(out / "features.parquet", index=False)
    (out / "feature_schema.json").write_text(json.dumps(feature_schema(params), indent=2) + "\n")
    print(f"features: {len(table)} rows, {table['sku'].nunique()} SKUs, {table['group'].nunique()} workload groups")


if __name__ == "__main__":
    main()
