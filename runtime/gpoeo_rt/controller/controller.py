"""The runtime controller: counters -> predictions -> search -> clocks, with a measured slowdown guard.

One `step()` takes one measurement window on the device's own clock (simulated or real) and makes one decision,
logged as one JSON-ready dict (see state.LOG_KEYS). The state machine:

    PROFILING --two agreeing periods--> SEARCHING --converged--> HOLDING <--ok-- GUARDING
        |   \\--phase seen before------------------------------>   |  \\--slowdown > bound--^   |
        |--no period (x3): stay at reference, retry later          |--phase change--> PROFILING
        |--no activity--> IDLE --activity--> PROFILING             |--no activity--> IDLE
    any state --stop() or an exception in step()--> STOPPED (clocks reset)

One window (or run of windows) of segmented iterations that stands alone (`PeriodEstimate.stands_alone`: long
iterations, no multiple of its period fits as well, no alternating segments) is a baseline without a second; so is
a run whose windows' candidates paired with none (`_run_alone`).
A profiling window that the detector wants longer, to tell a wandering period from an alias, is not counted among
the three failures: the next window is as long as it asks (see `_step_profiling`). One whose power ends at the idle
level (the job ended or paused inside it: `idle_tail_s`) gives no period and is a failure. A window without a period
that continues windows without one is analysed once more together with them, as one window (a weak waveform that
neither a 3 s nor a 6 s window folds can fold over their 9 s); a period found so is that one window's.

Measurements: the period (time per iteration) comes from the training loop's step markers when it sends them
(enough of them in the window: `_estimate`), else from the power samples (detection layer); a phase keeps the source
its baseline was measured with, and every decision logs which one it used (`timing`). Mean power comes from the
buffered samples over whole periods; energy per iteration = mean power x period. Every ratio is against the
phase's own baseline at reference clocks (the device's default clocks, reached by resetting them).

The controller talks only to the device interface (GPUReader + ClockController), the sampler, detection,
prediction and search layers. It never reads a simulator's ground truth.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, TextIO

import numpy as np

from gpoeo_rt.controller.state import CONFIRM_TOLERANCE, Baseline, Decision, PhaseRecord, Policy, State
from gpoeo_rt.detection import (
    COUNTABLE_VERDICTS,
    MARKERS,
    SIGNAL,
    DetectorConfig,
    PeriodEstimate,
    Verdict,
    count_confirms,
    counted_period_near,
    counter_check,
    detect_period,
    has_changed,
    idle_tail_s,
    level_shift,
    period_from_markers,
    phase_persists,
    stall_share,
    window_for_periods,
)
from gpoeo_rt.device.base import GPU
from gpoeo_rt.device.clock import SleepInterruptedError
from gpoeo_rt.features import FEATURE_NAMES
from gpoeo_rt.prediction.predictor import Predictor
from gpoeo_rt.sampling import MarkerSource, PowerWindow, Sampler, merge_windows
from gpoeo_rt.search.baselines import DescentSearch, PredictedPick
from gpoeo_rt.search.measured import MeasuredSearch
from gpoeo_rt.search.objectives import Objective, pick_config
from gpoeo_rt.search.prior import counter_trust, prior_from_prediction
from gpoeo_rt.search.protocol import Search

LogSink = Callable[[dict[str, object]], None]
Clocks = tuple[int, int]
# A decision logs the energy counter only when the latest reading ends its own window (a few ms before it).
_COUNTER_FRESH_S = 0.5
# Drift checks: the held config's power is compared over spans this long (two hold intervals at the longest).
_DRIFT_SPAN_S = 60.0
# A baseline's two folds may be short of the counted mean iteration time by this much (relative) when host stalls
# moved the iterations' phase: less is within the count's precision; more than half an iteration of stall per
# iteration is beyond what a count near the fold can measure (its band spans about 0.65-1.2 of the fold).
_FOLD_SHORT = (0.01, 0.5)


@dataclass(frozen=True)
class ControllerConfig:
    """Every tunable of the controller. Times are device-clock seconds."""

    policy: Policy = Policy.HYBRID
    # Advise: profile, predict and log the recommended config, but never touch a clock (not even a reset), so a
    # read-only device suffices. Probing needs clock changes, so the recommendation is the model's pick.
    advise: bool = False
    objective: Objective = Objective.ENERGY
    max_slowdown: float = 0.05  # against the phase's own baseline at reference clocks
    # Measurement windows: a whole number of (expected) periods, at least min_window_s.
    settle_s: float = 0.2  # after a clock change, wait this long (and at least one period) before measuring
    first_window_s: float = 3.0  # the first profiling window, before the period is known
    window_periods: int = 20
    min_window_s: float = 2.0
    max_window_s: float = 60.0
    max_period_s: float = 10.0  # longer periods are treated as "no period" (GPOEO's aperiodic)
    period_agreement: float = 0.02  # two profiling windows must agree this closely (harmonic locks are rare)
    # ... or, for jittery iterations, as closely as chance allows (see Controller._agreement), up to this.
    max_jitter_agreement: float = 0.10
    max_profile_failures: int = 3  # windows without a period before the aperiodic fallback
    # A profiling window continues the last one (its samples touch the last's) when it starts at most this long
    # after it ended: the pause's samples are still in the driver's buffer. Runs of windows: _run_candidate.
    profile_run_gap_s: float = 2.0
    # While a longer profiling window is measured, the span so far is looked at this often for a baseline that
    # stands alone (`_LongerWindow`): a look costs analysis, not device time.
    profile_look_every_s: float = 3.0
    # Profiling windows read the energy counter this often (None: once per window), so that a count of jittery
    # iterations can be told from an alias of faster ones (detection.counter; ~4 ms a read on an H200).
    profile_energy_every_s: float | None = 0.1
    # A counted candidate's second window holds as many iterations as its own, but at most this many periods (and
    # never less than the first window): a run or window the schedule made long (a 21 s run of 3 + 6 + 12 s) need
    # not be matched second for second.
    counted_window_periods: int = 36
    # Step markers give a window's period when at least this many whole iterations were marked and the markers
    # span this share of the window (else the power signal does, unless the phase's baseline came from markers).
    min_marker_intervals: int = 10
    marker_coverage: float = 0.75
    # Search.
    max_probes: int = 12  # probes after the reference (the measurement-led search and the descent baseline)
    max_descent_probes: int = 12
    # A probe is measured longer (up to max_probe_windows windows, analysed as one) when its time ratio is within
    # near_bound of the bound (period error of one 2 s window: sd 0.25%, max 1%), or this far from what the
    # calibrated model expects.
    near_bound: float = 0.015
    # A config with lower clocks whose iterations measure more than this much faster than the baseline, by the
    # power signal, is an alias (two sweeps have such rows, down to 0.72: measurement artefacts, which the
    # simulator reproduces). Step markers cannot alias: a marker-timed speed-up is taken as measured.
    faster_tolerance: float = 0.08
    # ... and one measured faster than the reference by more than this is not confirmed (state.CONFIRM_TOLERANCE):
    # it may be probed but is never held (Controller._confirmed_best).
    confirm_tolerance: float = CONFIRM_TOLERANCE
    plausible_deviation: float = 0.25
    max_probe_windows: int = 3
    # Guard: act when the measured slowdown exceeds the bound by more than this (period noise is ~0.2%).
    guard_margin: float = 0.01
    # Holding: re-check after check_interval_s, doubling while nothing changes, up to max_check_interval_s.
    check_interval_s: float = 5.0
    max_check_interval_s: float = 30.0
    level_tolerance: float = 0.15  # has_changed: relative power level change that means a new phase
    period_tolerance: float = 0.10
    # Phase memory: a new baseline within these of a seen phase's is that phase again.
    phase_period_tol: float = 0.03
    phase_power_tol: float = 0.06
    phase_counter_tol: float = 0.05
    # Drift checks: while a locked config is held, a short window at reference clocks refreshes the baseline power,
    # so ratios are against a baseline of the same thermal state (a GPU draws more as it warms: +0.4% over 3.5 min
    # on a real H200, 3% in the simulator's stress case; docs/accounting.md). The held config's own power, measured
    # in every hold window, warms with the same GPU: a check is due only when it has moved more than drift_noise
    # since the last window at reference (so the reference may have too), no sooner than drift_check_s after it;
    # and, whatever the held power says, max_drift_check_s after it (doubling while checks find no drift). The
    # first check of a new baseline comes drift_check_s into its hold (the GPU warmed while the search ran). Each
    # check costs its window (drift_window_periods periods, at least min_window_s) at reference, logged as
    # `drift_check`. 0 turns them off.
    drift_check_s: float = 30.0
    max_drift_check_s: float = 480.0
    drift_noise: float = 0.005
    drift_window_periods: int = 5
    # Fallbacks.
    fallback_retry_s: float = 60.0  # no resolvable period: stay at reference, re-profile this much later
    idle_sm_active: float = 0.05  # feat_sm_active under this (when the GPU reports it): idle
    idle_window_s: float = 1.0
    idle_check_interval_s: float = 5.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.max_slowdown < 10.0:
            raise ValueError(f"max_slowdown must be in [0, 10), got {self.max_slowdown}")
        if self.advise and self.policy is Policy.SEARCH:
            raise ValueError("advise mode recommends the model's pick: it needs the hybrid or prediction policy")
        if self.window_periods < 10:
            raise ValueError("window_periods must be >= 10 (period detection needs ~10 cycles)")
        if self.min_window_s <= 0 or self.max_window_s < self.min_window_s:
            raise ValueError("need 0 < min_window_s <= max_window_s")


def _touches(earlier: PowerWindow, later: PowerWindow) -> bool:
    """Whether `later` continues `earlier` (Sampler.collect's continue_within_s): their samples touch."""
    return abs(later.start_s - earlier.end_s) <= 1e-6


def _concat(windows: list[PowerWindow]) -> tuple[np.ndarray, np.ndarray]:
    if len(windows) == 1:
        return windows[0].t_s, windows[0].power_w
    return np.concatenate([w.t_s for w in windows]), np.concatenate([w.power_w for w in windows])


def _as_counted(estimate: PeriodEstimate, counted: tuple[float, float], confidence: float) -> PeriodEstimate:
    """A window's estimate as the joint count (period, spread) over it and the window it pairs with."""
    return replace(
        estimate,
        period_s=counted[0],
        verdict=Verdict.OK,
        method="count",
        spread=counted[1],
        confidence=confidence,
    )


def _evidence(estimate: PeriodEstimate) -> str:
    """What kind of evidence a window's period is, for pairing windows: a folded period, or iterations counted
    (by the band-passed phase or a matched template: both count the iterations of a jittery job)."""
    return "counted" if estimate.method in ("count", "template") else estimate.method


class ControllerStoppedError(RuntimeError):
    """step() after stop() or after an error stopped the controller."""


def jsonl_sink(stream: TextIO) -> LogSink:
    """A decision-log sink that writes one JSON object per line (flushed, so a crash keeps what was decided)."""

    def write(record: dict[str, object]) -> None:
        stream.write(json.dumps(record, allow_nan=False) + "\n")
        stream.flush()

    return write


# A look's window is short of the length asked for by more than this (float slack on summed durations).
_LOOK_SLACK_S = 0.05

# A candidate's look (`Controller._plan_alone_look`) spans this many periods: the iterations a segmentation needs to
# stand alone, and a tenth more for stalls.
_ALONE_SPAN_PERIODS = 1.1 * DetectorConfig().template_min_cycles


@dataclass(frozen=True)
class _LongerWindow:
    """A longer profiling window asked for, `length_s`, that continues the windows without a period before it:
    first only its rest is measured and the whole looked at (`head` None); while a look finds no baseline, the
    window goes on toward `length_s`, looked at again every profile_look_every_s, `head` being its part measured
    so far; once it is `length_s` long it is analysed as if never looked at. With `before`, a candidate's second
    window: its parts are looked at with the candidate's run of windows (`before`) as one."""

    length_s: float
    head: PowerWindow | None = None
    before: PowerWindow | None = None


@dataclass(frozen=True)
class _Measured:
    """One window at fixed clocks, reduced to what decisions use."""

    window_s: float
    period_s: float | None
    power_w: float
    estimate: PeriodEstimate

    @property
    def timing(self) -> str | None:
        """Where the period came from (None: no period)."""
        return self.estimate.timing if self.period_s is not None else None


@dataclass(frozen=True)
class _FoldCandidate:
    """A folded candidate on the power signal that the pairs over two windows start from."""

    measured: _Measured
    window: PowerWindow
    period_s: float

    @property
    def pair(self) -> tuple[_Measured, PowerWindow]:
        return self.measured, self.window


class Controller:
    """Chooses clocks for the job running on `device`, one `step()` at a time (see the module docstring).

    `predictor` is required for the hybrid and prediction policies. `log` receives each decision as a dict with
    the keys of LOG_KEYS. `decisions` keeps the last `keep_decisions` of them for inspection. `markers` is where
    the job's step markers arrive (the daemon's marker channel, a simulated job's emitter), if anywhere.
    """

    def __init__(
        self,
        device: GPU,
        *,
        predictor: Predictor | None = None,
        config: ControllerConfig | None = None,
        log: LogSink | None = None,
        sampler: Sampler | None = None,
        keep_decisions: int = 10_000,
        markers: MarkerSource | None = None,
    ) -> None:
        self.config = config or ControllerConfig()
        if self.config.policy is not Policy.SEARCH and predictor is None:
            raise ValueError(f"policy {self.config.policy.value!r} needs a predictor (a model bundle)")
        if sampler is not None and markers is not None:
            raise ValueError("pass markers to the Sampler you give, not to the Controller")
        self._device = device
        self._predictor = predictor
        self._sampler = sampler or Sampler(device, markers=markers)
        self._log = log
        self._keep = keep_decisions
        self.decisions: list[Decision] = []
        table = device.supported_clocks()
        self.reference: Clocks = (table.default_sm_mhz, table.default_mem_mhz)
        pairs = list(table.pairs())
        self._grid = pairs
        self._grid_sm = np.array([p[0] for p in pairs], dtype=np.float64)
        self._grid_mem = np.array([p[1] for p in pairs], dtype=np.float64)
        self._ref_index = pairs.index(self.reference)
        self._table = table
        # Clock state. None: not locked (the driver's default behaviour = the reference clocks).
        self._locked: Clocks | None = None
        self._settle_until_s = -math.inf
        self.clock_changes: list[tuple[float, int, int, bool]] = []  # (t_s, sm, mem, locked)
        self.prediction_cpu_s: list[float] = []  # CPU time of each grid prediction
        # Phases.
        self.phases: list[PhaseRecord] = []
        self._phase: int | None = None
        self._baseline: Baseline | None = None
        self.state = State.PROFILING
        self._start_profiling()
        # Search.
        self._search: Search | None = None
        self._probe: int | None = None
        self._probe_parts: list[PowerWindow] = []
        self._probe_failures = 0
        # Holding / guarding.
        self._held: Clocks | None = None
        self._held_ratios: tuple[float | None, float | None] = (None, None)
        self._hold_ref: PeriodEstimate | None = None
        self._hold_failures = 0
        self._suspect_change = False
        self._next_check_s = -math.inf
        self._check_interval_s = self.config.check_interval_s
        self._hold_window_s: float | None = None
        self._fallback_reason: str | None = None
        self._held_predicted_time_ratio: float | None = None
        # Drift checks (see ControllerConfig.drift_check_s): the baseline they were scheduled for, when the
        # reference was last measured, and the longest wait for the next check.
        self._drift_for: Baseline | None = None
        self._drift_since_s = -math.inf
        self._drift_interval_s = self.config.max_drift_check_s
        # The latest hold window (baseline, clocks, time, energy-counter reading) and the held power since
        # (power, seconds) between hold windows since the last window at reference.
        self._held_counter: tuple[Baseline | None, Clocks | None, float, tuple[float, float] | None] | None = None
        self._held_power: list[tuple[float, float]] = []
        # The first step resets the clocks: a lock left behind by another process must not pose as the reference.
        self._reset_pending = not self.config.advise
        self._started = False  # the first step logs a "start" decision: a run boundary in the decision log
        self.advised: Clocks | None = None  # advise mode: the config it would set (None: the reference)
        # (start_s, end_s) of each window the last baseline was measured on: two of a pair need not touch (a window
        # that ended idle may lie between them), so their total length does not say where they were.
        self.baseline_windows: tuple[tuple[float, float], ...] = ()

    # --- public API -------------------------------------------------------------------------------------------

    @property
    def clocks(self) -> Clocks:
        """Clocks in effect (after the settle delay): the locked pair, or the reference when not locked."""
        return self._locked or self.reference

    @property
    def baseline(self) -> Baseline | None:
        return self._baseline

    def step(self) -> Decision:
        """Take one measurement window and make one decision. Any exception resets the clocks, stops the
        controller and is re-raised."""
        if self.state is State.STOPPED:
            raise ControllerStoppedError("the controller is stopped (clocks were reset)")
        handlers: dict[State, Callable[[], Decision]] = {
            State.PROFILING: self._step_profiling,
            State.SEARCHING: self._step_searching,
            State.HOLDING: self._step_holding,
            State.GUARDING: self._step_guarding,
            State.IDLE: self._step_idle,
        }
        try:
            if not self._started:
                self._started = True
                what = "advise mode" if self.config.advise else f"policy {self.config.policy.value}"
                bound = 100.0 * self.config.max_slowdown if self.config.objective is Objective.ENERGY else None
                self._decide(
                    "start",
                    self.state,
                    f"controller started ({what}): a new run in the decision log",
                    slowdown_bound_pct=bound,
                )
            if self._reset_pending:
                self._device.reset_clocks()
                self._record_clock_change(None)
                self._settle_until_s = self._now() + self.config.settle_s
                self._reset_pending = False
            return handlers[self.state]()
        except SleepInterruptedError:
            # The owner asked us to stop (e.g. SIGTERM in the daemon) while we waited: a normal, clean stop.
            decision = self.stop("stop requested while measuring")
            assert decision is not None
            return decision
        except BaseException as exc:
            self._fail(exc)
            raise

    def run(self, until_s: float) -> None:
        """Step until the device clock reaches until_s (the last window may end a little after it)."""
        while self.state is not State.STOPPED and self._device.now_s() < until_s:
            self.step()

    def stop(self, reason: str = "stopped by the caller") -> Decision | None:
        """Reset the clocks and stop. Idempotent (None when already stopped)."""
        if self.state is State.STOPPED:
            return None
        if not self.config.advise:
            self._device.reset_clocks()
            self._record_clock_change(None)
        return self._decide("stop", State.STOPPED, reason)

    def __enter__(self) -> Controller:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop("controller closed")

    # --- plumbing ---------------------------------------------------------------------------------------------

    def _now(self) -> float:
        return self._device.now_s()

    def _decide(self, event: str, next_state: State, reason: str, **fields: Any) -> Decision:
        sm, mem = self.clocks
        now = self._now()
        reading = self._sampler.energy_reading  # the counter at the end of the latest window: the witness's
        decision = Decision(
            t_s=now,
            state=self.state,
            next_state=next_state,
            event=event,
            sm_clock_mhz=sm,
            mem_clock_mhz=mem,
            locked=self._locked is not None,
            reason=reason,
            phase=self._phase,
            energy_counter_j=reading[1] if reading is not None and now - reading[0] <= _COUNTER_FRESH_S else None,
            **fields,
        )
        self.state = next_state
        self.decisions.append(decision)
        if len(self.decisions) > self._keep:
            del self.decisions[: len(self.decisions) - self._keep]
        if self._log is not None:
            self._log(decision.to_dict())
        return decision

    def _fail(self, exc: BaseException) -> None:
        """Reset the clocks whatever went wrong, log it, stop."""
        reset_error = ""
        try:
            if not self.config.advise:
                self._device.reset_clocks()
                self._record_clock_change(None)
        except Exception as reset_exc:  # the GPU may be gone: still log and stop
            reset_error = f"; resetting the clocks failed too: {type(reset_exc).__name__}: {reset_exc}"
        try:
            self._decide("error", State.STOPPED, f"{type(exc).__name__}: {exc}{reset_error}")
        except Exception:
            self.state = State.STOPPED  # a broken log sink must not hide the original exception

    def _record_clock_change(self, clocks: Clocks | None) -> None:
        self._locked = clocks
        sm, mem = clocks or self.reference
        self.clock_changes.append((self._now(), sm, mem, clocks is not None))

    def _set_clocks(self, clocks: Clocks | None) -> bool:
        """Lock a pair (None or the reference: reset to the default behaviour). True when something changed."""
        if clocks == self.reference:
            clocks = None
        if clocks == self._locked:
            return False
        if self.config.advise:  # unreachable by design; a bug here must not become a clock write
            raise RuntimeError(f"advise mode tried to set clocks {clocks}")
        if clocks is None:
            self._device.reset_clocks()
        else:
            self._device.lock_clocks(*clocks)
        self._record_clock_change(clocks)
        period = self._baseline.period_s if self._baseline else 0.0
        self._settle_until_s = self._now() + max(self.config.settle_s, period)
        return True

    def _sleep_until(self, t_s: float) -> None:
        dt = t_s - self._now()
        if dt > 0:
            self._device.clock.sleep(dt)

    def _measure(
        self, window_s: float, *, continue_within_s: float = 0.0, energy_every_s: float | None = None
    ) -> PowerWindow:
        """A window at settled clocks (continuing the last one, reading the energy counter that often:
        `Sampler.collect`)."""
        self._sleep_until(self._settle_until_s)
        return self._sampler.collect(window_s, continue_within_s=continue_within_s, energy_every_s=energy_every_s)

    def _window_for(self, period_s: float) -> float:
        cfg = self.config
        floor_s = max(cfg.min_window_s, self._window_floor_s)
        return window_for_periods(period_s, cfg.window_periods, min_window_s=floor_s, max_window_s=cfg.max_window_s)

    @staticmethod
    def _power(window: PowerWindow) -> float:
        # Buffered samples cover the window exactly; the 10 Hz energy counter is off by up to a refresh at each
        # edge (2% of a 10 s window), so it is the fallback for devices without buffered samples.
        return window.mean_power_w if len(window.power_w) >= 10 else window.counter_power_w

    @staticmethod
    def _window_power(windows: list[PowerWindow], period_s: float | None) -> float:
        """Mean power of consecutive windows. Iterations shorter than two sample intervals (only step markers
        time those) alias the buffered samples: each sample catches the same few instants of the iteration, and
        the window's mean is off by up to tens of percent, so the energy counter (unbiased, edges off by up to a
        refresh) gives the power then."""
        _, power_w = _concat(windows)
        if len(power_w) < 10:
            return float(np.mean([w.counter_power_w for w in windows]))
        counter_w = sum(w.energy_j for w in windows) / sum(w.duration_s for w in windows)
        t_s = np.concatenate([w.t_s for w in windows])
        aliased = period_s is not None and period_s < 2.0 * float(np.median(np.diff(t_s)))
        return counter_w if aliased and math.isfinite(counter_w) else float(np.mean(power_w))

    def _reduce(self, window: PowerWindow, estimate: PeriodEstimate) -> _Measured:
        marked = estimate.timing == MARKERS
        power = self._window_power([window], estimate.period_s if marked else None)
        return _Measured(window.duration_s, estimate.period_s, power, estimate)

    def _estimate(
        self,
        windows: list[PowerWindow],
        *,
        min_period_s: float | None = None,
        max_period_s: float | None = None,
        detector: DetectorConfig | None = None,
        timing: str | None = None,
        stands_alone: bool = False,
    ) -> PeriodEstimate:
        """The period of consecutive windows at one config: from the step markers when enough arrived, else from
        the power signal. `timing` (default: the baseline's source, except while profiling) pins the source:
        within a phase every ratio compares periods of one source (a marked step and a power cycle need not be the
        same thing). Pinned to markers that are missing, the answer is "no period", which the states handle like
        any other. A marker estimate's level_w is the windows' mean power (`_window_power`), as phase-change
        checks compare it; the signal's is the detector's own. `stands_alone`: have the detector judge whether a
        segmented window needs no second one (profiling only: it costs more segmentations). Where the windows read
        the energy counter through (profiling's), it tells the detector whether the samples' slow variation is
        real (`counter_check`)."""
        cfg = self.config
        if timing is None and self._baseline is not None and self.state is not State.PROFILING:
            timing = self._baseline.timing  # profiling finds the (new) phase's source afresh
        t_s, power_w = _concat(windows)
        if timing != SIGNAL:
            marked = period_from_markers(
                np.concatenate([w.marker_t_s for w in windows]),
                np.concatenate([w.marker_seq for w in windows]),
                start_s=windows[0].start_s,
                end_s=windows[-1].end_s,
                min_intervals=cfg.min_marker_intervals,
                min_coverage=cfg.marker_coverage,
                max_period_s=cfg.max_period_s,
            )
            if marked.ok or timing == MARKERS:
                # level_w is the window's power, which phase-change checks compare.
                return replace(marked, level_w=self._window_power(windows, marked.period_s))
        check = counter_check(
            t_s,
            power_w,
            np.concatenate([w.energy_t_s for w in windows]),
            np.concatenate([w.energy_read_j for w in windows]),
        )
        confirmed = check is not None and check.confirms()
        if detector is not None:
            return detect_period(t_s, power_w, config=detector, variation_confirmed=confirmed)
        return detect_period(
            t_s,
            power_w,
            min_period_s=min_period_s,
            max_period_s=max_period_s or cfg.max_period_s,
            config=DetectorConfig(judge_stands_alone=True) if stands_alone else None,
            variation_confirmed=confirmed,
        )

    def _agreement(self, a: PeriodEstimate, b: PeriodEstimate) -> float:
        """How closely two windows' periods must agree to be one phase's: period_agreement for steady iterations;
        for jittery ones (a spread of single iteration times was measured), also what two means over that many
        iterations differ by, by chance (3 sigma), up to max_jitter_agreement (well short of a harmonic's 33%)."""
        cfg = self.config
        chance = 0.0
        if a.period_s and b.period_s and a.window_s > 0 and b.window_s > 0:
            spread = max(a.spread, b.spread)
            chance = 3.0 * spread * math.sqrt(a.period_s / a.window_s + b.period_s / b.window_s)
        return max(cfg.period_agreement, min(chance, cfg.max_jitter_agreement))

    def _has_markers(self, window: PowerWindow) -> bool:
        """Enough step markers in this window to time it by them."""
        return self._estimate([window], timing=MARKERS).ok

    def _is_idle(self, window: PowerWindow) -> bool:
        sm_active = window.counters.features.get("feat_sm_active", math.nan)
        return math.isfinite(sm_active) and sm_active < self.config.idle_sm_active

    def _period_bounds(self, index: int) -> tuple[float, float]:
        """Periods a config can plausibly have given the baseline: time scales at most like the clock ratios
        (with generous margins: measured sweeps show up to 2x that, and 0.8x). Excludes the 1/2 and 1/3
        harmonics that period detection occasionally locks onto."""
        assert self._baseline is not None
        sm, mem = self._grid_sm[index], self._grid_mem[index]
        ratios = (self.reference[0] / sm, self.reference[1] / mem)
        lo = 0.6 * self._baseline.period_s * min(1.0, *ratios)
        hi = 3.0 * self._baseline.period_s * max(1.0, *ratios)
        return lo, min(hi, self.config.max_period_s)

    def _index_of(self, clocks: Clocks | None) -> int:
        return self._ref_index if clocks is None else self._grid.index(clocks)

    # --- PROFILING ---------------------------------------------------------------------------------------------

    def _start_profiling(self) -> None:
        self._prof_prev: tuple[_Measured, PowerWindow] | None = None
        self._prof_window_s = self.config.first_window_s
        # Short periods (a few 50 Hz samples each) need longer windows than 20 periods: profiling lengthens its
        # window until a period holds, and every later window of the phase is at least that long.
        self._window_floor_s = 0.0
        self._prof_failures = 0
        self._prof_counters: list[dict[str, float]] = []
        # Consecutive windows at reference since the last reset (samples touching), none paired: _run_candidate.
        self._prof_run: list[PowerWindow] = []
        # The last window without a period and its estimate: `_none_then_fold` pairs it with a fold right after it.
        self._prof_failed: tuple[PowerWindow, PeriodEstimate] | None = None
        # The windows without a period since the last that had one (as one): the next window, if it finds none
        # alone, is analysed together with them.
        self._prof_extend: PowerWindow | None = None
        # A longer window asked for that continues _prof_extend (`_plan_window`).
        self._prof_longer: _LongerWindow | None = None

    def _reprofile(self, event: str, reason: str, **fields: Any) -> Decision:
        self._set_clocks(None)
        self._start_profiling()
        self._phase = None
        return self._decide(event, State.PROFILING, reason, **fields)

    def _step_profiling(self) -> Decision:
        cfg = self.config
        self._set_clocks(None)
        # After a profiling window (at reference, no clock change since), the next continues it: runs and pairs of
        # windows are then analysed over samples that touch, on a real GPU (a pause to analyse) as in a replay.
        last = self._prof_run[-1] if self._prof_run else self._prof_prev[1] if self._prof_prev else None
        longer, self._prof_longer = self._prof_longer, None
        window = self._measure(
            self._prof_window_s,
            continue_within_s=cfg.profile_run_gap_s if last or longer else 0.0,
            energy_every_s=cfg.profile_energy_every_s,
        )
        head = longer.head if longer is not None else None
        continued = head is not None and _touches(head, window)
        if continued and head is not None:
            window = merge_windows([head, window])
        # A look: the window so far is still short of the length asked for (`_LongerWindow`).
        looking = (
            longer is not None and (head is None or continued) and window.duration_s < longer.length_s - _LOOK_SLACK_S
        )
        if longer is not None and not looking:
            self._prof_window_s = longer.length_s
        # Everything since the first window without a period, while the windows touch (each continues the last).
        span, joined = window, False
        joint: PeriodEstimate | None = None  # the span's estimate, where it was analysed as one
        short, self._prof_extend = self._prof_extend, None
        if short is not None and _touches(short, window) and short.duration_s + window.duration_s <= cfg.max_window_s:
            span = merge_windows([short, window])
        if looking and longer is not None and longer.before is not None and _touches(longer.before, window):
            span = merge_windows([longer.before, window])
        if looking and longer is not None and span is not window:
            # The early look: the span so far (the windows without a period and the part of the window asked for
            # measured so far) as one window (or a candidate's run of windows with its second window's part so
            # far: `_plan_alone_look`). It ends profiling only with a baseline that stands alone (a candidate would
            # divert the pairing).
            est = joint = self._estimate([span], stands_alone=True)
            # A candidate's look was planned to hold 33 of the candidate's periods; it must hold as many of its own,
            # within 1% (a segmentation that merged iterations, or took in a stall at its edge, comes out long).
            short_look = (
                longer.before is not None
                and joint.period_s is not None
                and span.duration_s < 0.99 * _ALONE_SPAN_PERIODS * joint.period_s
            )
            if short_look or not (
                joint.ok and joint.period_s is not None and joint.stands_alone and self._one_phase(span)
            ):
                # Not yet: the window goes on toward the length asked for, as if it had not been looked at, and
                # is looked at again every profile_look_every_s on the way.
                self._prof_extend, self._prof_longer = short, replace(longer, head=window)
                rest_s = longer.length_s - window.duration_s
                step_s = cfg.profile_look_every_s
                self._prof_window_s = max(0.1, rest_s if rest_s < 1.5 * step_s else step_s)
                seen = (
                    f"{joint.verdict.value}: {joint.message}"
                    if joint.period_s is None
                    else f"period {joint.period_s * 1e3:.2f} ms, not alone"
                )
                look = "a first look" if longer.head is None else "a look"
                if longer.before is not None:
                    look += " with the candidate's windows"
                return self._decide(
                    "longer_window",
                    State.PROFILING,
                    f"{look} over {span.duration_s:.1f} s: {seen}; the window goes on to {longer.length_s:.1f} s",
                    window_s=span.duration_s,
                )
        else:
            est = self._estimate([window], stands_alone=True)
            if span is not window and not (est.ok and est.period_s is not None):
                # No period in this window alone: with the windows without one that it continues, as one (a weak
                # waveform folds over 9 s, not over 3 s or 6 s).
                joint = self._estimate([span], stands_alone=True)
        if joint is not None and joint.ok and joint.period_s is not None:
            # The span as one window replaces the windows in it.
            window, est, joined = span, joint, True
            self._prof_failed = None
            self._prof_run = [w for w in self._prof_run if w.start_s < span.start_s]
        if self._prof_run and not _touches(self._prof_run[-1], window):
            self._prof_run = []  # a pause too long for the driver's buffer: the samples no longer touch
        m = self._reduce(window, est)
        info = {"window_s": m.window_s, "period_s": m.period_s, "power_w": m.power_w, "timing": m.timing}
        # Idle whatever the detector says: an idle H200's buffered power carries a 10 Hz artefact that folds.
        if self._is_idle(window):
            return self._enter_idle(f"no GPU activity (feat_sm_active < {cfg.idle_sm_active}) while profiling", info)
        # A window whose activity ends before it does (the job ended or paused inside it) gives no period: its idle
        # tail would count as one long iteration. A failure, so that a job pausing at every window cannot keep
        # profiling for ever; the candidate and the window length stay, and the next window tells which it was.
        if (tail_s := idle_tail_s(window.t_s, window.power_w)) > 0.0:
            self._prof_failures += 1
            self._prof_run = []
            why = f"the power sits at its idle level for the window's last {tail_s:.1f} s (the job ended or paused)"
            if self._prof_failures >= cfg.max_profile_failures:
                return self._enter_fallback(why, info)
            return self._decide("ends_idle", State.PROFILING, f"{why}: no period from this window", **info)
        if est.ok and est.period_s is not None:
            prev = self._prof_prev
            counters = dict(window.counters.features)
            # A window that stands alone is the baseline if it holds one phase; else a candidate like any window.
            if est.stands_alone and self._one_phase(window):
                return self._on_baseline([(m, window)], [counters], info)
            # Two windows agree only in one source: a job that starts (or stops) marking starts a new candidate. And
            # only by one method: a folded period and a counted one are different evidence (on the 9.8 ms MLP
            # phases, a rare folded alias and a rare counted one could otherwise pair up).
            same_kind = prev is not None and (prev[0].timing, _evidence(prev[0].estimate)) == (m.timing, _evidence(est))
            if prev is not None and prev[0].period_s is not None and same_kind:
                gap = abs(est.period_s - prev[0].period_s) / prev[0].period_s
                if gap <= self._agreement(prev[0].estimate, est):
                    return self._on_baseline([prev, (m, window)], [*self._prof_counters, counters], info)
            elif (
                prev is not None
                and prev[0].period_s is not None
                and prev[0].timing == m.timing == SIGNAL
                and (counted := self._joint_count(prev[1], window, (est.period_s, prev[0].period_s))) is not None
            ):
                # A fold and a count of one jittery job (a +-10% job folds in one window and counts in the next):
                # one phase only where the count over both (touching) windows agrees with both.
                both = [*self._prof_counters, counters]
                return self._on_baseline([prev, (m, window)], both, info, counted=counted)
            if (found := self._none_then_fold(m, window, info)) is not None:
                return found
            self._prof_run.append(window)
            if len(self._prof_run) > 1 and (found := self._run_alone(*self._merged_run(), info)) is not None:
                return found
            self._prof_prev = (m, window)
            self._prof_counters = [counters]
            length_s = window.duration_s if joined else self._prof_window_s
            lengthened = length_s > cfg.first_window_s  # an earlier window was too short: keep this one's length
            # Counted (jittery) iterations need as many in the next window as this one held to be counted again.
            lengthened |= est.method != "fold"
            keep = length_s
            if est.method != "fold":
                keep = self._counted_second_window(length_s, est.period_s)
            self._prof_window_s = max(keep if lengthened else 0.0, self._window_for(est.period_s))
            self._plan_alone_look(est.period_s)
            return self._decide(
                "period_candidate",
                State.PROFILING,
                f"period {est.period_s * 1e3:.2f} ms ({est.timing}); waiting for a second window that agrees within "
                f"{self._agreement(est, est) * 100:.0f}%",
                **info,
            )
        if (found := self._fold_then_count(m, window, info)) is not None:
            return found
        if (found := self._fold_over_both(m, window, info)) is not None:
            return found
        self._prof_prev = None
        self._prof_failed = (window, est)
        self._prof_run.append(window)
        analysed = (span, joint) if joint is not None else None
        if len(self._prof_run) > 1 and (found := self._run_candidate(info, analysed)) is not None:
            return found
        # The next window, if it finds no period alone, is analysed with this span (a fallback re-profiles afresh;
        # after a window of max_window_s the two are too long to join).
        self._prof_extend = span
        suggested = est.suggested_window_s
        # A period that wanders, in a window too short to tell it from an alias: the detector says how long a
        # window can. Measuring that long is no failure yet (each such window is longer than the last, up to
        # max_window_s, so this cannot repeat for ever). (Live on an H200, a 50 ms job with a host stall fell
        # back after three such windows of 3, 6 and 12 s.)
        wanders = (
            est.verdict is not Verdict.INSUFFICIENT_DATA
            and suggested is not None
            and self._prof_window_s < min(suggested, cfg.max_window_s)
        )
        if wanders and suggested is not None:
            self._plan_window(min(cfg.max_window_s, suggested), span)
            return self._decide("longer_window", State.PROFILING, est.message, **info)
        self._prof_failures += 1
        if self._prof_failures >= cfg.max_profile_failures:
            return self._enter_fallback(f"{est.verdict.value}: {est.message}", info)
        if est.verdict is Verdict.INSUFFICIENT_DATA and self._prof_window_s < cfg.max_window_s:
            suggested = suggested or 2.0 * self._prof_window_s
            self._plan_window(min(cfg.max_window_s, max(suggested, 1.5 * self._prof_window_s)), span)
            return self._decide("longer_window", State.PROFILING, est.message, **info)
        if self._prof_window_s < cfg.max_window_s:
            self._plan_window(min(cfg.max_window_s, 2.0 * self._prof_window_s), span)
            return self._decide(
                "no_period",
                State.PROFILING,
                f"{est.verdict.value}: {est.message}; next window {self._planned_length():g} s",
                **info,
            )
        return self._decide("no_period", State.PROFILING, f"{est.verdict.value}: {est.message}", **info)

    def _plan_window(self, length_s: float, span: PowerWindow) -> None:
        """The next window: `length_s` long; where it continues `span` (the windows without a period so far, as
        one) and the rest of that length is shorter, first that rest, for the early look, then the looks every
        profile_look_every_s on the way (`_LongerWindow`)."""
        self._prof_window_s = length_s
        rest_s = max(self.config.first_window_s, length_s - span.duration_s)
        if rest_s < length_s:
            self._prof_window_s, self._prof_longer = rest_s, _LongerWindow(length_s)

    def _planned_length(self) -> float:
        """The next profiling window's length, looks on the way included."""
        return self._prof_longer.length_s if self._prof_longer is not None else self._prof_window_s

    def _plan_alone_look(self, period_s: float) -> None:
        """A candidate's second window, where the candidate's run of touching windows and the first part of it
        hold as many iterations as stand alone (template_min_cycles, a tenth more for stalls) before it ends: that
        part is measured first and looked at with the run as one window (`_LongerWindow.before`). A baseline that
        stands alone ends profiling there; else the window goes on as planned, as if not looked at (a 500 ms job's
        pair needs two windows of 20 iterations after a first 3 s window that could not tell its period)."""
        if not self._prof_run:
            return
        run = merge_windows(self._prof_run)
        rest_s = _ALONE_SPAN_PERIODS * period_s - run.duration_s
        if 0.0 < rest_s < self._prof_window_s and run.duration_s + rest_s <= self.config.max_window_s:
            self._prof_longer = _LongerWindow(self._prof_window_s, before=run)
            self._prof_window_s = rest_s

    def _fold_candidate_before(self, m: _Measured) -> _FoldCandidate | None:
        """The candidate (and its period) that a window without a period follows, where the pairs over both
        windows apply: a fold on the power signal, then a failure on it that a count or a longer fold could still
        resolve."""
        prev, est = self._prof_prev, m.estimate
        if (
            prev is None
            or prev[0].period_s is None
            or prev[0].estimate.method != "fold"
            or prev[0].timing != SIGNAL
            or est.timing != SIGNAL
            or est.verdict not in COUNTABLE_VERDICTS
        ):
            return None
        return _FoldCandidate(prev[0], prev[1], prev[0].period_s)

    def _fold_then_count(self, m: _Measured, window: PowerWindow, info: dict[str, Any]) -> Decision | None:
        """A folded candidate, then a touching window without a period: a +-10% job's phase diffuses over the
        longer second window, which then neither folds nor counts on its own. The count over both windows near
        the candidate (`count_confirms`), within period_agreement of it, pairs them; the count is the period."""
        found, est = self._fold_candidate_before(m), m.estimate
        if found is None or (counted := self._joint_count(found.window, window, (found.period_s,) * 2)) is None:
            return None
        as_count = _as_counted(est, counted, found.measured.estimate.confidence)
        both = [*self._prof_counters, dict(window.counters.features)]
        return self._on_baseline([found.pair, (self._reduce(window, as_count), window)], both, info, counted=counted)

    def _fold_over_both(self, m: _Measured, window: PowerWindow, info: dict[str, Any]) -> Decision | None:
        """A folded candidate, then a touching window at least as long without a period whose samples fold no
        differently: a weak waveform (a steady GPT's fold r2 0.2-0.3) over sub-windows of a few cycles each, one of
        which strays. Both windows as one pair them where that one window folds within period_agreement of the
        candidate and passes every check (its sub-windows twice as long). As long: the window adds as much evidence
        as the candidate's (a steady 181 ms GPT whose waveform nearly repeats every half iteration folds at 90 ms
        over 3 s and over those 3 s with the 2 s after them; over 6 s at 180 ms)."""
        found = self._fold_candidate_before(m)
        if found is None or not _touches(found.window, window) or window.duration_s < 0.95 * found.window.duration_s:
            return None
        period, agreement = found.period_s, self.config.period_agreement
        both = merge_windows([found.window, window])
        joint = self._estimate([both], timing=SIGNAL)
        if (
            not joint.ok
            or joint.period_s is None
            or joint.method != "fold"
            or abs(joint.period_s / period - 1.0) > agreement
            or not self._one_phase(both)
        ):
            return None
        # A fold lines up the typical iteration: the mean is longer by the time spent in long host stalls, which
        # vary (held-out-24's 101 ms +-50% heavy-tailed job: 10% of the samples, the fold 6% short). Only where
        # that time is within period_agreement is the fold the mean iteration time.
        share = stall_share(both.t_s, both.power_w, joint.period_s)
        if share is None or share > agreement:
            return None
        counters = [*self._prof_counters, dict(window.counters.features)]
        # Later windows (probes, holding) as long as both: one as long as the second does not fold on its own.
        measured = [found.pair, (self._reduce(window, joint), window)]
        return self._on_baseline(measured, counters, info, floor_s=both.duration_s)

    def _none_then_fold(self, m: _Measured, window: PowerWindow, info: dict[str, Any]) -> Decision | None:
        """A window without a period, then a touching one that folds: `_fold_then_count` in the other order (a
        +-10% job's longer window fails where a later, shorter stretch of it folds). The count over both windows
        near the fold, within period_agreement of it, pairs them; the count is the period."""
        failed, est = self._prof_failed, m.estimate
        if (
            failed is None
            or self._prof_prev is not None
            or est.period_s is None
            or est.method != "fold"
            or m.timing != SIGNAL
            or failed[1].verdict not in COUNTABLE_VERDICTS
            or (counted := self._joint_count(failed[0], window, (est.period_s, est.period_s))) is None
        ):
            return None
        as_count = _as_counted(failed[1], counted, est.confidence)
        both = [dict(failed[0].counters.features), dict(window.counters.features)]
        return self._on_baseline(
            [(self._reduce(failed[0], as_count), failed[0]), (m, window)], both, info, counted=counted
        )

    def _joint_count(
        self, earlier: PowerWindow, window: PowerWindow, periods: tuple[float, float]
    ) -> tuple[float, float] | None:
        """The count over two windows whose samples touch near `periods`, where it agrees with each within
        period_agreement (`count_confirms`); else None. The callers check that both are power-signal timed."""
        if not _touches(earlier, window):
            return None
        return count_confirms(*_concat([earlier, window]), periods, agreement=self.config.period_agreement)

    def _counted_second_window(self, candidate_s: float, period_s: float) -> float:
        """A counted candidate's second window: as long as the candidate's (its iterations were needed to count),
        at most counted_window_periods periods, never shorter than the first window (a shorter one confirmed a
        biased count on a real H100 job: docs/jitter.md, session 7)."""
        cap = max(self.config.counted_window_periods * period_s, self.config.first_window_s)
        return min(candidate_s, cap)

    def _one_phase(self, window: PowerWindow) -> bool:
        """Whether a window that stands alone holds one phase: its halves' mean power differs by at most what
        `has_changed` calls a new phase (level_tolerance). A job's warm-up, then its phase, does not (real
        gpt_32-resnet_1024: a window of the ResNet's warm-up and first 9 s stood alone 7.2% long)."""
        return level_shift(window.t_s, window.power_w) <= self.config.level_tolerance

    def _merged_run(
        self, analysed: tuple[PowerWindow, PeriodEstimate] | None = None
    ) -> tuple[PowerWindow, PeriodEstimate]:
        """The windows of the run (consecutive, at reference, since the last reset; none paired) as one window, and
        its estimate: `analysed`'s, where that window already spans the same samples (the continued windows)."""
        merged = merge_windows(self._prof_run)
        if analysed is not None and (analysed[0].start_s, analysed[0].end_s) == (merged.start_s, merged.end_s):
            return merged, analysed[1]
        return merged, self._estimate([merged], stands_alone=True)

    def _run_alone(self, merged: PowerWindow, est: PeriodEstimate, info: dict[str, Any]) -> Decision | None:
        """The merged run as the baseline, if it stands alone. Tried after a window without a period
        (`_run_candidate`) and after one whose candidate paired with none: a jittery job's 6 s windows of 23
        iterations each count 2-6% apart, by chance, where both together segment 46."""
        if not (est.ok and est.period_s is not None and est.stands_alone and self._one_phase(merged)):
            return None
        self._prof_run = []
        return self._on_baseline([(self._reduce(merged, est), merged)], [dict(merged.counters.features)], info)

    def _run_candidate(
        self, info: dict[str, Any], analysed: tuple[PowerWindow, PeriodEstimate] | None = None
    ) -> Decision | None:
        """The windows of the run analysed as one: a jittery job whose iterations a 3 s and a 6 s window each hold
        too few of can be counted over both (9 s) without waiting for a longer third. A run that stands alone is
        the baseline; a period counted is a candidate like a window's (it replaces the last), and needs a second
        window, as long, that agrees."""
        merged, est = self._merged_run(analysed)
        if (found := self._run_alone(merged, est, info)) is not None:
            return found
        # Only counted iterations: a fold needs no more than one window, and over windows that folded apart it
        # can lock onto a multiple (a steady 100 ms job's 3 s and 2 s windows folded as one at 500 ms).
        if not (est.ok and est.period_s is not None) or est.method == "fold":
            return None
        m = self._reduce(merged, est)
        self._prof_prev = (m, merged)
        self._prof_counters = [dict(merged.counters.features)]
        windows, self._prof_run = len(self._prof_run), []
        need = self._counted_second_window(merged.duration_s, est.period_s)
        self._prof_window_s = min(self.config.max_window_s, max(need, self._window_for(est.period_s)))
        return self._decide(
            "period_candidate",
            State.PROFILING,
            f"period {est.period_s * 1e3:.2f} ms ({est.timing}) over the last {windows} "
            f"windows ({merged.duration_s:.1f} s); waiting for a second window that agrees within "
            f"{self._agreement(est, est) * 100:.0f}%",
            **{**info, "window_s": m.window_s, "period_s": m.period_s, "power_w": m.power_w, "timing": m.timing},
        )

    def _on_baseline(
        self,
        measured: list[tuple[_Measured, PowerWindow]],
        counters: list[dict[str, float]],
        info: dict[str, Any],
        *,
        counted: tuple[float, float] | None = None,
        floor_s: float = 0.0,
    ) -> Decision:
        """Two agreeing windows at reference clocks, or one that stands alone (`PeriodEstimate.stands_alone`): the
        baseline. A phase seen before goes straight to its config; a new one is searched. `floor_s`: later windows
        at least this long (a pair whose second window folded only with the first: as long as both)."""
        (m1, w1), (m2, w2) = measured[0], measured[-1]
        assert m1.period_s is not None and m2.period_s is not None
        windows = [w for _, w in measured]
        self.baseline_windows = tuple((w.start_s, w.end_s) for w in windows)
        if self._prof_window_s > self.config.first_window_s:
            lengths = [m.window_s for m, _ in measured]
            if len(measured) == 1:  # later windows as long as a pair's second window would have been
                lengths.append(self._counted_second_window(m1.window_s, m1.period_s))
            self._window_floor_s = min(lengths)
        self._window_floor_s = max(self._window_floor_s, floor_s)
        weights = [m.window_s for m, _ in measured]
        period = float(np.average([m.period_s for m, _ in measured], weights=weights))
        # Both windows as one, for precision (every ratio is relative to this period). The two already agree, so
        # the search is narrowed to their neighbourhood; if the joint fit fails, the average stays (or, for two
        # folds, the count over both windows: below).
        timing = m2.estimate.timing
        method, spread = m2.estimate.method, max(m1.estimate.spread, m2.estimate.spread)
        pair = len(measured) == 2  # else one window that stands alone: its own estimate
        joint = None
        if pair and counted is None:
            joint = self._estimate([w1, w2], min_period_s=0.9 * period, max_period_s=1.1 * period, timing=timing)
            if joint.period_s is None and _evidence(m2.estimate) == "counted":
                # The search narrowed to the pair's neighbourhood puts a floor under it that the detector takes for
                # the sampling's, so its alias checks may refuse the iterations near it: a segmentation over both
                # windows by its own search then refines the pair (a count over both is no better than the two).
                unbounded = self._estimate([w1, w2], timing=timing)
                joint = unbounded if unbounded.method == "template" else joint
        if counted is not None:  # a fold and a count: the mean iteration time is the count over both
            (period, spread), method = counted, "count"
        elif (
            joint is not None
            and joint.period_s is not None
            and _evidence(joint) == _evidence(m2.estimate)
            and abs(joint.period_s / period - 1.0) <= self._agreement(m1.estimate, m2.estimate)
        ):
            # Only the pair's kind of evidence refines it: over two windows of counted iterations a weak fold lines
            # up the typical iteration (held-out-13: two templates within 0.2% each, folded jointly 5.7% short).
            period = joint.period_s
        elif pair and timing == SIGNAL and m1.estimate.method == m2.estimate.method == "fold":
            # Two folds, not one over both windows: the iterations' phase moved between them. A fold lines up the
            # typical iteration; where long host stalls moved it, the mean iteration time (counted) is longer.
            counted = counted_period_near(*_concat([w1, w2]), period)
            if counted is not None and _FOLD_SHORT[0] <= counted[0] / period - 1.0 <= _FOLD_SHORT[1]:
                period, spread = counted
                method = "count"
        power = self._window_power(windows, period if timing == MARKERS else None)
        info = {**info, "window_s": sum(weights), "period_s": period, "power_w": power, "timing": timing}
        mean_counters = {
            name: float(np.nanmean(vals))
            if np.isfinite(vals := np.array([c.get(name, math.nan) for c in counters])).any()
            else math.nan
            for name in FEATURE_NAMES
        }
        confidence = min(m1.estimate.confidence, m2.estimate.confidence)
        baseline = Baseline(period, power, mean_counters, timing, confidence, method, spread)
        self._baseline = baseline
        cfg = self.config
        for record in self.phases:
            if record.matches(
                baseline,
                period_tol=cfg.phase_period_tol,
                power_tol=cfg.phase_power_tol,
                counter_tol=cfg.phase_counter_tol,
            ):
                self._phase = record.index
                # Keep the fresh baseline (power drifts as the GPU warms) but the config found before.
                self.phases[record.index] = replace(record, baseline=baseline)
                if self.config.advise:
                    self.advised = record.clocks
                    return self._enter_hold(
                        None,
                        (1.0, 1.0),
                        "known_phase",
                        f"phase {record.index} seen before: advise {record.clocks or self.reference} MHz again; "
                        "clocks left unchanged",
                        {**info, "advised": record.clocks or self.reference},
                    )
                return self._enter_hold(
                    record.clocks,
                    (record.measured_time_ratio, record.measured_energy_ratio),
                    "known_phase",
                    f"phase {record.index} seen before (period {period * 1e3:.2f} ms, {power:.0f} W at reference): "
                    "re-using its config without a search",
                    info,
                )
        self._phase = len(self.phases)
        self.phases.append(PhaseRecord(self._phase, baseline, None, 1.0, 1.0))
        self._search = self._make_search(baseline)
        self._probe = None
        return self._decide(
            "baseline",
            State.SEARCHING,
            f"baseline: period {period * 1e3:.2f} ms (from the {timing}{'' if pair else ', one window'}), "
            f"{power:.1f} W, {power * period:.3f} J per iteration at reference clocks; searching "
            f"({self.config.policy.value})",
            **info,
            measured_time_ratio=1.0,
            measured_energy_ratio=1.0,
        )

    def _enter_fallback(self, why: str, info: dict[str, Any]) -> Decision:
        """No trustworthy period: the documented policy is to stay at reference clocks (no slowdown can be
        measured, so none may be risked) and to try profiling again after fallback_retry_s."""
        self._set_clocks(None)
        self._held = None
        self._search = None
        self._probe = None
        self._fallback_reason = why
        self._next_check_s = self._now() + self.config.fallback_retry_s
        return self._decide(
            "fallback_reference",
            State.HOLDING,
            f"no trustworthy period ({why}); policy: stay at reference clocks, re-profile in "
            f"{self.config.fallback_retry_s:g} s",
            **info,
        )

    # --- SEARCHING ---------------------------------------------------------------------------------------------

    def _make_search(self, baseline: Baseline) -> Search:
        cfg = self.config
        if cfg.policy is Policy.SEARCH:
            search: Search = DescentSearch(
                self._grid_sm, self._grid_mem, cfg.objective, cfg.max_slowdown, max_probes=cfg.max_descent_probes
            )
        else:
            assert self._predictor is not None
            t0 = time.process_time()
            pred = self._predictor.predict_grid(
                baseline.counters, self._grid_sm, self._grid_mem, float(self.reference[0]), float(self.reference[1])
            )
            trust = counter_trust(baseline.counters, self._predictor.manifest.feature_names)
            prior = prior_from_prediction(
                self._grid_sm, self._grid_mem, self._ref_index, pred.time_ratio, pred.power_ratio, trust
            )
            self.prediction_cpu_s.append(time.process_time() - t0)
            if cfg.policy is Policy.PREDICTION or cfg.advise:
                search = PredictedPick(prior.time_ratio, prior.energy_ratio, cfg.objective, cfg.max_slowdown)
            else:
                search = MeasuredSearch(
                    self._grid_sm,
                    self._grid_mem,
                    self._ref_index,
                    cfg.objective,
                    cfg.max_slowdown,
                    prior,
                    max_probes=cfg.max_probes,
                )
        search.record(self._ref_index, 1.0, 1.0)  # the baseline is the reference probe
        return search

    def _step_searching(self) -> Decision:
        assert self._search is not None and self._baseline is not None
        search, baseline, cfg = self._search, self._baseline, self.config
        if self._probe is None:
            index = search.next_probe()
            if index is None:
                return self._converge("converged", "the search has converged")
            self._probe = index
            self._probe_parts = []
            self._probe_failures = 0
            self._set_clocks(self._grid[index])
        index = self._probe
        exp_time, exp_energy = search.expected(index)
        lo, hi = self._period_bounds(index)
        expected_period = min(max(baseline.period_s * (exp_time or 1.0), lo), hi)
        window = self._measure(self._window_for(expected_period))
        # Consecutive windows at one config are analysed as one longer window (period error falls ~ T^-1.5).
        parts = [*self._probe_parts, window]
        est = self._estimate(parts, min_period_s=lo, max_period_s=hi)
        span_s = sum(w.duration_s for w in parts)
        power = self._window_power(parts, est.period_s if est.timing == MARKERS else None)
        info: dict[str, Any] = {
            "window_s": span_s,
            "period_s": est.period_s,
            "power_w": power,
            "predicted_time_ratio": exp_time,
            "predicted_energy_ratio": exp_energy,
            "timing": est.timing if est.period_s is not None else None,
        }
        if est.period_s is None:
            self._probe_failures += 1
            self._probe_parts = []  # start afresh: what failed may be a transient
            if self._probe_failures >= cfg.max_probe_windows:
                return self._converge(
                    "probe_failed",
                    f"no period at {self._grid[index]} MHz ({est.message}): "
                    "ending the search on the best measured config",
                    info,
                )
            return self._decide("probe_retry", State.SEARCHING, f"no period: {est.message}", **info)
        time_ratio = baseline.time_ratio(est.period_s)
        energy_ratio = baseline.energy_ratio(est.period_s, power)
        info.update(measured_time_ratio=time_ratio, measured_energy_ratio=energy_ratio)
        # Lower clocks cannot make iterations much faster: a power-signal period that says so is an alias of
        # iterations faster than the sampling resolves (a 12 ms iteration sampled every 20 ms repeats every 60 ms,
        # and that pattern moves erratically with the clock). Confirm once, then trust no period of this phase.
        # Step markers time the iterations themselves (both periods are marker-timed: a phase keeps its source).
        slower_clocks = self._grid_sm[index] <= self.reference[0] and self._grid_mem[index] <= self.reference[1]
        implausible = est.timing != MARKERS and slower_clocks and time_ratio < 1.0 - cfg.faster_tolerance
        if implausible and len(parts) >= cfg.max_probe_windows:
            self._update_phase(None, (None, None))
            return self._enter_fallback(
                f"at {self._grid[index]} MHz the period says iterations run {(1 - time_ratio) * 100:.0f}% faster "
                "than at reference clocks, which lower clocks cannot do: the periods are likely aliases of "
                "iterations faster than the power sampling resolves",
                info,
            )
        # Measure longer when the decision hinges on this probe: its slowdown is near the bound, or it is far
        # from what the calibrated model expects (a surprise, or a rare wrong period lock).
        near_bound = cfg.objective is Objective.ENERGY and abs(time_ratio - 1.0 - cfg.max_slowdown) < cfg.near_bound
        # (Not when it is clearly over the bound: more windows would not change what the search does with it.)
        clearly_over = time_ratio > 1.0 + cfg.max_slowdown + cfg.near_bound
        surprise = (
            exp_time is not None and abs(time_ratio / exp_time - 1.0) > cfg.plausible_deviation and not clearly_over
        )
        if (near_bound or surprise or implausible) and len(parts) < cfg.max_probe_windows:
            self._probe_parts = parts
            why = (
                "implausibly fast"
                if implausible
                else "near the slowdown bound"
                if near_bound
                else f"far from the expected {exp_time:.3f}"
            )
            return self._decide(
                "probe_extend",
                State.SEARCHING,
                f"time ratio {time_ratio:.4f} is {why}: measuring longer",
                **info,
            )
        search.record(index, time_ratio, energy_ratio)
        self._probe = None
        self._probe_parts = []
        return self._decide(
            "probe",
            State.SEARCHING,
            f"probe {len(search.measured_indices()) - 1} at {self._grid[index]} MHz",
            **info,
        )

    def _unconfirmed(self, index: int) -> float | None:
        """The measured time ratio of a config whose timing on the power signal is not confirmed: no higher clocks
        than the reference, yet measured faster than it by more than the period's noise (confirm_tolerance). A
        false period (an alias of iterations shorter than the sampling resolves) does that; a true one cannot,
        beyond noise. None: confirmed (or marker-timed: markers cannot alias)."""
        assert self._search is not None and self._baseline is not None
        measured = self._search.measured(index)
        if self._baseline.timing == MARKERS or measured is None or index == self._ref_index:
            return None
        lower = self._grid_sm[index] <= self.reference[0] and self._grid_mem[index] <= self.reference[1]
        return measured[0] if lower and measured[0] < 1.0 - self.config.confirm_tolerance else None

    def _confirmed_best(self) -> tuple[int, str]:
        """The search's best, or, when its timing is not confirmed, the best measured config whose timing is (the
        reference at worst): an unconfirmed config is never held beyond its probe."""
        assert self._search is not None
        best = self._search.best()
        doubt = self._unconfirmed(best)
        if doubt is None:
            return best, ""
        confirmed = [i for i in self._search.measured_indices() if self._unconfirmed(i) is None]
        values = [self._search.measured(i) or (1.0, 1.0) for i in confirmed]
        pick = confirmed[
            pick_config(
                self.config.objective,
                np.array([v[0] for v in values]),
                np.array([v[1] for v in values]),
                self.config.max_slowdown,
            )
        ]
        return pick, (
            f"; {self._grid[best]} MHz measured {(1 - doubt) * 100:.1f}% faster than reference at lower clocks: "
            "its period on the power signal is not confirmed, so it is not held"
        )

    def _converge(self, event: str, reason: str, info: dict[str, Any] | None = None) -> Decision:
        assert self._search is not None
        best, doubt = (self._search.best(), "") if self.config.advise else self._confirmed_best()
        reason += doubt
        clocks = None if best == self._ref_index else self._grid[best]
        measured = self._search.measured(best) or (None, None)
        exp_time, exp_energy = self._search.expected(best)
        self._update_phase(clocks, measured)
        fields = dict(info or {})
        fields.update(predicted_time_ratio=exp_time, predicted_energy_ratio=exp_energy)
        self._search = None
        self._probe = None
        if self.config.advise:
            self.advised = clocks
            fields["advised"] = self._grid[best]
            sm, mem = self._grid[best]
            return self._enter_hold(
                None,
                (1.0, 1.0),
                "advise",
                f"advise: would set SM {sm} / memory {mem} MHz (predicted time x{exp_time:.3f}, energy "
                f"x{exp_energy:.3f}); clocks left unchanged",
                fields,
            )
        what = "measured" if measured[0] is not None else "predicted, not measured"
        return self._enter_hold(
            clocks, measured, event, f"{reason}: holding {self._grid[best]} MHz ({what})", fields, exp_time
        )

    def _update_phase(self, clocks: Clocks | None, measured: tuple[float | None, float | None]) -> None:
        if self._phase is not None:
            self.phases[self._phase] = replace(
                self.phases[self._phase],
                clocks=clocks,
                measured_time_ratio=measured[0],
                measured_energy_ratio=measured[1],
            )

    # --- HOLDING / GUARDING ------------------------------------------------------------------------------------

    def _enter_hold(
        self,
        clocks: Clocks | None,
        measured: tuple[float | None, float | None],
        event: str,
        reason: str,
        info: dict[str, Any],
        predicted_time_ratio: float | None = None,
    ) -> Decision:
        self._set_clocks(clocks)
        self._held = clocks
        self._held_ratios = measured
        self._held_predicted_time_ratio = predicted_time_ratio  # sizes the windows when nothing was measured
        self._hold_ref = None  # the phase-change reference must be taken at the held clocks
        self._hold_failures = 0
        self._suspect_change = False
        self._hold_window_s = None
        self._fallback_reason = None
        self._check_interval_s = self.config.check_interval_s
        self._next_check_s = self._now()  # first check as soon as the clocks settle
        fields = dict(info)
        fields.setdefault("measured_time_ratio", measured[0])
        fields.setdefault("measured_energy_ratio", measured[1])
        return self._decide(event, State.HOLDING, reason, **fields)

    def _expected_held_period(self) -> float:
        assert self._baseline is not None
        index = self._index_of(self._held)
        if self._hold_ref is not None and self._hold_ref.period_s is not None:
            return self._hold_ref.period_s
        time_ratio = self._held_ratios[0] or self._held_predicted_time_ratio or 1.0
        lo, hi = self._period_bounds(index)
        return min(max(self._baseline.period_s * time_ratio, lo), hi)

    def _drift_due(self) -> bool:
        """A drift check is due now: a locked config held and confirmed (a phase-change reference taken), nothing
        suspected, and its power moved beyond the noise since the reference was last measured (or that was
        long ago). The schedule starts with each new baseline."""
        cfg = self.config
        if cfg.advise or cfg.drift_check_s <= 0 or self._held is None or self._baseline is None:
            return False
        if self._fallback_reason is not None or self._suspect_change or self._hold_ref is None:
            return False
        now = self._now()
        if self._drift_for is not self._baseline:
            # A new baseline (profiled, or a known phase's) is older than the hold: the search, or the phase's
            # absence, ran between. The first check comes drift_check_s into the hold; later ones follow the
            # held power.
            self._drift_for = self._baseline
            self._drift_since_s = now
            self._drift_interval_s = cfg.drift_check_s
        if now - self._drift_since_s < cfg.drift_check_s:
            return False
        moved = abs(self._held_drift()) > cfg.drift_noise
        return moved or now - self._drift_since_s >= self._drift_interval_s

    def _note_held_power(self, window_power_w: float) -> None:
        """After a trusted hold window: the held config's power over the time since the previous hold window at
        the same clocks and baseline, from the energy counter (else this window's power), kept for _held_drift."""
        reading = self._sampler.energy_reading
        last, self._held_counter = self._held_counter, (self._baseline, self._held, self._now(), reading)
        if last is None or last[0] is not self._baseline or last[1] != self._held:
            self._held_power = []  # the time since the last hold window was not all at the held config
            return
        duration_s = self._now() - last[2]
        power_w = window_power_w
        if reading is not None and last[3] is not None and reading[0] > last[3][0]:
            power_w = (reading[1] - last[3][1]) / (reading[0] - last[3][0])
        if duration_s > 0.0 and math.isfinite(power_w) and power_w > 0.0:
            self._held_power.append((power_w, duration_s))

    def _held_drift(self) -> float:
        """How far the held config's power moved since the last window at reference: its mean over the latest
        _DRIFT_SPAN_S against its mean over the first (0 until that much was seen). Long spans, because the
        energy counter refreshes every ~100 ms: a 30 s difference of two readings is uncertain by ~0.3%."""
        spans = self._held_power
        if sum(w for _, w in spans) < _DRIFT_SPAN_S:
            return 0.0

        def mean(parts: list[tuple[float, float]]) -> float:
            total = weight = 0.0
            for power_w, w in parts:
                total, weight = total + power_w * w, weight + w
                if weight >= _DRIFT_SPAN_S:
                    break
            return total / weight

        return mean(spans[::-1]) / mean(spans) - 1.0

    def _drift_check(self) -> Decision:
        """A short window at reference clocks: its power becomes the baseline's (the period is kept: it drifts far
        less, +0.2% on the H200, and a short window's period is noisier than that); then back to the held config."""
        cfg = self.config
        baseline, held = self._baseline, self._held
        assert baseline is not None and held is not None
        self._set_clocks(None)
        periods = max(cfg.drift_window_periods, math.ceil(cfg.min_window_s / baseline.period_s))
        window = self._measure(min(periods * baseline.period_s, cfg.max_window_s))
        power = self._window_power([window], baseline.period_s if baseline.timing == MARKERS else None)
        self._set_clocks(held)
        drift = power / baseline.power_w - 1.0
        self._baseline = self._drift_for = replace(baseline, power_w=power)
        if self._phase is not None:
            self.phases[self._phase] = replace(self.phases[self._phase], baseline=self._baseline)
        self._drift_interval_s = max(self._drift_interval_s, cfg.max_drift_check_s)
        if abs(drift) <= cfg.drift_noise:
            self._drift_interval_s = 2.0 * self._drift_interval_s
        self._drift_since_s = self._now()
        return self._decide(
            "drift_check",
            State.HOLDING,
            f"reference power {power:.1f} W ({drift * 100:+.2f}% since the last baseline): baseline refreshed; "
            f"back to {held} MHz; next check when its power moves {cfg.drift_noise * 100:g}% "
            f"or in {self._drift_interval_s:g} s",
            window_s=window.duration_s,
            power_w=power,
        )

    def _step_holding(self) -> Decision:
        cfg = self.config
        if self._drift_due():
            return self._drift_check()
        self._sleep_until(self._next_check_s)
        if self._fallback_reason is not None:
            return self._reprofile("retry_profile", f"re-profiling after the fallback ({self._fallback_reason})")
        assert self._baseline is not None
        expected = self._expected_held_period()
        window = self._measure(self._hold_window_s or self._hold_window_for(expected))
        self._hold_window_s = None
        detector = DetectorConfig(min_period_s=0.55 * expected, max_period_s=cfg.max_period_s)
        marked = self._baseline.timing == MARKERS
        est = self._estimate([window], detector=detector)
        if marked and not est.ok:
            changed, why = True, f"the step markers stopped ({est.message})"
        elif self._hold_ref is None:
            changed, why = False, ""
        else:
            verdict = has_changed(
                self._hold_ref,
                window.t_s,
                window.power_w,
                level_tolerance=cfg.level_tolerance,
                period_tolerance=max(cfg.period_tolerance, self._agreement(self._hold_ref, self._hold_ref)),
                config=detector,
                estimate=est if marked else None,
            )
            est, changed, why = verdict.estimate, verdict.changed, verdict.reason
            # The period alone went missing, at the same power level: a short window misses a steady job's
            # period now and then (on looped H200 recordings, ~1 in 15 windows of a 72 ms job). Confirm on a
            # window twice as long, which finds it again if nothing changed.
            only_period_lost = est.period_s is None and verdict.level_change <= cfg.level_tolerance
            if changed and only_period_lost and not self._suspect_change:
                self._hold_window_s = min(cfg.max_window_s, 2.0 * window.duration_s)
        m = self._reduce(window, est)
        info: dict[str, Any] = {
            "window_s": m.window_s,
            "period_s": m.period_s,
            "power_w": m.power_w,
            "timing": m.timing,
        }
        if m.period_s is not None:
            info["measured_time_ratio"] = self._baseline.time_ratio(m.period_s)
            info["measured_energy_ratio"] = self._baseline.energy_ratio(m.period_s, m.power_w)
        if self._is_idle(window):
            return self._enter_idle("no GPU activity while holding", info)
        if not marked and self._has_markers(window):
            return self._reprofile(
                "markers_appeared", "the job sends step markers now: re-profiling to time it by them", **info
            )
        lost = self._hold_ref is None or est.verdict is Verdict.INSUFFICIENT_DATA  # has_changed did not judge it
        if lost and m.period_s is None and not marked:
            # The window's own search failed; the phase's period (as expected at these clocks) may still show.
            # The same rule as has_changed's; before the held clocks' reference, the expected period is a
            # prediction, so anything near it counts.
            method = None if self._hold_ref is None else self._hold_ref.method
            kept, how = phase_persists(window.t_s, window.power_w, expected, method, tolerance=cfg.period_tolerance)
            if kept is not None:
                est = replace(est, period_s=kept, verdict=Verdict.OK, message=f"{est.message}; the period {how}")
                m = self._reduce(window, est)
                info.update(period_s=m.period_s, timing=m.timing)
                info["measured_time_ratio"] = self._baseline.time_ratio(kept)
                info["measured_energy_ratio"] = self._baseline.energy_ratio(kept, m.power_w)
        if est.verdict is Verdict.INSUFFICIENT_DATA and est.suggested_window_s:
            changed, why = True, f"a longer period than expected may be present: {est.message}"
            self._hold_window_s = min(cfg.max_window_s, est.suggested_window_s)
        if self._hold_ref is None and m.period_s is None:
            self._hold_failures += 1
            changed, why = self._hold_failures >= 2, f"no period at the held clocks: {est.message}"
            if not changed:
                self._next_check_s = self._now()
                return self._decide("hold_retry", State.HOLDING, why, **info)
        if changed:
            if self._suspect_change or self._hold_ref is None:
                return self._reprofile("phase_change", f"phase change ({why}): back to reference to re-profile", **info)
            # One window can mislead (a harmonic lock, a transient): confirm with the next one, right away.
            self._suspect_change = True
            self._next_check_s = self._now()
            return self._decide("change_suspected", State.HOLDING, f"{why}; confirming", **info)
        self._suspect_change = False
        if self._hold_ref is None:
            self._hold_ref = est
        assert m.period_s is not None
        self._note_held_power(m.power_w)
        time_ratio = self._baseline.time_ratio(m.period_s)
        limit = self._time_limit()
        if cfg.policy is not Policy.PREDICTION and time_ratio > limit + cfg.guard_margin:
            return self._guard_step(time_ratio, limit, info)
        self._next_check_s = self._now() + self._check_interval_s
        reason = (
            f"slowdown {(time_ratio - 1) * 100:.1f}% (limit {(limit - 1) * 100:.1f}%); "
            f"next check in {self._check_interval_s:g} s"
        )
        self._check_interval_s = min(2.0 * self._check_interval_s, cfg.max_check_interval_s)
        return self._decide("hold", State.HOLDING, reason, **info)

    def _hold_window_for(self, period_s: float) -> float:
        """A hold window: as any (_window_for), and for jittery iterations long enough that its mean period stays
        within period_tolerance of the phase's by chance (3 sigma of the difference of two such means)."""
        assert self._baseline is not None
        cfg = self.config
        cycles = 2.0 * (3.0 * self._baseline.spread / cfg.period_tolerance) ** 2
        return min(cfg.max_window_s, max(self._window_for(period_s), cycles * period_s))

    def _time_limit(self) -> float:
        """The time ratio the guard holds the job to: 1 + max_slowdown for the energy objective. edp and ed2p
        have no bound: there the limit is the time ratio the search accepted at the held config (one window, so
        with one more margin of slack), so the guard reacts when the job gets slower than what was chosen."""
        if self.config.objective is Objective.ENERGY:
            return 1.0 + self.config.max_slowdown
        held = self._held_ratios[0]
        return held * (1.0 + self.config.guard_margin) if held else math.inf

    def _step_up(self, clocks: Clocks | None, time_ratio: float, limit: float) -> Clocks | None:
        """Toward the reference: raise the SM clock at this memory clock by the factor that would just remove
        the excess slowdown if the job were fully SM-bound (time_ratio / limit), at least one step.
        A partly SM-bound job needs more, so this never overshoots (and the guard repeats if needed). At the top
        SM clock, the next higher memory clock; then the reference itself."""
        if clocks is None:
            return None
        sm, mem = clocks
        ref_sm, ref_mem = self.reference
        if sm < ref_sm:
            need_mhz = sm * time_ratio / limit
            higher = [s for s in self._table.sm_clocks_mhz(mem) if s > sm]
            if higher:
                enough = [s for s in higher if s >= need_mhz - 1e-9]
                return (enough[0] if enough else higher[-1], mem)
        if mem < ref_mem:
            mems = [m for m in self._table.mem_clocks_mhz if m > mem and self._table.contains(sm, m)]
            if mems:
                return (sm, mems[0])
        return None

    def _guard_step(self, time_ratio: float, limit: float, info: dict[str, Any]) -> Decision:
        slowdown = time_ratio - 1.0
        if self._held is None:
            # At reference and still "slower" than the baseline: the baseline is stale (the job changed subtly).
            return self._reprofile(
                "baseline_stale", f"slowdown {slowdown * 100:.1f}% at reference clocks: re-profiling", **info
            )
        target = self._step_up(self._held, time_ratio, limit)
        self._set_clocks(target)
        self._held = target
        self._held_ratios = (None, None)
        self._hold_ref = None
        return self._decide(
            "guard_step_up",
            State.GUARDING,
            f"measured slowdown {slowdown * 100:.1f}% > limit {(limit - 1) * 100:.1f}% + margin: "
            f"stepping toward reference, to {self.clocks} MHz",
            **info,
        )

    def _step_guarding(self) -> Decision:
        cfg = self.config
        assert self._baseline is not None
        index = self._index_of(self._held)
        lo, hi = self._period_bounds(index)
        expected = min(max(self._baseline.period_s * (1.0 + cfg.max_slowdown), lo), hi)
        window = self._measure(self._window_for(expected))
        est = self._estimate([window], min_period_s=lo, max_period_s=hi)
        m = self._reduce(window, est)
        info: dict[str, Any] = {
            "window_s": m.window_s,
            "period_s": m.period_s,
            "power_w": m.power_w,
            "timing": m.timing,
        }
        if m.period_s is None:
            self._hold_failures += 1
            if self._hold_failures >= 2:
                return self._reprofile(
                    "phase_change", f"no period while guarding ({est.message}): re-profiling", **info
                )
            return self._decide("guard_retry", State.GUARDING, f"no period: {est.message}", **info)
        time_ratio = self._baseline.time_ratio(m.period_s)
        energy_ratio = self._baseline.energy_ratio(m.period_s, m.power_w)
        info.update(measured_time_ratio=time_ratio, measured_energy_ratio=energy_ratio)
        limit = self._time_limit()
        if time_ratio > limit + cfg.guard_margin:
            return self._guard_step(time_ratio, limit, info)
        self._update_phase(self._held, (time_ratio, energy_ratio))
        self._held_ratios = (time_ratio, energy_ratio)
        self._hold_ref = est
        self._hold_failures = 0
        self._check_interval_s = cfg.check_interval_s
        self._next_check_s = self._now() + self._check_interval_s
        return self._decide(
            "guard_ok", State.HOLDING, f"slowdown {(time_ratio - 1) * 100:.1f}% is within the limit again", **info
        )

    # --- IDLE ----------------------------------------------------------------------------------------------------

    def _enter_idle(self, reason: str, info: dict[str, Any]) -> Decision:
        self._set_clocks(None)
        self._held = None
        self._phase = None
        self._next_check_s = self._now() + self.config.idle_check_interval_s
        return self._decide("idle", State.IDLE, f"{reason}: default clocks", **info)

    def _step_idle(self) -> Decision:
        self._sleep_until(self._next_check_s)
        window = self._measure(self.config.idle_window_s)
        info = {"window_s": window.duration_s, "power_w": self._power(window)}
        if self._is_idle(window):
            self._next_check_s = self._now() + self.config.idle_check_interval_s
            return self._decide("idle", State.IDLE, "still idle", **info)
        return self._reprofile("activity", "GPU activity: profiling", **info)
