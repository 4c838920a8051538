#!/usr/bin/env python3
"""How late the controller sees phase changes, on simulated phase-change jobs (simulated time, no hardware).

Each job of bench_claims.PHASED (plus the short membound > gpt > membound of the controller test) runs once per
seed with the shipped Controller and the small test bundle (markers off, 5% bound). The figure per change is the
time from the change to the first `phase_change` decision after it (None: not seen before the job ended), and any
phase change more than 200 s from every real one (false).

Usage: python scripts/bench_phase_delay.py [--seeds 0-7]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_claims import PHASED

from gpoeo_rt.controller import Controller
from gpoeo_rt.device import SimConfig, SimulatedGPU, preset_workload
from gpoeo_rt.prediction.bundle import verify_bundle
from gpoeo_rt.prediction.predictor import Predictor
from tests.bundles import write_bundle

JOBS = {"membound>gpt>membound (test, 330 s)": [(0.0, "membound"), (100.0, "gpt"), (220.0, "membound")], **PHASED}


def delays(schedule: list[tuple[float, str]], seed: int, predictor: Predictor) -> tuple[list[float | None], int]:
    """Seconds from each change to its detection, and the count of false phase changes."""
    job_s = 330.0 if schedule[-1][0] < 300.0 else schedule[-1][0] + 150.0
    jobs = [(t, preset_workload(name)) for t, name in schedule]
    gpu = SimulatedGPU(jobs, seed=seed, allow_clock_writes=True, config=SimConfig(history_s=job_s + 120.0))  # type: ignore[arg-type]
    controller = Controller(gpu, predictor=predictor)
    controller.run(job_s)
    seen = [d.t_s for d in controller.decisions if d.event == "phase_change"]
    starts = [t for t, _ in schedule[1:]]
    out: list[float | None] = []
    for t0 in starts:
        after = [t for t in seen if t > t0]
        out.append(round(after[0] - t0, 1) if after else None)
    false = sum(1 for t in seen if not any(t0 < t <= t0 + 200.0 for t0 in starts))
    return out, false


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--seeds", default="0-7", help="first-last seed (default 0-7)")
    args = ap.parse_args()
    first, last = (int(s) for s in args.seeds.split("-"))
    with tempfile.TemporaryDirectory() as tmp:
        predictor = Predictor(verify_bundle(write_bundle(Path(tmp) / "b")))
        for name, schedule in JOBS.items():
            rows = [delays(schedule, seed, predictor) for seed in range(first, last + 1)]
            for k in range(len(schedule) - 1):
                got = [r[0][k] for r in rows]
                found = [d for d in got if d is not None]
                mean = f"{statistics.mean(found):.1f}" if found else "-"
                worst = f"{max(found):.1f}" if found else "-"
                print(f"{name} change {k + 1}: delays {json.dumps(got)} s; mean {mean}, worst {worst}")
            print(f"{name}: false phase changes {sum(r[1] for r in rows)}")


if __name__ == "__main__":
    main()
