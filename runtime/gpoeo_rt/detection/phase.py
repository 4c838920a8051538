"""Phase-change detection: where a long power signal changes its level or its iteration period (pure numpy).

Two kinds of change, found separately and merged:
- Level: power block means (0.5 s) are segmented by binary segmentation. A split is kept when the two sides differ
  by a relative amount *and* by many noise standard errors, so that iteration waveforms and slow drift are not
  taken for phases. Level boundaries are precise (about one block).
- Period: the period is tracked over sliding windows; a run of windows with one period that gives way to another
  period (or to "no resolvable period", or back) is a change. Its position is bracketed by the last window that
  saw the old period and the first that saw the new one; a level boundary inside the bracket pins it.
Each resulting phase is then analysed as a whole by `detect_period_uniform`.

`has_changed` is the online check for the controller: one new window against a reference estimate.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from gpoeo_rt.detection.period import (
    DetectorConfig,
    PeriodEstimate,
    UniformSignal,
    Verdict,
    average_power_from_energy,
    detect_period,
    detect_period_uniform,
    fold_r2,
    prepare_signal,
)

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class PhaseConfig:
    """Thresholds of phase detection."""

    block_s: float = 0.5  # resolution of level changes
    min_phase_s: float = 3.0  # shorter stretches are merged into a neighbour
    # A level change must be this large relative to the lower level... (training vs another workload: 20-40%;
    # one job's drift over a minute: a few %)
    level_rel_change: float = 0.08
    level_sigma: float = 8.0  # ... and this many standard errors of the block means
    # Sliding windows that track the period: long enough that a weak but real period (the transformer trace's
    # 257 ms) is found in nearly every one; a failed window inside a phase would look like a change.
    track_window_s: float = 8.0
    track_step_s: float = 1.0
    period_rel_change: float = 0.08  # two periods differing by more are different phases
    # Each phase's own period comes from at most this much of its middle (the detector's cost grows with length,
    # and a long phase is better summarised by its centre than by its possibly drifting edges).
    max_analysis_s: float = 30.0
    edge_trim_s: float = 0.5  # left out at each phase edge when analysing it (transients)
    detector: DetectorConfig = field(default_factory=DetectorConfig)


@dataclass(frozen=True)
class Phase:
    """A stretch with one power level and one period (or one "no resolvable period" verdict)."""

    start_s: float
    end_s: float
    period_s: float | None
    confidence: float
    verdict: Verdict
    level_w: float
    message: str

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s

    def to_dict(self) -> dict[str, object]:
        """JSON-ready: period_s is null when no period is resolvable."""
        return {
            "start_s": self.start_s,
            "end_s": self.end_s,
            "period_s": self.period_s,
            "confidence": round(self.confidence, 3),
            "verdict": self.verdict.value,
            "level_w": round(self.level_w, 1) if math.isfinite(self.level_w) else None,
            "message": self.message,
        }


@dataclass(frozen=True)
class PhaseReport:
    phases: tuple[Phase, ...]
    notes: tuple[str, ...] = ()  # input repairs (NaN, order, gaps), source caveats
    error: str | None = None  # set when the input could not be used at all

    def to_dict(self) -> dict[str, object]:
        return {
            "phases": [ph.to_dict() for ph in self.phases],
            "notes": list(self.notes),
            "error": self.error,
        }


@dataclass(frozen=True)
class ChangeVerdict:
    """Result of `has_changed`."""

    changed: bool
    reason: str
    level_change: float  # relative change of mean power vs the reference
    period_change: float | None  # relative change of period, when both have one
    estimate: PeriodEstimate  # the new window's own estimate


# --------------------------------------------------------------------------------------------------------------
# Level segmentation


def level_change_points(sig: UniformSignal, cfg: PhaseConfig | None = None) -> list[float]:
    """Times where the mean power level changes, by binary segmentation of block means."""
    cfg = cfg or PhaseConfig()
    per_block = max(1, round(cfg.block_s / sig.dt_s))
    n_blocks = sig.n // per_block
    min_blocks = max(2, math.ceil(cfg.min_phase_s / (per_block * sig.dt_s)))
    if n_blocks < 2 * min_blocks:
        return []
    means = sig.values[: n_blocks * per_block].reshape(n_blocks, per_block).mean(axis=1)
    # Block-mean noise from successive differences (robust to the level steps being looked for).
    sigma = float(np.median(np.abs(np.diff(means)))) / (0.6745 * math.sqrt(2.0))
    sigma = max(sigma, 1e-9 * max(float(np.abs(means).max()), 1.0))
    cuts: list[int] = []
    _bisect(means, 0, n_blocks, min_blocks, sigma, cfg, cuts)
    return sorted(sig.t0_s + c * per_block * sig.dt_s for c in cuts)


def _bisect(
    means: FloatArray, a: int, b: int, min_blocks: int, sigma: float, cfg: PhaseConfig, cuts: list[int]
) -> None:
    n = b - a
    if n < 2 * min_blocks:
        return
    seg = means[a:b]
    csum = np.cumsum(seg)
    k = np.arange(min_blocks, n - min_blocks + 1)
    left = csum[k - 1] / k
    right = (csum[-1] - csum[k - 1]) / (n - k)
    diff = np.abs(left - right)
    tstat = diff / (sigma * np.sqrt(1.0 / k + 1.0 / (n - k)))
    i = int(np.argmax(tstat))
    lower = max(min(float(left[i]), float(right[i])), 1e-9)
    if tstat[i] < cfg.level_sigma or diff[i] < cfg.level_rel_change * lower:
        return
    c = a + int(k[i])
    cuts.append(c)
    _bisect(means, a, c, min_blocks, sigma, cfg, cuts)
    _bisect(means, c, b, min_blocks, sigma, cfg, cuts)


# --------------------------------------------------------------------------------------------------------------
# Period tracking


@dataclass(frozen=True)
class _Track:
    start_s: float
    end_s: float
    period_s: float | None

    @property
    def center_s(self) -> float:
        return 0.5 * (self.start_s + self.end_s)


def _track(sig: UniformSignal, cfg: PhaseConfig, reference: UniformSignal | None) -> list[_Track]:
    out: list[_Track] = []
    start = sig.t0_s
    end = sig.t0_s + sig.duration_s
    while start + cfg.track_window_s <= end + 1e-9:
        window = sig.slice_time(start, start + cfg.track_window_s)
        est = detect_period_uniform(window, cfg.detector, reference=reference)
        out.append(_Track(start, start + cfg.track_window_s, est.period_s))
        start += cfg.track_step_s
    return out


def _same(a: float | None, b: float | None, tol: float) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) <= tol * min(a, b)


def period_change_points(
    tracks: list[_Track], cfg: PhaseConfig
) -> list[tuple[float, float, float | None, float | None]]:
    """Brackets (earliest, latest, period before, period after) of period changes along the tracked windows.

    Runs of windows that agree (same period within tolerance, or all without a period) are formed; runs that
    span less than `min_phase_s` of window centres are transition noise and are ignored. A change lies between
    the centre of the last window of one run and the centre of the first window of the next.
    """
    runs: list[list[_Track]] = []
    for tr in tracks:
        if runs and _same(runs[-1][-1].period_s, tr.period_s, cfg.period_rel_change):
            runs[-1].append(tr)
        else:
            runs.append([tr])
    # Stable runs only: long enough to be more than a transition. A run without a period must be twice as long:
    # a weak period can be missed by a few windows in a row without the workload changing.
    stable = [
        r
        for r in runs
        if r[-1].center_s - r[0].center_s + cfg.track_step_s
        >= cfg.min_phase_s * (1.0 if r[0].period_s is not None else 2.0)
    ]
    brackets: list[tuple[float, float, float | None, float | None]] = []
    for prev, nxt in itertools.pairwise(stable):
        p_prev = _run_period(prev)
        p_next = _run_period(nxt)
        if _same(p_prev, p_next, cfg.period_rel_change):
            continue
        brackets.append((prev[-1].center_s, nxt[0].center_s, p_prev, p_next))
    return brackets


def _run_period(run: list[_Track]) -> float | None:
    periods = [t.period_s for t in run if t.period_s is not None]
    return float(np.median(periods)) if periods else None


# --------------------------------------------------------------------------------------------------------------
# Phases


def detect_phases(
    t_s: npt.ArrayLike,
    power_w: npt.ArrayLike,
    *,
    energy_j: npt.ArrayLike | None = None,
    energy_t_s: npt.ArrayLike | None = None,
    config: PhaseConfig | None = None,
) -> PhaseReport:
    """Split a power signal into phases of constant level and period, each with its own period estimate.

    Gaps in the samples end a phase. `energy_j` (cumulative counter, read at `energy_t_s`, default t_s) is passed
    on to the period detector as its anti-aliasing reference. Never raises on bad data.
    """
    cfg = config or PhaseConfig()
    det = cfg.detector
    prep = prepare_signal(t_s, power_w, gap_factor=det.gap_factor, max_backward_fraction=det.max_backward_fraction)
    if prep.error is not None:
        return PhaseReport((), prep.notes, prep.error)
    notes = list(prep.notes)
    reference = None
    if energy_j is not None:
        reference = average_power_from_energy(t_s if energy_t_s is None else energy_t_s, energy_j)
        if reference is None:
            notes.append("the energy counter was unusable: ignored")
    phases: list[Phase] = []
    for seg in prep.segments:
        phases.extend(_segment_phases(seg, cfg, reference))
    return PhaseReport(tuple(phases), tuple(notes))


def _segment_phases(sig: UniformSignal, cfg: PhaseConfig, reference: UniformSignal | None) -> list[Phase]:
    start, end = sig.t0_s, sig.t0_s + sig.duration_s
    levels = level_change_points(sig, cfg)
    brackets = period_change_points(_track(sig, cfg, reference), cfg)
    bounds = list(levels)
    for lo, hi, p_a, p_b in brackets:
        inside = [b for b in levels if lo - cfg.block_s <= b <= hi + cfg.block_s]
        if not inside:  # a level boundary in the bracket already marks this change; else find it in there
            bounds.append(_locate_period_change(sig, lo, hi, p_a, p_b, cfg))
    edges = _merge_short([start, *sorted(bounds), end], cfg.min_phase_s)
    phases = [_analyse(sig, a, b, cfg, reference) for a, b in itertools.pairwise(edges)]
    # Neighbours that turn out alike (same period, or same no-period verdict, and levels within the tolerance)
    # are one phase: a boundary can come from a transient that the whole-phase analysis does not confirm.
    merged = True
    while merged and len(phases) > 1:
        merged = False
        for i in range(len(phases) - 1):
            a, b = phases[i], phases[i + 1]
            if _alike(a, b, cfg):
                phases[i : i + 2] = [_analyse(sig, a.start_s, b.end_s, cfg, reference)]
                merged = True
                break
        if merged:
            continue
        # A short stretch without a period, at the level of its two neighbours which both have one, is the
        # transition between them (windows there see both periods, and fail): split it between the neighbours
        # where the one period gives way to the other.
        for i in range(1, len(phases) - 1):
            prev, mid, nxt = phases[i - 1], phases[i], phases[i + 1]
            if (
                mid.period_s is None
                and mid.duration_s <= 2.0 * cfg.track_window_s
                and prev.period_s is not None
                and nxt.period_s is not None
                and _level_alike(prev, mid, cfg)
                and _level_alike(mid, nxt, cfg)
            ):
                cut = _locate_period_change(sig, mid.start_s, mid.end_s, prev.period_s, nxt.period_s, cfg)
                cut = min(max(cut, mid.start_s), mid.end_s)
                phases[i - 1 : i + 2] = [
                    _analyse(sig, prev.start_s, cut, cfg, reference),
                    _analyse(sig, cut, nxt.end_s, cfg, reference),
                ]
                merged = True
                break
    return phases


def _level_alike(a: Phase, b: Phase, cfg: PhaseConfig) -> bool:
    low = max(min(a.level_w, b.level_w), 1e-9)
    return abs(a.level_w - b.level_w) <= cfg.level_rel_change * low


def _alike(a: Phase, b: Phase, cfg: PhaseConfig) -> bool:
    if not _level_alike(a, b, cfg):
        return False
    if a.period_s is not None and b.period_s is not None:
        return _same(a.period_s, b.period_s, cfg.period_rel_change)
    return a.period_s is None and b.period_s is None and a.verdict is b.verdict


def _locate_period_change(
    sig: UniformSignal, lo: float, hi: float, p_a: float | None, p_b: float | None, cfg: PhaseConfig
) -> float:
    """Where, between the centres of the last window with the old period and the first with the new one, the
    change happens. Windows straddling a change see both (or fail), so the bracket can be a window wide; short
    blocks scored on the two known periods pin it: it is where the old period's fold gives way to the new one's
    (to nothing, when the new phase has no period)."""
    periods = [p for p in (p_a, p_b) if p is not None]
    block = max(2.0, 4.0 * max(periods))
    centers = np.arange(lo - 0.5 * block, hi + 0.5 * block + 1e-9, 0.25)
    score: list[float] = []
    kept: list[float] = []
    for c in centers:
        piece = sig.slice_time(c - 0.5 * block, c + 0.5 * block)
        if piece.n < 16:
            continue
        r2 = fold_r2(piece.values - piece.values.mean(), piece.dt_s, periods)
        score.append(float(r2[0] - (r2[1] if len(r2) > 1 else 0.0)) if p_a is not None else float(-r2[0]))
        kept.append(float(c))
    if len(score) < 4:
        return 0.5 * (lo + hi)
    sc = np.asarray(score)
    n_edge = max(1, len(sc) // 5)
    before, after = float(np.median(sc[:n_edge])), float(np.median(sc[-n_edge:]))
    if before - after <= 0:
        return 0.5 * (lo + hi)
    # Last centre still on the old side of half-way, and the first after it: the change is between them.
    half = 0.5 * (before + after)
    above = np.flatnonzero(sc >= half)
    i = int(above[-1]) if len(above) else 0
    return float(min(max(kept[i] + 0.125, lo - 0.5 * block), hi + 0.5 * block))


def _merge_short(edges: list[float], min_len: float) -> list[float]:
    """Drop inner boundaries that would leave a phase shorter than min_len (the shortest first)."""
    edges = list(edges)
    while len(edges) > 2:
        lengths = np.diff(edges)
        i = int(np.argmin(lengths))
        if lengths[i] >= min_len:
            break
        # Remove the inner edge of the short piece that makes the smaller merged piece.
        if i == 0:
            del edges[1]
        elif i == len(lengths) - 1:
            del edges[-2]
        elif lengths[i - 1] <= lengths[i + 1]:
            del edges[i]
        else:
            del edges[i + 1]
    return edges


def _analyse(sig: UniformSignal, a: float, b: float, cfg: PhaseConfig, reference: UniformSignal | None) -> Phase:
    trim = min(cfg.edge_trim_s, 0.1 * (b - a))
    lo, hi = a + trim, b - trim
    if hi - lo > cfg.max_analysis_s:
        mid = 0.5 * (lo + hi)
        lo, hi = mid - 0.5 * cfg.max_analysis_s, mid + 0.5 * cfg.max_analysis_s
    est = detect_period_uniform(sig.slice_time(lo, hi), cfg.detector, reference=reference)
    level = float(sig.slice_time(a, b).values.mean()) if b > a else math.nan
    return Phase(a, b, est.period_s, est.confidence, est.verdict, level, est.message)


def iteration_boundaries(t_s: npt.ArrayLike, power_w: npt.ArrayLike, phase: Phase) -> FloatArray:
    """Estimated iteration boundaries in a phase with a period: every period, aligned on the lowest point of the
    mean waveform (the dip at the synchronisation / optimizer step of most training loops). For plotting."""
    if phase.period_s is None:
        return np.zeros(0)
    t = np.asarray(t_s, dtype=np.float64)
    p = np.asarray(power_w, dtype=np.float64)
    m = (t >= phase.start_s) & (t < phase.end_s) & np.isfinite(t) & np.isfinite(p)
    if m.sum() < 8:
        return np.zeros(0)
    period = phase.period_s
    bins = 32
    idx = np.minimum((((t[m] - phase.start_s) / period) % 1.0 * bins).astype(np.intp), bins - 1)
    cnt = np.bincount(idx, minlength=bins)
    mean = np.bincount(idx, weights=p[m], minlength=bins) / np.maximum(cnt, 1)
    mean[cnt == 0] = np.inf
    offset = (int(np.argmin(mean)) + 0.5) / bins * period
    first = phase.start_s + offset
    return np.asarray(np.arange(first, phase.end_s, period), dtype=np.float64)


# --------------------------------------------------------------------------------------------------------------
# Online check


def has_changed(
    reference: PeriodEstimate,
    t_s: npt.ArrayLike,
    power_w: npt.ArrayLike,
    *,
    energy_j: npt.ArrayLike | None = None,
    energy_t_s: npt.ArrayLike | None = None,
    level_tolerance: float = 0.15,
    period_tolerance: float = 0.10,
    config: DetectorConfig | None = None,
    estimate: PeriodEstimate | None = None,
) -> ChangeVerdict:
    """Has the workload changed since `reference` was measured? One new window of samples decides.

    Changed when the mean power moved by more than `level_tolerance` (relative; GPOEO uses 18%), when the period
    moved by more than `period_tolerance`, or when a period appeared or vanished. A new window that cannot be
    analysed (too short, bad input) is reported as not changed, with the reason, so that a glitch does not
    trigger a re-search; the caller sees it in `reason`.
    The reference should come from the same clocks: a clock change alone moves level and period.
    `estimate` replaces the detection on the samples when the caller has the window's period from elsewhere (step
    markers); it must carry the window's mean power as level_w.
    """
    if estimate is None:
        est = detect_period(t_s, power_w, energy_j=energy_j, energy_t_s=energy_t_s, config=config)
    else:
        est = estimate
    if est.verdict in (Verdict.BAD_INPUT, Verdict.INSUFFICIENT_DATA) or not math.isfinite(est.level_w):
        return ChangeVerdict(False, f"cannot judge: {est.message}", 0.0, None, est)
    ref_level = reference.level_w
    level_change = abs(est.level_w - ref_level) / abs(ref_level) if math.isfinite(ref_level) and ref_level else 0.0
    period_change: float | None = None
    if reference.period_s is not None and est.period_s is not None:
        period_change = abs(est.period_s - reference.period_s) / reference.period_s
    reasons: list[str] = []
    if level_change > level_tolerance:
        reasons.append(f"power level moved {level_change * 100:.0f}% ({ref_level:.0f} -> {est.level_w:.0f} W)")
    if period_change is not None and period_change > period_tolerance:
        reasons.append(
            f"period moved {period_change * 100:.0f}% ({reference.period_s * 1e3:.1f} -> "  # type: ignore[operator]
            f"{est.period_s * 1e3:.1f} ms)"  # type: ignore[operator]
        )
    if reference.period_s is not None and est.period_s is None and est.verdict is not Verdict.ALIAS_RISK:
        reasons.append(f"the period ({reference.period_s * 1e3:.1f} ms) is gone: {est.verdict.value}")
    if reference.period_s is None and est.period_s is not None:
        reasons.append(f"a period appeared ({est.period_s * 1e3:.1f} ms)")
    if reasons:
        return ChangeVerdict(True, "; ".join(reasons), level_change, period_change, est)
    return ChangeVerdict(False, "same level and period", level_change, period_change, est)
