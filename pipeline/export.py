"""DVC stage `export`: XGBoost boosters to ONNX (onnxmltools), verified against XGBoost on every training row.

Inputs are float32 named `input` with features f0..fN in the schema's order; the output is log(ratio). The stage
fails, writing nothing, if onnxruntime and XGBoost disagree by more than `max_rel_diff` on any row.

Usage: python -m gpoeo_pipeline.export <bundle-name>
Outputs: data/onnx/<name>/time.onnx, power.onnx, export_check.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pandas as pd
import xgboost as xgb
from onnxmltools.convert import convert_xgboost
from onnxmltools.convert.common.data_types import FloatTensorType

from gpoeo_pipeline.params import load_section
from gpoeo_pipeline.train import MODEL_TARGETS, select_training_rows


class ExportMismatchError(RuntimeError):
    """ONNX and XGBoost predictions differ beyond the tolerance: the ONNX model must not be shipped."""


def booster_to_onnx(booster: xgb.Booster, n_inputs: int, opset: int) -> bytes:
    """Convert a booster whose trees are exactly the ones to ship (train saved it at the early-stopped round)."""
    booster.feature_names = None  # the converter needs f0..fN names
    # A fixed graph name: onnxmltools otherwise draws a random one, so identical models would get different sha256.
    model = convert_xgboost(
        booster, name="gpoeo_xgboost", initial_types=[("input", FloatTensorType([None, n_inputs]))], target_opset=opset
    )
    return bytes(model.SerializeToString())


def onnx_predict(onnx_bytes: bytes, x: np.ndarray) -> np.ndarray:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(onnx_bytes, options, providers=["CPUExecutionProvider"])
    (output,) = session.run(None, {"input": np.ascontiguousarray(x, dtype=np.float32)})
    return np.asarray(output, dtype=np.float64).reshape(-1)


def verify(booster: xgb.Booster, onnx_bytes: bytes, x: np.ndarray, max_rel_diff: float, what: str) -> float:
    """Largest relative difference of the predicted ratios (exp of the log outputs); raise above the tolerance."""
    expected = np.exp(booster.predict(xgb.DMatrix(x)).astype(np.float64))
    got = np.exp(onnx_predict(onnx_bytes, x))
    rel = np.abs(got - expected) / np.abs(expected)
    worst = float(rel.max()) if rel.size else 0.0
    if not worst <= max_rel_diff:
        row = int(np.argmax(rel))
        raise ExportMismatchError(
            f"{what}: ONNX differs from XGBoost by {worst:.3g} (> {max_rel_diff:g}) relative at row {row}: "
            f"{got[row]!r} vs {expected[row]!r}"
        )
    return worst


def main() -> None:
    name = sys.argv[1]
    params = load_section("export")
    schema = json.loads(Path("data/processed/feature_schema.json").read_text())
    table = pd.read_parquet("data/processed/features.parquet")
    frame = select_training_rows(table, name, load_section("models"))
    inputs: list[str] = list(schema["generic_inputs"] if name == "generic" else schema["sku_inputs"])
    x = frame[inputs].to_numpy(np.float32)

    out_dir = Path(f"data/onnx/{name}")
    out_dir.mkdir(parents=True, exist_ok=True)
    check: dict[str, Any] = {"bundle": name, "rows_checked": len(frame), "max_rel_diff": {}}
    converted: dict[str, bytes] = {}
    for model_name in MODEL_TARGETS:
        booster = xgb.Booster()
        booster.load_model(Path(f"data/models/{name}/{model_name}.json"))
        onnx_bytes = booster_to_onnx(booster, len(inputs), int(params["opset"]))
        check["max_rel_diff"][model_name] = verify(
            booster, onnx_bytes, x, float(params["max_rel_diff"]), f"{name}/{model_name}"
        )
        converted[model_name] = onnx_bytes
    # Written only once every model has passed, so a failed check leaves no half-exported bundle behind.
    for model_name, onnx_bytes in converted.items():
        (out_dir / f"{model_name}.onnx").write_bytes(onnx_bytes)
    (out_dir / "export_check.json").write_text(json.dumps(check, indent=2) + "\n")
    print(f"export {name}: max relative difference {check['max_rel_diff']}")


if __name__ == "__main__":
    main()
