"""Step markers checked against the GPU's own power signal before the controller may time a window by them.

A marker is the job's word; the power signal is the GPU's. Per window, each admitted sender's markers (the busiest
first) are compared with the period the power samples show: when the signal resolves a period, the markers' period
must be a whole multiple of it, or it of theirs (a marked step may be several power cycles, or the signal may lock
onto a multiple), within `tolerance`. A sender that disagrees is dropped for that window and the reason logged;
the window then goes to the controller with the next sender that agrees, or without markers (it falls back to the
power signal, or re-profiles a marker-timed phase). So a marker can move timing only within `tolerance` of what the
signal confirms.

Not checked (the markers are taken as sent): windows whose signal resolves no period, and marker periods shorter
than two power-sample intervals (the samples alias there; the energy counter does not resolve single steps). Those
are the cases where markers are the only timing there is; admission (`markers.MarkerAdmission`) still limits them
to processes on the GPU and allowed users.
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
    if not math.isfinite(dt) or marked.period_s < 2.0 * dt:
        return None  # beyond what the samples resolve (see the module docstring)
    signal = detect_period(window.t_s, window.power_w, max_period_s=max_period_s)
    if not signal.ok or signal.period_s is None:
        return None
    ratio = marked.period_s / signal.period_s
    big = max(ratio, 1.0 / ratio)
    whole = round(big)
    if whole >= 1 and abs(big - whole) <= tolerance * big:
        return None
    return (
        f"their period {marked.period_s * 1e3:.1f} ms is no whole multiple of the power signal's "
        f"{signal.period_s * 1e3:.1f} ms (nor it of theirs)"
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
