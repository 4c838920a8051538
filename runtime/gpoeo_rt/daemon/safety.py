"""What keeps the clocks safe beyond the process: per-GPU lock files and clock state files.

- `GPULock`: an exclusive flock on `<lock_dir>/gpu-<uuid>.lock`, held for the daemon's life, so a second instance on
  the same GPU refuses to start, whatever its run and state dirs: lock_dir is host-wide (`/run/gpoeo-rt-locks` for
  root, a per-user folder otherwise). The kernel drops it when the process dies, even by SIGKILL.
- `RunDirLock`: one daemon per run dir, so a second one never replaces the first one's sockets.
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
import stat
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpoeo_rt.device.base import GPU, ClockTable, CounterSnapshot, PolledReading, PowerSamples
from gpoeo_rt.device.clock import Clock, StoppableClock


class AlreadyRunningError(RuntimeError):
    """Another gpoeo-rt already manages this GPU, or serves from this run dir."""


class LockDirError(RuntimeError):
    """The lock folder is not one this process may trust (owner, mode, a symlink)."""


def _safe_name(uuid: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in uuid)


# Where every gpoeo-rt on the host takes its per-GPU locks, whatever its --run-dir and --state-dir (root only can
# create entries under /run, so no user can plant a file or a symlink there first).
SYSTEM_LOCK_DIR = Path("/run/gpoeo-rt-locks")


def default_lock_dir(*, simulated_state_dir: str | Path | None = None) -> Path:
    """The host-wide lock folder: SYSTEM_LOCK_DIR for root; a per-user one for unprivileged runs (they can only
    advise, never set clocks). A simulated GPU's "hardware" lives in its state dir, so its locks do too."""
    if simulated_state_dir is not None:
        return Path(simulated_state_dir) / "locks"
    if os.geteuid() == 0:
        return SYSTEM_LOCK_DIR
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    return Path(base) / f"gpoeo-rt-locks-{os.geteuid()}"


def _trusted_dir(path: Path) -> None:
    """Create `path` if needed and check that it is ours: a real directory, owned by us, writable by nobody else."""
    path.mkdir(mode=0o755, parents=True, exist_ok=True)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise LockDirError(
            f"{path}: lock folder is not a directory owned by uid {os.geteuid()} and closed to others "
            "(remove it or fix its owner and mode)"
        )


class _FileLock:
    """An exclusive flock on one file, held until release() or the process's end (the kernel drops it, even
    after SIGKILL). The file is never unlinked: unlinking would let a second process lock a fresh inode while
    the first still holds the old one."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def _holder(self, fd: int) -> str:
        with contextlib.suppress(OSError):
            return os.pread(fd, 512, 0).decode("utf-8", "replace").strip()
        return ""

    def acquire(self, refuse: Callable[[str], AlreadyRunningError], note: str) -> None:
        _trusted_dir(self.path.parent)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = self._holder(fd) or "pid unknown"
            os.close(fd)
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                raise refuse(holder) from None
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{note}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None


class GPULock:
    """Exclusive per-GPU lock, host-wide: `<lock_dir>/gpu-<uuid>.lock` (see default_lock_dir). Use as a context
    manager or acquire()/release(). `run_dir` is only written into the file, so a refusal can say where the
    holder's sockets are."""

    def __init__(self, lock_dir: str | Path, uuid: str, index: int, *, run_dir: str | Path | None = None) -> None:
        self.path = Path(lock_dir) / f"gpu-{_safe_name(uuid)}.lock"
        self._uuid = uuid
        self._index = index
        self._run_dir = run_dir
        self._lock = _FileLock(self.path)

    def acquire(self) -> None:
        def refuse(holder: str) -> AlreadyRunningError:
            return AlreadyRunningError(
                f"GPU {self._index} ({self._uuid}) is already managed by another gpoeo-rt ({holder}; lock file "
                f"{self.path}); stop it first (gpoeo-rt stop --run-dir of that one) or choose other GPUs with --gpus"
            )

        note = f"pid {os.getpid()}" + (f", run dir {self._run_dir}" if self._run_dir is not None else "")
        self._lock.acquire(refuse, note)

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> GPULock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class RunDirLock:
    """`<run_dir>/daemon.lock`: one daemon per run dir, so no daemon replaces another one's sockets."""

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)
        self._lock = _FileLock(self.run_dir / "daemon.lock")

    def acquire(self) -> None:
        def refuse(holder: str) -> AlreadyRunningError:
            return AlreadyRunningError(
                f"run dir {self.run_dir} is in use by another gpoeo-rt ({holder}): its sockets stay its own; "
                "give this one another --run-dir"
            )

        self._lock.acquire(refuse, f"pid {os.getpid()}")

    def release(self) -> None:
        self._lock.release()


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

    def scan(self) -> tuple[list[ClockRecord], dict[Path, str]]:
        """Every readable record, and every unreadable file with why: each file on its own, so one bad file never
        hides the others."""
        records: list[ClockRecord] = []
        unreadable: dict[Path, str] = {}
        if not self.dir.is_dir():
            return records, unreadable
        for path in sorted(self.dir.glob("clocks-*.json")):
            try:
                data: dict[str, Any] = json.loads(path.read_bytes())
                sm, mem = data["locked"]
                records.append(
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
                unreadable[path] = f"{type(exc).__name__}: {exc}"[:200]
            except OSError as exc:
                unreadable[path] = exc.strerror or str(exc)
        return records, unreadable

    def record_for(self, uuid: str) -> ClockRecord | str | None:
        """This GPU's record; a string saying why when its file exists but cannot be read; None without a file."""
        path = self.path_for(uuid)
        records, unreadable = self.scan()
        if path in unreadable:
            return unreadable[path]
        return next((r for r in records if r.uuid == uuid), None)


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
