"""The daemon's end of the step-marker channel: `<run_dir>/markers.sock`, a Unix datagram socket anyone may send to.

A training process sends one datagram per step (`gpoeo_rt.client`). Nothing in it is trusted:
- the sender's pid comes from the kernel (SO_PASSCRED), never from the datagram;
- a datagram must parse (protocol tag, step counter, timestamp, GPU list), fit in 256 bytes, carry a timestamp
  within `max_skew_s` of the daemon's clock and no earlier than that sender's previous one;
- each sender is rate-limited (a token bucket of `max_rate_hz`), and at most `max_senders` senders are tracked per
  GPU (the stalest is forgotten), each with a bounded history: a flood costs bounded memory and CPU;
- only a process running on the GPU it marks (the device's process list, matched to the kernel-given pid and
  looked up again when an unknown sender appears, at most every `MarkerAdmission.min_refresh_s`) or a sender whose
  uid or group is allowed (root, the daemon's user, `marker_users`, `marker_group`) is heard at all: any other
  local user's markers are counted as `not_on_gpu` and dropped;
- a marker can only move the controller's timing (the period a window is measured with), never a setting, and
  only within what the GPU's own power signal confirms (`marker_check.CheckedSampler`). The controller still
  applies its slowdown guard and phase checks to what markers say.

GPU mapping: a GPU token that is an NVML index or UUID (with or without the GPU- prefix) of a managed GPU names it;
`-` (the sender could not tell) names the managed GPU only when the daemon manages exactly one. Anything else is
counted as unmapped. Limits: a CUDA index equals the NVML index only with CUDA_DEVICE_ORDER=PCI_BUS_ID (the client
sends UUIDs when torch is loaded, which avoids this); MIG instances are not matched.

When several admitted senders mark the same GPU (two jobs sharing it, or a restarted job), a window is timed by
the sender with the most markers in it (ties: the lower pid) among those the power signal does not contradict.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gpoeo_rt.client.markers import MARKER_SOCKET, PROTOCOL
from gpoeo_rt.sampling.markers import FloatArray, IntArray, no_markers

MAX_DATAGRAM = 256
_CREDS = struct.Struct("3i")
_log = logging.getLogger(__name__)

PidsOn = Callable[[int], "frozenset[int] | None"]  # NVML index -> pids running on that GPU (None: unknown)


def _process_groups(pid: int) -> set[int]:
    """The primary and supplementary groups of a live process (empty when it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Groups:"):
                return {int(g) for g in line.split()[1:]}
    except (OSError, ValueError):
        pass
    return set()


class MarkerAdmission:
    """Who may send step markers for a GPU: a process on that GPU, or an allowed uid or group.

    The process list is cached per GPU for `refresh_s`; a sender not in it triggers one fresh look-up, at most every
    `min_refresh_s` per GPU, so a flood from a stranger costs bounded NVML calls. A failing look-up counts as an empty
    list (only allowed uids and groups are heard until it works again)."""

    def __init__(
        self,
        pids_on: PidsOn,
        *,
        allowed_uids: Collection[int] = (),
        allowed_gid: int | None = None,
        refresh_s: float = 5.0,
        min_refresh_s: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._pids_on = pids_on
        self.allowed_uids = frozenset({0, os.geteuid(), *allowed_uids})
        self.allowed_gid = allowed_gid
        self._refresh_s = refresh_s
        self._min_refresh_s = min_refresh_s
        self._clock = clock
        self._cache: dict[int, tuple[float, frozenset[int]]] = {}
        self._group_ok: dict[int, bool] = {}  # pid -> in allowed_gid (bounded: cleared when large)
        self.lookup_errors = 0

    def _pids(self, index: int, *, fresh: bool) -> frozenset[int]:
        now = self._clock()
        cached = self._cache.get(index)
        if cached is not None and now - cached[0] < (self._min_refresh_s if fresh else self._refresh_s):
            return cached[1]
        try:
            pids = self._pids_on(index) or frozenset()
        except Exception as exc:  # a GPU error or a hung-NVML timeout: nobody on the list until it answers
            self.lookup_errors += 1
            _log.warning("GPU %d: cannot list its processes for the marker check: %s", index, exc)
            pids = frozenset()
        self._cache[index] = (now, pids)
        return pids

    def _in_group(self, pid: int, gid: int) -> bool:
        if self.allowed_gid is None:
            return False
        if gid == self.allowed_gid:
            return True
        if pid not in self._group_ok:
            if len(self._group_ok) > 4096:
                self._group_ok.clear()
            self._group_ok[pid] = self.allowed_gid in _process_groups(pid)
        return self._group_ok[pid]

    def admits(self, index: int, pid: int, uid: int, gid: int) -> bool:
        if uid in self.allowed_uids or self._in_group(pid, gid):
            return True
        return pid in self._pids(index, fresh=False) or pid in self._pids(index, fresh=True)

    def still_admits(self, index: int, pid: int, uid: int, gid: int) -> bool:
        """As admits, from the cached list only (a reader's check: no look-up on the caller's thread)."""
        if uid in self.allowed_uids or self._in_group(pid, gid):
            return True
        return pid in self._pids(index, fresh=False)


@dataclass
class _Stream:
    """One sender's markers for one GPU."""

    tokens: float
    refilled_s: float
    markers: deque[tuple[float, int]]
    received: int = 0
    uid: int = -1  # kernel-given; -1: not known (no admission check)
    gid: int = -1


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
        admission: MarkerAdmission | None = None,
    ) -> None:
        """`gpus`: (NVML index, UUID) of each managed GPU; `clock`: the daemon's time (markers' time base);
        `admission`: who may mark (None: anyone, for tests of the rest)."""
        self._by_index = {index: index for index, _ in gpus}
        self._by_uuid = {_norm_uuid(uuid): index for index, uuid in gpus}
        self._gpus = {index: _GPUMarkers() for index, _ in gpus}
        self._clock = clock
        self._max_rate_hz = max_rate_hz
        self._max_senders = max_senders
        self._history = history
        self._max_skew_s = max_skew_s
        self._admission = admission
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

    def offer(self, payload: bytes, pid: int, uid: int | None = None, gid: int | None = None) -> str | None:
        """Take one datagram from `pid` (uid, gid: kernel-given). Returns None when stored, else why it was not."""
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
            if self._admission is not None:
                if uid is None or gid is None:
                    return self._reject("no_credentials")
                if not all(self._admission.admits(index, pid, uid, gid) for index in targets):
                    return self._reject("not_on_gpu")
            for index in targets:
                why = self._store(self._gpus[index], pid, step, t_s, now, uid, gid)
                if why is not None:
                    return self._reject(why)
            return None

    def _store(
        self, board: _GPUMarkers, pid: int, step: int, t_s: float, now: float, uid: int | None, gid: int | None
    ) -> str | None:
        stream = board.streams.get(pid)
        if stream is None:
            if len(board.streams) >= self._max_senders:  # forget the stalest sender
                stalest = min(board.streams, key=lambda p: board.streams[p].refilled_s)
                del board.streams[stalest]
            stream = board.streams[pid] = _Stream(self._max_rate_hz, now, deque(maxlen=self._history))
            stream.uid, stream.gid = (-1 if uid is None else uid), (-1 if gid is None else gid)
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

    def candidates(
        self, indices: Sequence[int], start_s: float, end_s: float
    ) -> list[tuple[int, FloatArray, IntArray]]:
        """(pid, timestamps, steps) of every sender with markers in [start_s, end_s] on these GPUs, the one with the
        most markers first (ties: the lower pid). A sender that has left the GPU since is no longer listed."""
        with self._lock:
            found: dict[int, list[tuple[float, int]]] = {}
            for index in indices:
                for pid, stream in self._gpus[index].streams.items():
                    if self._admission is not None and not self._admission.still_admits(
                        index, pid, stream.uid, stream.gid
                    ):
                        continue
                    inside = [m for m in stream.markers if start_s <= m[0] <= end_s]
                    if inside and len(inside) > len(found.get(pid, ())):
                        found[pid] = inside
        out = []
        for pid, inside in sorted(found.items(), key=lambda item: (-len(item[1]), item[0])):
            values = np.array(inside, dtype=np.float64)
            out.append((pid, values[:, 0].copy(), values[:, 1].astype(np.int64)))
        return out

    def markers_between(self, indices: Sequence[int], start_s: float, end_s: float) -> tuple[FloatArray, IntArray]:
        """The markers in [start_s, end_s] of the sender with the most of them on these GPUs."""
        found = self.candidates(indices, start_s, end_s)
        return (found[0][1], found[0][2]) if found else no_markers()

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
                "rejected": dict(self.rejected),
                "last_marker_age_s": round(self._clock() - last, 3) if math.isfinite(last) else None,
            }


class GPUMarkerSource:
    """A MarkerSource (sampling layer) over one worker's GPUs."""

    def __init__(self, board: MarkerBoard, indices: list[int]) -> None:
        self._board = board
        self._indices = indices

    def markers_between(self, start_s: float, end_s: float) -> tuple[FloatArray, IntArray]:
        return self._board.markers_between(self._indices, start_s, end_s)

    def candidates(self, start_s: float, end_s: float) -> list[tuple[int, FloatArray, IntArray]]:
        return self._board.candidates(self._indices, start_s, end_s)


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
            creds = None
            for level, kind, blob in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS and len(blob) >= _CREDS.size:
                    creds = _CREDS.unpack(blob[: _CREDS.size])
            if creds is None:
                self.board._reject("no_credentials")
                continue
            pid, uid, gid = creds
            if self.board.offer(data, pid, uid, gid) is None:
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
