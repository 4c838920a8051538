"""Is the slow variation of the power samples real? The energy counter's interval averages against the samples'.

The driver's 50 Hz power samples are near-instantaneous, so iterations faster than 40 ms alias onto slow patterns
that look like a slower, jittery job's (docs/jitter.md, session 13: every jittery job has such a steady twin with
identical samples). The energy counter integrates the power continuously: over each of its ~100 ms intervals, the
mean of a real slow variation is in the counter, and an alias is not (measured: docs/jitter.md, session 23).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpoeo_rt.detection.period import _DETREND_DEGREE  # the slow trend left out: the detector's own

FloatArray = npt.NDArray[np.float64]

# A counter reading reflects its last 10 Hz refresh, up to one refresh (plus a read's latency) before it was read.
_LAGS_S = np.arange(0.0, -0.151, -0.01)
# Two consecutive intervals this short together (in typical intervals) are one split by a read off the grid.
_JOINED_SPAN = 1.25


@dataclass(frozen=True)
class CounterCheck:
    """The samples' interval means against the energy counter's, at the lag where they agree best."""

    correlation: float
    real_share: float  # 1 - var(samples' means - counter's means) / var(samples' means)
    swing: float  # std of the samples' interval means / their mean power
    intervals: int
    lag_s: float

    def confirms(self, *, min_real_share: float = 0.6, min_swing: float = 0.05) -> bool:
        """The samples vary enough to tell (min_swing), and the counter holds most of that variation. The share,
        not the correlation, tells: a twin's counter means follow the samples' at a fraction of their size
        (correlation up to 0.93, share at most 0.41 in 288 windows of constructed twins), a real job's at full size
        (recorded jobs with host stalls: median window 0.96; docs/jitter.md, session 23)."""
        return self.swing >= min_swing and self.real_share >= min_real_share


def counter_check(
    t_s: npt.ArrayLike,
    power_w: npt.ArrayLike,
    energy_t_s: npt.ArrayLike,
    energy_j: npt.ArrayLike,
    *,
    min_intervals: int = 20,
) -> CounterCheck | None:
    """Compare the power samples' means over the energy counter's refresh intervals with the counter's own (None:
    too few intervals inside the samples' span, or samples that do not vary). Readings that repeat the previous
    value (read faster than the counter refreshes) and intervals over 1.5x the typical one (a pause) are left out."""
    t = np.asarray(t_s, dtype=np.float64).ravel()
    p = np.asarray(power_w, dtype=np.float64).ravel()
    te = np.asarray(energy_t_s, dtype=np.float64).ravel()
    ej = np.asarray(energy_j, dtype=np.float64).ravel()
    if len(t) != len(p) or len(te) != len(ej) or len(t) < 8 or len(te) < min_intervals + 1:
        return None  # windows read once (all but profiling's) end here, before any work on their samples
    ok = np.isfinite(t) & np.isfinite(p)
    t, p = t[ok], p[ok]
    order = np.argsort(t, kind="stable")
    t, p = t[order], p[order]
    ok = np.isfinite(te) & np.isfinite(ej)
    te, ej = te[ok], ej[ok]
    order = np.argsort(te, kind="stable")
    te, ej = te[order], ej[order]
    # A read that repeats the last value saw no refresh: the reads sat on the counter's refresh, so the reads
    # around it may each have seen either side of it. Only fresh values count, and intervals that end at a read
    # just before a repeat are left out.
    fresh = np.concatenate(([True], np.diff(ej) != 0)) if len(ej) else np.zeros(0, dtype=bool)
    doubtful = np.concatenate((~fresh[1:], [False]))
    te, ej, doubtful = te[fresh], ej[fresh], doubtful[fresh]
    if len(te) < min_intervals + 1 or len(t) < 8:
        return None
    # Windows joined into one keep each window's last read, off the reads' grid: it splits one refresh interval in
    # two short ones at a point the lag search cannot place. Such a read is left out (its neighbours are one
    # interval apart), so joined windows are read as one window is.
    read_step = float(np.median(np.diff(te)))
    joined = np.zeros(len(te), dtype=bool)
    joined[1:-1] = (te[2:] - te[:-2]) <= _JOINED_SPAN * read_step
    te, ej, doubtful = te[~joined], ej[~joined], doubtful[~joined]
    # The samples' running integral (trapezoids), to average them over any interval.
    cum = np.concatenate(([0.0], np.cumsum(0.5 * (p[1:] + p[:-1]) * np.diff(t))))
    width = np.diff(te)
    typical = float(np.median(width))
    e_mean = np.diff(ej) / np.where(width > 0, width, np.nan)
    best: CounterCheck | None = None
    for lag in _LAGS_S:
        a, b = te[:-1] + lag, te[1:] + lag
        use = (a >= t[0]) & (b <= t[-1]) & (width > 0) & (width <= 1.5 * typical) & (e_mean >= 0) & ~doubtful[1:]
        if use.sum() < min_intervals:
            continue
        s_raw = (np.interp(b[use], t, cum) - np.interp(a[use], t, cum)) / width[use]
        level = float(s_raw.mean())
        # The variation the detector reads: both without their slow trend (the detector's detrending degree).
        mid = 0.5 * (a[use] + b[use])
        u = 2.0 * (mid - mid[0]) / max(float(mid[-1] - mid[0]), 1e-9) - 1.0
        s_mean = s_raw - np.polynomial.polynomial.polyval(
            u, np.polynomial.polynomial.polyfit(u, s_raw, _DETREND_DEGREE)
        )
        c_raw = e_mean[use]
        c_mean = c_raw - np.polynomial.polynomial.polyval(
            u, np.polynomial.polynomial.polyfit(u, c_raw, _DETREND_DEGREE)
        )
        sd = float(s_mean.std())
        if not (level > 0 and sd > 1e-9 * level and float(c_mean.std()) > 1e-9 * level):
            continue
        corr = float(np.corrcoef(s_mean, c_mean)[0, 1])
        diff = s_mean - c_mean
        check = CounterCheck(corr, 1.0 - float(diff.var()) / sd**2, sd / level, int(use.sum()), float(lag))
        if best is None or check.correlation > best.correlation:
            best = check
    return best if best is not None and math.isfinite(best.correlation) else None
