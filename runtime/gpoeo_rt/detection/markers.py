"""Time per iteration from step markers: the timestamps a training loop sends at the end of each iteration.

Pure numeric, like the rest of the detection layer. A window's period is its mean inter-marker interval over whole
iterations, (last - first) / (steps between them), where steps come from the sender's step counter so that a lost
marker does not lengthen the period. The mean (not the median) is what energy per iteration needs: a host stall
inside the window is part of the job's time per iteration.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from gpoeo_rt.detection.period import PeriodEstimate, Verdict

MARKERS = "markers"
SIGNAL = "signal"


def period_from_markers(
    t_s: npt.ArrayLike,
    seq: npt.ArrayLike,
    *,
    start_s: float,
    end_s: float,
    level_w: float = math.nan,
    min_intervals: int = 10,
    min_coverage: float = 0.75,
    max_period_s: float = math.inf,
) -> PeriodEstimate:
    """The period from the markers inside [start_s, end_s], or a non-OK estimate saying why there is none.

    OK needs at least `min_intervals` whole iterations between the first and the last marker, and those markers
    must span `min_coverage` of the window: a job that stopped marking half-way (or started to) does not get a
    period from half a window. `level_w` (the window's mean power) is carried so that phase-change checks can
    compare levels as they do with the signal's estimates.
    """
    t = np.asarray(t_s, dtype=np.float64)
    steps = np.asarray(seq, dtype=np.int64)
    window_s = end_s - start_s
    if t.shape != steps.shape or t.ndim != 1:
        return _none(Verdict.BAD_INPUT, f"marker times {t.shape} and steps {steps.shape} differ", start_s, level_w)
    inside = (t >= start_s) & (t <= end_s)
    t, steps = t[inside], steps[inside]
    if len(t) < 2:
        return _none(Verdict.INSUFFICIENT_DATA, f"{len(t)} step marker(s) in the window", start_s, level_w, window_s)
    span_s = float(t[-1] - t[0])
    intervals = int(steps[-1] - steps[0])
    if intervals <= 0 or span_s <= 0:  # a counter that went backwards (a restarted job): count markers instead
        intervals = len(t) - 1
    if intervals < min_intervals:
        return _none(
            Verdict.INSUFFICIENT_DATA,
            f"{intervals} iterations between step markers, fewer than {min_intervals}",
            start_s,
            level_w,
            window_s,
        )
    if window_s > 0 and span_s < min_coverage * window_s:
        return _none(
            Verdict.INSUFFICIENT_DATA,
            f"step markers cover {span_s:.2f} s of a {window_s:.2f} s window (the job marked only part of it)",
            start_s,
            level_w,
            window_s,
        )
    period = span_s / intervals
    if period > max_period_s:
        return _none(
            Verdict.APERIODIC, f"{period:.2f} s per marked step exceeds {max_period_s:g} s", start_s, level_w, window_s
        )
    return PeriodEstimate(
        period_s=period,
        confidence=1.0,
        verdict=Verdict.OK,
        message=f"{intervals} iterations from {len(t)} step markers",
        samples_used=len(t),
        window_s=span_s,
        start_s=float(t[0]),
        level_w=level_w,
        timing=MARKERS,
        method=MARKERS,
    )


def _none(verdict: Verdict, message: str, start_s: float, level_w: float, window_s: float = 0.0) -> PeriodEstimate:
    return PeriodEstimate(
        period_s=None,
        confidence=0.0,
        verdict=verdict,
        message=message,
        window_s=window_s,
        start_s=start_s,
        level_w=level_w,
        timing=MARKERS,
        method=MARKERS,
    )
