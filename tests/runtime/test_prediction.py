import sys
from pathlib import Path

import numpy as np
import pytest

from gpoeo_rt.prediction.bundle import BundleError, verify_bundle
from gpoeo_rt.prediction.predictor import Predictor
from gpoeo_rt.prediction.selection import select_bundle
from tests.bundles import rewrite_manifest, write_bundle


def test_one_call_predicts_the_whole_grid_in_the_manifest_order(tmp_path: Path) -> None:
    predictor = Predictor(verify_bundle(write_bundle(tmp_path / "b")))
    sm = np.arange(345.0, 1981.0, 15.0)  # an H200-like table: 110 SM clocks at two memory clocks
    grid_sm = np.concatenate([sm, sm])
    grid_mem = np.concatenate([np.full(sm.size, 3201.0), np.full(sm.size, 2201.0)])
    counters = {"feat_sm_active": 0.9, "feat_dram_active": 0.3, "feat_tensor_active": None}
    prediction = predictor.predict_grid(counters, grid_sm, grid_mem, 1980.0, 3201.0)
    assert prediction.time_ratio.shape == (220,)
    top = slice(0, sm.size)
    # A compute-bound workload: time falls and power rises as the SM clock goes up.
    assert prediction.time_ratio[top][0] > 1.5 * prediction.time_ratio[top][-1]
    assert prediction.power_ratio[top][-1] > prediction.power_ratio[top][0]
    assert np.allclose(prediction.energy_ratio, prediction.time_ratio * prediction.power_ratio)
    front = prediction.pareto_front()
    assert len(front) >= 2
    assert np.all(np.diff(prediction.time_ratio[front]) >= 0)
    assert np.all(np.diff(prediction.energy_ratio[front]) < 0)


def test_missing_counters_become_nan_inputs(tmp_path: Path) -> None:
    predictor = Predictor(verify_bundle(write_bundle(tmp_path / "b")))
    x = predictor.design_matrix({}, [1000.0], [877.0], 1500.0, 877.0)
    assert np.isnan(x[0, 0]) and np.isnan(x[0, 1])
    assert x[0, 2] == pytest.approx(1000 / 1500)


def test_the_matching_sku_bundle_wins_and_generic_is_the_fallback(tmp_path: Path) -> None:
    write_bundle(tmp_path / "sim-gpu", name="sim-gpu", nvml_names=("Sim GPU",))
    write_bundle(tmp_path / "generic", name="generic", nvml_names=())
    choice = select_bundle(tmp_path, "Sim GPU 80GB")
    assert choice.manifest.name == "sim-gpu"
    fallback = select_bundle(tmp_path, "NVIDIA H200")
    assert fallback.manifest.name == "generic"
    assert "NVIDIA H200" in fallback.reason and "sim-gpu" in fallback.reason


def test_a_corrupt_bundle_is_refused_not_skipped(tmp_path: Path) -> None:
    write_bundle(tmp_path / "sim-gpu")
    write_bundle(tmp_path / "generic", name="generic", nvml_names=())
    (tmp_path / "sim-gpu" / "time.onnx").write_bytes(b"not a model")
    with pytest.raises(BundleError, match=r"sim-gpu: sha256 of time\.onnx"):
        select_bundle(tmp_path, "Sim GPU")


def test_no_match_and_no_generic_is_a_clear_error(tmp_path: Path) -> None:
    write_bundle(tmp_path / "sim-gpu")
    with pytest.raises(BundleError, match="no generic bundle"):
        select_bundle(tmp_path, "NVIDIA H200")
    with pytest.raises(BundleError, match="not found"):
        select_bundle(tmp_path / "nowhere", "NVIDIA H200")


def test_a_bundle_with_an_input_the_runtime_cannot_compute_is_refused_naming_input_and_manifest(tmp_path: Path) -> None:
    import json

    bundle = write_bundle(tmp_path / "b")
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["feature_names"][1] = "bogus_term"
    rewrite_manifest(bundle, manifest)
    with pytest.raises(BundleError, match=r"b/manifest\.json: model input 'bogus_term' is not"):
        verify_bundle(bundle)
    # A manifest that got past verification some other way is refused before any prediction.
    from gpoeo_rt.prediction.bundle import parse_manifest

    with pytest.raises(BundleError, match=r"b/manifest\.json: model input 'bogus_term'"):
        Predictor(parse_manifest(bundle))


def test_derived_inputs_are_computed_from_counters_and_clocks(tmp_path: Path) -> None:
    from dataclasses import replace

    from gpoeo_rt.prediction.predictor import design_matrix

    manifest = replace(
        verify_bundle(write_bundle(tmp_path / "b")),
        feature_names=("compute_term", "roofline_time", "inv_mem_ratio", "feat_fp64_active"),
    )
    x = design_matrix(manifest, {"feat_sm_active": 0.8, "feat_dram_active": 0.5}, [750.0], [700.0], 1500.0, 875.0)
    assert x[0, 0] == pytest.approx(0.8 * (2.0 - 1.0))
    assert x[0, 1] == pytest.approx(max(0.8 / 0.5, 0.5 / 0.8) + 1 - 0.8)
    assert x[0, 2] == pytest.approx(1.25)
    assert np.isnan(x[0, 3])


def test_bundles_are_looked_for_where_every_kind_of_install_puts_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A venv, `pip install --user` and a system Python each put the wheel's models under another data root."""
    import sysconfig

    from gpoeo_rt.prediction import selection

    user_root = tmp_path / "home" / ".local"
    real_get_path = sysconfig.get_path

    def get_path(name: str, scheme: str | None = None, *args: object, **kwargs: object) -> str:
        if name == "data" and scheme is not None and scheme.endswith("_user"):
            return str(user_root)
        return real_get_path(name, scheme, *args, **kwargs) if scheme else real_get_path(name)

    monkeypatch.setattr(sysconfig, "get_path", get_path)
    monkeypatch.setenv("GPOEO_BUNDLES", str(tmp_path / "explicit"))
    dirs = selection.default_bundle_dirs()
    assert dirs[0] == tmp_path / "explicit"
    assert user_root / "share" / "gpoeo" / "models" in dirs
    assert Path(sys.prefix) / "share" / "gpoeo" / "models" in dirs
