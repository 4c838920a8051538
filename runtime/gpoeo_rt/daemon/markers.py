"""The daemon's end of the step-marker channel: `<run_dir>/markers.sock`, a Unix datagram socket anyone may send to.

A training process sends one datagram per step (`gpoeo_rt.client`). Nothing in it is trusted:
- the sender's pid comes from the kernel (SO_PASSCRED), never from the datagram;
- a datagram must parse (protocol tag, step counter, timestamp, GPU list), fit in 256 bytes, carry a timestamp
  within `max_skew_s` of the daemon's clock and no earlier than that sender's previous one;
- each sender is rate-limited (a token bucket of `max_rate_hz`), and at most `max_senders` senders are tracked per
  GPU (the stalest is forgotten), each with a bounded history: a flood costs bounded memory and CPU;
- a marker can only move the controller's timing (the period a window is measured with), never a setting. The
  controller still applies its slowdown guard and phase checks to what markers say.

GPU mapping: a GPU token that is an NVML index or UUID (with or without the GPU- prefix) of a managed GPU names it;
`-` (the sender could not tell) names the managed GPU only when the daemon manages exactly one. Anything else is
counted as unmapped. Limits: a CUDA index equals the NVML index only with CUDA_DEVICE_ORDER=PCI_BUS_ID (the client
sends UUIDs when torch is loaded, which avoids this); MIG instances are not matched.

When several senders mark the same GPU (two jobs sharing it, or a restarted job), a window is timed by the sender
with the most markers in it (ties: the lower pid).
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import struct
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gpoeo_rt.client.markers import MARKER_SOCKET, PROTOCOL
from gpoeo_rt.sampling.markers import FloatArray, IntArray, no_markers

MAX_DATAGRAM = 256
_CREDS = struct.Struct("3i")


@dataclass
class _Stream:
    """One sender's markers for one GPU."""

    tokens: float
    refilled_s: float
    markers: deque[tuple[float, int]]
    received: int = 0


@dataclass
class _GPUMarkers:
    streams: dict[int, _Stream] = field(default_factory=dict)  # pid -> stream
    received: int = 0
    last_s: float = -math.inf


class MarkerBoard:
    """Validated markers per managed GPU (see the module docstring). Thread-safe: the socket thread offers, the
    controllers' samplers read."""

    def __init__(
        self,
        gpus: Sequence[tuple[int, str]],
        clock: Callable[[], float],
        *,
        max_rate_hz: float = 5000.0,
        max_senders: int = 16,
        history: int = 8192,
        max_skew_s: float = 5.0,
    ) -> None:
        """`gpus`: (NVML index, UUID) of each managed GPU; `clock`: the daemon's time (markers' time base)."""
        self._by_index = {index: index for index, _ in gpus}
        self._by_uuid = {_norm_uuid(uuid): index for index, uuid in gpus}
        self._gpus = {index: _GPUMarkers() for index, _ in gpus}
        self._clock = clock
        self._max_rate_hz = max_rate_hz
        self._max_senders = max_senders
        self._history = history
        self._max_skew_s = max_skew_s
        self._lock = threading.Lock()
        self.rejected: dict[str, int] = {}

    def _reject(self, why: str) -> str:
        self.rejected[why] = self.rejected.get(why, 0) + 1
        return why

    def _targets(self, field_: str) -> list[int] | None:
        if field_ == "-":
            return list(self._gpus) if len(self._gpus) == 1 else None
        found = []
        for token in field_.split(","):
            index = self._by_index.get(int(token)) if token.isdigit() else self._by_uuid.get(_norm_uuid(token))
            if index is not None and index not in found:
                found.append(index)
        return found or None

    def offer(self, payload: bytes, pid: int) -> str | None:
        """Take one datagram from `pid` (kernel-given). Returns None when stored, else why it was not."""
        with self._lock:
            try:
                if len(payload) > MAX_DATAGRAM:
                    raise ValueError
                tag, step_text, t_text, gpus_text = payload.decode("ascii").split(" ")
                step, t_s = int(step_text), float(t_text)
            except ValueError:
                return self._reject("malformed")
            if tag.encode() != PROTOCOL or step < 0 or not math.isfinite(t_s):
                return self._reject("malformed")
            now = self._clock()
            if abs(t_s - now) > self._max_skew_s:
                return self._reject("clock_skew")
            targets = self._targets(gpus_text)
            if targets is None:
                return self._reject("unmapped")
            for index in targets:
                why = self._store(self._gpus[index], pid, step, t_s, now)
                if why is not None:
                    return self._reject(why)
            return None

    def _store(self, board: _GPUMarkers, pid: int, step: int, t_s: float, now: float) -> str | None:
        stream = board.streams.get(pid)
        if stream is None:
            if len(board.streams) >= self._max_senders:  # forget the stalest sender
                stalest = min(board.streams, key=lambda p: board.streams[p].refilled_s)
                del board.streams[stalest]
            stream = board.streams[pid] = _Stream(self._max_rate_hz, now, deque(maxlen=self._history))
        stream.tokens = min(self._max_rate_hz, stream.tokens + (now - stream.refilled_s) * self._max_rate_hz)
        stream.refilled_s = now
        if stream.tokens < 1.0:
            return "rate_limited"
        stream.tokens -= 1.0
        if stream.markers:
            last_t, last_step = stream.markers[-1]
            if t_s < last_t:
                return "out_of_order"
            if step <= last_step:  # a new counter under the same pid (an exec'd job): a fresh stream
                stream.markers.clear()
        stream.markers.append((t_s, step))
        stream.received += 1
        board.received += 1
        board.last_s = now
        return None

    def markers_between(self, indices: Sequence[int], start_s: float, end_s: float) -> tuple[FloatArray, IntArray]:
        """The markers in [start_s, end_s] of the sender with the most of them on these GPUs."""
        with self._lock:
            best: tuple[int, int, list[tuple[float, int]]] | None = None
            for index in indices:
                for pid, stream in self._gpus[index].streams.items():
                    inside = [m for m in stream.markers if start_s <= m[0] <= end_s]
                    if inside and (best is None or (len(inside), -pid) > (best[0], -best[1])):
                        best = (len(inside), pid, inside)
        if best is None:
            return no_markers()
        values = np.array(best[2], dtype=np.float64)
        return values[:, 0].copy(), values[:, 1].astype(np.int64)

    def source(self, indices: Sequence[int]) -> GPUMarkerSource:
        return GPUMarkerSource(self, list(indices))

    def summary(self, indices: Sequence[int]) -> dict[str, object]:
        """For `gpoeo-rt status`: who marks these GPUs, how many markers, how long ago the last one came."""
        with self._lock:
            boards = [self._gpus[i] for i in indices]
            last = max((b.last_s for b in boards), default=-math.inf)
            return {
                "senders": sorted({pid for b in boards for pid in b.streams}),
                "received": sum(b.received for b in boards),
                "last_marker_age_s": round(self._clock() - last, 3) if math.isfinite(last) else None,
            }


class GPUMarkerSource:
    """A MarkerSource (sampling layer) over one worker's GPUs."""

    def __init__(self, board: MarkerBoard, indices: list[int]) -> None:
        self._board = board
        self._indices = indices

    def markers_between(self, start_s: float, end_s: float) -> tuple[FloatArray, IntArray]:
        return self._board.markers_between(self._indices, start_s, end_s)


def _norm_uuid(text: str) -> str:
    text = text.strip().lower()
    return text[4:] if text.startswith("gpu-") else text


class MarkerServer:
    """Receives datagrams on `<run_dir>/markers.sock` (mode 0666) into a MarkerBoard, on a background thread.

    The thread polls (drains every `drain_interval_s`) instead of waiting in select(): a reader asleep on the
    socket makes every send() wake it, and on a busy host the sender then pays for a context switch (measured here:
    ~40 us per marker instead of a few). Polled, a send only queues. The kernel queues at most
    net.unix.max_dgram_qlen datagrams (10 on some hosts): beyond that, markers are dropped at the sender, which
    the step counter bridges (a window's period needs only its first and last marker)."""

    def __init__(self, run_dir: str | Path, board: MarkerBoard, *, drain_interval_s: float = 0.02) -> None:
        self.path = Path(run_dir) / MARKER_SOCKET
        self.board = board
        self._drain_interval_s = drain_interval_s
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()  # left by a killed daemon (the GPU locks already prove we are alone)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)  # room for bursts while the GIL is busy
        sock.bind(str(self.path))
        os.chmod(self.path, 0o666)  # anyone may mark their own job's steps
        sock.setblocking(False)
        self._sock = sock

    def drain(self) -> int:
        """Take every datagram waiting now; returns how many were stored."""
        assert self._sock is not None
        stored = 0
        while True:
            try:
                data, ancillary, _, _ = self._sock.recvmsg(MAX_DATAGRAM + 1, socket.CMSG_SPACE(_CREDS.size))
            except (BlockingIOError, InterruptedError):
                return stored
            except OSError:
                return stored
            pid = None
            for level, kind, blob in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS and len(blob) >= _CREDS.size:
                    pid = _CREDS.unpack(blob[: _CREDS.size])[0]
            if pid is None:
                self.board._reject("no_credentials")
                continue
            if self.board.offer(data, pid) is None:
                stored += 1

    def start(self) -> None:
        self.open()
        self._thread = threading.Thread(target=self._serve, name="gpoeo-rt markers", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.wait(self._drain_interval_s):
            self.drain()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
