"""Replay benchmark runner: every workload of a sweeps table becomes a simulated job, run under each policy.

Per workload, one SimulatedGPU(SweepWorkload) per policy, all with the same seed (so the same measurement noise and
iteration jitter), and the default-clock run simulated once and shared. Scores come from the simulator's ground
truth at the end of the job (`harness.score_job`); the policies never read it.

Honesty: model-guided policies (gpoeo-rt, gpoeo-rt-markers, gpoeo-paper) get a bundle whose models never saw the
workload: its leave-one-workload-out fold (`<folds_root>/<sku>/folds/index.json`); for a SKU without per-SKU folds
(or a workload missing from them), the generic model's leave-one-SKU-out fold (`<folds_root>/generic/folds/index.json`);
for a SKU the pipeline never saw, the generic bundle itself (`<models_root>/generic`, trained on other SKUs only).
"""

from __future__ import annotations

import json
import multiprocessing
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gpoeo_rt.bench.harness import (
    FOLD_INDEX,
    JobTruth,
    Oracle,
    fold_bundles,
    held_out_predictor,
    job_gpu,
    oracle_for,
    score_job,
    score_parts,
)
from gpoeo_rt.bench.policies import (
    BanditConfig,
    BanditPolicy,
    BenchPolicy,
    ControllerPolicy,
    FixedClocks,
    GpoeoPaperConfig,
    GpoeoPaperPolicy,
    StepEnds,
    SweepConfig,
    SweepPolicy,
)
from gpoeo_rt.bench.sweeps import Groups, Row
from gpoeo_rt.controller.controller import Controller, ControllerConfig
from gpoeo_rt.controller.state import Policy
from gpoeo_rt.device import COUNTER_MODES, SimulatedGPU, SimulatedStepMarkers, SweepWorkload
from gpoeo_rt.prediction.bundle import BundleError, parse_manifest
from gpoeo_rt.search.objectives import Objective

# gpoeo-rt times iterations from the power samples (no change to the training code); gpoeo-rt-markers is the same
# controller fed the job's step markers (gpoeo_rt.client.mark_step), the step-end times the baselines also get.
POLICIES: tuple[str, ...] = ("default", "oracle", "gpoeo-rt", "gpoeo-rt-markers", "sweep", "gpoeo-paper", "bandit")
MODEL_POLICIES = frozenset({"gpoeo-rt", "gpoeo-rt-markers", "gpoeo-paper"})
# The simulated GPU's clock table: the sweep's measured clocks, or every `sm_step_mhz` between each memory clock's
# measured min and max SM clock (like an H200's 15 MHz steps), time and power interpolated between measured clocks.
CLOCK_GRIDS: tuple[str, ...] = ("measured", "fine")


class BenchInputError(ValueError):
    """Bad bench arguments or a missing model (the message names what and where)."""


@dataclass(frozen=True)
class BenchSettings:
    max_slowdown: float = 0.05
    job_s: float = 1800.0
    iteration_s: float = 0.1  # simulated iteration at the reference clocks (sweep sources use different units)
    seed: int = 0
    clock_grid: str = "measured"  # one of CLOCK_GRIDS; every policy and the oracle get the same table
    sm_step_mhz: int = 15  # the fine grid's SM step
    # Counters the simulated GPUs present (SimConfig.counters): "realistic" = NVML GPM on Hopper and later only.
    counters: str = "realistic"
    sweep: SweepConfig = field(default_factory=SweepConfig)
    paper: GpoeoPaperConfig = field(default_factory=GpoeoPaperConfig)
    bandit: BanditConfig = field(default_factory=BanditConfig)

    def __post_init__(self) -> None:
        if self.clock_grid not in CLOCK_GRIDS:
            raise BenchInputError(f"clock grid {self.clock_grid!r}: choose from {', '.join(CLOCK_GRIDS)}")
        if self.sm_step_mhz < 1:
            raise BenchInputError(f"SM step of the fine clock grid: {self.sm_step_mhz} MHz must be >= 1")
        if self.counters not in COUNTER_MODES:
            raise BenchInputError(f"counters {self.counters!r}: choose from {', '.join(COUNTER_MODES)}")

    def workload(self, rows: Sequence[Row]) -> SweepWorkload:
        """The simulated workload of one sweep, on this bench's clock grid (the same for every policy)."""
        table = "grid" if self.clock_grid == "fine" else "measured"
        return SweepWorkload.from_rows(rows, iteration_s=self.iteration_s, table=table, sm_step_mhz=self.sm_step_mhz)


@dataclass(frozen=True)
class BenchTask:
    sku: str
    workload: str
    rows: tuple[Row, ...]
    policies: tuple[str, ...]
    settings: BenchSettings
    bundle: str | None = None  # for the model-guided policies
    held_out: str | None = None  # what the bundle's manifest must list as held out (the workload or the SKU)


@dataclass
class PolicyResult:
    sku: str
    workload: str
    policy: str
    bundle: str | None
    saving: float  # energy per iteration vs the default run, whole job (exploration included)
    slowdown: float  # default run's iterations / this run's - 1 (same job length)
    regret: float  # oracle saving - saving
    violation: bool  # slowdown > the bound
    oracle_saving: float
    oracle_slowdown: float
    oracle_clocks: tuple[int, int]
    final_clocks: tuple[int, int]
    converge_s: float  # time of the last clock change
    exploration_j: float  # energy until converge_s beyond what the final config would have used
    exploration_frac: float  # of the default run's energy
    clock_changes: int
    probes: int
    # What the runtime would report for the job (SavingsMeter over its decisions); None for the baselines.
    claimed_saving: float | None = None
    claimed_slowdown: float | None = None
    # The saving's two parts (accounting.SavingsMeter.split: the held decisions' saving over the time held, what
    # exploring cost as a fraction of the job's reference energy), claimed and true over the same seconds.
    claimed_held_saving: float | None = None
    held_saving: float | None = None
    claimed_exploration_cost: float | None = None
    exploration_cost: float | None = None
    reference_clocks: tuple[int, int] | None = None
    max_slowdown: float | None = None  # the bound the run was held to


# --- models --------------------------------------------------------------------------------------------------


def _fold_index(folds_root: Path, name: str) -> dict[str, Path] | None:
    if not (folds_root / name / FOLD_INDEX).exists():
        return None
    return fold_bundles(folds_root, name)


MODEL_SOURCES: tuple[str, ...] = ("sku-folds", "generic-folds")


def _trained_on(bundle: Path) -> list[str]:
    """The SKUs a bundle's manifest says its models learnt from (a bundle that saw a SKU is no test for it)."""
    try:
        return list(parse_manifest(bundle).raw.get("trained_on_skus", []))
    except BundleError as exc:
        raise BenchInputError(str(exc)) from exc


def resolve_bundles(
    keys: Sequence[tuple[str, str]], folds_root: Path, models_root: Path, models: str = "sku-folds"
) -> dict[tuple[str, str], tuple[str, str, str | None]]:
    """(sku, workload) -> (bundle directory, why it is honest, the name its manifest must list as held out),
    per the module docstring; with models="generic-folds", the per-SKU folds are passed over (every SKU is judged
    by the generic model that never saw it: a leave-one-SKU-out evaluation)."""
    if models not in MODEL_SOURCES:
        raise BenchInputError(f"model source {models!r}: choose from {', '.join(MODEL_SOURCES)}")
    generic_folds = _fold_index(folds_root, "generic")
    out: dict[tuple[str, str], tuple[str, str, str | None]] = {}
    per_sku: dict[str, dict[str, Path] | None] = {}
    for sku, workload in keys:
        if sku not in per_sku:
            per_sku[sku] = _fold_index(folds_root, sku) if models == "sku-folds" else None
        folds = per_sku[sku]
        if folds is not None and workload in folds:
            out[(sku, workload)] = (str(folds[workload]), "leave-one-workload-out fold", workload)
        elif generic_folds is not None and sku in generic_folds:
            out[(sku, workload)] = (str(generic_folds[sku]), "generic leave-one-SKU-out fold", sku)
        elif folds is None and (models_root / "generic").is_dir() and sku not in _trained_on(models_root / "generic"):
            out[(sku, workload)] = (
                str(models_root / "generic"),
                "generic bundle (the pipeline never saw this SKU)",
                None,
            )
        else:
            raise BenchInputError(
                f"no honest model for {sku}/{workload}: not in {folds_root / sku / FOLD_INDEX}, "
                f"{folds_root / 'generic' / FOLD_INDEX} has no fold for {sku!r} (run `dvc repro` to build the folds)"
            )
    return out


# --- one workload --------------------------------------------------------------------------------------------


def _step_ends(gpu: SimulatedGPU) -> StepEnds:
    # The training loop's step-end timestamps (what an on_step_end hook sees), never energy or the model.
    return lambda since_s: gpu.truth.iterations(since_s).t_s


def make_policy(name: str, gpu: SimulatedGPU, task: BenchTask, oracle: Oracle, seed: int) -> BenchPolicy:
    s = task.settings
    ends = _step_ends(gpu)
    if name == "default":
        table = gpu.supported_clocks()
        return FixedClocks(gpu, ends, (table.default_sm_mhz, table.default_mem_mhz), name)
    if name == "oracle":
        return FixedClocks(gpu, ends, oracle.clocks, name)
    if name == "sweep":
        return SweepPolicy(gpu, ends, s.sweep)
    if name == "bandit":
        return BanditPolicy(gpu, ends, s.bandit)
    if name in MODEL_POLICIES:
        if task.bundle is None:
            raise BenchInputError(f"policy {name!r} needs a model bundle for {task.sku}/{task.workload}")
        predictor = held_out_predictor(Path(task.bundle), task.held_out)
        if name == "gpoeo-paper":
            return GpoeoPaperPolicy(gpu, ends, predictor, s.paper)
        config = ControllerConfig(policy=Policy.HYBRID, objective=Objective.ENERGY, max_slowdown=s.max_slowdown)
        markers = SimulatedStepMarkers(gpu, seed=seed) if name == "gpoeo-rt-markers" else None
        return ControllerPolicy(gpu, Controller(gpu, predictor=predictor, config=config, markers=markers), name)
    raise BenchInputError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}")


def _fraction(pct: float | None) -> float | None:
    return None if pct is None else pct / 100.0


def run_workload(task: BenchTask) -> list[PolicyResult]:
    s = task.settings
    workload = s.workload(task.rows)
    oracle = oracle_for(workload, Objective.ENERGY, s.max_slowdown)
    seed = (zlib.crc32(f"{task.sku}/{task.workload}".encode()) + s.seed) % 2**31
    table = workload.clock_table()
    reference = (table.default_sm_mhz, table.default_mem_mhz)
    # The default run is simulated once: it is both the `default` policy and every other run's yardstick.
    base = job_gpu(workload, seed, s.job_s, counters=s.counters)
    base.clock.advance(s.job_s)
    default = JobTruth(base)
    results = []
    for name in task.policies:
        claimed: dict[str, float | None] = {}
        if name == "default" or (name == "oracle" and oracle.clocks == reference):
            truth, changes, probes = default, [], 0  # identical to the default run (same seed, same clocks)
        else:
            gpu = job_gpu(workload, seed, s.job_s, counters=s.counters)
            policy = make_policy(name, gpu, task, oracle, seed)
            policy.run(s.job_s)
            truth, changes, probes = JobTruth(gpu), policy.clock_changes, policy.probes
            if isinstance(policy, ControllerPolicy):
                meter = policy.claimed()
                split = meter.split()
                parts = score_parts(truth, default, meter.intervals, s.job_s)
                claimed = {
                    "claimed_saving": _fraction(meter.saving_pct),
                    "claimed_slowdown": _fraction(meter.slowdown_pct),
                    "claimed_held_saving": _fraction(split["held_saving_pct"]),
                    "held_saving": parts["held_saving"],
                    "claimed_exploration_cost": _fraction(split["exploration_cost_pct"]),
                    "exploration_cost": parts["exploration_cost"],
                }
        scored = score_job(truth, default, changes, reference, s.job_s)
        results.append(
            PolicyResult(
                sku=task.sku,
                workload=task.workload,
                policy=name,
                bundle=task.bundle if name in MODEL_POLICIES else None,
                regret=oracle.saving - scored["saving"],
                violation=scored["slowdown"] > s.max_slowdown,
                oracle_saving=oracle.saving,
                oracle_slowdown=oracle.slowdown,
                oracle_clocks=oracle.clocks,
                probes=probes,
                claimed_saving=claimed.get("claimed_saving"),
                claimed_slowdown=claimed.get("claimed_slowdown"),
                claimed_held_saving=claimed.get("claimed_held_saving"),
                held_saving=claimed.get("held_saving"),
                claimed_exploration_cost=claimed.get("claimed_exploration_cost"),
                exploration_cost=claimed.get("exploration_cost"),
                reference_clocks=reference,
                max_slowdown=s.max_slowdown,
                **scored,
            )
        )
    return results


# --- the whole bench -----------------------------------------------------------------------------------------


@dataclass
class BenchRun:
    results: list[PolicyResult]
    wall_s: float
    jobs: int
    models: dict[str, int]  # how many workloads got each kind of honest model


def run_bench(
    groups: Groups,
    policies: Sequence[str],
    settings: BenchSettings,
    *,
    folds_root: Path = Path("data/eval"),
    models_root: Path = Path("models"),
    jobs: int = 2,
    limit: int = 0,
    progress: Callable[[int, int], None] | None = None,
    models: str = "sku-folds",
) -> BenchRun:
    """Run every (sku, workload) of `groups` (at most `limit` per SKU when > 0) under `policies`; `models`: see
    resolve_bundles."""
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        raise BenchInputError(f"unknown policy {', '.join(map(repr, unknown))}; choose from {', '.join(POLICIES)}")
    keys = sorted(groups)
    if limit > 0:
        taken: dict[str, int] = {}
        kept = []
        for sku, workload in keys:
            if taken.get(sku, 0) < limit:
                taken[sku] = taken.get(sku, 0) + 1
                kept.append((sku, workload))
        keys = kept
    bundles = resolve_bundles(keys, folds_root, models_root, models) if MODEL_POLICIES & set(policies) else {}
    model_counts: dict[str, int] = {}
    for _, why, _ in bundles.values():
        model_counts[why] = model_counts.get(why, 0) + 1
    tasks = []
    for sku, w in keys:
        bundle, _, held_out = bundles.get((sku, w), (None, "", None))
        tasks.append(BenchTask(sku, w, tuple(groups[(sku, w)]), tuple(policies), settings, bundle, held_out))
    t0 = time.perf_counter()
    results: list[PolicyResult] = []
    if jobs > 1 and len(tasks) > 1:
        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            for batch in pool.imap_unordered(run_workload, tasks, chunksize=2):
                results.extend(batch)
                if progress:
                    progress(len(results) // len(policies), len(tasks))
    else:
        for task in tasks:
            results.extend(run_workload(task))
            if progress:
                progress(len(results) // len(policies), len(tasks))
    wall_s = time.perf_counter() - t0
    order = {p: i for i, p in enumerate(policies)}
    results.sort(key=lambda r: (r.sku, r.workload, order[r.policy]))
    return BenchRun(results, wall_s, jobs, model_counts)


def results_json(run: BenchRun, summary: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    payload = {
        **meta,
        "wall_s": run.wall_s,
        "jobs": run.jobs,
        "models": run.models,
        "summary": summary,
        "runs": [{k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(r).items()} for r in run.results],
    }
    return json.dumps(payload, indent=1, default=json_default)


def json_default(value: object) -> object:
    """What the bench's JSON files write for a value json cannot: numpy floats as numbers, anything else as text."""
    return float(value) if isinstance(value, np.floating) else str(value)
