"""States of the runtime controller and the small frozen records it keeps and logs.

Every decision is one `Decision`; `Decision.to_dict()` is one JSON line of the decision log, always with the keys
in `LOG_KEYS` (null where a value does not apply), so a log can be read back as a table.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from gpoeo_rt.features import FEATURE_NAMES


class State(StrEnum):
    PROFILING = "profiling"  # at reference clocks: find the period (two agreeing windows, or one segmented window
    # that stands alone: PeriodEstimate.stands_alone), measure the baseline
    SEARCHING = "searching"  # predict the grid once, then probe configs (each a whole number of periods)
    HOLDING = "holding"  # at the chosen config: re-check slowdown and phase now and then
    GUARDING = "guarding"  # measured slowdown broke the bound: stepped one clock toward reference, re-checking
    IDLE = "idle"  # no GPU activity: default clocks, wait for work
    STOPPED = "stopped"  # clocks reset; step() refuses to run


class Policy(StrEnum):
    HYBRID = "hybrid"  # predict, then refine on measurements, then guard (GPOEO)
    PREDICTION = "prediction"  # jump to the predicted optimum; no refinement, no guard (a baseline)
    SEARCH = "search"  # model-free descent from the reference, with the guard (a baseline)


# A power-signal period that says clocks no higher than the reference run iterations faster than it by more than
# this (period noise: sd 0.25%, max 1% per window) is not confirmed: a false period. The controller never holds such
# a config (ControllerConfig.confirm_tolerance); the accounting rates nothing by such a window.
CONFIRM_TOLERANCE = 0.015

LOG_KEYS: tuple[str, ...] = (
    "t_s",  # device time of the decision
    "state",  # state the decision was taken in
    "next_state",  # state after it
    "event",  # short machine-readable name of what happened (see Controller)
    "sm_clock_mhz",  # clocks in effect after the decision (the reference clocks when not locked)
    "mem_clock_mhz",
    "locked",  # whether the controller holds a clock lock (False: driver default behaviour)
    "phase",  # index of the job phase (in order of first appearance), null before one is profiled
    "window_s",  # measurement window this decision is based on (null: none)
    "period_s",  # measured iteration period in that window
    "power_w",  # measured mean power in that window
    "timing",  # where period_s came from: "markers" (the job's step markers) or "signal" (power samples); null: none
    "measured_time_ratio",  # measured time per iteration / the phase's baseline at reference clocks
    "measured_energy_ratio",  # measured energy per iteration / baseline
    "predicted_time_ratio",  # the (job-calibrated) model's prediction for the config concerned
    "predicted_energy_ratio",
    "advised_sm_clock_mhz",  # advise mode: the config it would set (null: not advising)
    "advised_mem_clock_mhz",
    "energy_counter_j",  # the GPU's energy counter at the end of this decision's window (null: none, or no counter)
    "slowdown_bound_pct",  # the bound the run holds the job to (on its `start` decision; null elsewhere)
    "reason",  # human-readable why
)


def _json_float(value: float | None, digits: int = 6) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return round(float(value), digits)


@dataclass(frozen=True)
class Decision:
    """One logged decision. Clock fields describe the state after the decision."""

    t_s: float
    state: State
    next_state: State
    event: str
    sm_clock_mhz: int
    mem_clock_mhz: int
    locked: bool
    reason: str
    phase: int | None = None
    window_s: float | None = None
    period_s: float | None = None
    power_w: float | None = None
    measured_time_ratio: float | None = None
    measured_energy_ratio: float | None = None
    predicted_time_ratio: float | None = None
    predicted_energy_ratio: float | None = None
    advised: tuple[int, int] | None = None
    timing: str | None = None
    energy_counter_j: float | None = None
    slowdown_bound_pct: float | None = None

    def to_dict(self) -> dict[str, object]:
        """JSON-ready: exactly LOG_KEYS, NaN as null."""
        return {
            "t_s": _json_float(self.t_s, 4),
            "state": self.state.value,
            "next_state": self.next_state.value,
            "event": self.event,
            "sm_clock_mhz": int(self.sm_clock_mhz),
            "mem_clock_mhz": int(self.mem_clock_mhz),
            "locked": bool(self.locked),
            "phase": self.phase,
            "window_s": _json_float(self.window_s, 4),
            "period_s": _json_float(self.period_s, 6),
            "power_w": _json_float(self.power_w, 2),
            "timing": self.timing,
            "measured_time_ratio": _json_float(self.measured_time_ratio, 5),
            "measured_energy_ratio": _json_float(self.measured_energy_ratio, 5),
            "predicted_time_ratio": _json_float(self.predicted_time_ratio, 5),
            "predicted_energy_ratio": _json_float(self.predicted_energy_ratio, 5),
            "advised_sm_clock_mhz": None if self.advised is None else int(self.advised[0]),
            "advised_mem_clock_mhz": None if self.advised is None else int(self.advised[1]),
            "energy_counter_j": _json_float(self.energy_counter_j, 3),
            "slowdown_bound_pct": _json_float(self.slowdown_bound_pct, 4),
            "reason": self.reason,
        }


def _frozen(values: Mapping[str, float]) -> Mapping[str, float]:
    return MappingProxyType({name: float(values.get(name, math.nan)) for name in FEATURE_NAMES})


@dataclass(frozen=True)
class Baseline:
    """The job phase at reference clocks: what every ratio is measured against."""

    period_s: float  # time per iteration
    power_w: float  # mean power over whole periods
    counters: Mapping[str, float] = field(default_factory=dict)  # feat_* averaged over the profiling windows
    timing: str = "signal"  # where period_s came from: "signal" or "markers"; the phase's ratios keep to it
    confidence: float = 1.0  # the period estimate's (the lower of the two profiling windows')
    method: str = "fold"  # how the signal's period was found: "fold", "count" (jittery iterations), "markers"
    spread: float = 0.0  # relative std of single iteration times, where measured (counted: jittery iterations)

    def __post_init__(self) -> None:
        object.__setattr__(self, "counters", _frozen(self.counters))

    @property
    def energy_per_iteration_j(self) -> float:
        return self.power_w * self.period_s

    def time_ratio(self, period_s: float) -> float:
        return period_s / self.period_s

    def energy_ratio(self, period_s: float, power_w: float) -> float:
        return (power_w * period_s) / self.energy_per_iteration_j


@dataclass(frozen=True)
class PhaseRecord:
    """A job phase seen before: its baseline and the config the search (and guard) settled on."""

    index: int
    baseline: Baseline
    clocks: tuple[int, int] | None  # None: the reference (clocks not locked)
    measured_time_ratio: float | None = None
    measured_energy_ratio: float | None = None

    def matches(self, other: Baseline, *, period_tol: float, power_tol: float, counter_tol: float) -> bool:
        """Same phase: period and power at reference within tolerance, and every counter both have within
        counter_tol (absolute, fractions)."""
        mine = self.baseline
        if abs(other.period_s - mine.period_s) > period_tol * mine.period_s:
            return False
        if abs(other.power_w - mine.power_w) > power_tol * mine.power_w:
            return False
        for name in FEATURE_NAMES:
            a, b = mine.counters.get(name, math.nan), other.counters.get(name, math.nan)
            if math.isfinite(a) and math.isfinite(b) and abs(a - b) > counter_tol:
                return False
        return True
