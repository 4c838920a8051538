"""Step markers checked against the GPU's own power signal before the controller may time a window by them.

A marker is the job's word; the power signal is the GPU's. Per window, each admitted sender's markers (the busiest
first) are compared with the period the power samples show: when the signal resolves a period, the markers' period
must be a whole multiple of it, or it of theirs (a marked step may be several power cycles, or the signal may lock
onto a multiple), within `tolerance`. A sender that disagrees is dropped for that window and the reason logged;
the window then goes to the controller with the next sender that agrees, or without markers (it falls back to the
power signal, or re-profiles a marker-timed phase). So a marker can move timing only within `tolerance` of what the
signal confirms.

Marker periods shorter than two power-sample intervals cannot show in the samples as themselves, but a periodic
job still leaves its alias there (12 ms steps sampled at 50 Hz beat at 60 ms): when the signal resolves a period,
it must be that alias (of the steps' frequency or one of its first harmonics), or a whole multiple of it.

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
from gpoeo_rt.detection import detect_period, period_from_markers
from gpoeo_rt.device.base import GPUReader
from gpoeo_rt.sampling.markers import FloatArray, IntArray, MarkerSource
from gpoeo_rt.sampling.sampler import PowerWindow, Sampler

_log = logging.getLogger(__name__)


def marker_disagreement(
    window: PowerWindow,
    t_s: FloatArray,
    seq: IntArray,
    *,
    tolerance: float = 0.02,
    min_intervals: int = 10,
    min_coverage: float = 0.75,
    max_period_s: float = 10.0,
) -> str | None:
    """Why these markers contradict the window's power signal, or None when they do not (or it cannot tell)."""
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
        return None  # too few markers: the controller will not time this window by them anyway
    dt = float(np.median(np.diff(window.t_s)))
    if not math.isfinite(dt) or dt <= 0:
        return None
    signal = detect_period(window.t_s, window.power_w, max_period_s=max_period_s)
    if not signal.ok or signal.period_s is None:
        return None
    if marked.period_s < 2.0 * dt:
        return _alias_disagreement(marked.period_s, signal.period_s, dt, tolerance)
    ratio = marked.period_s / signal.period_s
    big = max(ratio, 1.0 / ratio)
    whole = round(big)
    if whole >= 1 and abs(big - whole) <= tolerance * big:
        return None
    return (
        f"their period {marked.period_s * 1e3:.1f} ms is no whole multiple of the power signal's "
        f"{signal.period_s * 1e3:.1f} ms (nor it of theirs)"
    )


def _alias_disagreement(marker_s: float, signal_s: float, dt_s: float, tolerance: float) -> str | None:
    """Steps faster than the samples resolve: the signal's period must be an alias of the steps (a harmonic h of
    their frequency folded by the sampling rate), or a whole multiple of one."""
    f_steps, f_sampling, f_signal = 1.0 / marker_s, 1.0 / dt_s, 1.0 / signal_s
    for h in (1, 2, 3):
        f = h * f_steps
        alias = abs(f - round(f / f_sampling) * f_sampling)
        slack = tolerance * alias + 0.005 * f  # the detector's error on the alias, the markers' on the steps
        if alias <= slack:
            if h == 1:
                return None  # the steps alias to near zero frequency: the samples cannot tell (module docstring)
            continue
        if any(abs(k * f_signal - alias) <= slack for k in (1, 2)):  # the detector may lock onto twice the period
            return None
    return (
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
    ) -> None:
        super().__init__(device)  # no markers here: collect() adds the checked ones
        self._source = markers
        self._on_drop = on_drop
        self._tolerance = tolerance
        self._min_intervals = min_intervals
        self._min_coverage = min_coverage
        self._max_period_s = max_period_s
        self.dropped = 0
        self.last_drop: str | None = None

    def _candidates(self, start_s: float, end_s: float) -> list[tuple[int | None, FloatArray, IntArray]]:
        if isinstance(self._source, GPUMarkerSource):
            return list(self._source.candidates(start_s, end_s))
        t_s, seq = self._source.markers_between(start_s, end_s)
        return [(None, t_s, seq)] if len(t_s) else []

    def collect(self, window_s: float) -> PowerWindow:
        window = super().collect(window_s)
        for pid, t_s, seq in self._candidates(window.start_s, window.end_s):
            why = marker_disagreement(
                window,
                t_s,
                seq,
                tolerance=self._tolerance,
                min_intervals=self._min_intervals,
                min_coverage=self._min_coverage,
                max_period_s=self._max_period_s,
            )
            if why is None:
                return replace(window, marker_t_s=t_s, marker_seq=seq)
            self.dropped += 1
            who = "the simulated job" if pid is None else f"pid {pid}"
            self.last_drop = f"markers from {who} dropped: {why}"
            _log.warning("%s", self.last_drop)
            if self._on_drop is not None:
                self._on_drop(self.last_drop)
        return window
