#!/usr/bin/env python3
"""How often the idle-tail rule (gpoeo_rt.detection.idle_tail_s) fires on windows inside a job, and how soon after
a job's end it catches a window that runs into idle, on recorded buffered power with ground truth.

For each recording and window length (3, 3.45, 6, 12 s): every window ending every 50 ms inside a phase (from the
phase's start + the window + 0.5 s to its end): how many have an idle tail (false fires: host stalls at the
window's end); and windows ending 0.1, 0.2, 0.3, 0.55, 1 and 2 s after the phase's last iteration: which are
caught ('x') or not ('.'), in that order (column 'after').

Usage: python scripts/bench_idle_tail.py [TRACE_FOLDER ...]  (default: data/traces/h200*/*)
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from gpoeo_rt.detection import idle_tail_s
from gpoeo_rt.tracefile import read_buffered_power, read_iterations

HERE = Path(__file__).resolve().parents[1]
LENGTHS_S = (3.0, 3.45, 6.0, 12.0)
AFTER_END_S = (0.1, 0.2, 0.3, 0.55, 1.0, 2.0)


def main() -> None:
    folders = [Path(a) for a in sys.argv[1:]] or sorted(HERE.glob("data/traces/h200*/*/"))
    print(f"{'recording':33s} {'window':>6s} {'fired':>16s}  after")
    for folder in folders:
        power, iterations = read_buffered_power(folder), read_iterations(folder)
        if power is None or iterations is None:
            continue
        t, p = power.t_s, power.power_w
        for phase in iterations.phases():
            for length in LENGTHS_S:
                ends = np.arange(phase.start_s + length + 0.5, phase.end_s, 0.05)
                fired = sum(idle_tail_s(t[m], p[m]) > 0 for e in ends if (m := (t > e - length) & (t <= e)).any())
                caught = "".join(
                    "x" if idle_tail_s(t[m], p[m]) > 0 else "."
                    for d in AFTER_END_S
                    for m in [(t > phase.end_s + d - length) & (t <= phase.end_s + d)]
                )
                name = f"{folder.parent.name}/{folder.name} p{phase.phase}"
                print(f"{name:33s} {length:6.2f} {fired:>6d} of {len(ends):>6d}  {caught}")


if __name__ == "__main__":
    main()
