#!/usr/bin/env python3
"""The simulated GPU's 50 Hz power waveform against the recorded H200 traces (docs/bench.md, "Simulator waveform
calibration").

For each case of gpoeo_rt.bench.waveform.CASES: the statistics of every recording of the phase (data/traces/h200
and data/traces/h200-live, from 2 s after the phase's first iteration) and of the simulated job (default
SimConfig, on a SimClock, at the recorded period; 36 s, median over SEEDS seeds). A simulated value marked `*`
lies outside its tolerance of the recordings' span (bench.waveform.TOLERANCES).

--detect adds a functional check: the share of 6 s windows (0.5 s apart) in which the detection layer's
detect_period finds the true period within 2%, on each recording and on the simulated job (all seeds).

Usage: python scripts/waveform_stats.py [--seeds N] [--detect] [--json] [TRACES_DIR]
       (default TRACES_DIR: data/traces)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from gpoeo_rt.bench.waveform import (
    CASES,
    STAT_NAMES,
    TOLERANCES,
    CalibrationCase,
    PhaseSamples,
    calibration_case,
    recorded_phase,
    simulate_phase,
    simulated_job,
)
from gpoeo_rt.detection import detect_period

DETECT_WINDOW_S, DETECT_STEP_S = 6.0, 0.5

_FORMATS = {"cv": "{:.3f}", "peak_ratio": "{:.0f}", "lag1": "{:+.2f}", "drift": "{:+.2f}", "wander": "{:.4f}"}
_HEADS = {"cv": "cv", "peak_ratio": "peak/med", "lag1": "lag1", "drift": "drift%/m", "wander": "wander"}


def _cell(stat: str, value: float) -> str:
    return _FORMATS.get(stat, "{:.3f}").format(value)


def _detected_share(phase: PhaseSamples) -> float:
    """Share of the phase's 6 s windows in which detect_period finds its true period within 2%."""
    t, p = phase.t_s, phase.power_w
    hits = []
    for start in np.arange(t[0], t[-1] - DETECT_WINDOW_S, DETECT_STEP_S):
        m = (t >= start) & (t < start + DETECT_WINDOW_S)
        period = detect_period(t[m], p[m]).period_s
        hits.append(period is not None and abs(period / phase.period_s - 1.0) <= 0.02)
    return float(np.mean(hits)) if hits else float("nan")


def _detection(case: CalibrationCase, traces_dir: str, seeds: int) -> dict[str, float]:
    out, first = {}, None
    for root in ("h200", "h200-live"):
        folder = Path(traces_dir) / root / case.folder
        if folder.is_dir():
            phase = recorded_phase(folder, case.phase)
            first = first or phase
            out[root] = _detected_share(phase)
    if first is None:
        return out
    job = simulated_job(case.job, first.period_s, float(np.mean(first.power_w)))
    out["simulated"] = float(np.mean([_detected_share(simulate_phase(job, 36.0, seed=s)) for s in range(seeds)]))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("traces_dir", nargs="?", default=str(Path(__file__).resolve().parents[1] / "data/traces"))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--detect", action="store_true", help="also the detector's hit rate on 6 s windows")
    parser.add_argument("--json", action="store_true", help="one JSON object per case instead of the table")
    args = parser.parse_args()
    try:
        results = [calibration_case(case, args.traces_dir, seeds=args.seeds) for case in CASES]
        detection = {c.name: _detection(c, args.traces_dir, args.seeds) for c in CASES} if args.detect else {}
    except (OSError, ValueError) as exc:
        print(f"waveform_stats: {exc}", file=sys.stderr)
        return 2
    if args.json:
        for r in results:
            out = {
                "case": r.case.name,
                "job": r.case.job,
                "role": r.case.role,
                "recorded": {root: s.to_dict() for root, s in r.recorded.items()},
                "simulated": r.simulated,
                "misses": r.misses,
            }
            if args.detect:
                out["detected_6s"] = detection[r.case.name]
            print(json.dumps(out))
        return 0
    head = f"{'':17s}" + "".join(f"{_HEADS.get(s, s):>9s}" for s in STAT_NAMES)
    tol = ", ".join(f"{s} {t.kind} {t.size:g}" for s, t in TOLERANCES.items())
    print(f"tolerances: {tol}")
    for r in results:
        print(f"\n{r.case.name} [{r.case.role}], simulated: {r.case.job}")
        print(head)
        for root, stats in r.recorded.items():
            print(f"  {root:15s}" + "".join(f"{_cell(s, getattr(stats, s)):>9s}" for s in STAT_NAMES))
        cells = [_cell(s, r.simulated[s]) + ("*" if not r.passes(s) else " ") for s in STAT_NAMES]
        print(f"  {'simulated':15s}" + "".join(f"{c:>9s}" for c in cells))
        if args.detect:
            shares = ", ".join(f"{k} {v:.0%}" for k, v in detection[r.case.name].items())
            print(f"  period found in 6 s windows: {shares}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
