"""Export and bundle: ONNX must match XGBoost, and a bundle that does not verify is never accepted."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import xgboost as xgb

from gpoeo_pipeline.export import ExportMismatchError, booster_to_onnx, onnx_predict, verify
from gpoeo_rt.inputs import BASE_INPUTS
from gpoeo_rt.prediction.bundle import BundleError, sha256_file, verify_bundle


def _booster(seed: int, n_inputs: int = 4) -> tuple[xgb.Booster, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 1, size=(300, n_inputs)).astype(np.float32)
    y = np.log(1.0 + x[:, 0] + 0.5 * x[:, 1] * x[:, 2])
    booster = xgb.train(
        {"max_depth": 4, "eta": 0.2, "seed": 0, "nthread": 1}, xgb.DMatrix(x, label=y), num_boost_round=40
    )
    return booster, x


def test_onnx_matches_xgboost_within_tolerance() -> None:
    booster, x = _booster(0)
    onnx_bytes = booster_to_onnx(booster, x.shape[1], opset=15)
    assert verify(booster, onnx_bytes, x, 1e-4, "test") < 1e-4
    assert onnx_predict(onnx_bytes, x[:3]).shape == (3,)


def test_a_mismatching_onnx_model_fails_the_check() -> None:
    booster, x = _booster(0)
    other, _ = _booster(1)
    with pytest.raises(ExportMismatchError, match="test/time"):
        verify(booster, booster_to_onnx(other, x.shape[1], opset=15), x, 1e-4, "test/time")


def _write_bundle(directory: Path, n_inputs: int = 4) -> Path:
    directory.mkdir(parents=True)
    booster, _ = _booster(0, n_inputs)
    for name in ("time", "power"):
        (directory / f"{name}.onnx").write_bytes(booster_to_onnx(booster, n_inputs, opset=15))
    manifest = {
        "schema_version": 1,
        "name": "sim-gpu",
        "nvml_names": ["Sim GPU"],
        "feature_names": list(BASE_INPUTS[:n_inputs]),
        "target_transform": "log",
        "reference_clocks": {"sm_clock_mhz": 1500.0, "mem_clock_mhz": 877.0},
        "clock_table": [[600.0, 877.0], [1500.0, 877.0]],
        "sha256": {f: sha256_file(directory / f) for f in ("time.onnx", "power.onnx")},
    }
    (directory / "manifest.json").write_text(json.dumps(manifest))
    return directory


def test_a_consistent_bundle_verifies(tmp_path: Path) -> None:
    manifest = verify_bundle(_write_bundle(tmp_path / "b"))
    assert manifest.name == "sim-gpu"
    assert manifest.clock_table[-1] == (1500.0, 877.0)


def test_a_tampered_model_is_refused_naming_file_and_bundle(tmp_path: Path) -> None:
    bundle = _write_bundle(tmp_path / "b")
    other, _ = _booster(3)
    (bundle / "power.onnx").write_bytes(booster_to_onnx(other, 4, opset=15))
    with pytest.raises(BundleError, match=r"b: sha256 of power.onnx"):
        verify_bundle(bundle)


def test_a_feature_schema_mismatch_is_refused(tmp_path: Path) -> None:
    bundle = _write_bundle(tmp_path / "b")
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["feature_names"] = manifest["feature_names"][:-1]
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match="takes 4 inputs, manifest lists 3"):
        verify_bundle(bundle)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m.pop("sha256"), "no 'sha256'"),
        (lambda m: m.update(schema_version=99), "schema_version 99"),
        (lambda m: m.update(target_transform="sqrt"), "unknown target_transform"),
    ],
)
def test_malformed_manifests_are_refused(tmp_path: Path, edit: object, message: str) -> None:
    bundle = _write_bundle(tmp_path / "b")
    manifest = json.loads((bundle / "manifest.json").read_text())
    edit(manifest)  # type: ignore[operator]
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match=message):
        verify_bundle(bundle)


def test_missing_files_are_refused(tmp_path: Path) -> None:
    bundle = _write_bundle(tmp_path / "b")
    (bundle / "time.onnx").unlink()
    with pytest.raises(BundleError, match=r"missing time\.onnx"):
        verify_bundle(bundle)
    shutil.rmtree(bundle)
    with pytest.raises(BundleError, match="no manifest"):
        verify_bundle(bundle)


def test_conversion_is_deterministic() -> None:
    booster, x = _booster(0)
    assert booster_to_onnx(booster, x.shape[1], opset=15) == booster_to_onnx(booster, x.shape[1], opset=15)
