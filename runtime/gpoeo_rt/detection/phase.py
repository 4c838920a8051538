"""Phase-change detection for the controller (pure numpy): has one new window left the phase of a reference
estimate? (Whole traces are no longer segmented offline here: `gpoeo-rt trace detect` replays a trace through the
controller itself, so what it prints is what the daemon concludes; see bench/replay.py:replay_phases.)"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy.typing as npt

from gpoeo_rt.detection.period import DetectorConfig, PeriodEstimate, Verdict, detect_period, period_persists

# How close to a steady phase's period a window that lost its own period must still show it to be that phase: a
# 2 s window of it folds within 0.5% of it (simulated membound); a new job's harmonic can show 5-10% away.
STEADY_PERSIST_TOLERANCE = 0.03


def phase_persists(
    t_s: npt.ArrayLike,
    power_w: npt.ArrayLike,
    period_s: float,
    method: str | None,
    *,
    tolerance: float,
    config: DetectorConfig | None = None,
) -> tuple[float | None, str]:
    """Does a window that lost its own period still show the phase's (`period_persists`), found by `method`? A
    folded phase must show within 3% of its own period: a fold or a count a few percent off it can be a new job's
    harmonics (1/4 of a 309 ms gpt folded 8% off a held 84 ms membound). Method None (the period only predicted,
    not yet measured at these clocks): anything within `tolerance` counts."""
    if method == "fold":
        tolerance = min(tolerance, STEADY_PERSIST_TOLERANCE)
    return period_persists(t_s, power_w, period_s, tolerance=tolerance, config=config)


@dataclass(frozen=True)
class ChangeVerdict:
    """Result of `has_changed`."""

    changed: bool
    reason: str
    level_change: float  # relative change of mean power vs the reference
    period_change: float | None  # relative change of period, when both have one
    estimate: PeriodEstimate  # the new window's own estimate


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
        # The window's own search failed; a period that still shows is no change (see phase_persists).
        kept, how = (
            (None, "")
            if estimate is not None
            else phase_persists(
                t_s, power_w, reference.period_s, reference.method, tolerance=period_tolerance, config=config
            )
        )
        if kept is None:
            why = f" ({how})" if how else ""
            reasons.append(f"the period ({reference.period_s * 1e3:.1f} ms) is gone: {est.verdict.value}{why}")
        elif not reasons:
            message = f"{est.message}; the period {how}"
            est = replace(
                est, period_s=kept, verdict=Verdict.OK, confidence=0.5 * reference.confidence, message=message
            )
            change = abs(kept - reference.period_s) / reference.period_s
            return ChangeVerdict(False, f"same level; the period {how}", level_change, change, est)
    if reference.period_s is None and est.period_s is not None:
        reasons.append(f"a period appeared ({est.period_s * 1e3:.1f} ms)")
    if reasons:
        return ChangeVerdict(True, "; ".join(reasons), level_change, period_change, est)
    return ChangeVerdict(False, "same level and period", level_change, period_change, est)
