"""The device interface: a read-only `GPUReader` and a separate `ClockController`, plus the values they return.

Reading and actuating are split so that code that only observes (the trace recorder, detection, `--advise`) can be
typed against `GPUReader` and cannot reach a clock write. Units are in the names; times are seconds on the device's
own time base (`now_s()`), which is wall-clock time for NVML (its buffered-sample timestamps are CPU real time) and
simulated time for the simulated GPU.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Self

import numpy as np
import numpy.typing as npt

from gpoeo_rt.device.clock import Clock
from gpoeo_rt.features import FEATURE_NAMES

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class ClockTable:
    """Supported clocks: for each memory clock, the SM clocks that may be locked with it (both ascending)."""

    entries: tuple[tuple[int, tuple[int, ...]], ...]
    default_sm_mhz: int
    default_mem_mhz: int

    @staticmethod
    def from_mapping(mem_to_sm: Mapping[int, Collection[int]], default_sm_mhz: int, default_mem_mhz: int) -> ClockTable:
        entries = tuple(
            (int(mem), tuple(sorted({int(s) for s in sms}))) for mem, sms in sorted(mem_to_sm.items()) if len(sms)
        )
        if not entries:
            raise ValueError("a clock table needs at least one memory clock with SM clocks")
        table = ClockTable(entries, int(default_sm_mhz), int(default_mem_mhz))
        if not table.contains(table.default_sm_mhz, table.default_mem_mhz):
            raise ValueError(f"default clocks {default_sm_mhz}/{default_mem_mhz} MHz are not in the table")
        return table

    @property
    def mem_clocks_mhz(self) -> tuple[int, ...]:
        return tuple(mem for mem, _ in self.entries)

    def sm_clocks_mhz(self, mem_clock_mhz: int) -> tuple[int, ...]:
        for mem, sms in self.entries:
            if mem == mem_clock_mhz:
                return sms
        return ()

    def contains(self, sm_clock_mhz: int, mem_clock_mhz: int) -> bool:
        return int(sm_clock_mhz) in self.sm_clocks_mhz(int(mem_clock_mhz))

    def pairs(self) -> Iterator[tuple[int, int]]:
        """All (sm_clock_mhz, mem_clock_mhz) pairs, memory clock major."""
        for mem, sms in self.entries:
            for sm in sms:
                yield sm, mem

    def __len__(self) -> int:
        return sum(len(sms) for _, sms in self.entries)


@dataclass(frozen=True)
class PowerSamples:
    """Buffered power samples (nvmlDeviceGetSamples; 50 Hz on an H200), oldest first."""

    t_s: FloatArray = field(repr=False)
    power_w: FloatArray = field(repr=False)

    def __len__(self) -> int:
        return len(self.t_s)

    @staticmethod
    def empty() -> PowerSamples:
        return PowerSamples(np.empty(0), np.empty(0))


def _nan_features() -> Mapping[str, float]:
    return MappingProxyType(dict.fromkeys(FEATURE_NAMES, math.nan))


@dataclass(frozen=True)
class CounterSnapshot:
    """Counter features (`feat_*`, fractions in [0, 1], NaN where unavailable) averaged over [start_s, end_s].

    GPM-style counters are differences of two hardware samples, so a snapshot covers the interval since the
    previous one. A snapshot asked for too soon (< 100 ms for GPM) is the previous one again (same end_s): callers
    recognise a stale snapshot by its end_s. start_s == end_s means no interval yet (all NaN).
    """

    start_s: float
    end_s: float
    features: Mapping[str, float] = field(default_factory=_nan_features)
    source: str = "none"  # "gpm", "simulated" or "none"

    @property
    def interval_s(self) -> float:
        return self.end_s - self.start_s


@dataclass(frozen=True)
class PolledReading:
    """One poll of the slow (10 Hz-refresh) NVML values, as the trace recorder writes them."""

    t_s: float
    power_instant_w: float  # NVML_FI_DEV_POWER_INSTANT
    power_average_w: float  # NVML_FI_DEV_POWER_AVERAGE (1 s average)
    power_usage_w: float  # nvmlDeviceGetPowerUsage (a 1 s average on Ampere-non-GA100 and newer)
    energy_j: float  # energy counter since driver load
    util_gpu_pct: float
    util_mem_pct: float
    sm_clock_mhz: int
    mem_clock_mhz: int
    call_s: float  # how long the poll took (real) or is modelled to take (simulated)
    counters: CounterSnapshot


class GPUReader(ABC):
    """Read-only view of one GPU. Reading never needs privileges and never changes the GPU."""

    @property
    @abstractmethod
    def index(self) -> int: ...

    @property
    @abstractmethod
    def name(self) -> str: ...

    @property
    @abstractmethod
    def uuid(self) -> str: ...

    @property
    @abstractmethod
    def clock(self) -> Clock:
        """The clock this device lives on: sleeping on it lets device time pass (simulated or real)."""

    def now_s(self) -> float:
        """Current time on this device's time base (the base of every t_s it returns)."""
        return self.clock.now_s()

    @abstractmethod
    def supported_clocks(self) -> ClockTable: ...

    @abstractmethod
    def current_clocks(self) -> tuple[int, int]:
        """(sm_clock_mhz, mem_clock_mhz) now."""

    @abstractmethod
    def power_samples_since(self, t_s: float) -> PowerSamples:
        """Buffered power samples newer than t_s (t_s <= 0: all the driver still holds). The driver's buffer is
        finite (about 2.4 s at 50 Hz), so callers must drain it more often than that."""

    @abstractmethod
    def power_w(self) -> float:
        """Polled instantaneous power (refreshes at ~10 Hz on an H200)."""

    @abstractmethod
    def energy_j(self) -> float:
        """Energy counter since driver load. Slow on an H200 (~4 ms a read): keep it out of fast loops."""

    @abstractmethod
    def counter_snapshot(self) -> CounterSnapshot:
        """Counter features averaged since the previous snapshot (see CounterSnapshot)."""

    @abstractmethod
    def poll(self) -> PolledReading:
        """All slow values at once (what `trace record` writes per row)."""

    def running_pids(self) -> frozenset[int] | None:
        """Process ids with a context on this GPU (None: this backend cannot tell). Who may send step markers."""
        return None

    def close(self) -> None:  # noqa: B027 - optional hook, nothing to release by default
        """Release the device (and, for a controller that locked clocks, restore them)."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ClockController(ABC):
    """Clock writes. Separate from reading so that read-only code cannot reach them."""

    @abstractmethod
    def lock_clocks(self, sm_clock_mhz: int, mem_clock_mhz: int) -> None:
        """Lock SM and memory clocks to one supported pair (min = max)."""

    @abstractmethod
    def reset_clocks(self) -> None:
        """Undo any lock: back to the driver's default clock behaviour."""


class GPU(GPUReader, ClockController, ABC):
    """A device that can both read and (when allowed) write clocks: what the backends implement."""
