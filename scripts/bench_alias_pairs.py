#!/usr/bin/env python3
"""How often consecutive profiling windows of fast jobs' aliases would pair: by one method (a fold with a fold, a
count with a count, within 10%), by the fold/count rule (within 2%, and the count over both windows within 2%
of each), by the fold-then-count rule (a window with a folded period, then one without: the count over both
within 2% of the fold) and by its mirror, the none-then-fold rule (a window without a period, then one with a
folded period: likewise). The jobs: the 100 wandering 22-40 ms jobs of tests/runtime/test_period.py (same
generator and seed), 60 s long, cut into consecutive 3, 6 and 12 s windows. Pure detection, no controller: it
bounds how much the fold/count, fold-then-count and none-then-fold rules add to what pairing by one method already
lets through (docs/jitter.md, sessions 7, 12 and 13).

Usage: python scripts/bench_alias_pairs.py [--rows]
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gpoeo_rt.controller import ControllerConfig
from gpoeo_rt.detection import count_confirms, detect_period
from tests.runtime.synth import sample, wandering_fast_jobs

AGREEMENT = ControllerConfig().period_agreement  # the profiling rule's (2%)


def _row(job: int, period_s: float, length_s: float, pair: str) -> str:
    """One accepted alias pair (--rows)."""
    return f"job {job}: {period_s * 1e3:.1f} ms iterations, {length_s:g} s windows: {pair}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--rows", action="store_true", help="print every pair that a count rule accepts")
    args = ap.parse_args()
    windows = same = mixed = accepted = 0
    # A fold next to a window without a period: (fold first?) -> [pairs, accepted by the joint count]
    beside = {True: [0, 0], False: [0, 0]}
    for i, job in enumerate(wandering_fast_jobs(duration_s=60.0)):
        period = job.period_s
        t, p = sample(job)
        for length in (3.0, 6.0, 12.0):
            cuts = [(t >= a) & (t < a + length) for a in np.arange(t[0], t[-1] - length, length)]
            ests = [(detect_period(t[k], p[k]), k) for k in cuts]
            windows += len(ests)
            for (e1, k1), (e2, k2) in itertools.pairwise(ests):
                for fold_first, fold, other in ((True, e1, e2), (False, e2, e1)):
                    if not (fold.ok and fold.period_s and fold.method == "fold" and not other.ok):
                        continue
                    beside[fold_first][0] += 1
                    both = (fold.period_s, fold.period_s)
                    if count_confirms(t[k1 | k2], p[k1 | k2], both, agreement=AGREEMENT) is not None:
                        beside[fold_first][1] += 1
                        if args.rows:
                            fold_ms = f"fold {fold.period_s * 1e3:.1f} ms"
                            pair = f"{fold_ms}, then none" if fold_first else f"none, then {fold_ms}"
                            print(_row(i, period, length, pair))
                if not (e1.ok and e2.ok and e1.period_s and e2.period_s):
                    continue
                gap = abs(e2.period_s / e1.period_s - 1.0)
                if (e1.method == "fold") == (e2.method == "fold"):
                    same += gap <= 0.10
                    continue
                if gap > AGREEMENT:
                    continue
                mixed += 1
                periods = (e1.period_s, e2.period_s)
                if count_confirms(t[k1 | k2], p[k1 | k2], periods, agreement=AGREEMENT) is not None:
                    accepted += 1
                    if args.rows:
                        print(_row(i, period, length, f"fold/count {periods[0] * 1e3:.1f} / {periods[1] * 1e3:.1f} ms"))
    print(
        f"{windows} windows; consecutive pairs by one method within 10%: {same}; "
        f"fold and count within 2%: {mixed}, of which the joint count accepts {accepted}; a fold, then none: "
        f"{beside[True][0]}, of which the joint count accepts {beside[True][1]}; none, then a fold: "
        f"{beside[False][0]}, of which the joint count accepts {beside[False][1]}"
    )


if __name__ == "__main__":
    main()
