"""Clocks the sampling layer runs on: simulated time (advanced explicitly, never sleeps) or wall-clock time."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Time source plus a way to let time pass. Everything above the device layer sleeps through this."""

    def now_s(self) -> float: ...

    def sleep(self, dt_s: float) -> None: ...


class SimClock:
    """Simulated time: `sleep` and `advance` move it forward instantly, so an hour simulates in seconds."""

    def __init__(self, start_s: float = 0.0) -> None:
        self._now_s = float(start_s)

    def now_s(self) -> float:
        return self._now_s

    def advance(self, dt_s: float) -> None:
        if dt_s < 0:
            raise ValueError(f"simulated time only moves forward (dt_s={dt_s})")
        self._now_s += dt_s

    def advance_to(self, t_s: float) -> None:
        self.advance(max(0.0, t_s - self._now_s))

    def sleep(self, dt_s: float) -> None:
        self.advance(max(0.0, dt_s))


class WallClock:
    """Real time. now_s is time.time() because NVML's buffered-sample timestamps are CPU real-time microseconds."""

    def now_s(self) -> float:
        return time.time()

    def sleep(self, dt_s: float) -> None:
        if dt_s > 0:
            time.sleep(dt_s)
