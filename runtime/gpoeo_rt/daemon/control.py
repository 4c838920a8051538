"""The daemon's local control channel: two Unix stream sockets speaking one JSON object per line (no pickle).

- `<run_dir>/status.sock` (mode 0666): read-only requests (`status`) from anyone on the host.
- `<run_dir>/control.sock` (mode 0660, group = the configured socket_group): requests that change the daemon
  (`stop`, `set`). Besides the file mode, every control request is checked against the peer's credentials
  (SO_PEERCRED): root, the daemon's own user, or a member of socket_group. No TCP listener is ever opened here.
"""

from __future__ import annotations

import contextlib
import grp
import json
import os
import pwd
import socket
import socketserver
import struct
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

STATUS_SOCKET = "status.sock"
CONTROL_SOCKET = "control.sock"
MAX_REQUEST_BYTES = 64 * 1024
READ_ONLY_COMMANDS = frozenset({"status"})
CONTROL_COMMANDS = frozenset({"stop", "set"})

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


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, path: Path, handler: Handler, *, control: bool, control_gid: int | None) -> None:
        self.handler = handler
        self.control = control
        self.control_gid = control_gid
        self.owner_uid = os.geteuid()
        super().__init__(str(path), _RequestHandler)


class _RequestHandler(socketserver.StreamRequestHandler):
    timeout = 5.0

    def handle(self) -> None:
        server = self.server
        assert isinstance(server, _Server)
        line = self.rfile.readline(MAX_REQUEST_BYTES + 1)
        try:
            if len(line) > MAX_REQUEST_BYTES:
                raise ValueError("request too long")
            request = json.loads(line)
            if not isinstance(request, dict) or not isinstance(request.get("cmd"), str):
                raise ValueError('expected a JSON object with a "cmd" string')
        except ValueError as exc:
            self._reply({"ok": False, "error": f"bad request: {exc}"})
            return
        cmd = request["cmd"]
        if cmd in CONTROL_COMMANDS:
            if not server.control:
                self._reply({"ok": False, "error": f"{cmd!r} is only accepted on {CONTROL_SOCKET}"})
                return
            pid, uid, gid = peer_credentials(self.request)
            if not may_control(pid, uid, gid, owner_uid=server.owner_uid, control_gid=server.control_gid):
                self._reply({"ok": False, "error": f"permission denied: uid {uid} may not control gpoeo-rt"})
                return
        elif cmd not in READ_ONLY_COMMANDS:
            self._reply({"ok": False, "error": f"unknown command {cmd!r}"})
            return
        try:
            reply = server.handler(request)
        except Exception as exc:  # a handler bug must not kill the channel
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        self._reply(reply)

    def _reply(self, payload: dict[str, Any]) -> None:
        with contextlib.suppress(OSError):
            self.wfile.write(json.dumps(payload, allow_nan=False, default=str).encode() + b"\n")


class ControlServer:
    """Serves both sockets on background threads until close()."""

    def __init__(self, run_dir: str | Path, handler: Handler, *, socket_group: str | None = None) -> None:
        self.run_dir = Path(run_dir)
        self._handler = handler
        self._gid = resolve_group(socket_group)
        self._servers: list[_Server] = []
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        for name, control, mode in ((STATUS_SOCKET, False, 0o666), (CONTROL_SOCKET, True, 0o660)):
            path = self.run_dir / name
            with contextlib.suppress(FileNotFoundError):
                path.unlink()  # a socket left by a killed daemon (the GPU locks already prove we are alone)
            # Create it with no access for anyone, then open it up: no window where control is wider than 0660.
            old_umask = os.umask(0o777)
            try:
                server = _Server(path, self._handler, control=control, control_gid=self._gid)
            finally:
                os.umask(old_umask)
            if control and self._gid is not None:
                os.chown(path, -1, self._gid)
            os.chmod(path, mode)
            self._servers.append(server)
        # Serve only once both sockets exist: a client that got a status answer can rely on control.sock too.
        for server in self._servers:
            thread = threading.Thread(
                target=server.serve_forever, name=f"gpoeo-rt {server.server_address}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def close(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(server.server_address)  # type: ignore[arg-type]
        self._servers.clear()


def request(run_dir: str | Path, payload: dict[str, Any], *, timeout_s: float = 2.0) -> dict[str, Any]:
    """Send one request to a running daemon and return its reply (ControlError when there is none)."""
    cmd = payload.get("cmd")
    path = Path(run_dir) / (CONTROL_SOCKET if cmd in CONTROL_COMMANDS else STATUS_SOCKET)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout_s)
    try:
        try:
            sock.connect(str(path))
        except FileNotFoundError:
            raise ControlError(f"no gpoeo-rt daemon is running here ({path} does not exist)") from None
        except ConnectionRefusedError:
            raise ControlError(f"no gpoeo-rt daemon answers on {path} (stale socket)") from None
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
