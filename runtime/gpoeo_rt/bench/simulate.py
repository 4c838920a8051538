"""Evaluation harness: run the controller on simulated GPUs driven by measured sweeps, score it from the truth.

For each (sku, workload) of a sweeps CSV and each iteration period: a SimulatedGPU(SweepWorkload) runs a job of
`duration_s` once at default clocks and once under each policy (same seed, so the same noise), and the simulator's
ground truth gives:
- saving: 1 - (energy per iteration) / (default run's), over the whole job, exploration included;
- slowdown: default run's iterations / this run's - 1 (same job duration);
- oracle: the best measured sweep config within the bound (from the table: what a perfect controller would hold);
- converge_s: time of the last clock change (the final config held from then on);
- exploration: energy spent until converge_s beyond what the final config would have used for the same iterations.
With `--markers`, the simulated job also sends step markers (SimulatedStepMarkers: the true iteration ends plus a
host-side delay, jitter and a little loss), and the controller times iterations by them instead of the power signal.
The summary's columns are built for the energy objective (with edp/ed2p the oracle is that objective's optimum,
but savings are still energy savings and the ">6%" column means nothing).

Honesty: model-guided policies use, per workload, a bundle whose models never saw that workload: the leave-out
fold bundle named by `<folds_root>/<sku>/folds/index.json` (workload -> fold directory). A single `--bundle` can
be forced instead (then the report says so: it is not an honest evaluation if that bundle saw the workloads).

Run: python -m gpoeo_rt.bench.simulate --sku tesla-v100 --sku quadro-rtx-8000 --jobs 2 --out results.json
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import math
import multiprocessing
import statistics
import sys
import time
import zlib
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from gpoeo_rt.bench.harness import (
    FOLD_INDEX,
    JobTruth,
    Oracle,
    decided_clock_changes,
    fold_bundles,
    held_out_predictor,
    job_gpu,
    oracle_for,
    score_job,
)
from gpoeo_rt.controller.controller import Controller, ControllerConfig
from gpoeo_rt.controller.state import Policy, State
from gpoeo_rt.device import COUNTER_MODES, SimulatedGPU, SimulatedStepMarkers, SweepWorkload, h200_spec
from gpoeo_rt.prediction.bundle import verify_bundle
from gpoeo_rt.prediction.predictor import Predictor
from gpoeo_rt.progress import Bars
from gpoeo_rt.search.objectives import Objective
from gpoeo_rt.tables import Column, render

DEFAULT_SWEEPS = Path("data/processed/sweeps.csv")
DEFAULT_FOLDS_ROOT = Path("data/eval")


# --- inputs -----------------------------------------------------------------------------------------------------


def read_sweeps(path: Path, skus: Sequence[str] | None = None) -> dict[tuple[str, str], list[dict[str, str]]]:
    """Rows of a sweeps CSV grouped by (sku, workload), optionally only some SKUs (csv module: no pandas)."""
    groups: dict[tuple[str, str], list[dict[str, str]]] = defaultdict(list)
    with path.open(newline="") as fh:
        for row in csv.DictReader(fh):
            if skus is None or row["sku"] in skus:
                groups[(row["sku"], row["workload"])].append(row)
    return dict(groups)


# --- one run ----------------------------------------------------------------------------------------------------


@dataclass
class RunResult:
    sku: str
    workload: str
    policy: str
    iteration_s: float
    markers: bool  # the job sent step markers
    bundle: str | None
    saving: float
    slowdown: float
    oracle_saving: float
    oracle_slowdown: float
    oracle_clocks: tuple[int, int]
    final_clocks: tuple[int, int]
    final_table_saving: float | None  # what the final config saves per the table (no exploration)
    final_table_slowdown: float | None
    converge_s: float
    exploration_j: float
    exploration_frac: float  # of the default run's energy
    clock_changes: int
    probes: int
    events: dict[str, int] = field(default_factory=dict)
    steady_cpu_frac: float | None = None  # controller + simulator CPU per simulated second while holding
    marker_timed: float = 0.0  # share of the decisions with a period that took it from step markers
    prediction_ms: float | None = None


def run_policy(
    workload: SweepWorkload,
    policy: Policy,
    predictor: Predictor | None,
    *,
    seed: int,
    duration_s: float,
    config: ControllerConfig,
    markers: bool = False,
    subsample_jitter: bool = False,
    counters: str = "realistic",
) -> tuple[SimulatedGPU, Controller, float, float]:
    """Run the controller for duration_s; returns (gpu, controller, steady-state CPU s, steady simulated s).
    With markers, the job sends step markers (seeded like the GPU)."""
    gpu = job_gpu(workload, seed, duration_s, subsample_jitter=subsample_jitter, counters=counters)
    controller = Controller(
        gpu,
        predictor=predictor if policy is not Policy.SEARCH else None,
        config=_with_policy(config, policy),
        markers=SimulatedStepMarkers(gpu, seed=seed) if markers else None,
    )
    steady_cpu = steady_sim = 0.0
    while gpu.now_s() < duration_s:
        t0, c0 = gpu.now_s(), time.process_time()
        decision = controller.step()
        if decision.state is State.HOLDING and decision.event == "hold":
            steady_cpu += time.process_time() - c0
            steady_sim += gpu.now_s() - t0
    controller.stop("end of the job")
    return gpu, controller, steady_cpu, steady_sim


def _with_policy(config: ControllerConfig, policy: Policy) -> ControllerConfig:
    return replace(config, policy=policy)


def score(
    gpu: SimulatedGPU,
    controller: Controller,
    default: JobTruth,
    oracle: Oracle,
    *,
    duration_s: float,
) -> dict[str, Any]:
    changes = decided_clock_changes(controller)
    scored = score_job(JobTruth(gpu), default, changes, controller.reference, duration_s)
    table = oracle.table.get(scored["final_clocks"])
    scored["final_table_saving"] = 1.0 - table[1] if table else None
    scored["final_table_slowdown"] = table[0] - 1.0 if table else None
    return scored


# --- one workload, all policies ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Task:
    sku: str
    workload: str
    rows: tuple[dict[str, str], ...]
    iteration_s: float
    bundle: str | None
    policies: tuple[str, ...]
    duration_s: float
    seed: int
    max_slowdown: float
    objective: str
    table: str = "measured"  # the simulated GPU's clock table: the sweep's measured clocks, or an SM grid
    sm_step_mhz: int = 15
    markers: bool = False  # the simulated job sends step markers
    subsample_jitter: bool = False  # SimConfig.subsample_jitter (unaliased power for iterations near 5 ms multiples)
    counters: str = "realistic"  # SimConfig.counters


def evaluate_workload(task: Task) -> list[RunResult]:
    objective = Objective(task.objective)
    config = ControllerConfig(objective=objective, max_slowdown=task.max_slowdown)
    workload = SweepWorkload.from_rows(
        task.rows, iteration_s=task.iteration_s, table=task.table, sm_step_mhz=task.sm_step_mhz
    )
    oracle = oracle_for(workload, objective, task.max_slowdown)
    seed = (zlib.crc32(f"{task.sku}/{task.workload}".encode()) + task.seed) % 2**31
    base = job_gpu(workload, seed, task.duration_s, subsample_jitter=task.subsample_jitter, counters=task.counters)
    base.clock.advance(task.duration_s)
    default = JobTruth(base)
    results = []
    for name in task.policies:
        policy = Policy(name)
        predictor = (
            held_out_predictor(Path(task.bundle), task.workload)
            if task.bundle and policy is not Policy.SEARCH
            else None
        )
        gpu, controller, cpu_s, sim_s = run_policy(
            workload,
            policy,
            predictor,
            seed=seed,
            duration_s=task.duration_s,
            config=config,
            markers=task.markers,
            subsample_jitter=task.subsample_jitter,
            counters=task.counters,
        )
        scored = score(gpu, controller, default, oracle, duration_s=task.duration_s)
        events: dict[str, int] = defaultdict(int)
        for d in controller.decisions:
            events[d.event] += 1
        timed = [d.timing for d in controller.decisions if d.timing is not None]
        results.append(
            RunResult(
                sku=task.sku,
                workload=task.workload,
                policy=name,
                iteration_s=task.iteration_s,
                markers=task.markers,
                bundle=task.bundle if policy is not Policy.SEARCH else None,
                oracle_saving=oracle.saving,
                oracle_slowdown=oracle.slowdown,
                oracle_clocks=oracle.clocks,
                probes=events.get("probe", 0),
                events=dict(events),
                steady_cpu_frac=cpu_s / sim_s if sim_s > 0 else None,
                marker_timed=sum(t == "markers" for t in timed) / len(timed) if timed else 0.0,
                prediction_ms=1e3 * statistics.mean(controller.prediction_cpu_s)
                if controller.prediction_cpu_s
                else None,
                **scored,
            )
        )
    return results


# --- summaries ----------------------------------------------------------------------------------------------------


def summarize(results: Iterable[RunResult], max_slowdown: float) -> list[dict[str, Any]]:
    """Means per (sku, iteration_s, markers, policy). saving_vs_oracle_pct = mean saving / mean oracle saving."""
    groups: dict[tuple[str, float, bool, str], list[RunResult]] = defaultdict(list)
    for r in results:
        groups[(r.sku, r.iteration_s, r.markers, r.policy)].append(r)
    rows = []
    for (sku, iteration_s, markers, policy), rs in sorted(groups.items()):
        saving = statistics.mean(r.saving for r in rs)
        oracle = statistics.mean(r.oracle_saving for r in rs)
        cpu = [r.steady_cpu_frac for r in rs if r.steady_cpu_frac is not None]
        pred = [r.prediction_ms for r in rs if r.prediction_ms is not None]
        rows.append(
            {
                "sku": sku,
                "iteration_s": iteration_s,
                "markers": markers,
                "policy": policy,
                "workloads": len(rs),
                "saving_pct": 100 * saving,
                "oracle_saving_pct": 100 * oracle,
                "saving_vs_oracle_pct": 100 * saving / oracle if oracle > 0 else math.nan,
                "mean_slowdown_pct": 100 * statistics.mean(r.slowdown for r in rs),
                "max_slowdown_pct": 100 * max(r.slowdown for r in rs),
                "over_6pct": sum(r.slowdown > max_slowdown + 0.01 for r in rs),
                "mean_converge_s": statistics.mean(r.converge_s for r in rs),
                "p95_converge_s": float(np.percentile([r.converge_s for r in rs], 95)),
                "max_converge_s": max(r.converge_s for r in rs),
                "exploration_pct": 100 * statistics.mean(r.exploration_frac for r in rs),
                "mean_probes": statistics.mean(r.probes for r in rs),
                "marker_timed_pct": 100 * statistics.mean(r.marker_timed for r in rs),
                "fallbacks": sum(r.events.get("fallback_reference", 0) > 0 for r in rs),
                "steady_cpu_pct": 100 * max(cpu) if cpu else None,
                "prediction_ms": statistics.median(pred) if pred else None,
            }
        )
    return rows


SIMULATE_COLUMNS: tuple[Column, ...] = (
    Column("sku", left=True),
    Column("iteration_s", "g", label="iter_s"),
    Column("markers", lambda v: "yes" if v else "no", label="mark"),
    Column("policy", left=True),
    Column("workloads", "d", drop=3),
    Column("saving_pct", ".2f"),
    Column("oracle_saving_pct", ".2f", drop=4),
    Column("saving_vs_oracle_pct", ".1f"),
    Column("mean_slowdown_pct", ".2f"),
    Column("max_slowdown_pct", ".2f", drop=1),
    Column("over_6pct", "d", drop=2, label=">6%"),
    Column("mean_converge_s", ".1f", drop=2),
    Column("p95_converge_s", ".1f", drop=8),
    Column("exploration_pct", ".2f", drop=7),
    Column("mean_probes", ".1f", drop=9),
    Column("fallbacks", "d", drop=5, label="fallb"),
    Column("steady_cpu_pct", ".3f", drop=6, label="cpu%"),
)


def format_table(rows: Sequence[Mapping[str, Any]], *, tty: bool | None = None, width: int | None = None) -> str:
    """The summary as a table, in the bench's vocabulary (gpoeo_rt.tables)."""
    return render(SIMULATE_COLUMNS, rows, tty=tty, width=width)


def prediction_latency_ms(bundle: Path, repeats: int = 200) -> dict[str, float]:
    """Wall time of one grid prediction for the H200's 220-config clock table (median and p99 over repeats)."""
    predictor = Predictor(verify_bundle(bundle))
    table = h200_spec().clock_table
    pairs = list(table.pairs())
    sm = np.array([p[0] for p in pairs], dtype=np.float64)
    mem = np.array([p[1] for p in pairs], dtype=np.float64)
    counters = {"feat_sm_active": 0.9, "feat_sm_occupancy": 0.4, "feat_dram_active": 0.4, "feat_tensor_active": 0.4}
    predictor.predict_grid(counters, sm, mem, table.default_sm_mhz, table.default_mem_mhz)  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        predictor.predict_grid(counters, sm, mem, table.default_sm_mhz, table.default_mem_mhz)
        times.append(time.perf_counter() - t0)
    return {
        "configs": float(len(pairs)),
        "median_ms": 1e3 * statistics.median(times),
        "p99_ms": 1e3 * float(np.percentile(times, 99)),
    }


# --- command line ------------------------------------------------------------------------------------------------


def build_tasks(args: argparse.Namespace) -> tuple[list[Task], str]:
    groups = read_sweeps(Path(args.sweeps), args.sku)
    if not groups:
        raise SystemExit(f"no sweep rows for SKUs {args.sku} in {args.sweeps}")
    bundles: dict[str, dict[str, Path]] = {}
    needs_model = any(p != Policy.SEARCH.value for p in args.policy)
    source = "none (pure search only)"
    if needs_model:
        if args.bundle:
            source = (
                f"ONE bundle for every workload ({args.bundle}): NOT a held-out evaluation unless it never saw them"
            )
        else:
            source = f"leave-out fold bundles from {args.folds_root}/<sku>/{FOLD_INDEX}"
            for sku in sorted({s for s, _ in groups}):
                bundles[sku] = fold_bundles(Path(args.folds_root), sku)
    tasks = []
    for (sku, workload), rows in sorted(groups.items()):
        if not any(r["ref"].strip().lower() in ("true", "1") for r in rows):
            continue
        bundle = None
        if needs_model:
            if args.bundle:
                bundle = str(args.bundle)
            elif workload in bundles[sku]:
                bundle = str(bundles[sku][workload])
            else:
                print(f"skipping {sku}/{workload}: not in the fold index", file=sys.stderr)
                continue
        for iteration_s, markers in itertools.product(args.iteration_s, args.markers):
            tasks.append(
                Task(
                    sku,
                    workload,
                    tuple(rows),
                    iteration_s,
                    bundle,
                    tuple(args.policy),
                    args.duration_s,
                    args.seed,
                    args.max_slowdown,
                    args.objective,
                    table=args.table,
                    sm_step_mhz=args.sm_step_mhz,
                    markers=markers,
                    subsample_jitter=args.subsample_jitter,
                    counters=args.counters,
                )
            )
    if args.limit:
        taken: dict[tuple[str, float, bool], int] = defaultdict(int)
        kept = []
        for t in tasks:
            if taken[(t.sku, t.iteration_s, t.markers)] < args.limit:
                taken[(t.sku, t.iteration_s, t.markers)] += 1
                kept.append(t)
        tasks = kept
    return tasks, source


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", default=str(DEFAULT_SWEEPS))
    parser.add_argument("--sku", action="append", help="SKU to evaluate (repeatable; default V100 and RTX 8000)")
    parser.add_argument("--folds-root", default=str(DEFAULT_FOLDS_ROOT))
    parser.add_argument("--bundle", help="use this one bundle for every workload instead of the fold bundles")
    parser.add_argument("--policy", action="append", choices=[p.value for p in Policy])
    parser.add_argument("--iteration-s", type=float, action="append", help="simulated iteration at reference")
    parser.add_argument(
        "--markers",
        default="off",
        choices=["off", "on", "both"],
        help="the simulated job sends step markers (on), does not (off, the default), or each run both ways",
    )
    parser.add_argument("--duration-s", type=float, default=1800.0)
    parser.add_argument("--max-slowdown", type=float, default=0.05)
    parser.add_argument("--objective", default=Objective.ENERGY.value, choices=[o.value for o in Objective])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--table",
        default="measured",
        choices=["measured", "grid"],
        help="clocks of the simulated GPU: the sweep's measured ones, or every --sm-step-mhz (interpolated)",
    )
    parser.add_argument("--sm-step-mhz", type=int, default=15)
    parser.add_argument(
        "--subsample-jitter",
        action="store_true",
        help="random instants within each simulated power sample: without it, iterations near a multiple of 5 ms "
        "alias the simulator's power and its true energy (use it for --iteration-s below ~0.04)",
    )
    parser.add_argument(
        "--counters",
        default="realistic",
        choices=list(COUNTER_MODES),
        help="counters the simulated GPUs give: NVML GPM on Hopper and later only (realistic, the default), the "
        "sweep's on every GPU (sweep), or none",
    )
    parser.add_argument("--limit", type=int, default=0, help="at most N workloads per SKU (0: all)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", help="write per-run results and the summary as JSON here")
    parser.add_argument("--latency-bundle", default="models/generic", help="bundle timed on the H200 grid")
    args = parser.parse_args(argv)
    args.sku = args.sku or ["tesla-v100", "quadro-rtx-8000"]
    args.policy = args.policy or [p.value for p in Policy]
    args.iteration_s = args.iteration_s or [0.1, 0.5]
    args.markers = {"off": [False], "on": [True], "both": [False, True]}[args.markers]

    tasks, source = build_tasks(args)
    t0 = time.perf_counter()
    results: list[RunResult] = []
    with Bars() as bars:  # a bar while a terminal watches; nothing in a log
        advance = bars.task("simulated jobs")
        if args.jobs > 1:
            with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
                for done, batch in enumerate(pool.imap_unordered(evaluate_workload, tasks, chunksize=4), 1):
                    results.extend(batch)
                    advance(done, len(tasks))
        else:
            for done, task in enumerate(tasks, 1):
                results.extend(evaluate_workload(task))
                advance(done, len(tasks))
    wall_s = time.perf_counter() - t0
    summary = summarize(results, args.max_slowdown)
    latency = prediction_latency_ms(Path(args.latency_bundle)) if Path(args.latency_bundle).exists() else None
    print(f"models: {source}")
    print(
        f"{len(tasks)} workload runs x {len(args.policy)} policies, {args.duration_s:g} s jobs, in {wall_s:.0f} s "
        f"with {args.jobs} processes"
    )
    print(format_table(summary))
    if latency:
        print(
            f"grid prediction ({latency['configs']:.0f} H200 configs, {args.latency_bundle}): median "
            f"{latency['median_ms']:.2f} ms, p99 {latency['p99_ms']:.2f} ms"
        )
    if args.out:
        payload = {
            "models": source,
            "args": {k: v for k, v in vars(args).items()},
            "wall_s": wall_s,
            "prediction_latency": latency,
            "summary": summary,
            "runs": [asdict(r) for r in sorted(results, key=lambda r: (r.sku, r.workload, r.iteration_s, r.policy))],
        }
        Path(args.out).write_text(json.dumps(payload, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
