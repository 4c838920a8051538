"""Stage `source_holdout`: per-SKU bundles that never saw one of the SKU's data sources.

The per-SKU folds hold out workloads, but their models still learn from the same lab, tools and workload suite.
For a SKU with sweeps from two sources (P100: gpu-ddvfs and nv-dvfs-history; GTX 980 / 1080 Ti: dlbench-dvfs DL
jobs and nv-dvfs-history), each pair in `params.yaml: source_holdout.held_out` gets a bundle trained on the SKU's
other source only (hyperparameters chosen on those rows, as every fold does), so the bench's leave-one-source-out
set (`gpoeo-rt bench-suite --set leave-one-source-out`) judges those workloads by a model from another lab.

Outputs: data/eval/source-holdout/<sku>/folds/ (verified bundles + index.json: workload -> fold, as the evaluate
stage's folds), metrics/source_holdout.json (held-out MAPE per pair).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from gpoeo_pipeline.evaluate import FoldBundleWriter, error_metrics
from gpoeo_pipeline.headline import source_holdout_headline, write_headline
from gpoeo_pipeline.modeling import bundle_params, fit_targets, predict_ratio
from gpoeo_pipeline.params import load_section
from gpoeo_pipeline.train import MODEL_TARGETS, untrainable_reason

OUT_ROOT = Path("data/eval/source-holdout")


def held_out_pairs(raw: object) -> list[tuple[str, str]]:
    """`source_holdout.held_out` as (sku, source) pairs; anything else is an error naming the key."""
    if not isinstance(raw, list) or not all(
        isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p) for p in raw
    ):
        raise ValueError("params.yaml source_holdout.held_out: expected a list of [sku, source] pairs")
    return [(p[0], p[1]) for p in raw]


def split(table: pd.DataFrame, sku: str, source: str, min_groups: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(training rows: the SKU's other sources, held-out rows: this source), refused when either is unusable."""
    rows = table.loc[table["sku"] == sku]
    test = rows.loc[rows["source"] == source]
    train = rows.loc[rows["source"] != source]
    where = f"params.yaml source_holdout.held_out [{sku}, {source}]"
    if test.empty:
        raise ValueError(f"{where}: no rows of source {source!r} for SKU {sku!r}")
    reason = untrainable_reason(train, min_groups) if not train.empty else "no rows from another source"
    if reason is not None:
        raise ValueError(f"{where}: the other sources cannot be trained on ({reason})")
    return train.reset_index(drop=True), test.reset_index(drop=True)


def main() -> None:
    pairs = held_out_pairs(load_section("source_holdout").get("held_out"))
    models_params = load_section("models")
    schema = json.loads(Path("data/processed/feature_schema.json").read_text())
    inputs = list(schema["sku_inputs"])
    table = pd.read_parquet("data/processed/features.parquet")
    sweeps = pd.read_parquet("data/processed/sweeps.parquet")
    opset = int(load_section("export")["opset"])
    splits = {pair: split(table, *pair, int(models_params["min_groups"])) for pair in pairs}  # all checks first
    report: dict[str, Any] = {}
    writers: dict[str, FoldBundleWriter] = {}
    for (sku, source), (train, test) in splits.items():
        xgb_params = bundle_params(load_section("xgb"), sku)
        time_model, power_model = fit_targets(
            [(train, MODEL_TARGETS["time"]), (train, MODEL_TARGETS["power"])], inputs, xgb_params
        )
        if sku not in writers:
            writers[sku] = FoldBundleWriter(
                OUT_ROOT / sku / "folds", f"{sku}-source-holdout", inputs, sweeps, "workload", opset
            )
        writers[sku](source, time_model, power_model, test)
        predicted = test.assign(
            pred_time_ratio=predict_ratio(time_model, test), pred_power_ratio=predict_ratio(power_model, test)
        )
        report[f"{sku}/{source}"] = {
            "trained_on_workloads": int(train["workload"].nunique()),
            "held_out_workloads": int(test["workload"].nunique()),
            **{k: round(v, 2) for k, v in error_metrics(predicted, "pred_time_ratio", "pred_power_ratio").items()},
        }
        print(f"source_holdout {sku} without {source}: {report[f'{sku}/{source}']}")
    for writer in writers.values():
        writer.write_index()
    Path("metrics").mkdir(exist_ok=True)
    Path("metrics/source_holdout.json").write_text(json.dumps(report, indent=2) + "\n")
    write_headline("source_holdout", source_holdout_headline(report))


if __name__ == "__main__":
    main()
