"""A read-only GPU that plays a recorded NVML trace folder back on a simulated clock.

Why a device and not a script that slices the arrays: the controller talks only to the device interface, so
serving a recording through it runs the controller's *real* profiling procedure (its window lengths, the
sampler's 250 ms drains of a finite sample buffer, the idle check on the counters, the retries) unchanged, on
samples a real H200 produced. A harness that called `detect_period` on slices would re-implement that procedure
and drift from it.

What is served, at device time `now` (the recording's own time base, so t_s values are the recorded ones):
- buffered power samples (`nvml_buffered.csv`) with timestamps <= now, at most `buffer_s` of them back, as the
  driver's finite buffer holds; a folder without buffered samples serves its polled instantaneous power instead
  (the only power signal such a GPU has; the detector treats that stair-step signal as alias-prone);
- polled power, the energy counter, utilisation and clocks: the last poll at or before now (the recording already
  carries NVML's 10 Hz refresh);
- counter snapshots: the GPM columns (`gpm_*`, percent) averaged over the polls since the previous snapshot,
  NaN where none are finite (GPM gives NaN between two identical samples), at most every 100 ms as on NVML.
Every clock write raises ClockWriteNotAllowedError: a recording cannot react to clocks, so only read-only use
(`ControllerConfig(advise=True)`) is meaningful. Reading past the end of the recording raises ReplayEndedError.

Recordings are short (20-35 s of training), shorter than profiling can take on a hard job (a 3 s window, then
11 s ones). `loop=(a, b)` plays the stretch [a, b) of the recording over and over, as if the job kept doing what
it did there: a and b are moved to iteration ends, so every seam joins one recorded iteration's end to another's
(no cut through an iteration); the energy counter keeps counting across seams. A looped replay is a construct
on recorded samples, not a recording of that length, and is reported as such.
The recording's ground truth (`iterations`, iteration end times, looped alike) rides along for scoring only;
nothing in the device interface exposes it, as with the simulated GPU's `truth`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

import numpy as np
import numpy.typing as npt

from gpoeo_rt.device.base import GPU, ClockTable, CounterSnapshot, PolledReading, PowerSamples
from gpoeo_rt.device.clock import SimClock
from gpoeo_rt.device.errors import ClockWriteNotAllowedError, GPUError
from gpoeo_rt.device.workload import h200_spec
from gpoeo_rt.features import FEATURE_NAMES, GPM_METRIC_TO_FEATURE
from gpoeo_rt.tracefile import Iterations, read_polled, read_trace

FloatArray = npt.NDArray[np.float64]
_EPS = 1e-9

# Trace column (what `trace record` writes: gpm_ + the metric name, lower case) -> feature name.
_GPM_COLUMNS: Mapping[str, str] = {f"gpm_{m.lower()}": f for m, f in GPM_METRIC_TO_FEATURE.items()}
_POLLED_COLUMNS = ("p_inst_mw", "p_avg_mw", "p_usage_mw", "energy_mj", "util_gpu", "util_mem", "sm_clk", "mem_clk")


class ReplayEndedError(GPUError):
    """The replay was read past the end of its recording: nothing more was measured."""


class ReplayGPU(GPU):
    """Plays back trace folder `folder` from device time `start_s` (default: its first sample), read-only.

    `clock_table` is the table the controller searches over (default: the H200's, which the recordings were made
    on); the recording only ever ran at its default clocks.
    """

    def __init__(
        self,
        folder: str | Path,
        *,
        start_s: float | None = None,
        index: int = 0,
        name: str = "NVIDIA H200",
        clock_table: ClockTable | None = None,
        buffer_s: float = 2.4,
        gpm_min_interval_s: float = 0.1,
        loop: tuple[float, float] | None = None,
        loop_s: float = 300.0,
    ) -> None:
        self._folder = Path(folder)
        trace = read_trace(self._folder)
        power = trace.power
        ok = np.isfinite(power.t_s) & np.isfinite(power.power_w)
        order = np.argsort(power.t_s[ok], kind="stable")
        self._sample_t = np.asarray(power.t_s[ok][order], dtype=np.float64)
        self._sample_w = np.asarray(power.power_w[ok][order], dtype=np.float64)
        self.sample_source = power.source
        present = set(_header(self._folder))
        wanted = tuple(c for c in (*_POLLED_COLUMNS, *_GPM_COLUMNS) if c in present)
        cols = read_polled(self._folder, wanted)
        keep = np.isfinite(cols["t_s"])
        order = np.argsort(cols["t_s"][keep], kind="stable")
        self._poll_t = cols["t_s"][keep][order]
        self._polled: dict[str, FloatArray] = {c: cols[c][keep][order] for c in wanted}
        if len(self._sample_t) == 0 or len(self._poll_t) == 0:
            raise GPUError(f"{self._folder}: no power samples or no polls to replay")
        self.iterations: Iterations | None = trace.iterations  # scoring only (see the module docstring)
        self.loop: tuple[float, float] | None = None
        if loop is not None:
            self._make_loop(*loop, loop_s)
        self.end_s = float(min(self._sample_t[-1], self._poll_t[-1]))
        first = float(max(self._sample_t[0], self._poll_t[0]))
        begin = first if start_s is None else float(start_s)
        if not first <= begin < self.end_s:
            raise ValueError(f"start_s {begin} is outside the recording ({first:.3f} .. {self.end_s:.3f})")
        self._clock = SimClock(begin)
        self._index = index
        self._name = name
        self._table = clock_table or h200_spec().clock_table
        self._buffer_s = buffer_s
        self._gpm_min_interval_s = gpm_min_interval_s
        self._last_snapshot: CounterSnapshot | None = None
        self.clock_write_attempts = 0  # every attempt is refused; counted so tests can assert there were none

    def _make_loop(self, a: float, b: float, total_s: float) -> None:
        """Replace every series by the stretch [a, b) repeated from a for total_s (see the module docstring)."""
        its = self.iterations
        if its is None or len(its.t_s) < 3:
            raise GPUError(f"{self._folder}: looping needs the ground-truth iteration ends to cut at")
        ends = np.sort(its.t_s)
        lo = int(np.searchsorted(ends, a))
        hi = int(np.searchsorted(ends, b, side="right")) - 1
        if hi - lo < 2:
            raise ValueError(f"loop ({a:.3f}, {b:.3f}) holds fewer than 2 iterations")
        a, b = float(ends[lo]), float(ends[hi])
        span = b - a
        laps = math.ceil(total_s / span)

        def tile(t: FloatArray, *values: FloatArray) -> list[FloatArray]:
            m = (t >= a) & (t < b)
            shifts = np.repeat(np.arange(laps) * span, int(m.sum()))
            return [np.tile(t[m], laps) + shifts, *(np.tile(v[m], laps) for v in values)]

        energy = self._polled.get("energy_mj")
        # A counter: each lap adds what the stretch used, so energy keeps rising across seams.
        used = 0.0 if energy is None else float(np.diff(np.interp([a, b], self._poll_t, energy))[0])
        self._sample_t, self._sample_w = tile(self._sample_t, self._sample_w)
        names = list(self._polled)
        poll_t, *polled = tile(self._poll_t, *(self._polled[c] for c in names))
        self._polled = dict(zip(names, polled, strict=True))
        if energy is not None:
            self._polled["energy_mj"] += np.floor((poll_t - a) / span) * used
        self._poll_t = poll_t
        phase = np.asarray(its.phase[np.argsort(its.t_s)], dtype=np.int64)
        self.iterations = Iterations(
            np.concatenate([ends[lo:hi] + k * span for k in range(laps)]), np.tile(phase[lo:hi], laps)
        )
        self.loop = (a, b)

    # --- identity ---

    @property
    def index(self) -> int:
        return self._index

    @property
    def name(self) -> str:
        return self._name

    @property
    def uuid(self) -> str:
        return f"GPU-replay-{self._folder.name}"

    @property
    def clock(self) -> SimClock:
        return self._clock

    @property
    def folder(self) -> Path:
        return self._folder

    # --- reader ---

    def _now(self) -> float:
        now = self._clock.now_s()
        if now > self.end_s + _EPS:
            raise ReplayEndedError(
                f"replay of {self._folder.name} read at {now - self.end_s:.2f} s past the end of its recording"
            )
        return now

    def _poll_index(self) -> int:
        """Index of the last poll at or before now (-1: none yet)."""
        return int(np.searchsorted(self._poll_t, self._now() + _EPS, side="right")) - 1

    def _polled_value(self, column: str, scale: float = 1.0) -> float:
        i = self._poll_index()
        values = self._polled.get(column)
        if i < 0 or values is None:
            return math.nan
        return float(values[i]) * scale

    def supported_clocks(self) -> ClockTable:
        return self._table

    def current_clocks(self) -> tuple[int, int]:
        sm, mem = self._polled_value("sm_clk"), self._polled_value("mem_clk")
        if math.isfinite(sm) and math.isfinite(mem):
            return int(sm), int(mem)
        return self._table.default_sm_mhz, self._table.default_mem_mhz

    def power_samples_since(self, t_s: float) -> PowerSamples:
        now = self._now()
        lo_t = max(t_s, now - self._buffer_s)  # the driver keeps only the last few seconds
        lo = int(np.searchsorted(self._sample_t, lo_t, side="right"))
        hi = int(np.searchsorted(self._sample_t, now + _EPS, side="right"))
        return PowerSamples(self._sample_t[lo:hi].copy(), self._sample_w[lo:hi].copy())

    def power_w(self) -> float:
        return self._polled_value("p_inst_mw", 1e-3)

    def energy_j(self) -> float:
        return self._polled_value("energy_mj", 1e-3)

    def counter_snapshot(self) -> CounterSnapshot:
        now = self._now()
        last = self._last_snapshot
        if last is not None and now - last.end_s < self._gpm_min_interval_s - _EPS:
            return last  # too soon: the same answer, as the NVML backend gives
        if last is None:
            snapshot = CounterSnapshot(now, now, source="gpm")
        else:
            lo = int(np.searchsorted(self._poll_t, last.end_s + _EPS, side="right"))
            hi = int(np.searchsorted(self._poll_t, now + _EPS, side="right"))
            features = dict.fromkeys(FEATURE_NAMES, math.nan)
            for column, feature in _GPM_COLUMNS.items():
                values = self._polled.get(column)
                if values is not None and hi > lo and np.isfinite(chunk := values[lo:hi]).any():
                    features[feature] = float(np.clip(np.nanmean(chunk) / 100.0, 0.0, 1.0))
            snapshot = CounterSnapshot(last.end_s, now, MappingProxyType(features), source="gpm")
        self._last_snapshot = snapshot
        return snapshot

    def poll(self) -> PolledReading:
        now = self._now()
        sm, mem = self.current_clocks()
        return PolledReading(
            t_s=now,
            power_instant_w=self.power_w(),
            power_average_w=self._polled_value("p_avg_mw", 1e-3),
            power_usage_w=self._polled_value("p_usage_mw", 1e-3),
            energy_j=self.energy_j(),
            util_gpu_pct=self._polled_value("util_gpu"),
            util_mem_pct=self._polled_value("util_mem"),
            sm_clock_mhz=sm,
            mem_clock_mhz=mem,
            call_s=0.0,
            counters=self.counter_snapshot(),
        )

    # --- clocks: never ---

    def lock_clocks(self, sm_clock_mhz: int, mem_clock_mhz: int) -> None:
        self.clock_write_attempts += 1
        raise ClockWriteNotAllowedError(
            f"replay of {self._folder.name} is read-only: a recording cannot react to clocks "
            f"(asked to lock {sm_clock_mhz}/{mem_clock_mhz} MHz)"
        )

    def reset_clocks(self) -> None:
        self.clock_write_attempts += 1
        raise ClockWriteNotAllowedError(f"replay of {self._folder.name} is read-only: it never resets clocks")


def _header(folder: Path) -> list[str]:
    with (folder / "nvml_polled.csv").open(newline="") as fh:
        return [h.strip() for h in fh.readline().split(",")]
