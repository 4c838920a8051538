"""The daemon's local control channel: two Unix stream sockets speaking one JSON object per line (no pickle).

- `<run_dir>/status.sock` (mode 0666): read-only requests (`status`) from anyone on the host.
- `<run_dir>/control.sock` (mode 0660, group = the configured socket_group): requests that change the daemon
  (`stop`, `set`). Besides the file mode, every control request is checked against the peer's credentials
  (SO_PEERCRED): root, the daemon's own user, or a member of socket_group. No TCP listener is ever opened here.
- Anyone may connect to status.sock, so the server is bounded (see ControlServer): one thread, a cap on clients in
  all and per uid, a size and nesting limit per request, strict field types, and an idle timeout.
"""

from __future__ import annotations

import contextlib
import grp
import json
import logging
import math
import os
import pwd
import selectors
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STATUS_SOCKET = "status.sock"
CONTROL_SOCKET = "control.sock"
MAX_REQUEST_BYTES = 4096  # the longest real request is under 100 bytes
_LISTEN_BACKLOG = 1024  # a burst of connections queues rather than failing (the kernel caps it at somaxconn)
MAX_DEPTH = 2
READ_ONLY_COMMANDS = frozenset({"status"})
CONTROL_COMMANDS = frozenset({"stop", "set"})
# Every field each command accepts, with its type ("number": int or float, never a bool).
REQUEST_FIELDS: dict[str, dict[str, str]] = {
    "status": {},
    "stop": {},
    "set": {"objective": "string", "max_slowdown": "number"},
}
_log = logging.getLogger(__name__)

Handler = Callable[[dict[str, Any]], dict[str, Any]]


class ControlError(RuntimeError):
    """The daemon could not be reached, or refused the request."""


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end of a Unix socket."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    return pid, uid, gid


def _supplementary_groups(pid: int) -> set[int]:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Groups:"):
                return {int(g) for g in line.split()[1:]}
    except OSError:
        pass
    return set()


def resolve_group(name: str | None, what: str = "socket_group") -> int | None:
    """A group name or numeric gid -> gid (None: no group)."""
    if name is None:
        return None
    if name.isdigit():
        return int(name)
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        raise ValueError(f"{what} {name!r}: no such group on this host") from None


def resolve_users(text: str | None) -> set[int]:
    """'alice,1001' -> their uids (marker_users)."""
    uids: set[int] = set()
    for name in (text or "").split(","):
        name = name.strip()
        if not name:
            continue
        if name.isdigit():
            uids.add(int(name))
            continue
        try:
            uids.add(pwd.getpwnam(name).pw_uid)
        except KeyError:
            raise ValueError(f"marker_users: {name!r}: no such user on this host") from None
    return uids


def may_control(pid: int, uid: int, gid: int, *, owner_uid: int, control_gid: int | None) -> bool:
    if uid in (0, owner_uid):
        return True
    if control_gid is None:
        return False
    return gid == control_gid or control_gid in _supplementary_groups(pid)


@dataclass
class _Client:
    sock: socket.socket
    pid: int
    uid: int
    gid: int
    control: bool  # connected to control.sock
    deadline_s: float
    buffer: bytearray = field(default_factory=bytearray)


def nesting_depth(data: bytes) -> int:
    """How deeply JSON arrays/objects nest in `data` (strings skipped): checked before parsing, so a deep request
    is refused with a reply instead of exhausting the parser's recursion."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in data:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):
            depth += 1
            deepest = max(deepest, depth)
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return deepest


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def validate_request(request: object) -> dict[str, Any]:
    """The request as a dict of known fields with the right types, or ValueError naming the field."""
    if not isinstance(request, dict) or not isinstance(request.get("cmd"), str):
        raise ValueError('expected a JSON object with a "cmd" string')
    cmd = request["cmd"]
    fields_ = REQUEST_FIELDS.get(cmd)
    if fields_ is None:
        raise ValueError(f"unknown command {cmd[:40]!r}")
    for key, value in request.items():
        if key == "cmd":
            continue
        kind = fields_.get(key)
        if kind is None:
            raise ValueError(f"{cmd}: unknown field {str(key)[:40]!r}")
        if kind == "number" and not _is_number(value):
            raise ValueError(f"{cmd}: {key} must be a number (not {type(value).__name__})")
        if kind == "string" and not isinstance(value, str):
            raise ValueError(f"{cmd}: {key} must be a string (not {type(value).__name__})")
    return request


class ControlServer:
    """Serves both sockets from one thread (a selector loop) until close().

    Bounded whatever clients do: at most `max_clients` open connections and `max_clients_per_uid` per user (the
    ones beyond get a one-line "busy" reply and are closed at once), a request is one line of at most
    MAX_REQUEST_BYTES nested at most MAX_DEPTH deep, and a client that has not sent its line within `idle_timeout_s`
    is closed. One request per connection."""

    def __init__(
        self,
        run_dir: str | Path,
        handler: Handler,
        *,
        socket_group: str | None = None,
        max_clients: int = 64,
        max_clients_per_uid: int = 8,
        idle_timeout_s: float = 5.0,
    ) -> None:
        self.run_dir = Path(run_dir)
        self._handler = handler
        self._gid = resolve_group(socket_group)
        self._owner_uid = os.geteuid()
        self._max_clients = max_clients
        self._max_per_uid = max_clients_per_uid
        self._idle_timeout_s = idle_timeout_s
        self._listeners: dict[int, tuple[socket.socket, bool, Path]] = {}
        self._clients: dict[int, _Client] = {}
        self._per_uid: dict[int, int] = {}
        self._selector = selectors.DefaultSelector()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.refused = 0  # connections closed at once: over a cap
        self.timed_out = 0  # connections closed for idling

    def start(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        for name, control, mode in ((STATUS_SOCKET, False, 0o666), (CONTROL_SOCKET, True, 0o660)):
            path = self.run_dir / name
            with contextlib.suppress(FileNotFoundError):
                path.unlink()  # a socket left by a killed daemon (the GPU locks already prove we are alone)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            # Create it with no access for anyone, then open it up: no window where control is wider than 0660.
            old_umask = os.umask(0o777)
            try:
                sock.bind(str(path))
            finally:
                os.umask(old_umask)
            if control and self._gid is not None:
                os.chown(path, -1, self._gid)
            os.chmod(path, mode)
            sock.listen(_LISTEN_BACKLOG)
            sock.setblocking(False)
            self._listeners[sock.fileno()] = (sock, control, path)
            self._selector.register(sock, selectors.EVENT_READ)
        # Serve only once both sockets exist: a client that got a status answer can rely on control.sock too.
        self._thread = threading.Thread(target=self._serve, name="gpoeo-rt control", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            for key, _ in self._selector.select(timeout=0.25):
                fd = key.fd
                try:
                    if fd in self._listeners:
                        self._accept(fd)
                    elif fd in self._clients:
                        self._read(self._clients[fd])
                except Exception as exc:  # never let one client end the channel
                    _log.warning("control channel: %s: %s", type(exc).__name__, exc)
                    if fd in self._clients:
                        self._drop(self._clients[fd])
            now = time.monotonic()
            for client in [c for c in self._clients.values() if c.deadline_s < now]:
                self.timed_out += 1
                self._reply(client, {"ok": False, "error": "timed out waiting for a request line"})
                self._drop(client)

    def _accept(self, fd: int) -> None:
        listener, control, _ = self._listeners[fd]
        for _ in range(256):  # a burst: take what is queued, then serve the others
            try:
                sock, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # EMFILE and the like: the ones queued wait
                _log.warning("control channel: cannot accept: %s", exc)
                return
            pid, uid, gid = peer_credentials(sock)
            if len(self._clients) >= self._max_clients or self._per_uid.get(uid, 0) >= self._max_per_uid:
                self.refused += 1
                with contextlib.suppress(OSError):
                    sock.setblocking(False)
                    sock.send(b'{"ok": false, "error": "busy: too many open connections; try again"}\n')
                sock.close()
                continue
            sock.setblocking(False)
            client = _Client(sock, pid, uid, gid, control, time.monotonic() + self._idle_timeout_s)
            self._clients[sock.fileno()] = client
            self._per_uid[uid] = self._per_uid.get(uid, 0) + 1
            self._selector.register(sock, selectors.EVENT_READ)

    def _drop(self, client: _Client) -> None:
        fd = client.sock.fileno()
        if self._clients.pop(fd, None) is None:
            return
        left = self._per_uid.get(client.uid, 1) - 1
        if left > 0:
            self._per_uid[client.uid] = left
        else:
            self._per_uid.pop(client.uid, None)
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(client.sock)
        client.sock.close()

    def _read(self, client: _Client) -> None:
        try:
            data = client.sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(client)
            return
        if not data:
            self._drop(client)
            return
        client.buffer += data
        end = client.buffer.find(b"\n")
        if end < 0 and len(client.buffer) <= MAX_REQUEST_BYTES:
            return  # wait for the rest of the line (until the idle deadline)
        line = bytes(client.buffer if end < 0 else client.buffer[:end])
        self._reply(client, self._answer(client, line))
        self._drop(client)

    def _answer(self, client: _Client, line: bytes) -> dict[str, Any]:
        try:
            if len(line) > MAX_REQUEST_BYTES:
                raise ValueError(f"request longer than {MAX_REQUEST_BYTES} bytes")
            if nesting_depth(line) > MAX_DEPTH:
                raise ValueError(f"request nested deeper than {MAX_DEPTH}")
            request = validate_request(json.loads(line))
        except (ValueError, UnicodeDecodeError) as exc:
            return {"ok": False, "error": f"bad request: {exc}"}
        cmd = request["cmd"]
        if cmd in CONTROL_COMMANDS:
            if not client.control:
                return {"ok": False, "error": f"{cmd!r} is only accepted on {CONTROL_SOCKET}"}
            if not may_control(client.pid, client.uid, client.gid, owner_uid=self._owner_uid, control_gid=self._gid):
                return {"ok": False, "error": f"permission denied: uid {client.uid} may not control gpoeo-rt"}
        try:
            return self._handler(request)
        except Exception as exc:  # a handler bug must not kill the channel
            return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}

    @staticmethod
    def _reply(client: _Client, payload: dict[str, Any]) -> None:
        data = json.dumps(payload, allow_nan=False, default=str).encode() + b"\n"
        with contextlib.suppress(OSError):
            client.sock.setblocking(True)
            client.sock.settimeout(1.0)  # a client that does not read its reply costs at most this
            client.sock.sendall(data)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        for client in list(self._clients.values()):
            self._drop(client)
        for sock, _, path in self._listeners.values():
            sock.close()
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        self._listeners.clear()
        self._selector.close()


class NoDaemonError(ControlError):
    """Nothing listens on the socket (none there, or a stale one): a client may try the next run dir."""


def _connect_while_queue_full(sock: socket.socket, path: Path, deadline_s: float) -> None:
    """Connect, retrying while the listen queue is full (EAGAIN): another user may be flooding it, and the daemon
    drains it within milliseconds. TimeoutError at the deadline."""
    while True:
        try:
            sock.connect(str(path))
            return
        except BlockingIOError:
            if time.monotonic() >= deadline_s:
                raise TimeoutError(f"{path}: listen queue full") from None
            time.sleep(0.01)


def request(run_dir: str | Path, payload: dict[str, Any], *, timeout_s: float = 2.0) -> dict[str, Any]:
    """Send one request to a running daemon and return its reply (ControlError when there is none)."""
    cmd = payload.get("cmd")
    path = Path(run_dir) / (CONTROL_SOCKET if cmd in CONTROL_COMMANDS else STATUS_SOCKET)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout_s)
    try:
        try:
            _connect_while_queue_full(sock, path, time.monotonic() + timeout_s)
        except (FileNotFoundError, NotADirectoryError):
            raise NoDaemonError(f"no gpoeo-rt daemon is running here ({path} does not exist)") from None
        except ConnectionRefusedError:
            raise NoDaemonError(f"no gpoeo-rt daemon answers on {path} (stale socket)") from None
        except PermissionError:
            raise ControlError(
                f"permission denied on {path}: controlling gpoeo-rt needs root or its socket_group"
            ) from None
        sock.sendall(json.dumps(payload).encode() + b"\n")
        chunks = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
            if chunk.endswith(b"\n"):
                break
    except TimeoutError:
        raise ControlError(f"the gpoeo-rt daemon did not answer on {path} within {timeout_s:g} s") from None
    finally:
        sock.close()
    try:
        reply = json.loads(b"".join(chunks))
    except ValueError:
        raise ControlError(f"unreadable reply from {path}") from None
    if not isinstance(reply, dict):
        raise ControlError(f"unreadable reply from {path}")
    return reply
