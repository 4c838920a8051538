"""DVC stage `features`: one training row per (sku, workload, config), with inputs measured at the reference.

Inputs are the workload's `feat_*` counters at its reference row plus the config as ratios to the reference clocks
(and absolute MHz, used by per-SKU models only), and the derived inputs params.yaml `features.derived_inputs`
declares (closed-form functions of those, `gpoeo_rt.inputs`: the same code computes them in the runtime). Targets
are time, power and energy ratios to the reference. The input order is explicit and written to a schema file that
the export and bundle stages (and so the runtime) follow.

It also reports, per SKU of the sweeps, whether a model can be trained on it (metrics/features.json): a SKU without
counters at its reference rows, or with fewer workload groups than `models.min_groups`, is listed with the reason
and skipped; listing such a SKU in `models.bundles` (or one without counters in `models.generic_train_skus`) is an
error naming it, so no model is trained on workloads it cannot tell apart.

Outputs: data/processed/features.parquet, data/processed/feature_schema.json, metrics/features.json.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpoeo_pipeline.headline import features_headline, write_headline
from gpoeo_pipeline.params import load_section
from gpoeo_pipeline.train import untrainable_reason
from gpoeo_rt.features import FEATURE_NAMES
from gpoeo_rt.inputs import BASE_INPUTS, DERIVED_INPUTS, UnknownInputError, check_input_names, input_columns

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


def model_inputs(params: dict[str, Any]) -> dict[str, list[str]]:
    """The input lists of the two model families, from params.yaml `features`: generic = `generic_inputs` then
    `derived_inputs.generic`; per SKU = `generic_inputs`, `sku_extra_inputs`, then `derived_inputs.sku`. Every name
    must be one the runtime can compute (`gpoeo_rt.inputs`), else a ValueError naming it and params.yaml."""
    derived = params.get("derived_inputs") or {}
    if not isinstance(derived, dict) or set(derived) - {"generic", "sku"}:
        raise ValueError(f"params.yaml features.derived_inputs: a mapping with keys generic and sku, got {derived!r}")
    lists = {family: list(derived.get(family) or []) for family in ("generic", "sku")}
    for family, names in lists.items():
        where = f"params.yaml features.derived_inputs.{family}"
        not_derived = [name for name in names if name not in DERIVED_INPUTS]
        try:
            check_input_names(names, where)
        except UnknownInputError as exc:
            raise ValueError(str(exc)) from exc
        if not_derived:
            raise ValueError(f"{where}: {not_derived} are not derived inputs (known: {sorted(DERIVED_INPUTS)})")
    generic_inputs = list(params["generic_inputs"]) + lists["generic"]
    sku_inputs = list(params["generic_inputs"]) + list(params["sku_extra_inputs"]) + lists["sku"]
    for key, names in (("generic_inputs", generic_inputs), ("sku_inputs", sku_inputs)):
        try:
            check_input_names(names, f"params.yaml features ({key})")
        except UnknownInputError as exc:
            raise ValueError(str(exc)) from exc
        if len(set(names)) != len(names):
            raise ValueError(f"params.yaml features: {key} lists an input twice: {names}")
    return {"generic_inputs": generic_inputs, "sku_inputs": sku_inputs}


def add_derived_inputs(table: pd.DataFrame, names: list[str]) -> pd.DataFrame:
    """`table` with a column for every derived input in `names`, computed by `gpoeo_rt.inputs.input_columns` (the
    runtime's definition) from the table's counters and clock ratios: the pipeline's only place that computes them."""
    wanted = [name for name in dict.fromkeys(names) if name in DERIVED_INPUTS]
    if not wanted:
        return table
    base = {name: table[name].to_numpy(np.float64) for name in BASE_INPUTS}
    columns = input_columns(wanted, base, "params.yaml features")
    return table.assign(**columns)


def feature_schema(params: dict[str, Any]) -> dict[str, object]:
    """The explicit input order of each model family; ONNX inputs f0..fN follow these lists."""
    inputs = model_inputs(params)
    return {
        "schema_version": 1,
        "sku_inputs": inputs["sku_inputs"],
        "generic_inputs": inputs["generic_inputs"],
        "derived_inputs": {
            name: DERIVED_INPUTS[name].formula
            for name in dict.fromkeys(inputs["generic_inputs"] + inputs["sku_inputs"])
            if name in DERIVED_INPUTS
        },
        "targets": {"time": "time_ratio", "power": "power_ratio"},
        "target_transform": "log",
        "group_pattern": params["group_pattern"],
    }


def sku_coverage(table: pd.DataFrame, models: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per SKU of `table`: its rows, workloads and workload groups, how many workloads carry counters at their
    reference row, whether a model can be trained on it (`trainable`, else `skipped_because`), and whether
    params.yaml `models` uses it. Raises ValueError, naming the SKU and the params key, when `models.bundles` lists
    a SKU that cannot be trained or `models.generic_train_skus` lists one without counters."""
    min_groups = int(models["min_groups"])
    coverage: dict[str, dict[str, Any]] = {}
    for sku, rows in table.groupby("sku", sort=True, observed=True):
        name = str(sku)
        with_counters = int(rows.loc[rows["ref"], list(FEATURE_NAMES)].notna().any(axis=1).sum())
        reason = untrainable_reason(rows, min_groups)
        coverage[name] = {
            "rows": len(rows),
            "workloads": int(rows["workload"].nunique()),
            "workload_groups": int(rows["group"].nunique()),
            "workloads_with_counters": with_counters,
            "trainable": reason is None,
            "skipped_because": reason,
            "bundled": name in models["bundles"],
            "generic_training": name in models["generic_train_skus"],
        }
        if reason is not None and name in models["bundles"]:
            raise ValueError(f"params.yaml models.bundles: SKU {name!r} cannot be trained ({reason}); remove it")
        if with_counters == 0 and name in models["generic_train_skus"]:
            raise ValueError(f"params.yaml models.generic_train_skus: SKU {name!r} has {reason}; remove it")
    return coverage


def main() -> None:
    params = load_section("features")
    sweeps = pd.read_parquet(params.get("sweeps", "data/processed/sweeps.parquet"))
    schema = feature_schema(params)
    table = build_training_table(sweeps, str(params["group_pattern"]))
    inputs = model_inputs(params)
    table = add_derived_inputs(table, inputs["generic_inputs"] + inputs["sku_inputs"])
    coverage = sku_coverage(table, load_section("models"))  # before writing: a refused SKU leaves no outputs
    out = Path("data/processed")
    out.mkdir(parents=True, exist_ok=True)
    table.to_parquet(out / "features.parquet", index=False)
    (out / "feature_schema.json").write_text(json.dumps(schema, indent=2) + "\n")
    Path("metrics").mkdir(exist_ok=True)
    Path("metrics/features.json").write_text(json.dumps({"skus": coverage}, indent=2) + "\n")
    write_headline("features", features_headline(coverage))
    print(f"features: {len(table)} rows, {table['sku'].nunique()} SKUs, {table['group'].nunique()} workload groups")
    for sku, entry in coverage.items():
        if not entry["trainable"]:
            print(f"features: skipped SKU {sku}: {entry['skipped_because']}")


if __name__ == "__main__":
    main()
