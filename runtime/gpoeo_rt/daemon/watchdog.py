"""A watchdog per GPU: every NVML call of one GPU runs on that GPU's own thread and is waited for at most
`timeout_s`, so a call that hangs (a GPU with Xid errors, one falling off the bus) freezes neither that GPU's
controller for good, nor the other GPUs, nor the sockets.

While a call hangs, every further call on that GPU fails at once with `GPUHungError` (nothing queues behind it);
a call that was still waiting when its caller gave up is cancelled, so a late clock write never lands unnoticed.
`responsive` is set again the moment the hung call returns: the daemon then resets the GPU's clocks (if its state
file says it may be locked) and starts a fresh controller.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeoutError
from typing import Any, TypeVar

from gpoeo_rt.device.base import GPU, ClockTable, CounterSnapshot, PolledReading, PowerSamples
from gpoeo_rt.device.clock import Clock
from gpoeo_rt.device.errors import GPUError

T = TypeVar("T")


class GPUHungError(GPUError):
    """An NVML call on this GPU did not return within the watchdog's timeout."""


def call_bounded(fn: Callable[[], T], timeout_s: float, what: str) -> T:
    """fn() on a thread of its own, waited for at most timeout_s: for calls made before a GPU has a watchdog
    (opening it, counting GPUs). On timeout GPUHungError; the thread is left behind (a daemon thread)."""
    future: Future[T] = Future()

    def run() -> None:
        try:
            future.set_result(fn())
        except BaseException as exc:
            future.set_exception(exc)

    threading.Thread(target=run, name=f"gpoeo-rt {what}", daemon=True).start()
    try:
        return future.result(timeout=timeout_s)
    except FutureTimeoutError:
        raise GPUHungError(f"{what} did not return within {timeout_s:g} s (NVML hangs)") from None


class WatchdogGPU(GPU):
    """`inner` with every call bounded by `timeout_s` (see the module docstring). Identity (index, name, uuid) and
    the clock are read once, without NVML."""

    def __init__(self, inner: GPU, *, timeout_s: float = 10.0) -> None:
        if timeout_s <= 0:
            raise ValueError("timeout_s must be > 0")
        self.inner = inner
        self.timeout_s = timeout_s
        self._index, self._name, self._uuid = inner.index, inner.name, inner.uuid
        self._jobs: queue.SimpleQueue[tuple[str, Callable[[], Any], Future[Any]] | None] = queue.SimpleQueue()
        self._state = threading.Lock()
        self._running: tuple[str, float] | None = None  # (call, monotonic start) of the call in progress
        self.responsive = threading.Event()
        self.responsive.set()
        self.hangs = 0
        self._thread = threading.Thread(target=self._serve, name=f"gpoeo-rt nvml gpu{self._index}", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            what, fn, future = job
            if not future.set_running_or_notify_cancel():
                continue  # its caller gave up while it waited: never run it late
            with self._state:
                self._running = (what, time.monotonic())
            try:
                future.set_result(fn())
            except BaseException as exc:
                future.set_exception(exc)
            finally:
                with self._state:
                    self._running = None
                    self.responsive.set()

    def stuck(self) -> dict[str, Any] | None:
        """The call that has hung past the timeout and for how long, or None."""
        with self._state:
            running = self._running
        if running is None:
            return None
        elapsed = time.monotonic() - running[1]
        if elapsed < self.timeout_s and self.responsive.is_set():
            return None
        return {"call": running[0], "for_s": round(elapsed, 1)}

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        if not self.responsive.is_set():
            stuck = self.stuck()
            since = f" ({stuck['call']} has not returned for {stuck['for_s']:g} s)" if stuck else ""
            raise GPUHungError(f"GPU {self._index}: NVML is not answering{since}; {what} not attempted")
        future: Future[T] = Future()
        self._jobs.put((what, fn, future))
        try:
            return future.result(timeout=self.timeout_s)
        except FutureTimeoutError:
            if future.cancel():  # still waiting behind another caller's call, which is the one that hangs
                raise GPUHungError(f"GPU {self._index}: NVML is not answering; {what} not attempted") from None
            with self._state:
                if self._running is not None:  # else it returned just now: still responsive
                    self.responsive.clear()
            self.hangs += 1
            raise GPUHungError(
                f"GPU {self._index}: {what} did not return within {self.timeout_s:g} s (NVML hangs)"
            ) from None

    # --- the GPU interface, each call through the watchdog ---

    @property
    def index(self) -> int:
        return self._index

    @property
    def name(self) -> str:
        return self._name

    @property
    def uuid(self) -> str:
        return self._uuid

    @property
    def clock(self) -> Clock:
        return self.inner.clock

    def supported_clocks(self) -> ClockTable:
        return self._call("read the supported clocks", self.inner.supported_clocks)

    def current_clocks(self) -> tuple[int, int]:
        return self._call("read the clocks", self.inner.current_clocks)

    def power_samples_since(self, t_s: float) -> PowerSamples:
        return self._call("read power samples", lambda: self.inner.power_samples_since(t_s))

    def power_w(self) -> float:
        return self._call("read power", self.inner.power_w)

    def energy_j(self) -> float:
        return self._call("read the energy counter", self.inner.energy_j)

    def counter_snapshot(self) -> CounterSnapshot:
        return self._call("read counters", self.inner.counter_snapshot)

    def poll(self) -> PolledReading:
        return self._call("poll", self.inner.poll)

    def running_pids(self) -> frozenset[int] | None:
        return self._call("list processes", self.inner.running_pids)

    def lock_clocks(self, sm_clock_mhz: int, mem_clock_mhz: int) -> None:
        self._call(
            f"lock clocks {sm_clock_mhz}/{mem_clock_mhz} MHz",
            lambda: self.inner.lock_clocks(sm_clock_mhz, mem_clock_mhz),
        )

    def reset_clocks(self) -> None:
        self._call("reset clocks", self.inner.reset_clocks)

    def close(self) -> None:
        """Close the inner device if NVML answers; a hung GPU's thread is left behind (a daemon thread)."""
        try:
            self._call("close", self.inner.close)
        finally:
            self._jobs.put(None)
