"""Where a window's activity ends or changes: the idle tail of a window of power samples, and the shift of its
power level between its halves (pure numpy).

A job that ends (or pauses) inside a window leaves its last stretch at the idle level. Measured over such a window,
the idle tail counts as one long iteration (a host stall) and the mean power falls: on the real gpt_32_0-80 job a
0.55 s tail made a 3.45 s window's count 10% long and the baseline 5.3% off (docs/jitter.md, session 6).

A host stall looks the same as idle in power (an H200 drops to its ~125 W idle within 60 ms), so the tail is told
from a stall by length against the window's own stalls: it must last `min_tail_s` and more than `tail_factor` times
the longest low stretch elsewhere in the window. A long stall mid-window is never a tail; a stall that the window
ends in is called one only when it is much longer than every other stall in the window (real heavy-tailed jobs: in
about 1% of their windows).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


def idle_tail_s(
    t_s: FloatArray,
    power_w: FloatArray,
    *,
    low_share: float = 0.25,
    tail_factor: float = 2.0,
    min_tail_s: float = 0.2,
    min_swing: float = 1.3,
) -> float:
    """Seconds of idle at the end of the window (samples in time order), or 0.0 when its end does not look idle.

    Low: under floor + low_share x (active - floor), the floor being the window's lowest sample and the active
    level the median of the samples above the mean. A window whose active level is under min_swing x its floor
    varies too little to tell (idle, or steady without stalls): 0.0."""
    t, p = _finite(t_s, power_w)
    if len(p) < 10:
        return 0.0
    floor = float(p.min())
    active = float(np.median(p[p > p.mean()])) if (p > p.mean()).any() else floor
    if floor <= 0.0 or active < min_swing * floor:
        return 0.0
    low = p < floor + low_share * (active - floor)
    tail = len(low) - int(np.flatnonzero(~low)[-1]) - 1 if not low.all() else len(low)
    body = low[: len(low) - tail]
    # The longest run of low samples inside the window (before its tail).
    edges = np.diff(np.concatenate([[0], body.astype(np.int8), [0]]))
    longest = int((np.flatnonzero(edges == -1) - np.flatnonzero(edges == 1)).max()) if body.any() else 0
    dt = float(np.median(np.diff(t)))
    tail_s = tail * dt
    return tail_s if tail_s >= min_tail_s and tail > tail_factor * longest else 0.0


def level_shift(t_s: FloatArray, power_w: FloatArray) -> float:
    """The change of mean power from the window's first half (in time) to its second, relative to the window's mean
    power; 0.0 when either half is empty. A job that starts or changes phase inside the window shifts it as much as
    a phase change shifts a whole window (the phase model's level tolerance); stalls spread over it do not."""
    t, p = _finite(t_s, power_w)
    if len(p) < 2:
        return 0.0
    first = t < 0.5 * (t[0] + t[-1])
    mean = float(p.mean())
    if not first.any() or first.all() or mean <= 0.0:
        return 0.0
    return abs(float(p[~first].mean()) - float(p[first].mean())) / mean


def _finite(t_s: FloatArray, power_w: FloatArray) -> tuple[FloatArray, FloatArray]:
    """The samples whose time and power are both finite, in their order."""
    t = np.asarray(t_s, dtype=float)
    p = np.asarray(power_w, dtype=float)
    keep = np.isfinite(t) & np.isfinite(p)
    return t[keep], p[keep]
