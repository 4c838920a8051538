"""Run the model stages' entry points in order on a small synthetic sweep, as `dvc repro` would."""

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xgboost as xgb
import yaml

from gpoeo_pipeline import bundle, evaluate, export, features, train
from gpoeo_rt.features import FEATURE_NAMES
from gpoeo_rt.prediction.bundle import verify_bundle
from gpoeo_rt.prediction.predictor import Predictor
from tests.pipeline.synthetic import synthetic_sweeps

PARAMS = {
    "features": {
        "sweeps": "data/processed/sweeps.parquet",
        "group_pattern": "^([^/]+)",
        "generic_inputs": ["feat_sm_active", "feat_dram_active", "sm_ratio", "mem_ratio"],
        "sku_extra_inputs": ["sm_clock_mhz", "mem_clock_mhz"],
        "derived_inputs": {"generic": ["roofline_time"], "sku": ["compute_term", "inv_sm_ratio"]},
    },
    "models": {
        "bundles": ["sim-a", "generic"],
        "generic_train_skus": ["sim-a", "sim-b", "sim-c"],
        "min_groups": 3,
    },
    "xgb": {
        "n_estimators": 60,
        "early_stopping_splits": 2,
        "early_stopping_rounds": 10,
        "validation_fraction": 0.25,
        "early_stopping_key": "workload",
        "max_depth": 3,
        "max_depth_choices": [2, 3],
        "learning_rate": 0.2,
        "subsample": 1.0,
        "colsample_bytree": 1.0,
        "min_child_weight": 1,
        "reg_lambda": 1.0,
        "n_jobs": 1,
        "seed": 0,
        # The generic model stops early leave-one-SKU-out among its training SKUs, at a fixed depth.
        "generic": {"early_stopping_key": "sku", "early_stopping_splits": 0, "max_depth": 2},
    },
    "evaluate": {"workload_folds": 0, "program_folds": 0, "bounds": [0.05, 0.02], "plot_workloads": 4},
    "export": {"opset": 15, "max_rel_diff": 1.0e-4},
    "bundle": {"out_dir": "models", "nvml_names": {"sim-a": ["Sim GPU A"]}},
}


def _run(module: object, *args: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["stage", *args])
    module.main()  # type: ignore[attr-defined]


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(PARAMS))
    (tmp_path / "data/processed").mkdir(parents=True)
    sweeps = pd.concat(
        [
            synthetic_sweeps(n_programs=4, sku="sim-a", seed=1),
            synthetic_sweeps(n_programs=4, sku="sim-b", seed=2),
            synthetic_sweeps(n_programs=4, sku="sim-c", seed=3),
        ]
    )
    sweeps.to_parquet(tmp_path / "data/processed/sweeps.parquet", index=False)
    return tmp_path


def test_stages_build_a_verified_bundle_with_metrics_and_plots(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _run(features, monkeypatch=monkeypatch)
    coverage = json.loads((workdir / "metrics/features.json").read_text())["skus"]
    assert sorted(coverage) == ["sim-a", "sim-b", "sim-c"]
    assert coverage["sim-a"]["trainable"] and coverage["sim-a"]["bundled"]
    for name in ("sim-a", "generic"):
        for stage in (train, evaluate, export, bundle):
            _run(stage, name, monkeypatch=monkeypatch)

    manifest = verify_bundle(workdir / "models/sim-a")
    assert manifest.nvml_names == ("Sim GPU A",)
    assert manifest.reference_sm_clock_mhz == 1500.0
    assert manifest.feature_names == (
        "feat_sm_active",
        "feat_dram_active",
        "sm_ratio",
        "mem_ratio",
        "sm_clock_mhz",
        "mem_clock_mhz",
        "compute_term",
        "inv_sm_ratio",
    )
    assert manifest.raw["derived_inputs"] == {
        "compute_term": "feat_sm_active * (1 / sm_ratio - 1)",
        "inv_sm_ratio": "1 / sm_ratio",
    }
    generic = verify_bundle(workdir / "models/generic")
    assert generic.clock_table == ()
    assert generic.feature_names[-1] == "roofline_time"
    # The shipped bundle, run by the runtime, gives what the pipeline's models give on the same rows.
    table = pd.read_parquet(workdir / "data/processed/features.parquet")
    rows = table.loc[table["sku"] == "sim-a"]
    predictor = Predictor(manifest)
    booster = xgb.Booster()
    booster.load_model(workdir / "data/models/sim-a/time.json")
    for _, workload_rows in rows.groupby("workload"):
        ref = workload_rows.loc[workload_rows["ref"]].iloc[0]
        counters = {name: float(ref[name]) for name in FEATURE_NAMES}
        sm, mem = workload_rows["sm_clock_mhz"].to_numpy(), workload_rows["mem_clock_mhz"].to_numpy()
        x = predictor.design_matrix(counters, sm, mem, float(ref["sm_clock_mhz"]), float(ref["mem_clock_mhz"]))
        np.testing.assert_array_equal(x, workload_rows[list(manifest.feature_names)].to_numpy(np.float32))
        expected = np.exp(booster.predict(xgb.DMatrix(x)).astype(np.float64))
        got = predictor.predict_grid(counters, sm, mem, float(ref["sm_clock_mhz"]), float(ref["mem_clock_mhz"]))
        np.testing.assert_allclose(got.time_ratio, expected, rtol=1e-4)

    metrics = json.loads((workdir / "metrics/sim-a.json").read_text())
    assert metrics["cv"] == "leave-one-workload-out"
    assert metrics["folds"] == 8  # 4 programs x 2 variants
    assert 0 <= metrics["overall"]["xgboost"]["mape_time_pct"] < 50
    assert "program_holdout" in metrics
    # Leave-out fold bundles: every workload maps to a verified bundle whose models never saw it.
    index = json.loads((workdir / "data/eval/sim-a/folds/index.json").read_text())
    assert index["key"] == "workload"
    assert len(index["folds"]) == 8
    for workload, fold in index["folds"].items():
        fold_manifest = verify_bundle(workdir / "data/eval/sim-a/folds" / fold)
        assert workload in fold_manifest.raw["held_out"]
        assert fold_manifest.nvml_names == ()
    generic_index = json.loads((workdir / "data/eval/generic/folds/index.json").read_text())
    assert set(generic_index["folds"]) == {"sim-a", "sim-b", "sim-c"}
    generic_metrics = json.loads((workdir / "metrics/generic.json").read_text())
    assert set(generic_metrics["per_held_out_sku"]) == {"sim-a", "sim-b", "sim-c"}
    # The headline dvc lists: three figures per bundle, rounded, in the keys every headline file shares.
    head = json.loads((workdir / "metrics/headline/sim-a.json").read_text())
    assert set(head) == {"mape_energy_pct", "regret_pts", "over_bound_pct"}
    assert head["mape_energy_pct"] == round(metrics["overall"]["xgboost"]["mape_energy_pct"], 2)
    assert json.loads((workdir / "metrics/headline/features.json").read_text()) == {"skus": 3}
    # Hyperparameters chosen inside each fold and for the shipped models, recorded where they were chosen.
    assert sum(metrics["fold_choices"]["time"]["chosen"].values()) == 8
    assert set(metrics["fold_choices"]["time"]["chosen"]) <= {"max_depth=2", "max_depth=3"}
    assert generic_metrics["fold_choices"]["power"]["chosen"] == {"fixed": 3}
    info = json.loads((workdir / "data/models/sim-a/train_info.json").read_text())
    assert [c["settings"]["max_depth"] for c in info["models"]["time"]["candidates"]] == [2, 3]
    assert manifest.raw["hyperparameters"]["time"] == info["models"]["time"]["chosen"]
    # Provenance that a rebuild from the same sources reproduces (no git revision, which changes with every commit).
    assert manifest.raw["pipeline_sources_sha256"] == bundle.pipeline_sources_sha256()
    assert "pipeline_git_revision" not in manifest.raw
    assert generic.raw["hyperparameters"]["power"]["max_depth"] == 2
    for name in ("pred_vs_measured.png", "pareto.png"):
        assert (workdir / "plots/sim-a" / name).read_bytes()[:4] == b"\x89PNG"


def test_a_sku_with_too_few_workload_groups_is_refused(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    params = yaml.safe_load((workdir / "params.yaml").read_text())
    params["models"]["min_groups"] = 10
    (workdir / "params.yaml").write_text(yaml.safe_dump(params))
    # The features stage refuses the listed SKU first, and writes nothing.
    with pytest.raises(ValueError, match=r"models\.bundles: SKU 'sim-a' cannot be trained .*min_groups=10"):
        _run(features, monkeypatch=monkeypatch)
    assert not (workdir / "data/processed/features.parquet").exists()
    assert not (workdir / "metrics/features.json").exists()
    # The train stage keeps its own guard (a features table built under other params).
    params["models"]["min_groups"] = 3
    (workdir / "params.yaml").write_text(yaml.safe_dump(params))
    _run(features, monkeypatch=monkeypatch)
    params["models"]["min_groups"] = 10
    (workdir / "params.yaml").write_text(yaml.safe_dump(params))
    with pytest.raises(ValueError, match=r"sim-a.*fewer than models\.min_groups=10"):
        _run(train, "sim-a", monkeypatch=monkeypatch)
    assert not (workdir / "data/models/sim-a").exists()
