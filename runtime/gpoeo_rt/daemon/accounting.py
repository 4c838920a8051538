"""What the controller saved so far, from its own decisions (pure: a stream of decision-log records in, figures out).

The time between two decisions is one interval, rated by what was measured at the clocks in effect during it:
- at reference clocks (not locked: profiling, fallback waits, drift checks, a search that kept the reference) the
  job runs exactly as without gpoeo: energy and time ratio 1.0 by definition, measured or not;
- at locked clocks, by the ratios of the decision's own window (taken at those clocks, against the phase's baseline
  at reference), when that window is trusted; a window the controller itself rejected (`SUSPECT_EVENTS`: it may have
  measured another phase), one without a period, and a power-signal one whose period is not confirmed (lower clocks
  measured faster than the reference beyond noise: a false period) rate nothing; their intervals are left out
  (`excluded_s`). So the figures cover `counted_s` of the job (`coverage`), and the stored ratios of
  a known phase are never applied: each interval is rated by a window of its own. Ratios are against the baseline
  the controller keeps true by its drift checks (`drift_check`: a short window at reference that refreshes the
  baseline power).

Figures are per iteration, as the bench's truth is: an interval of dt seconds at time ratio r_t and energy ratio r_e
did dt / r_t reference-seconds of work, which at reference would have used P0 dt / r_t joules (P0: the baseline
power) and used r_e times that. Over the counted intervals, `saving_pct` = 1 - used / at-reference joules and
`slowdown_pct` = time taken / reference-seconds of work, minus 1.

Runs: a controller's first decision is `start`, its last `stop` or `error`. The time between a run's end (or its
last decision, when the daemon was killed) and the next start is downtime: never counted. Runs combine by time
(their sums add). A clock that goes backwards (a reboot) also starts a new run.

Two parts, both honest, that add up to the headline: the time spent *exploring* (decisions taken while profiling
or searching: the baseline windows and the search's probes, also after a phase change) and the time the controller
*held* a decision (holding, guarding, drift checks, fallback waits, idle). `split()` gives the held decisions'
saving over the time they were held (`held_saving_pct`: 0 exactly for a job left at reference) and what exploring
cost (`exploration_cost_pct`: energy used beyond what the same work would have used at reference, in points of the
whole job's reference energy); saving_pct = held_saving_pct x held share of the reference joules - cost.

The energy counter (`energy_counter_j`, read at the end of each window) is a second, independent witness of the
energy used: `witness()` compares the counter's joules with the ratio-based joules over the same intervals.

In advise mode nothing changes: every interval is at reference (saving 0) and `advised_*` carries what the model
predicts the advice would give.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from gpoeo_rt.controller.state import CONFIRM_TOLERANCE

# Decisions whose window the controller itself did not trust: a suspected or confirmed phase change, a baseline
# found stale. Their ratios may belong to another phase; their intervals rate nothing.
SUSPECT_EVENTS = frozenset({"change_suspected", "phase_change", "baseline_stale"})
# Searching decisions whose window was measured at the clocks set at the start of the step (the probe's), which
# their record carries; every other decision's window ran at the clocks the previous decision left.
_PROBE_EVENTS = frozenset({"probe", "probe_extend", "probe_retry"})
RUN_END_EVENTS = frozenset({"stop", "error"})
# Decisions taken in these states rate time spent exploring (profiling at reference, the search's probes); every
# other interval is time a decision was held (`interval_part`).
EXPLORING_STATES = frozenset({"profiling", "searching"})
# The counter's and the ratios' joules disagree beyond noise: window power against a whole interval (sample noise,
# 10 Hz counter edges, drift between checks) stays within ~1% on simulated jobs; real ones were not measured yet.
WITNESS_TOLERANCE = 0.03
# How far the slowdown claim may be from the truth (issue 20's target for its worst error, met on the benches:
# docs/accounting.md): a claim closer than this to the bound cannot say which side of it the job is.
SLOWDOWN_CLAIM_NOISE_PTS = 0.5


def bound_verdict(slowdown_pct: float | None, bound_pct: float | None) -> str | None:
    """ "within" the bound, "over" it, or "at the bound" (within the claim's noise of it); None: nothing to say."""
    if slowdown_pct is None or bound_pct is None:
        return None
    if slowdown_pct <= bound_pct - SLOWDOWN_CLAIM_NOISE_PTS:
        return "within"
    return "over" if slowdown_pct > bound_pct + SLOWDOWN_CLAIM_NOISE_PTS else "at the bound"


def interval_part(record: dict[str, Any]) -> str:
    """ "exploring" or "held": the part of the job the interval that `record` closes belongs to."""
    return "exploring" if record.get("state") in EXPLORING_STATES else "held"


def _num(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


@dataclass
class Tally:
    """Sums over intervals (one run, or several combined)."""

    duration_s: float = 0.0  # every interval between two decisions of a run
    counted_s: float = 0.0  # intervals rated (at reference, or by a trusted window at the same clocks)
    reference_s: float = 0.0  # of which at reference clocks
    measured_s: float = 0.0  # window seconds behind the counted intervals
    excluded_s: float = 0.0  # suspect windows, windows without a period, intervals before any power was known
    drift_check_s: float = 0.0  # spent at reference for drift checks (their cost)
    drift_checks: int = 0
    work_s: float = 0.0  # reference-seconds of work done in counted intervals
    used_j: float = 0.0  # energy used in counted intervals (ratio-based)
    reference_j: float = 0.0  # what the same work would have used at reference clocks
    witness_ratio_j: float = 0.0  # ratio-based joules over the intervals the counter also covers
    witness_counter_j: float = 0.0  # the energy counter's joules over those intervals
    witness_s: float = 0.0

    def add(self, other: Tally) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    @property
    def saving_pct(self) -> float | None:
        return None if self.reference_j <= 0 else 100.0 * (1.0 - self.used_j / self.reference_j)

    @property
    def slowdown_pct(self) -> float | None:
        return None if self.work_s <= 0 else 100.0 * (self.counted_s / self.work_s - 1.0)

    @property
    def saved_j(self) -> float:
        return self.reference_j - self.used_j

    def coverage(self) -> dict[str, float | None]:
        """Shares of the run time: rated at all, at reference, by a measured window, left out, drift checks."""
        d = self.duration_s
        share = (lambda x: None) if d <= 0 else (lambda x: round(x / d, 4))
        return {
            "duration_s": round(d, 3),
            "counted": share(self.counted_s),
            "at_reference": share(self.reference_s),
            "measured": share(self.measured_s),
            "excluded": share(self.excluded_s),
            "drift_checks": self.drift_checks,
            "drift_check": share(self.drift_check_s),
        }

    def witness(self) -> dict[str, Any] | None:
        """The energy counter beside the ratio-based joules, over the same intervals; None without a counter."""
        if self.witness_s <= 0 or self.witness_counter_j <= 0:
            return None
        gap = self.witness_ratio_j / self.witness_counter_j - 1.0
        return {
            "seconds": round(self.witness_s, 3),
            "counter_j": round(self.witness_counter_j, 1),
            "ratio_based_j": round(self.witness_ratio_j, 1),
            "gap_pct": round(100.0 * gap, 2),
            "tolerance_pct": 100.0 * WITNESS_TOLERANCE,
            "disagrees": abs(gap) > WITNESS_TOLERANCE,
        }


@dataclass
class SavingsMeter:
    total: Tally = field(default_factory=Tally)
    runs: list[Tally] = field(default_factory=list)
    baseline: dict[str, float] | None = None
    last: dict[str, Any] = field(default_factory=dict)  # the latest record with a measured period
    advised_predicted: dict[str, float] | None = None
    run_bounds: list[float | None] = field(default_factory=list)  # each run's slowdown bound (%), from its start
    parts: dict[str, Tally] = field(default_factory=lambda: {"exploring": Tally(), "held": Tally()})
    # With keep_intervals: every interval rated, (start, end, part, counted) in order (the bench scores each part
    # against the truth of the same seconds); off in the daemon, where it would grow without bound.
    keep_intervals: bool = False
    intervals: list[tuple[float, float, str, bool]] = field(default_factory=list)
    _prev: dict[str, Any] | None = None  # the previous record of the current run (None: between runs)
    _reference_w: float | None = None  # the latest power measured at reference clocks
    _counter: tuple[float, float] | None = None  # (t_s, joules) of the latest counter reading in this run
    _reference: tuple[object, object] | None = None  # the reference clocks (those of an unlocked decision)

    def feed(self, record: dict[str, Any]) -> None:
        t = _num(record.get("t_s"))
        if t is None:
            return
        event = record.get("event")
        prev = self._prev
        if event == "start" or (prev is not None and t < float(prev["t_s"])):
            prev = None  # a new run: the time since the last one is downtime
        if prev is None:
            self.runs.append(Tally())
            self.run_bounds.append(None)
            self._counter = None
        else:
            self._rate(prev, record, t - float(prev["t_s"]))
        self._note(record, t)
        self._prev = None if event in RUN_END_EVENTS else record

    def _note(self, record: dict[str, Any], t: float) -> None:
        event = record.get("event")
        if event == "start":
            self.run_bounds[-1] = _num(record.get("slowdown_bound_pct"))
        if not record.get("locked"):
            self._reference = (record.get("sm_clock_mhz"), record.get("mem_clock_mhz"))
        period, power = _num(record.get("period_s")), _num(record.get("power_w"))
        if event == "drift_check" and self.baseline is not None and power is not None:
            period = self.baseline["period_s"]  # a drift check refreshes the power only
        if event in ("baseline", "known_phase", "drift_check") and period is not None and power is not None:
            self.baseline = {"period_s": period, "power_w": power, "energy_per_iteration_j": period * power}
        if record.get("advised_sm_clock_mhz") is not None:
            pt, pe = _num(record.get("predicted_time_ratio")), _num(record.get("predicted_energy_ratio"))
            if pt is not None and pe is not None:
                self.advised_predicted = {"time_ratio": pt, "energy_ratio": pe}
        if _num(record.get("period_s")) is not None:
            self.last = record
        counter = _num(record.get("energy_counter_j"))
        if counter is not None:
            self._counter = (t, counter)

    def _rate(self, prev: dict[str, Any], rec: dict[str, Any], dt: float) -> None:
        run = self.runs[-1]
        event = rec.get("event")
        probe = rec.get("state") == "searching" and event in _PROBE_EVENTS
        locked = bool(rec.get("locked")) if probe else bool(prev.get("locked")) and event != "drift_check"
        part = Tally(duration_s=dt)
        if event == "drift_check":
            part.drift_checks = 1
            part.drift_check_s = dt
        ratios = (_num(rec.get("measured_time_ratio")), _num(rec.get("measured_energy_ratio")))
        if not locked:
            # At reference: ratio 1 by definition. Its power: this window's (taken at reference), else the latest.
            power = _num(rec.get("power_w"))
            if power is not None:
                self._reference_w = power
            p0 = self._reference_w
            r_t = r_e = 1.0
            part.reference_s = dt
        elif (
            event in SUSPECT_EVENTS
            or ratios[0] is None
            or ratios[1] is None
            or ratios[0] <= 0
            or self._unconfirmed(rec, ratios[0])
        ):
            p0 = None
            r_t = r_e = math.nan
        else:
            p0 = self.baseline["power_w"] if self.baseline else None
            r_t, r_e = ratios  # type: ignore[assignment]
        if p0 is None or p0 <= 0 or not math.isfinite(r_t):
            part.excluded_s = dt
        else:
            part.counted_s = dt
            part.measured_s = min(dt, _num(rec.get("window_s")) or 0.0)
            part.work_s = dt / r_t
            part.reference_j = p0 * dt / r_t
            part.used_j = part.reference_j * r_e
            counter = _num(rec.get("energy_counter_j"))
            last = self._counter  # the previous decision's reading, when it had one: it opens this interval
            if last is not None and counter is not None and counter >= last[1] and last[0] == float(prev["t_s"]):
                part.witness_s = dt
                part.witness_counter_j = counter - last[1]
                part.witness_ratio_j = part.used_j
        run.add(part)
        self.total.add(part)
        self.parts[interval_part(rec)].add(part)
        if self.keep_intervals:
            self.intervals.append((float(prev["t_s"]), float(prev["t_s"]) + dt, interval_part(rec), part.counted_s > 0))

    def _unconfirmed(self, rec: dict[str, Any], time_ratio: float) -> bool:
        """A power-signal window at clocks no higher than the reference that says iterations ran faster than
        there beyond the period's noise: a false period (Controller._unconfirmed; the controller never holds such
        a config, and falls back to reference when a probe is far faster)."""
        if rec.get("timing") != "signal" or self._reference is None or time_ratio >= 1.0 - CONFIRM_TOLERANCE:
            return False
        clocks = [_num(v) for v in (rec.get("sm_clock_mhz"), rec.get("mem_clock_mhz"), *self._reference)]
        if any(c is None for c in clocks):
            return False
        sm, mem, ref_sm, ref_mem = clocks
        return sm <= ref_sm and mem <= ref_mem  # type: ignore[operator]

    @property
    def saving_pct(self) -> float | None:
        return self.total.saving_pct

    @property
    def slowdown_pct(self) -> float | None:
        return self.total.slowdown_pct

    @property
    def bound_pct(self) -> float | None:
        """The bound the figures are held to: the runs' (the strictest, if they differ); None if unknown."""
        known = [b for b in self.run_bounds if b is not None]
        return min(known) if known else None

    def verdict(self) -> str | None:
        return bound_verdict(self.slowdown_pct, self.bound_pct)

    def split(self) -> dict[str, float | None]:
        """The headline saving in its two parts: the held decisions' saving over the time they were held, and
        what exploring cost in points of the whole job's saving; with the shares of the counted time of each."""
        held, exploring, total = self.parts["held"], self.parts["exploring"], self.total
        cost = (
            None if total.reference_j <= 0 else 100.0 * (exploring.used_j - exploring.reference_j) / total.reference_j
        )
        counted = total.counted_s
        return {
            "held_saving_pct": held.saving_pct,
            "exploration_cost_pct": cost,
            "held_share": None if counted <= 0 else round(held.counted_s / counted, 4),
            "exploring_share": None if counted <= 0 else round(exploring.counted_s / counted, 4),
        }

    def energy(self) -> dict[str, float]:
        """Joules over the counted intervals: used, what the same work would have used at reference, saved."""
        t = self.total
        return {"used_j": round(t.used_j, 1), "reference_j": round(t.reference_j, 1), "saved_j": round(t.saved_j, 1)}

    def now(self) -> dict[str, float | None] | None:
        """The latest measured window: period, power, energy per iteration and ratios to the baseline."""
        rec = self.last
        if not rec:
            return None
        period, power = _num(rec.get("period_s")), _num(rec.get("power_w"))
        energy = period * power if period is not None and power is not None else None
        return {
            "period_s": period,
            "power_w": power,
            "energy_per_iteration_j": energy,
            "time_ratio": rec.get("measured_time_ratio"),
            "energy_ratio": rec.get("measured_energy_ratio"),
        }
