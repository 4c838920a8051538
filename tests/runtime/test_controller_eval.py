"""The controller's evaluation harness on a tiny synthetic sweep with leave-out fold bundles."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from gpoeo_rt.bench.harness import fold_bundles, held_out_predictor, oracle_for
from gpoeo_rt.bench.simulate import main, read_sweeps
from gpoeo_rt.device import SweepWorkload
from gpoeo_rt.features import FEATURE_NAMES
from gpoeo_rt.search.objectives import Objective
from tests.bundles import rewrite_manifest, write_bundle

SM = (600.0, 800.0, 1000.0, 1100.0, 1200.0, 1300.0, 1400.0, 1500.0)
COLUMNS = ["sku", "source", "workload", "sm_clock_mhz", "mem_clock_mhz", "time_s", "power_w", "energy_j", "ref"]


def _rows(workload: str, share: float) -> list[dict[str, object]]:
    """A workload whose SM-bound share of time is `share`; power rises with the SM clock."""
    rows = []
    for sm in SM:
        ratio = sm / SM[-1]
        time_s = 0.002 * (share / ratio + 1 - share)  # a kernel time (ms scale), as NV-DVFS measures
        power_w = 60 + 140 * (share * ratio**2 + (1 - share) * ratio)
        features = dict.fromkeys(FEATURE_NAMES, "")
        features.update(feat_sm_active=share, feat_dram_active=1 - share)
        rows.append(
            {
                "sku": "sim-gpu",
                "source": "synthetic",
                "workload": workload,
                "sm_clock_mhz": sm,
                "mem_clock_mhz": 877.0,
                "time_s": time_s,
                "power_w": power_w,
                "energy_j": time_s * power_w,
                "ref": sm == SM[-1],
                **features,
            }
        )
    return rows


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("eval")
    with (root / "sweeps.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS + list(FEATURE_NAMES))
        writer.writeheader()
        writer.writerows(_rows("memory/kernel/input0", 0.1) + _rows("compute/kernel/input0", 0.9))
    folds = root / "folds_root" / "sim-gpu" / "folds"
    for fold, workload in (("fold0", "memory/kernel/input0"), ("fold1", "compute/kernel/input0")):
        bundle = write_bundle(folds / fold, name=f"sim-gpu/{fold}", seed=int(fold[-1]))
        manifest = json.loads((bundle / "manifest.json").read_text())
        manifest["held_out"] = [workload]
        rewrite_manifest(bundle, manifest)
    index = {"key": "workload", "folds": {"memory/kernel/input0": "fold0", "compute/kernel/input0": "fold1"}}
    (folds / "index.json").write_text(json.dumps(index))
    return root


def test_the_harness_scores_every_policy_against_the_truth_and_the_oracle(setup: Path) -> None:
    out = setup / "results.json"
    argv = ["--sweeps", str(setup / "sweeps.csv"), "--sku", "sim-gpu", "--folds-root", str(setup / "folds_root")]
    argv += ["--duration-s", "240", "--iteration-s", "0.1", "--jobs", "1", "--out", str(out)]
    argv += ["--latency-bundle", str(setup / "folds_root" / "sim-gpu" / "folds" / "fold0")]
    assert main(argv) == 0
    payload = json.loads(out.read_text())
    assert "leave-out fold bundles" in payload["models"]
    assert {r["policy"] for r in payload["summary"]} == {"hybrid", "prediction", "search"}
    runs = {(r["workload"], r["policy"]): r for r in payload["runs"]}
    assert len(runs) == 6
    memory = runs[("memory/kernel/input0", "hybrid")]
    assert memory["bundle"].endswith("fold0")  # the bundle that never saw this workload
    assert memory["oracle_saving"] > 0.1 and memory["saving"] > 0.5 * memory["oracle_saving"]
    for r in payload["runs"]:
        if r["policy"] != "prediction":
            assert r["slowdown"] <= 0.06
        assert r["converge_s"] < 120.0
    assert payload["prediction_latency"]["configs"] == 220


def test_the_oracle_is_the_best_measured_config_within_the_bound(setup: Path) -> None:
    rows = read_sweeps(setup / "sweeps.csv")[("sim-gpu", "memory/kernel/input0")]
    workload = SweepWorkload.from_rows(rows, iteration_s=0.1)
    oracle = oracle_for(workload, Objective.ENERGY, 0.05)
    best = min((e, c) for c, (t, e) in oracle.table.items() if t <= 1.05)  # brute force over the measured table
    assert oracle.clocks == best[1] and oracle.saving == pytest.approx(1 - best[0])
    assert oracle.slowdown <= 0.05


def test_a_fold_bundle_that_saw_the_workload_is_refused(setup: Path, tmp_path: Path) -> None:
    bundles = fold_bundles(setup / "folds_root", "sim-gpu")
    assert bundles["memory/kernel/input0"].name == "fold0"
    with pytest.raises(ValueError, match="saw it"):
        held_out_predictor(bundles["memory/kernel/input0"], "compute/kernel/input0")
    with pytest.raises(FileNotFoundError, match="dvc repro"):
        fold_bundles(tmp_path, "sim-gpu")
