"""Clocks the sampling layer runs on: simulated time (advanced explicitly, never sleeps) or wall-clock time."""

from __future__ import annotations

import threading
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


class SleepInterruptedError(Exception):
    """A StoppableClock was asked to stop while (or before) sleeping: the caller should wind down."""


class StoppableClock:
    """Wraps a clock so that a sleep ends early, with SleepInterruptedError, once `stop_event` is set.

    Long-running loops (the daemon's controllers) sleep through this, so SIGTERM is acted on within moments instead
    of after a measurement window. `speed` paces a simulated clock: that many simulated seconds per real second
    (None: as fast as possible; ignored semantics for a wall clock, which is real time already).
    """

    def __init__(self, inner: Clock, stop_event: threading.Event, *, speed: float | None = None) -> None:
        if speed is not None and speed <= 0:
            raise ValueError(f"speed must be > 0 simulated seconds per real second, got {speed}")
        self._inner = inner
        self._stop = stop_event
        self._speed = speed
        self._real = isinstance(inner, WallClock)

    def now_s(self) -> float:
        return self._inner.now_s()

    def sleep(self, dt_s: float) -> None:
        if self._stop.is_set():
            raise SleepInterruptedError("stop requested")
        if dt_s <= 0:
            return
        if self._real:
            if self._stop.wait(dt_s):
                raise SleepInterruptedError("stop requested")
            return
        if self._speed is not None and self._stop.wait(dt_s / self._speed):
            raise SleepInterruptedError("stop requested")
        self._inner.sleep(dt_s)
