"""DVC stage `bundle`: assemble `models/<name>/` (time.onnx, power.onnx, manifest.json) for the runtime.

The bundle is written to a temporary directory, checked with the runtime's own `verify_bundle`, and only then moved
into place: a bundle whose manifest, sha256 or feature schema does not match is never written.

Usage: python -m gpoeo_pipeline.bundle <bundle-name>
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd

from gpoeo_pipeline.params import load_section
from gpoeo_pipeline.train import GENERIC
from gpoeo_rt.prediction.bundle import (
    MANIFEST_NAME,
    MODEL_FILES,
    SCHEMA_VERSION,
    SEAL_KEY,
    manifest_seal,
    sha256_file,
    verify_bundle,
)

PIPELINE_ROOT = Path(__file__).resolve().parent


def pipeline_sources_sha256() -> str:
    """sha256 over the pipeline's Python sources (relative path and content, in path order): the code that built
    the bundle, identical on every rerun from the same sources. (A git revision cannot be: the commit that holds
    the manifest is made after it, so a rebuild from a clean clone would never reproduce the committed file.)"""
    digest = hashlib.sha256()
    for path in sorted(PIPELINE_ROOT.rglob("*.py")):
        digest.update(path.relative_to(PIPELINE_ROOT).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def clock_facts(table: pd.DataFrame, name: str) -> tuple[dict[str, float] | None, list[list[float]]]:
    """Reference clocks and measured (sm, mem) pairs of a SKU; the generic bundle has neither (the runtime uses the
    GPU's own clock table and default clocks)."""
    if name == GENERIC:
        return None, []
    rows = table.loc[table["sku"] == name]
    refs = rows.loc[rows["ref"], ["sm_clock_mhz", "mem_clock_mhz"]]
    ref_sm = float(refs["sm_clock_mhz"].mode().iloc[0])
    ref_mem = float(refs["mem_clock_mhz"].mode().iloc[0])
    pairs = rows[["sm_clock_mhz", "mem_clock_mhz"]].drop_duplicates().sort_values(["mem_clock_mhz", "sm_clock_mhz"])
    return {"sm_clock_mhz": ref_sm, "mem_clock_mhz": ref_mem}, pairs.to_numpy().tolist()


def evaluation_summary(metrics: dict[str, Any]) -> dict[str, Any]:
    overall = metrics["overall"]["xgboost"]
    return {
        "cv": metrics["cv"],
        "mape_time_pct": overall["mape_time_pct"],
        "mape_power_pct": overall["mape_power_pct"],
        "mape_energy_pct": overall["mape_energy_pct"],
        "energy_at_5pct": overall["energy_at_5pct"],
    }


def build_manifest(name: str, params: dict[str, Any]) -> dict[str, Any]:
    schema = json.loads(Path("data/processed/feature_schema.json").read_text())
    info = json.loads(Path(f"data/models/{name}/train_info.json").read_text())
    metrics = json.loads(Path(f"metrics/{name}.json").read_text())
    table = pd.read_parquet("data/processed/features.parquet")
    feature_names = list(schema["generic_inputs"] if name == GENERIC else schema["sku_inputs"])
    if feature_names != info["inputs"]:
        raise ValueError(
            f"data/models/{name}/train_info.json: inputs {info['inputs']} differ from the schema {feature_names}"
        )
    reference, clock_table = clock_facts(table, name)
    nvml_names = params["nvml_names"].get(name, [])
    if name != GENERIC and not nvml_names:
        raise ValueError(f"params.yaml bundle.nvml_names: no NVML device names for SKU {name!r}")
    return {
        "schema_version": SCHEMA_VERSION,
        "name": name,
        "nvml_names": nvml_names,
        "feature_names": feature_names,
        # Formulas of the derived inputs among feature_names (documentation: the runtime computes them by name, with
        # gpoeo_rt.inputs, the code the pipeline used).
        "derived_inputs": {k: v for k, v in schema.get("derived_inputs", {}).items() if k in feature_names},
        "target_transform": schema["target_transform"],
        "targets": {"time": "time_ratio", "power": "power_ratio"},
        "reference_clocks": reference,
        "clock_table": clock_table,
        "trained_on_skus": info["skus"],
        "training_rows": info["rows"],
        "training_data_sha256": info["training_data_sha256"],
        "boosting_rounds": {k: v["rounds"] for k, v in info["models"].items()},
        "hyperparameters": {k: v.get("chosen", {}) for k, v in info["models"].items()},
        "pipeline_sources_sha256": pipeline_sources_sha256(),
        "evaluation": evaluation_summary(metrics),
    }


def write_verified_bundle(target: Path, models: dict[str, bytes], manifest: dict[str, Any]) -> dict[str, Any]:
    """Write a bundle directory (ONNX files + manifest with their sha256) atomically: it is staged beside `target`,
    checked with the runtime's own `verify_bundle`, and only then moved into place. Returns the full manifest."""
    manifest = {**manifest, "sha256": {}}
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{target.name}-") as tmp:
        staging = Path(tmp) / target.name
        staging.mkdir()
        for model_name, file_name in MODEL_FILES.items():
            (staging / file_name).write_bytes(models[model_name])
            manifest["sha256"][file_name] = sha256_file(staging / file_name)
        manifest[SEAL_KEY] = manifest_seal(manifest)  # last: it covers every field above
        (staging / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n")
        verify_bundle(staging, sealed=True)  # the runtime's own acceptance check
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    return manifest


def main() -> None:
    name = sys.argv[1]
    params = load_section("bundle")
    onnx_dir = Path(f"data/onnx/{name}")
    manifest = build_manifest(name, params)
    models = {model_name: (onnx_dir / file_name).read_bytes() for model_name, file_name in MODEL_FILES.items()}
    target = Path(params["out_dir"]) / name
    manifest = write_verified_bundle(target, models, manifest)
    n_features, n_clocks = len(manifest["feature_names"]), len(manifest["clock_table"])
    print(f"bundle {name}: {target} ({n_features} features, {n_clocks} clock pairs)")


if __name__ == "__main__":
    main()
