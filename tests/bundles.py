"""Small real bundles (XGBoost -> ONNX) for runtime tests; time falls and power rises with the SM clock ratio."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import xgboost as xgb

from gpoeo_pipeline.export import booster_to_onnx
from gpoeo_rt.prediction.bundle import SEAL_KEY, manifest_seal, sha256_file

FEATURES = ("feat_sm_active", "feat_dram_active", "sm_ratio", "mem_ratio")


def _booster(target: str, n_inputs: int, seed: int) -> xgb.Booster:
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.3, 1.0, size=(400, n_inputs)).astype(np.float32)
    share, ratio = x[:, 0], x[:, 2]
    y = share / ratio + (1 - share) if target == "time" else 0.4 + 0.6 * ratio**2
    params = {"max_depth": 4, "eta": 0.3, "seed": 0, "nthread": 1}
    return xgb.train(params, xgb.DMatrix(x, label=np.log(y)), num_boost_round=60)


def write_bundle(
    directory: Path, name: str = "sim-gpu", nvml_names: tuple[str, ...] = ("Sim GPU",), seed: int = 0
) -> Path:
    directory.mkdir(parents=True)
    for target in ("time", "power"):
        onnx_bytes = booster_to_onnx(_booster(target, len(FEATURES), seed), len(FEATURES), opset=15)
        (directory / f"{target}.onnx").write_bytes(onnx_bytes)
    manifest = {
        "schema_version": 1,
        "name": name,
        "nvml_names": list(nvml_names),
        "feature_names": list(FEATURES),
        "target_transform": "log",
        "reference_clocks": {"sm_clock_mhz": 1500.0, "mem_clock_mhz": 877.0} if name != "generic" else None,
        "clock_table": [[600.0, 877.0], [1500.0, 877.0]] if name != "generic" else [],
        "sha256": {f: sha256_file(directory / f) for f in ("time.onnx", "power.onnx")},
    }
    manifest[SEAL_KEY] = manifest_seal(manifest)
    (directory / "manifest.json").write_text(json.dumps(manifest))
    return directory


def rewrite_manifest(bundle: Path, manifest: dict[str, object]) -> None:
    """Write an edited manifest back, sealed again (as the pipeline would have written it)."""
    manifest[SEAL_KEY] = manifest_seal(manifest)
    (bundle / "manifest.json").write_text(json.dumps(manifest))
