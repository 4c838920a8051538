"""Windows of measurements from a device: buffered power samples, the energy-counter delta and counters.

The sampler sleeps on the device's clock (or an injected one), so with a simulated GPU a window costs no wall
time. It drains the driver's finite sample buffer often (every 250 ms by default) and reads the slow energy
counter once per window, or, where the caller asks for it, at the counter's own 10 Hz (its interval averages tell
real slow variation of the power from the alias of faster iterations: `detection.counter_check`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from gpoeo_rt.device.base import CounterSnapshot, GPUReader
from gpoeo_rt.device.clock import Clock
from gpoeo_rt.device.errors import GPUNotSupportedError
from gpoeo_rt.sampling.markers import IntArray, MarkerSource, no_markers

FloatArray = npt.NDArray[np.float64]
_EPS = 1e-9


@dataclass(frozen=True)
class PowerWindow:
    """What one window measured. `iterations` is known only when an iteration counter was given (a training-loop
    hook, or a simulator's ground truth in benchmarks); the step markers only when a marker source was given."""

    start_s: float
    end_s: float
    t_s: FloatArray = field(repr=False)
    power_w: FloatArray = field(repr=False)
    energy_j: float  # energy-counter delta over the window (10 Hz counter: edges are +-100 ms)
    counters: CounterSnapshot
    iterations: int | None = None
    marker_t_s: FloatArray = field(default_factory=lambda: np.empty(0), repr=False)
    marker_seq: IntArray = field(default_factory=lambda: np.empty(0, dtype=np.int64), repr=False)
    # Energy-counter readings (time, cumulative J) through the window, where they were asked for (see collect).
    energy_t_s: FloatArray = field(default_factory=lambda: np.empty(0), repr=False)
    energy_read_j: FloatArray = field(default_factory=lambda: np.empty(0), repr=False)

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s

    @property
    def mean_power_w(self) -> float:
        """Mean of the buffered samples (NaN without samples)."""
        return float(self.power_w.mean()) if len(self.power_w) else math.nan

    @property
    def counter_power_w(self) -> float:
        """Mean power from the energy counter."""
        return self.energy_j / self.duration_s if self.duration_s > 0 else math.nan


def merge_windows(windows: Sequence[PowerWindow]) -> PowerWindow:
    """Consecutive windows whose samples touch (see `Sampler.collect`), as one: samples, energy, iterations and
    markers joined; counters averaged over the windows' time where measured."""
    if not windows:
        raise ValueError("merge_windows needs at least one window")
    if len(windows) == 1:
        return windows[0]
    weights = [w.counters.interval_s for w in windows]
    features: dict[str, float] = {}
    for name in windows[-1].counters.features:
        vals = [(w.counters.features.get(name, math.nan), k) for w, k in zip(windows, weights, strict=True)]
        vals = [(v, k) for v, k in vals if math.isfinite(v) and k > 0]
        features[name] = sum(v * k for v, k in vals) / sum(k for _, k in vals) if vals else math.nan
    counts = [w.iterations for w in windows]
    # A window's first energy reading is the one its predecessor ended with: kept once.
    skip = [int(k > 0 and _continues(windows[k - 1], w)) for k, w in enumerate(windows)]
    return PowerWindow(
        start_s=windows[0].start_s,
        end_s=windows[-1].end_s,
        t_s=np.concatenate([w.t_s for w in windows]),
        power_w=np.concatenate([w.power_w for w in windows]),
        energy_j=sum(w.energy_j for w in windows),
        counters=CounterSnapshot(
            windows[0].counters.start_s, windows[-1].counters.end_s, features, windows[-1].counters.source
        ),
        iterations=None if any(c is None for c in counts) else sum(c for c in counts if c is not None),
        marker_t_s=np.concatenate([w.marker_t_s for w in windows]),
        marker_seq=np.concatenate([w.marker_seq for w in windows]),
        energy_t_s=np.concatenate([w.energy_t_s[k:] for w, k in zip(windows, skip, strict=True)]),
        energy_read_j=np.concatenate([w.energy_read_j[k:] for w, k in zip(windows, skip, strict=True)]),
    )


def _continues(before: PowerWindow, after: PowerWindow) -> bool:
    """Whether `after` opens with the energy reading `before` ended with."""
    return bool(
        len(before.energy_t_s) and len(after.energy_t_s) and abs(after.energy_t_s[0] - before.energy_t_s[-1]) <= _EPS
    )


class Sampler:
    """Collects consecutive windows from one device. Consecutive windows share their boundary reads (energy,
    counters, iteration count), so each window costs one energy read. With `markers`, each window also carries the
    step markers received for it."""

    def __init__(
        self,
        device: GPUReader,
        *,
        clock: Clock | None = None,
        drain_period_s: float = 0.25,
        iteration_counter: Callable[[], int] | None = None,
        markers: MarkerSource | None = None,
    ) -> None:
        if drain_period_s <= 0:
            raise ValueError("drain_period_s must be > 0")
        self._device = device
        self._clock = clock if clock is not None else device.clock
        self._drain_period_s = drain_period_s
        self._iteration_counter = iteration_counter
        self._markers = markers
        self._boundary_s: float | None = None  # end of the previous window, if the next one continues it
        self._boundary_energy_j = math.nan
        self._boundary_iterations: int | None = None
        self._last_sample_t_s: float | None = None
        # Energy reads through a window keep to one grid across windows; it moves by half a step when a read
        # repeats the last value (reads sitting on the counter's refresh see either side of it: collect).
        self._energy_grid_s: float | None = None

    @property
    def energy_reading(self) -> tuple[float, float] | None:
        """(time, joules) of the latest energy-counter reading, at the end of the last window (None: none yet,
        or no counter on this GPU)."""
        if self._boundary_s is None or not math.isfinite(self._boundary_energy_j):
            return None
        return self._boundary_s, self._boundary_energy_j

    def _energy(self) -> float:
        try:
            return self._device.energy_j()
        except GPUNotSupportedError:  # pre-Volta GPUs have no energy counter
            return math.nan

    def _next_energy_read(self, every_s: float | None) -> float:
        """The next energy read's time on the sampler's grid (inf: no reads asked for)."""
        if not every_s:
            return math.inf
        now = self._clock.now_s()
        if self._energy_grid_s is None:
            self._energy_grid_s = now
        steps = math.floor((now - self._energy_grid_s) / every_s + _EPS) + 1
        return self._energy_grid_s + steps * every_s

    def _drain(self, t_parts: list[FloatArray], p_parts: list[FloatArray]) -> None:
        since = self._last_sample_t_s if self._last_sample_t_s is not None else -math.inf
        samples = self._device.power_samples_since(since)
        if len(samples):
            t_parts.append(samples.t_s)
            p_parts.append(samples.power_w)
            self._last_sample_t_s = float(samples.t_s[-1])

    def collect(
        self, window_s: float, *, continue_within_s: float = 0.0, energy_every_s: float | None = None
    ) -> PowerWindow:
        """Let window_s pass on the clock and return what was measured in it. With continue_within_s, a window that
        starts at most that long after the previous one ended continues it: it starts at the previous end and holds
        the samples of the pause between them (still in the driver's buffer), so the two windows' samples touch.
        A caller asks for that only where nothing changed in the pause (no clock change). With energy_every_s, the
        energy counter is also read that often through the window (`PowerWindow.energy_t_s`; a read costs ~4 ms
        on an H200, so callers ask only where they use it)."""
        if window_s <= 0:
            raise ValueError("window_s must be > 0")
        if energy_every_s is not None and not energy_every_s > 0:
            raise ValueError("energy_every_s must be > 0")
        start = self._clock.now_s()
        resumes = self._boundary_s is not None and 0.0 <= start - self._boundary_s <= continue_within_s
        if resumes and self._boundary_s is not None:
            window_s += start - self._boundary_s
            start = self._boundary_s
        elif self._boundary_s is None or abs(start - self._boundary_s) > _EPS:
            # A fresh start: baseline reads; samples from before the window are not ours.
            self._boundary_energy_j = self._energy()
            self._device.counter_snapshot()
            self._boundary_iterations = self._iteration_counter() if self._iteration_counter else None
            self._last_sample_t_s = start
        end = start + window_s
        t_parts: list[FloatArray] = []
        p_parts: list[FloatArray] = []
        readings: list[tuple[float, float]] = [(start, self._boundary_energy_j)] if energy_every_s else []
        next_drain = self._clock.now_s() + self._drain_period_s
        next_read = self._next_energy_read(energy_every_s)
        while (now := self._clock.now_s()) < end - _EPS:
            wake = min(next_drain, next_read, end)
            self._clock.sleep(max(0.0, (end if end - wake < _EPS else wake) - now))  # the window ends at its end
            now = self._clock.now_s()
            if now >= next_read - _EPS and now < end - _EPS:
                readings.append((now, self._energy()))
                if len(readings) > 2 and readings[-1][1] == readings[-2][1] and energy_every_s:
                    # No refresh since the last read: the reads sit on the counter's refresh. Half a step away,
                    # each read sees the refresh before it at a steady lag (detection.counter searches the lag).
                    # (Not against the window's first reading, taken where the window starts, off the grid: a window
                    # that continues another would move the grid, and read unlike one window over both.)
                    self._energy_grid_s = now + 0.5 * energy_every_s
                next_read = self._next_energy_read(energy_every_s)
            if now >= next_drain - _EPS or now >= end - _EPS:  # without energy reads: every wake drains, as before
                self._drain(t_parts, p_parts)
                next_drain = now + self._drain_period_s
        self._drain(t_parts, p_parts)
        energy_j = self._energy()
        if energy_every_s:
            readings.append((self._clock.now_s(), energy_j))
        read = np.array([r for r in readings if math.isfinite(r[1])], dtype=np.float64).reshape(-1, 2)
        counters = self._device.counter_snapshot()
        iterations = self._iteration_counter() if self._iteration_counter else None
        end_s = self._clock.now_s()
        marker_t_s, marker_seq = self._markers.markers_between(start, end_s) if self._markers else no_markers()
        window = PowerWindow(
            start_s=start,
            end_s=end_s,
            t_s=np.concatenate(t_parts) if t_parts else np.empty(0),
            power_w=np.concatenate(p_parts) if p_parts else np.empty(0),
            energy_j=energy_j - self._boundary_energy_j,
            counters=counters,
            iterations=None
            if iterations is None or self._boundary_iterations is None
            else iterations - self._boundary_iterations,
            marker_t_s=marker_t_s,
            marker_seq=marker_seq,
            energy_t_s=read[:, 0],
            energy_read_j=read[:, 1],
        )
        self._boundary_s = window.end_s
        self._boundary_energy_j = energy_j
        self._boundary_iterations = iterations
        return window
