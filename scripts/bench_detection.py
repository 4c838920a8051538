#!/usr/bin/env python3
"""Measure the detection layer on the shared H200 traces (runtime only: numpy).

For every trace folder under data/traces/h200 and every phase of its ground truth (iterations.csv):
- true period: median of the differences of the phase's iteration end times;
- detected: `detect_period` on the first 10 s window starting 0.5 s after the phase's first iteration (the
  folder's best power source: buffered samples, else polled power with the energy counter as reference);
- windows: over all 10 s windows of the phase (0.5 s apart), how many give the true period within 2% / null /
  a wrong number;
- phase: what the daemon concludes (`gpoeo-rt trace detect`: the trace replayed through the advise-mode controller)
  for the phases overlapping the true phase (periods, "|"-separated; null where it trusted none) and the errors of
  their outer boundaries (start vs the first iteration, end vs the last iteration or the end of the samples);
- CPU: `detect_period` on a 60 s window (the phase's samples repeated end to end when the trace is shorter),
  fastest of 50 runs of time.process_time (other processes on the machine only ever add to it).

Usage: python scripts/bench_detection.py [TRACES_DIR]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from gpoeo_rt.bench.replay import replay_phases
from gpoeo_rt.detection import detect_period
from gpoeo_rt.prediction.predictor import Predictor
from gpoeo_rt.prediction.selection import default_bundle_dirs, select_bundle
from gpoeo_rt.tracefile import read_trace

WINDOW_S = 10.0
STEP_S = 0.5


def _tile_to(t: np.ndarray, p: np.ndarray, length_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Repeat a stretch of samples end to end (shifting time) until it covers length_s."""
    span = float(t[-1] - t[0]) + float(np.median(np.diff(t)))
    reps = int(np.ceil(length_s / span))
    tt = np.concatenate([t + k * span for k in range(reps)])
    pp = np.tile(p, reps)
    keep = tt < t[0] + length_s
    return tt[keep], pp[keep]


def _cpu_ms(t: np.ndarray, p: np.ndarray, e_t: np.ndarray | None, e: np.ndarray | None) -> float:
    detect_period(t, p, energy_j=e, energy_t_s=e_t)
    best = np.inf
    for _ in range(50):
        c = time.process_time()
        detect_period(t, p, energy_j=e, energy_t_s=e_t)
        best = min(best, time.process_time() - c)
    return best * 1e3


def bench(root: Path) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    bundles = next(d for d in default_bundle_dirs() if d.is_dir())
    predictor = Predictor(select_bundle(bundles, "NVIDIA H200").manifest)
    for folder in sorted(d for d in root.iterdir() if d.is_dir()):
        trace = read_trace(folder)
        if trace.iterations is None:
            continue
        t, p = trace.power.t_s, trace.power.power_w
        energy = trace.energy
        e_t = None if energy is None else energy.t_s
        e = None if energy is None else energy.energy_j
        daemon = [ph for ph in replay_phases(folder, predictor) if ph.conclusion != "idle"]
        for truth in trace.iterations.phases():
            start = truth.start_s + 0.5
            stop = min(truth.end_s, float(t[-1]))
            m = (t >= start) & (t < start + WINDOW_S)
            est = detect_period(t[m], p[m], energy_j=e, energy_t_s=e_t) if m.sum() > 1 else None
            ok = null = wrong = 0
            for s in np.arange(start, stop - WINDOW_S + 1e-9, STEP_S):
                w = (t >= s) & (t < s + WINDOW_S)
                r = detect_period(t[w], p[w], energy_j=e, energy_t_s=e_t)
                if r.period_s is None:
                    null += 1
                elif abs(r.period_s / truth.period_s - 1) <= 0.02:
                    ok += 1
                else:
                    wrong += 1
            # Detected phases overlapping the true one by 3 s or more: their periods, and the boundary errors
            # of the first and last of them (the end measured against the end of the samples when the
            # recording of power stopped before training did).
            inside = [ph for ph in daemon if min(ph.end_s, stop) - max(ph.start_s, truth.start_s) >= 3.0]
            phase_ms = "|".join("null" if ph.period_s is None else f"{ph.period_s * 1e3:.1f}" for ph in inside)
            bounds = f"{inside[0].start_s - truth.start_s:+.1f}/{inside[-1].end_s - stop:+.1f}" if inside else "-"
            ph_m = (t >= truth.start_s) & (t <= stop)
            tt, pp = (t[ph_m], p[ph_m]) if ph_m.sum() > 10 else (t, p)
            t60, p60 = _tile_to(tt, pp, 60.0)
            rows.append(
                {
                    "trace": folder.name,
                    "source": trace.power.source,
                    "phase": truth.phase,
                    "true_ms": truth.period_s * 1e3,
                    "detected_ms": None if est is None or est.period_s is None else est.period_s * 1e3,
                    "verdict": "-" if est is None else est.verdict.value,
                    "samples": 0 if est is None else est.samples_used,
                    "windows": f"{ok}/{null}/{wrong}",
                    "phase_ms": phase_ms,
                    "bounds": bounds,
                    "cpu60_ms": _cpu_ms(t60, p60, e_t, e),
                }
            )
    return rows


def main() -> None:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "data/traces/h200"
    rows = bench(root)
    head = (
        f"{'trace':32s} {'src':8s} {'ph':>2s} {'true ms':>8s} {'detected':>9s} {'err %':>7s} {'verdict':17s} "
        f"{'samples':>7s} {'10s windows ok/null/wrong':>25s} {'phase ms':>14s} {'phase bounds s':>14s} "
        f"{'CPU 60s ms':>10s}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        det = r["detected_ms"]
        det_s = "null" if det is None else f"{det:.2f}"
        err = "-" if det is None else f"{(float(det) / float(r['true_ms']) - 1) * 100:+.2f}"  # type: ignore[arg-type]
        print(
            f"{r['trace']:32s} {r['source']:8s} {r['phase']:>2} {r['true_ms']:8.2f} {det_s:>9s} {err:>7s} "
            f"{r['verdict']:17s} {r['samples']:>7} {r['windows']:>25s} {r['phase_ms']:>14s} {r['bounds']:>14s} "
            f"{r['cpu60_ms']:10.2f}"
        )


if __name__ == "__main__":
    main()
