"""The marker client: one non-blocking datagram per training step to `<run_dir>/markers.sock` (which run dir:
`gpoeo_rt.client.paths`, the host's /run/gpoeo-rt unless the caller runs a daemon of its own or says otherwise).

Wire format (ASCII, one datagram, at most 256 bytes): `gpoeo-mark1 <step> <unix time s> <gpus>`, where step is this
process's step counter (gaps tell the daemon that markers were lost), the time is `time.time()` at the call (the
time base of NVML's power samples), and gpus is `-` (unknown) or comma-separated CUDA devices as NVML indices or
UUIDs. The daemon learns the sender's pid from the kernel (SO_PASSCRED), not from the datagram.

Which GPU: an explicit `gpu=` wins; else, when torch is imported and CUDA initialised, the current device's UUID
(exact); else the single entry of CUDA_VISIBLE_DEVICES; else `-`, which a daemon managing one GPU takes as its own.
The device is resolved once per client (a process that moves between GPUs should pass `gpu=`).

Cost: every call counts the step and reads a clock; a datagram goes out at most once per `min_interval_s` (50 ms):
the step counter it carries makes the daemon's period exact however few are sent (it divides the time between two
markers by the steps between them), so the syscalls stay at <= 20 per second whatever the step rate (a send costs a
few to tens of microseconds depending on the host). Without a daemon, a failed connect is retried at most once a
second. A full socket queue drops the datagram (EAGAIN); a daemon that went away is reconnected a second later.
No exception ever reaches the caller; an unexpected error is logged once.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
import sys
import time
from collections.abc import Iterable
from types import TracebackType
from typing import Any

from gpoeo_rt.client.paths import client_run_dirs, usable_run_dir

MARKER_SOCKET = "markers.sock"
PROTOCOL = b"gpoeo-mark1"
RETRY_S = 1.0
MIN_INTERVAL_S = 0.05  # at most one datagram per this much time; the step counter covers the steps in between
# No daemon, a stale socket, a busy daemon: normal, silent. Anything else is logged once.
_QUIET_ERRNOS = frozenset({errno.ENOENT, errno.ECONNREFUSED, errno.EAGAIN, errno.EWOULDBLOCK, errno.ENOTDIR})

GPU = int | str
log = logging.getLogger("gpoeo_rt.client")


def _token(gpu: GPU | Iterable[GPU] | None) -> bytes | None:
    """An explicit gpu argument as the wire's gpus field (None: none given)."""
    if gpu is None:
        return None
    items = [gpu] if isinstance(gpu, int | str) else list(gpu)
    text = ",".join(str(g).strip() for g in items)
    if not text or len(text) > 160 or not all(c.isalnum() or c in "-,:" for c in text):
        raise ValueError(f"gpu={gpu!r}: expected a CUDA/NVML index, a GPU UUID, or a list of them")
    return text.encode()


def _detected_gpu() -> bytes:
    """The GPU this process trains on, as well as can be told without importing anything (see module doc)."""
    torch: Any = sys.modules.get("torch")
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    try:
        if torch is not None and torch.cuda.is_initialized():
            index = int(torch.cuda.current_device())
            uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
            if uuid is not None:
                text = str(uuid)
                return (text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}").encode()
            if visible:
                return visible[index].encode() if index < len(visible) else b"-"
            return str(index).encode()  # a CUDA index: NVML's only with CUDA_DEVICE_ORDER=PCI_BUS_ID
    except Exception:  # a broken CUDA set-up must not break the training loop
        pass
    return visible[0].encode() if len(visible) == 1 else b"-"


class MarkerClient:
    """Sends step markers for one process. Without `run_dir`: $GPOEO_RT_RUN_DIR, else the caller's own daemon if one
    answers, else the host's /run/gpoeo-rt (the lookup order of gpoeo_rt.client.paths, tried at every connect)."""

    def __init__(
        self,
        run_dir: str | os.PathLike[str] | None = None,
        *,
        gpu: GPU | Iterable[GPU] | None = None,
        min_interval_s: float = MIN_INTERVAL_S,
    ):
        self._dirs = client_run_dirs(run_dir)
        self._paths = [os.path.join(d, MARKER_SOCKET) for d in self._dirs]
        self.path = self._paths[-1]  # the socket connected to (before any: the last candidate, the host's)
        self._gpus = _token(gpu)
        self._min_interval_s = min_interval_s
        self._sock: socket.socket | None = None
        self._connected = False
        self._next_s = -1.0  # monotonic time of the next send (or connect attempt)
        self._warned = False
        self.steps = 0  # mark() calls
        self.sent = 0  # datagrams handed to the kernel

    def mark(self, gpu: GPU | Iterable[GPU] | None = None) -> None:
        """One training step ended. Never raises, never blocks."""
        self.steps += 1
        now = time.monotonic()
        if now < self._next_s:
            return
        self._next_s = now + self._min_interval_s
        if not self._connected and not self._connect():
            return
        try:
            gpus = _token(gpu) if gpu is not None else self._gpus
            if gpus is None:
                gpus = self._gpus = _detected_gpu()
            assert self._sock is not None
            self._sock.send(b"%s %d %.6f %s" % (PROTOCOL, self.steps, time.time(), gpus))
            self.sent += 1
        except BlockingIOError:
            pass  # the daemon's queue is full: this marker is lost, the step counter tells it so
        except OSError as exc:
            self._disconnect(exc)
        except Exception as exc:  # a bad gpu= argument, or anything else: log once, keep training
            self._warn(exc)

    def _connect(self) -> bool:
        """Connect to the first candidate socket that accepts (a stale one refuses and is passed over)."""
        error: OSError | None = None
        for directory, path in zip(self._dirs, self._paths, strict=True):
            if not usable_run_dir(directory, self._dirs):
                continue  # "our" folder, made by someone else
            try:
                if self._sock is None:
                    self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                    self._sock.setblocking(False)
                self._sock.connect(path)
            except OSError as exc:
                error = exc
                if exc.errno in _QUIET_ERRNOS:
                    continue  # nobody there: the next candidate
                self.path = path
                break
            self.path = path
            self._connected = True
            return True
        self._disconnect(error or FileNotFoundError(errno.ENOENT, "no daemon", self._paths[-1]))
        return False

    def _disconnect(self, exc: OSError) -> None:
        if exc.errno not in _QUIET_ERRNOS:
            self._warn(exc)
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
        self._sock = None
        self._connected = False
        self._next_s = time.monotonic() + RETRY_S

    def _warn(self, exc: BaseException) -> None:
        if not self._warned:
            self._warned = True
            log.warning("gpoeo-rt step markers to %s are off: %s: %s", self.path, type(exc).__name__, exc)

    def close(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
        self._sock = None
        self._connected = False


_default: MarkerClient | None = None


def _reset_after_fork() -> None:
    global _default
    _default = None  # the child gets its own socket and step counter


os.register_at_fork(after_in_child=_reset_after_fork)


def mark_step(gpu: GPU | Iterable[GPU] | None = None) -> None:
    """Tell the local gpoeo-rt daemon that a training step ended (see the module docstring). Never raises."""
    global _default
    client = _default
    if client is None:
        try:
            client = _default = MarkerClient()
        except Exception:  # pragma: no cover - MarkerClient() with defaults cannot fail; belt and braces
            return
    client.mark(gpu)


def marker_stats() -> dict[str, object]:
    """What the default client did: steps marked, datagrams sent, the socket path."""
    client = _default
    if client is None:
        return {"steps": 0, "sent": 0, "path": None}
    return {"steps": client.steps, "sent": client.sent, "path": client.path}


class step(contextlib.ContextDecorator):  # noqa: N801 - reads as a verb: `with step():` / `@step()`
    """Marks a step when the block (or decorated function) returns normally: `with step(): train_one_batch()`."""

    def __init__(self, gpu: GPU | Iterable[GPU] | None = None) -> None:
        self._gpu = _token(gpu)  # a bad argument fails here, at set-up, not in the loop

    def __enter__(self) -> step:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            mark_step(self._gpu.decode() if self._gpu is not None else None)
