"""Step markers checked against the GPU's own power signal before the controller may time a window by them.

A marker is the job's word; the power signal is the GPU's. Per window, each admitted sender's markers are compared
with the period the power samples show: when the signal resolves a period, the markers' period must be a whole
multiple of it (a marked step may be several power cycles, as with gradient accumulation), within `tolerance`; a
sender marking faster than the power cycles is refused (a job whose power pattern spans several steps loses its
marker timing and is timed by the signal). A sender that disagrees once is dropped for good (its pid is distrusted
on these GPUs; the reason is logged); the window then goes to the controller with the next sender that agrees, or
without markers (it falls back to the power signal, or re-profiles a marker-timed phase). The sender that timed the
previous window is preferred among those that agree equally well (the signal showing their period beats a whole
multiple of it, which beats a window the signal cannot check): a sender that appears later does not take over a
phase. Among senders the signal confirms, the one nearest to the signal's own period times the window (an imitator
within the tolerance cannot shift the job's baseline). Senders that agree equally well but mark different periods
otherwise leave the window without markers (the signal cannot arbitrate between two stories). So a marker can move
timing only within `tolerance` of what the signal confirms, or in windows it cannot check, only from a sender it
never contradicted and no other sender disputes.

Marker periods shorter than two power-sample intervals cannot show in the samples as themselves, but a periodic
job still leaves its alias there (12 ms steps sampled at 50 Hz beat at 60 ms): when the signal resolves a period,
it must be that alias (of the steps' frequency), or twice its period. (Harmonics are not accepted: their aliases
coincide with other jobs' too often, e.g. a 25 ms sender's second harmonic with a 33 ms job's alias.)

Not checked (the markers are taken as sent): windows whose signal resolves no period, and a fast job whose alias
falls near zero frequency (its step frequency a whole multiple of the sampling rate). The energy counter, which
the issue suggests for these, refreshes at 10 Hz and resolves no single step, so it is not used. In those cases
only admission (`markers.MarkerAdmission`) limits who is heard.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from gpoeo_rt.daemon.markers import GPUMarkerSource
from gpoeo_rt.detection import PeriodEstimate, detect_period, period_from_markers
from gpoeo_rt.device.base import GPUReader
from gpoeo_rt.sampling.markers import FloatArray, IntArray, MarkerSource
from gpoeo_rt.sampling.sampler import PowerWindow, Sampler

_log = logging.getLogger(__name__)


# How well a sender's markers agree with the window's power signal, best first (`marker_agreement`). A fast sender
# (steps shorter than two samples) contradicted by the alias check is dropped for that window only (ALIAS_MISS):
# that check is the weaker one, and a real fast job must not lose its markers for good over one window.
CONFIRMED = 0  # the signal shows their period (or, for fast steps, its alias): the sender times what the GPU does
MULTIPLE = 1  # a whole multiple of theirs or of the signal's (a step of several power cycles, or a slower pattern)
UNCHECKED = 2  # the signal cannot tell (no period resolved, too few markers, an alias near zero frequency)
CONTRADICTED = 3
ALIAS_MISS = 4


def marker_agreement(
    window: PowerWindow,
    t_s: FloatArray,
    seq: IntArray,
    *,
    tolerance: float = 0.02,
    min_intervals: int = 10,
    min_coverage: float = 0.75,
    max_period_s: float = 10.0,
    signal: PeriodEstimate | None = None,
) -> tuple[int, str]:
    """(CONFIRMED | MULTIPLE | UNCHECKED | CONTRADICTED, why) for these markers against the window's signal.
    `signal`: the window's own period estimate when the caller has it (detected here otherwise)."""
    marked = period_from_markers(
        t_s,
        seq,
        start_s=window.start_s,
        end_s=window.end_s,
        min_intervals=min_intervals,
        min_coverage=min_coverage,
        max_period_s=max_period_s,
    )
    if not marked.ok or marked.period_s is None or len(window.t_s) < 10:
        return UNCHECKED, "too few markers"  # the controller will not time this window by them anyway
    dt = float(np.median(np.diff(window.t_s)))
    if not math.isfinite(dt) or dt <= 0:
        return UNCHECKED, "no sample interval"
    if signal is None:
        signal = detect_period(window.t_s, window.power_w, max_period_s=max_period_s)
    if not signal.ok or signal.period_s is None:
        return UNCHECKED, "the power signal resolves no period"
    if marked.period_s < 2.0 * dt:
        if signal.method != "fold":
            # A counted mean (jittery cycles) is no sharp frequency: it cannot show or miss an alias.
            return UNCHECKED, "the power signal's period is a counted mean, not an alias to compare"
        return _alias_agreement(marked.period_s, signal.period_s, dt, tolerance)
    ratio = marked.period_s / signal.period_s
    whole = round(ratio)
    if whole >= 1 and abs(ratio - whole) <= tolerance * ratio:
        return (CONFIRMED if whole == 1 else MULTIPLE), f"{whole}x the power signal's period"
    return CONTRADICTED, (
        f"their period {marked.period_s * 1e3:.1f} ms is no whole multiple of the power signal's "
        f"{signal.period_s * 1e3:.1f} ms"
    )


def marker_disagreement(window: PowerWindow, t_s: FloatArray, seq: IntArray, **check: float) -> str | None:
    """Why these markers contradict the window's power signal, or None when they do not (or it cannot tell)."""
    verdict, why = marker_agreement(window, t_s, seq, **check)  # type: ignore[arg-type]
    return why if verdict in (CONTRADICTED, ALIAS_MISS) else None


def _span_period(t_s: FloatArray, seq: IntArray) -> float | None:
    """A sender's mean step time over its markers' span (None with fewer than two distinct steps)."""
    if len(t_s) < 2 or seq[-1] <= seq[0]:
        return None
    return float((t_s[-1] - t_s[0]) / float(seq[-1] - seq[0]))


def _off_signal(signal_s: float | None, t_s: FloatArray, seq: IntArray) -> float:
    """How far a sender's marked period is from the power signal's period (relative; inf when either is missing)."""
    marked = _span_period(t_s, seq)
    if signal_s is None or marked is None:
        return math.inf
    return abs(marked / signal_s - 1.0)


def _alias_agreement(marker_s: float, signal_s: float, dt_s: float, tolerance: float) -> tuple[int, str]:
    """Steps faster than the samples resolve: the signal's period must be the alias of the steps (their frequency
    folded by the sampling rate), or twice its period."""
    f_steps, f_sampling, f_signal = 1.0 / marker_s, 1.0 / dt_s, 1.0 / signal_s
    alias = abs(f_steps - round(f_steps / f_sampling) * f_sampling)
    slack = tolerance * alias + 0.005 * f_steps  # the detector's error on the alias, the markers' on the steps
    if alias <= slack:
        return UNCHECKED, "their steps alias to near zero frequency"  # (module docstring)
    for k in (1, 2):  # the detector may lock onto twice the alias's period
        if abs(k * f_signal - alias) <= slack:
            return (CONFIRMED if k == 1 else MULTIPLE), "the power signal shows their alias"
    return ALIAS_MISS, (
        f"their period {marker_s * 1e3:.1f} ms leaves no alias at the power signal's {signal_s * 1e3:.1f} ms "
        f"(sampled every {dt_s * 1e3:.0f} ms)"
    )


class CheckedSampler(Sampler):
    """A Sampler whose windows carry only markers that the power signal does not contradict (module docstring).

    `markers`: the daemon's per-GPU source (several senders, via `candidates`) or any MarkerSource (one sender).
    `on_drop(message)` is called when a sender's markers are dropped for a window."""

    def __init__(
        self,
        device: GPUReader,
        markers: MarkerSource,
        *,
        on_drop: Callable[[str], None] | None = None,
        tolerance: float = 0.02,
        min_intervals: int = 10,
        min_coverage: float = 0.75,
        max_period_s: float = 10.0,
        distrusted: dict[int, str] | None = None,
    ) -> None:
        """`distrusted` (pid -> why): senders dropped for good; pass the same dict to the next sampler of these
        GPUs (a restarted controller) so that a dropped sender stays dropped."""
        super().__init__(device)  # no markers here: collect() adds the checked ones
        self._source = markers
        self._on_drop = on_drop
        self._tolerance = tolerance
        self._min_intervals = min_intervals
        self._min_coverage = min_coverage
        self._max_period_s = max_period_s
        self.dropped = 0
        self.ambiguous = 0  # windows left without markers: senders disagreed and the signal could not arbitrate
        self.last_drop: str | None = None
        self.distrusted = distrusted if distrusted is not None else {}
        self._last_sender: int | None = None

    def _candidates(self, start_s: float, end_s: float) -> list[tuple[int | None, FloatArray, IntArray]]:
        if isinstance(self._source, GPUMarkerSource):
            return list(self._source.candidates(start_s, end_s))
        t_s, seq = self._source.markers_between(start_s, end_s)
        return [(None, t_s, seq)] if len(t_s) else []

    def collect(
        self, window_s: float, *, continue_within_s: float = 0.0, energy_every_s: float | None = None
    ) -> PowerWindow:
        window = super().collect(window_s, continue_within_s=continue_within_s, energy_every_s=energy_every_s)
        graded = []
        missed = False  # a fast sender's alias was missing from the signal in this window
        senders = [c for c in self._candidates(window.start_s, window.end_s) if c[0] not in self.distrusted]
        if not senders:
            return window
        # The window's own period, detected once for every sender's check.
        signal = detect_period(window.t_s, window.power_w, max_period_s=self._max_period_s)
        for order, (pid, t_s, seq) in enumerate(senders):
            verdict, why = marker_agreement(
                window,
                t_s,
                seq,
                tolerance=self._tolerance,
                min_intervals=self._min_intervals,
                min_coverage=self._min_coverage,
                max_period_s=self._max_period_s,
                signal=signal,
            )
            if verdict in (CONTRADICTED, ALIAS_MISS):
                self._drop(pid if verdict == CONTRADICTED else None, why, sender=pid)
                missed = missed or verdict == ALIAS_MISS
                continue
            # Best agreement first; among equals the previous window's sender, then the busiest (the source order).
            graded.append((verdict, pid != self._last_sender, order, pid, t_s, seq))
        if not graded:
            return window
        best_class = min(g[0] for g in graded)
        tied = sorted((g for g in graded if g[0] == best_class), key=lambda g: g[:3])
        chosen = tied[0]
        if best_class == UNCHECKED and missed:
            self.ambiguous += 1  # the signal contradicted one sender and can vouch for none of the others
            return window
        if best_class == CONFIRMED and len(tied) > 1:
            # Several senders the signal confirms (each within the tolerance): the one nearest to the signal's own
            # period times the window, so that an imitator within 2% cannot shift the job's baseline or hide its
            # slowdown (the signal's period is good to ~0.3% over a window).
            chosen = min(tied, key=lambda g: _off_signal(signal.period_s, g[4], g[5]))
        elif (chosen[3] != self._last_sender or best_class == UNCHECKED) and not self._same_period(tied):
            # Senders that agree equally well with the GPU but not with each other: the signal cannot arbitrate, so
            # none of them times this window. The previous window's sender keeps it only where the signal vouches
            # for its period: unchecked, a sender that came first could pose as the job while the job slows down.
            self.ambiguous += 1
            return window
        _, _, _, pid, t_s, seq = chosen
        self._last_sender = pid
        return replace(window, marker_t_s=t_s, marker_seq=seq)

    def _same_period(self, graded: list[tuple[int, bool, int, int | None, FloatArray, IntArray]]) -> bool:
        """Whether these senders mark one period (within the tolerance): one job seen twice, not two stories."""
        periods = [p for *_, t_s, seq in graded if (p := _span_period(t_s, seq)) is not None]
        return all(abs(p / periods[0] - 1.0) <= self._tolerance for p in periods[1:])

    def _drop(self, pid: int | None, why: str, *, sender: int | None = None) -> None:
        """Drop a sender's markers: for good when `pid` is given, else for this window only."""
        self.dropped += 1
        if pid is None:
            who = "the simulated job" if sender is None else f"pid {sender}"
            self.last_drop = f"markers from {who} dropped for a window: {why}"
        else:
            if len(self.distrusted) >= 4096:  # bounded: forget the oldest
                del self.distrusted[next(iter(self.distrusted))]
            self.distrusted[pid] = why
            self.last_drop = f"markers from pid {pid} ignored from now on: {why}"
        _log.warning("%s", self.last_drop)
        if self._on_drop is not None:
            self._on_drop(self.last_drop)
