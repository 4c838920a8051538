"""What keeps the clocks safe beyond the process: per-GPU lock files and clock state files.

- `GPULock`: an exclusive flock on `<run_dir>/gpu-<uuid>.lock`, held for the daemon's life, so a second instance on
  the same GPU refuses to start. The kernel drops it when the process dies, even by SIGKILL.
- `ClockStateStore`: `<state_dir>/clocks-<uuid>.json` is written (and fsynced) *before* a clock lock is applied
  and removed only after a reset succeeded. A file found at start-up therefore means a previous process may have
  left the GPU locked (SIGKILL, a crash, a lost GPU): `start` and `reset` restore those GPUs first.
- `ManagedGPU`: the device as the daemon's controllers see it: writes go through the state store, and sleeps end
  early when the daemon is asked to stop.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from gpoeo_rt.device.base import GPU, ClockTable, CounterSnapshot, PolledReading, PowerSamples
from gpoeo_rt.device.clock import Clock, StoppableClock


class AlreadyRunningError(RuntimeError):
    """Another gpoeo-rt already manages this GPU."""


def _safe_name(uuid: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in uuid)


class GPULock:
    """Exclusive per-GPU lock file (see the module docstring). Use as a context manager or acquire()/release()."""

    def __init__(self, run_dir: str | Path, uuid: str, index: int) -> None:
        self.path = Path(run_dir) / f"gpu-{_safe_name(uuid)}.lock"
        self._uuid = uuid
        self._index = index
        self._file: IO[str] | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = self.path.open("a+")
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            handle.close()
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                raise AlreadyRunningError(
                    f"GPU {self._index} ({self._uuid}) is already managed by another gpoeo-rt (pid {holder}; lock "
                    f"file {self.path}); stop it first (gpoeo-rt stop) or choose other GPUs with --gpus"
                ) from None
            raise
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        self._file = handle

    def release(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError):
                self.path.unlink()
            self._file.close()  # closing drops the flock
            self._file = None

    def __enter__(self) -> GPULock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


@dataclass(frozen=True)
class ClockRecord:
    """A clock lock that a gpoeo-rt process applied (or was about to apply) and has not yet undone."""

    path: Path
    uuid: str
    index: int
    name: str
    pid: int
    sm_clock_mhz: int
    mem_clock_mhz: int
    since_unix_s: float


class ClockStateStore:
    def __init__(self, state_dir: str | Path) -> None:
        self.dir = Path(state_dir)

    def path_for(self, uuid: str) -> Path:
        return self.dir / f"clocks-{_safe_name(uuid)}.json"

    def record_lock(self, gpu: GPU, sm_clock_mhz: int, mem_clock_mhz: int) -> None:
        """Durably note the lock before it is applied (write, fsync, rename, fsync the folder)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.path_for(gpu.uuid)
        payload = {
            "uuid": gpu.uuid,
            "index": gpu.index,
            "name": gpu.name,
            "pid": os.getpid(),
            "locked": [int(sm_clock_mhz), int(mem_clock_mhz)],
            "since_unix_s": time.time(),
        }
        tmp = path.with_name(path.name + ".tmp")
        with tmp.open("w") as fh:
            json.dump(payload, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        dir_fd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def record_reset(self, gpu: GPU) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path_for(gpu.uuid).unlink()

    def records(self) -> list[ClockRecord]:
        """Every recorded lock; an unreadable file is an error naming it (it must not be silently ignored)."""
        if not self.dir.is_dir():
            return []
        out = []
        for path in sorted(self.dir.glob("clocks-*.json")):
            try:
                data: dict[str, Any] = json.loads(path.read_text())
                sm, mem = data["locked"]
                out.append(
                    ClockRecord(
                        path,
                        str(data["uuid"]),
                        int(data["index"]),
                        str(data["name"]),
                        int(data["pid"]),
                        int(sm),
                        int(mem),
                        float(data["since_unix_s"]),
                    )
                )
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(
                    f"{path}: unreadable clock state file ({exc}); reset that GPU with `gpoeo-rt reset --gpus N` "
                    "and delete the file"
                ) from exc
        return out

    def record_for(self, uuid: str) -> ClockRecord | None:
        return next((r for r in self.records() if r.uuid == uuid), None)


class ManagedGPU(GPU):
    """`inner` as the daemon's controller sees it: every lock is recorded before it is applied and every reset
    clears the record after it succeeded; sleeps end with SleepInterruptedError once `stop_event` is set."""

    def __init__(
        self, inner: GPU, store: ClockStateStore, stop_event: threading.Event, *, speed: float | None = None
    ) -> None:
        self.inner = inner
        self._store = store
        self._clock = StoppableClock(inner.clock, stop_event, speed=speed)

    @property
    def index(self) -> int:
        return self.inner.index

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def uuid(self) -> str:
        return self.inner.uuid

    @property
    def clock(self) -> Clock:
        return self._clock

    def supported_clocks(self) -> ClockTable:
        return self.inner.supported_clocks()

    def current_clocks(self) -> tuple[int, int]:
        return self.inner.current_clocks()

    def power_samples_since(self, t_s: float) -> PowerSamples:
        return self.inner.power_samples_since(t_s)

    def power_w(self) -> float:
        return self.inner.power_w()

    def energy_j(self) -> float:
        return self.inner.energy_j()

    def counter_snapshot(self) -> CounterSnapshot:
        return self.inner.counter_snapshot()

    def poll(self) -> PolledReading:
        return self.inner.poll()

    def running_pids(self) -> frozenset[int] | None:
        return self.inner.running_pids()

    def lock_clocks(self, sm_clock_mhz: int, mem_clock_mhz: int) -> None:
        self._store.record_lock(self.inner, sm_clock_mhz, mem_clock_mhz)
        self.inner.lock_clocks(sm_clock_mhz, mem_clock_mhz)

    def reset_clocks(self) -> None:
        self.inner.reset_clocks()
        self._store.record_reset(self.inner)

    @property
    def clocks_recorded_locked(self) -> bool:
        """True while the state file says this GPU may be locked (a reset has not succeeded since)."""
        return self._store.path_for(self.inner.uuid).exists()

    def close(self) -> None:
        self.inner.close()
