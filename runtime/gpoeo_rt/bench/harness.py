"""What every evaluation on simulated jobs shares: the simulated GPU of a job, the ground truth read after it, the
oracle of a sweep's clock table, and the honest (held-out) models. Used by the bench runner and by the
controller's own harness (`gpoeo_rt.bench.simulate`); only scoring code reads the truth, never a policy."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpoeo_rt.controller.controller import Controller
from gpoeo_rt.device import SimConfig, SimulatedGPU, SweepWorkload
from gpoeo_rt.prediction.bundle import verify_bundle
from gpoeo_rt.prediction.predictor import Predictor
from gpoeo_rt.search.objectives import Objective, pick_config

FOLD_INDEX = Path("folds/index.json")


# --- the simulated job and its truth --------------------------------------------------------------------------


def job_gpu(
    workload: SweepWorkload,
    seed: int,
    duration_s: float,
    *,
    subsample_jitter: bool = False,
    counters: str = "realistic",
) -> SimulatedGPU:
    """A clock-writable simulated GPU that keeps the whole job's history, so energy and iteration counts can be
    read at any time afterwards (`JobTruth`). `subsample_jitter`, `counters`: see SimConfig (by default the GPU
    presents counters only where a real one of its SKU has NVML GPM)."""
    config = SimConfig(history_s=duration_s + 120.0, subsample_jitter=subsample_jitter, counters=counters)
    return SimulatedGPU(workload, seed=seed, allow_clock_writes=True, config=config)


class JobTruth:
    """Energy and iterations at any time of a finished simulation (the GPU keeps its whole history)."""

    def __init__(self, gpu: SimulatedGPU) -> None:
        self._gpu = gpu
        rec = gpu.truth.iterations()
        self._ends = rec.t_s
        self._first = int(rec.iteration[0]) - 1 if len(rec) else gpu.truth.iterations_completed

    def energy_j(self, t_s: float) -> float:
        return self._gpu.truth.energy_j(at_s=t_s)

    def iterations(self, t_s: float) -> int:
        return self._first + int(np.searchsorted(self._ends, t_s, side="right"))


def decided_clock_changes(controller: Controller) -> list[tuple[float, int, int]]:
    """The controller's clock changes (t_s, sm, mem) without its drift checks' excursions (to reference and back
    to the held config at the `drift_check` decision): what it decided, so `converge_s` is when its final config was
    chosen. The excursions' cost stays in the truth's energy and time."""
    checks = {d.t_s for d in controller.decisions if d.event == "drift_check"}
    changes = [(t, sm, mem) for t, sm, mem, _ in controller.clock_changes]
    kept: list[tuple[float, int, int]] = []
    for change in changes:
        if change[0] in checks and len(kept) >= 2 and kept[-2][1:] == change[1:]:
            kept.pop()  # the departure to reference; the return is the config already held
            continue
        kept.append(change)
    return kept


# --- the oracle ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Oracle:
    """The best config of the workload's clock table within the bound (ratios to the reference clocks)."""

    clocks: tuple[int, int]
    saving: float
    slowdown: float
    table: dict[tuple[int, int], tuple[float, float]]  # clocks -> (time ratio, energy ratio)


def oracle_for(workload: SweepWorkload, objective: Objective, max_slowdown: float) -> Oracle:
    """The best config of the workload's clock table within the bound (measured clocks: the sweep's rows; a
    `grid` table: the interpolated model the simulator runs, which is the truth there), as ratios to the
    reference clocks."""
    table = workload.clock_table()
    clocks = list(table.pairs())
    t_ref, p_ref = workload.time_power(table.default_sm_mhz, table.default_mem_mhz)
    tp = np.array([workload.time_power(sm, mem) for sm, mem in clocks])
    time_ratio = tp[:, 0] / t_ref
    energy_ratio = tp[:, 0] * tp[:, 1] / (t_ref * p_ref)  # mean power x iteration time, as the simulator makes it
    best = pick_config(objective, time_ratio, energy_ratio, max_slowdown)
    ratios = {c: (float(t), float(e)) for c, t, e in zip(clocks, time_ratio, energy_ratio, strict=True)}
    return Oracle(clocks[best], 1.0 - float(energy_ratio[best]), float(time_ratio[best]) - 1.0, ratios)


# --- honest models ------------------------------------------------------------------------------------------


def fold_bundles(folds_root: Path, name: str) -> dict[str, Path]:
    """held-out key (workload, or SKU for the generic model) -> the bundle directory whose models never saw it,
    from `<folds_root>/<name>/folds/index.json`."""
    index_path = folds_root / name / FOLD_INDEX
    if not index_path.exists():
        raise FileNotFoundError(
            f"{index_path}: no leave-out fold index (run `dvc repro` to build the fold bundles, or pass --bundle)"
        )
    raw = json.loads(index_path.read_text())
    # {"key": "workload", "folds": {workload: fold_dir}} (the pipeline's index), or a bare mapping.
    mapping = raw.get("folds", raw) if isinstance(raw, dict) else None
    if not isinstance(mapping, dict):
        raise ValueError(f"{index_path}: expected a JSON object mapping workload -> fold directory")
    return {str(w): index_path.parent / str(fold) for w, fold in mapping.items()}


_PREDICTORS: dict[str, Predictor] = {}


def held_out_predictor(bundle: Path, held_out: str | None = None) -> Predictor:
    """The bundle's predictor (one per process and bundle: sessions are reused across workloads). With
    `held_out`, refuse a fold bundle whose manifest does not list it as held out (its models saw it)."""
    key = str(bundle.resolve())
    if key not in _PREDICTORS:
        _PREDICTORS[key] = Predictor(verify_bundle(bundle))
    predictor = _PREDICTORS[key]
    listed = predictor.manifest.raw.get("held_out")
    if held_out is not None and listed is not None and held_out not in listed:
        raise ValueError(f"{bundle}: fold bundle does not hold out {held_out!r}: its models saw it")
    return predictor


# --- scoring ------------------------------------------------------------------------------------------------


def score_job(
    truth: JobTruth,
    default: JobTruth,
    changes: list[tuple[float, int, int]],
    reference: tuple[int, int],
    duration_s: float,
) -> dict[str, Any]:
    """Whole-job figures of one run against the default-clock run of the same job (both from the truth):
    - saving: 1 - (energy per iteration) / (the default run's), exploration included;
    - slowdown: the default run's iterations / this run's - 1 (same duration);
    - converge_s: time of the last clock change (`changes`: (t_s, sm, mem) in order), whose config is final;
    - exploration: energy until converge_s beyond what the final config would have used for those iterations."""
    e_run, n_run = truth.energy_j(duration_s), truth.iterations(duration_s)
    e_def, n_def = default.energy_j(duration_s), default.iterations(duration_s)
    changes = [c for c in changes if c[0] < duration_s]
    converge_s = changes[-1][0] if changes else 0.0
    final = (changes[-1][1], changes[-1][2]) if changes else reference
    e_conv, n_conv = truth.energy_j(converge_s), truth.iterations(converge_s)
    per_iteration_final = (e_run - e_conv) / max(n_run - n_conv, 1)
    exploration_j = e_conv - n_conv * per_iteration_final
    return {
        "saving": 1.0 - (e_run / n_run) / (e_def / n_def),
        "slowdown": n_def / n_run - 1.0,
        "final_clocks": final,
        "converge_s": converge_s,
        "exploration_j": exploration_j,
        "exploration_frac": exploration_j / e_def,
        "clock_changes": len(changes),
    }


def score_parts(
    truth: JobTruth,
    default: JobTruth,
    intervals: list[tuple[float, float, str, bool]],
    duration_s: float,
    phase_starts: tuple[float, ...] = (),
) -> dict[str, float | None]:
    """The truth of what the runtime reports (accounting.SavingsMeter), over the same seconds: `intervals` are the
    meter's (start, end, part, counted). Work is counted in reference-seconds, as the meter counts it: in each job
    phase (`phase_starts`: when each phase after the first begins), the run's iterations times the default run's
    time per iteration over the same seconds (the same thermal state), and their energy at reference likewise. For a
    job of one phase this is score_job's per-iteration figure; for a job whose phases have different iterations,
    an iteration of one phase is not one of another, and only this comparison means something.
    - saving, slowdown: the whole job's (used / reference joules, time / reference-seconds of work);
    - held_saving: 1 - used / reference joules over the held seconds (None: none);
    - exploration_cost: what the exploring seconds used beyond reference, as a fraction of the whole job's
      reference joules."""
    edges = sorted({0.0, *(t for t in phase_starts if 0.0 < t < duration_s), duration_s})

    def sums(ranges: list[tuple[float, float]]) -> tuple[float, float, float]:
        """(used joules, reference-seconds of work, reference joules) over `ranges`, phase by phase."""
        per_phase: dict[int, list[float]] = {}
        for start, end in ranges:
            for k, (lo, hi) in enumerate(itertools.pairwise(edges)):
                a, b = max(start, lo), min(end, hi)
                if b <= a:
                    continue
                acc = per_phase.setdefault(k, [0.0, 0.0, 0.0, 0.0, 0.0])  # run J, run its, default J, its, s
                acc[0] += truth.energy_j(b) - truth.energy_j(a)
                acc[1] += truth.iterations(b) - truth.iterations(a)
                acc[2] += default.energy_j(b) - default.energy_j(a)
                acc[3] += default.iterations(b) - default.iterations(a)
                acc[4] += b - a
        used = work = reference = 0.0
        for run_j, run_its, def_j, def_its, seconds in per_phase.values():
            used += run_j
            if def_its > 0:
                work += run_its * seconds / def_its
                reference += run_its * def_j / def_its
        return used, work, reference

    whole = sums([(0.0, duration_s)])
    parts = {
        part: sums([(a, min(b, duration_s)) for a, b, p, _ in intervals if p == part and a < duration_s])
        for part in ("held", "exploring")
    }
    held, exploring = parts["held"], parts["exploring"]
    return {
        "saving": None if whole[2] <= 0 else 1.0 - whole[0] / whole[2],
        "slowdown": None if whole[1] <= 0 else duration_s / whole[1] - 1.0,
        "held_saving": None if held[2] <= 0 else 1.0 - held[0] / held[2],
        "exploration_cost": None if whole[2] <= 0 else (exploring[0] - exploring[2]) / whole[2],
    }
