"""Detection layer: pure numeric period and phase-change detection over power-sample arrays."""

from gpoeo_rt.detection.activity import idle_tail_s, level_shift
from gpoeo_rt.detection.counter import CounterCheck, counter_check
from gpoeo_rt.detection.markers import MARKERS, SIGNAL, period_from_markers
from gpoeo_rt.detection.period import (
    COUNTABLE_VERDICTS,
    DetectorConfig,
    PeriodEstimate,
    PreparedSignal,
    UniformSignal,
    Verdict,
    average_power_from_energy,
    count_confirms,
    counted_period_near,
    detect_period,
    detect_period_uniform,
    fold_r2,
    min_resolvable_period,
    period_persists,
    prepare_signal,
    stall_share,
    window_for_periods,
)
from gpoeo_rt.detection.phase import ChangeVerdict, has_changed, phase_persists

__all__ = [
    "COUNTABLE_VERDICTS",
    "MARKERS",
    "SIGNAL",
    "ChangeVerdict",
    "CounterCheck",
    "DetectorConfig",
    "PeriodEstimate",
    "PreparedSignal",
    "UniformSignal",
    "Verdict",
    "average_power_from_energy",
    "count_confirms",
    "counted_period_near",
    "counter_check",
    "detect_period",
    "detect_period_uniform",
    "fold_r2",
    "has_changed",
    "idle_tail_s",
    "level_shift",
    "min_resolvable_period",
    "period_from_markers",
    "period_persists",
    "phase_persists",
    "prepare_signal",
    "stall_share",
    "window_for_periods",
]
