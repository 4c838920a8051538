#!/usr/bin/env python3
"""How much any policy could save at a given mean slowdown, on the bench's measured sweeps: an upper bound.

For every workload of `params.yaml: bench` (the sweeps and SKUs `dvc repro bench` runs), the clock table the bench
uses (measured clocks, or the fine grid) gives each config's true time and energy ratio to the reference. No
policy, however it explores, can beat perfect knowledge of those tables. With that knowledge, the largest mean
saving at a mean slowdown <= S is a knapsack over workloads; its linear relaxation is an upper bound, computed
exactly by duality: min over lambda >= 0 of mean_w max_c (saving - lambda * slowdown) + lambda * S. Every config of
the table is allowed (also those over the 5% bound). The bench scores a policy on the simulator's true energy, which
follows these tables up to zero-mean iteration jitter and a slow thermal drift; exploration only lowers it.

For each baseline of `metrics/bench.json` / `metrics/bench_fine.json` it prints the bound at that baseline's mean
slowdown, and the joint test of issue 7 (more saving than every baseline at no more slowdown than any of them).

Usage: python scripts/bench_frontier.py   (after `dvc repro ingest`; a few seconds)
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import yaml

from gpoeo_rt.bench.harness import oracle_for
from gpoeo_rt.bench.sweeps import read_sweeps_file
from gpoeo_rt.device import SweepWorkload
from gpoeo_rt.search.objectives import Objective

BASELINES = ("sweep", "gpoeo-paper", "bandit")
LAMBDAS = np.concatenate([np.linspace(0.0, 5.0, 2001), np.linspace(5.0, 100.0, 381)])


def tables(sweeps: Path, skus: list[str], grid: str, iteration_s: float, sm_step_mhz: int) -> list[np.ndarray]:
    """Per workload: an array of (saving, slowdown) rows, one per config of its clock table (the bench oracle's own
    table of true ratios, `oracle_for(...).table`)."""
    table_kind = "grid" if grid == "fine" else "measured"
    out = []
    for rows in read_sweeps_file(sweeps, skus).values():
        w = SweepWorkload.from_rows(rows, iteration_s=iteration_s, table=table_kind, sm_step_mhz=sm_step_mhz)
        ratios = np.array(list(oracle_for(w, Objective.ENERGY, 0.05).table.values()))  # (time, energy) per config
        out.append(np.column_stack([1.0 - ratios[:, 1], ratios[:, 0] - 1.0]))
    return out


def best_saving_bound(workloads: list[np.ndarray], max_mean_slowdown: float) -> float:
    """Upper bound on the mean saving of any per-workload choice with mean slowdown <= max_mean_slowdown."""
    best_per_lambda = np.mean(
        [np.max(w[:, :1] - LAMBDAS[None, :] * w[:, 1:2], axis=0) for w in workloads], axis=0
    )  # mean over workloads of max over configs, for every lambda
    return float(np.min(best_per_lambda + LAMBDAS * max_mean_slowdown))


def main() -> None:
    here = Path(__file__).resolve().parents[1]
    params = yaml.safe_load((here / "params.yaml").read_text())["bench"]
    skus = params["skus"].split(",")
    for grid, metrics in (("measured", "metrics/bench.json"), ("fine", "metrics/bench_fine.json")):
        workloads = tables(here / params["sweeps"], skus, grid, params["iteration_s"], params["sm_step_mhz"])
        summary = {r["policy"]: r for r in json.loads((here / metrics).read_text())["summary"] if r["sku"] == "all"}
        print(f"== {grid} clocks ({len(workloads)} workloads; policies from {metrics})")
        for policy in ("oracle", "gpoeo-rt", "gpoeo-rt-markers", *BASELINES):
            r = summary[policy]
            bound = best_saving_bound(workloads, r["mean_slowdown_pct"] / 100.0)
            print(
                f"  {policy:17s} saving {r['saving_pct']:6.2f}% at mean slowdown {r['mean_slowdown_pct']:5.2f}%; "
                f"best possible at that slowdown <= {100 * bound:6.2f}%"
            )
        need_saving = max(summary[b]["saving_pct"] for b in BASELINES)
        max_slowdown = min(summary[b]["mean_slowdown_pct"] for b in BASELINES)
        bound = 100 * best_saving_bound(workloads, max_slowdown / 100.0)
        verdict = "possible" if bound > need_saving else "impossible for any policy, the oracle included"
        print(
            f"  beating all three at once needs > {need_saving:.2f}% saving at <= {max_slowdown:.2f}% slowdown; "
            f"the bound there is {bound:.2f}%: {verdict}"
        )


if __name__ == "__main__":
    main()
