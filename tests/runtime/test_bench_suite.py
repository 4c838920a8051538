"""The evaluation suite: the synthetic job families, the sets, the dominance rule and the CLI."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from gpoeo_rt.bench import synthetic
from gpoeo_rt.bench.report import CLAIM_KEYS, dominance
from gpoeo_rt.bench.runner import BenchInputError
from gpoeo_rt.bench.suite import build_sets
from gpoeo_rt.cli import app
from gpoeo_rt.device import SweepWorkload, h200_spec
from gpoeo_rt.search.objectives import Objective, pick_config
from tests.bundles import write_bundle
from tests.runtime.sweep_rows import sweep_rows, write_sweep_csv


def _jobs() -> dict[str, SweepWorkload]:
    groups: dict[str, list[dict[str, object]]] = defaultdict(list)
    for row in synthetic.synthetic_rows():
        groups[str(row["workload"])].append(row)
    return {name: SweepWorkload.from_rows(rows) for name, rows in groups.items()}


def _ratios(w: SweepWorkload) -> tuple[list[tuple[int, int]], np.ndarray, np.ndarray]:
    table = w.clock_table()
    pairs = list(table.pairs())
    ref = pairs.index((table.default_sm_mhz, table.default_mem_mhz))
    tp = np.array([w.time_power(*p) for p in pairs])
    time_ratio = tp[:, 0] / tp[ref, 0]
    return pairs, time_ratio, time_ratio * tp[:, 1] / tp[ref, 1]


def test_synthetic_families_have_the_shapes_they_are_documented_with() -> None:
    jobs = _jobs()
    assert len(jobs) == len(synthetic.FAMILIES) * synthetic.PER_FAMILY
    spec = h200_spec()
    for name, w in jobs.items():
        assert w.clock_table().pairs() is not None and w.sku == synthetic.SKU
        pairs, time_ratio, energy_ratio = _ratios(w)
        assert len(pairs) == len(list(spec.clock_table.pairs()))
        best = pairs[pick_config(Objective.ENERGY, time_ratio, energy_ratio, 0.05)]
        family = name.split("/")[0]
        at = {p: (t, e) for p, t, e in zip(pairs, time_ratio, energy_ratio, strict=True)}
        if family == "memory_knee":  # flat above the knee: half the reference SM clock costs nearly nothing
            assert best[0] < 0.7 * spec.clock_table.default_sm_mhz
        if family == "memory_sensitive":  # the lower memory clock wins
            assert best[1] < spec.clock_table.default_mem_mhz
        if family == "host_bound":  # the host share keeps time within 40% even at the lowest SM clock
            assert at[(345, 3201)][0] < 1.0 + 0.55 * (1980 / 345 - 1)
    # The power-capped jobs: above the cap, the set clock changes neither time nor power.
    pairs, time_ratio, energy_ratio = _ratios(jobs["power_saturating/job00"])
    at = {p: (t, e) for p, t, e in zip(pairs, time_ratio, energy_ratio, strict=True)}
    assert at[(1980, 3201)] == pytest.approx(at[(1965, 3201)])
    assert synthetic.synthetic_rows() == synthetic.synthetic_rows()  # the same set everywhere


def test_dominance_needs_more_saving_at_no_more_slowdown_and_no_more_runs_over() -> None:
    def row(policy: str, saving: float, slowdown: float, violations: int) -> dict[str, object]:
        return {"policy": policy, "saving_pct": saving, "mean_slowdown_pct": slowdown, "violations": violations}

    rows = [
        row("gpoeo-rt", 10.0, 4.0, 1),
        row("sweep", 11.0, 4.0, 1),  # dominates
        row("gpoeo-paper", 12.0, 4.5, 0),  # more slowdown: does not
        row("bandit", 13.0, 3.0, 5),  # more runs over the bound: does not
        row("gpoeo-rt-markers", 11.5, 3.9, 1),
    ]
    assert dominance(rows) == {"gpoeo-rt": ["sweep"], "gpoeo-rt-markers": []}


def test_sets_are_built_from_the_right_workloads_and_bad_requests_are_refused(tmp_path: Path) -> None:
    groups = {("tesla-v100", f"w{i}"): [] for i in range(8)} | {("gtx-980", "a"): [], ("quadro-rtx-8000", "b"): []}
    sets = {
        s.name: s
        for s in build_sets(
            groups, ["in-distribution", "leave-one-sku-out"], folds_root=tmp_path, source_root=tmp_path, thin=4
        )
    }  # type: ignore[arg-type]
    assert set(sets["in-distribution"].groups) == {k for k in groups if k[0] != "gtx-980"}
    assert sets["in-distribution"].models == "sku-folds"
    loso = sets["leave-one-sku-out"]
    assert loso.models == "generic-folds" and ("gtx-980", "a") in loso.groups
    assert [k for k in loso.groups if k[0] == "tesla-v100"] == [("tesla-v100", "w0"), ("tesla-v100", "w4")]
    with pytest.raises(BenchInputError, match="evaluation set 'ood'"):
        build_sets(groups, ["ood"], folds_root=tmp_path, source_root=tmp_path)  # type: ignore[arg-type]
    with pytest.raises(BenchInputError, match="no source-holdout fold index"):
        build_sets(groups, ["leave-one-source-out"], folds_root=tmp_path, source_root=tmp_path)  # type: ignore[arg-type]


def test_cli_bench_suite_runs_a_set_at_two_bounds_and_writes_the_headline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(synthetic, "PER_FAMILY", 1)
    models = tmp_path / "models"
    write_bundle(models / "generic", name="generic", nvml_names=())
    sweeps = write_sweep_csv(tmp_path / "s.csv", sweep_rows())
    head, png, full = tmp_path / "head.json", tmp_path / "frontier.png", tmp_path / "all.json"
    result = CliRunner().invoke(
        app,
        [
            *("bench-suite", "--sweeps", str(sweeps), "--set", "synthetic", "--bounds", "0.05,0.1"),
            *("--policy", "default,oracle,gpoeo-rt,sweep", "--job-seconds", "240", "--jobs", "1"),
            *("--models-root", str(models), "--folds-root", str(tmp_path / "none")),
            *("--summary", str(head), "--plot", str(png), "--json", str(full)),
            *("--metrics-dir", str(tmp_path / "headline")),
        ],
    )
    assert result.exit_code == 0, result.output
    assert max(len(line) for line in result.output.splitlines()) <= 80
    headline = json.loads(head.read_text())
    assert set(headline) == {"synthetic@5%", "synthetic@10%"}
    assert headline["synthetic@5%"]["jobs"] == len(synthetic.FAMILIES)
    assert headline["synthetic@5%"]["oracle"]["pct_of_oracle"] == pytest.approx(100.0, abs=0.5)  # same noise
    assert "gpoeo-rt" in headline["synthetic@10%"] and "dominated_by" in headline["synthetic@10%"]
    # The runtime's own claim is scored against the truth; baselines make no claim.
    assert set(CLAIM_KEYS) <= set(headline["synthetic@5%"]["gpoeo-rt"])
    assert not set(CLAIM_KEYS) & set(headline["synthetic@5%"]["sweep"])
    # The headline dvc lists: gpoeo-rt at the 5% bound, three figures, in the names every headline file shares.
    small = json.loads((tmp_path / "headline" / "suite-synthetic.json").read_text())
    assert set(small) == {"pct_of_oracle", "slowdown_pct", "over_bound_pct"}
    assert small["pct_of_oracle"] == pytest.approx(headline["synthetic@5%"]["gpoeo-rt"]["pct_of_oracle"], abs=0.06)
    runs = json.loads(full.read_text())["sets"]["synthetic"]["0.05"]["runs"]
    assert {r["bundle"] for r in runs if r["policy"] == "gpoeo-rt"} == {str(models / "generic")}
    assert png.stat().st_size > 1000


def test_cli_bench_suite_reports_bad_bounds_in_one_line(tmp_path: Path) -> None:
    sweeps = write_sweep_csv(tmp_path / "s.csv", sweep_rows())
    result = CliRunner().invoke(app, ["bench-suite", "--sweeps", str(sweeps), "--bounds", "0.05,abc"])
    assert result.exit_code == 2
    assert "--bounds" in result.output and "Traceback" not in result.output


def test_tables_that_break_physics_are_measured_by_how_much_faster_a_lower_clock_runs() -> None:
    from gpoeo_rt.bench.sweeps import faster_at_lower_clock

    def rows(times: list[float], mem: float = 877.0) -> list[dict[str, object]]:
        return [{"sm_clock_mhz": 900.0 + 100.0 * i, "mem_clock_mhz": mem, "time_s": t} for i, t in enumerate(times)]

    assert faster_at_lower_clock(rows([2.0, 1.5, 1.2, 1.0])) == 0.0  # time falls as the clock rises
    assert faster_at_lower_clock(rows([1.0, 1.2, 1.0])) == pytest.approx(0.2)  # 900 MHz runs 20% faster than 1000
    # each memory clock's line on its own: a slower memory clock is no lower SM clock
    assert faster_at_lower_clock(rows([2.0, 1.0], mem=500.0) + rows([1.0, 0.9])) == 0.0
