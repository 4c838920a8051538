"""Where the daemon keeps its sockets and state (root vs a user), and where clients look for it: the step-marker
client of an unprivileged job must still reach the host's root daemon, and `status` the same one."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpoeo_rt.cli import app
from gpoeo_rt.client import paths
from gpoeo_rt.client.markers import MarkerClient
from gpoeo_rt.daemon.config import DaemonConfig, client_run_dirs, load_config
from gpoeo_rt.daemon.control import ControlServer

runner = CliRunner()


def test_root_keeps_the_system_folders() -> None:
    env = {"XDG_RUNTIME_DIR": "/run/user/0", "HOME": "/root"}
    assert paths.default_run_dir(euid=0, environ=env) == "/run/gpoeo-rt"
    assert paths.default_state_dir(euid=0, environ=env) == "/var/lib/gpoeo-rt"


def test_a_user_gets_xdg_folders() -> None:
    env = {"XDG_RUNTIME_DIR": "/run/user/1000", "HOME": "/home/ann"}
    assert paths.default_run_dir(euid=1000, environ=env) == "/run/user/1000/gpoeo-rt"
    assert paths.default_state_dir(euid=1000, environ=env) == "/home/ann/.local/state/gpoeo-rt"
    env["XDG_STATE_HOME"] = "/data/ann/state"
    assert paths.default_state_dir(euid=1000, environ=env) == "/data/ann/state/gpoeo-rt"


def test_a_user_without_xdg_runtime_dir_gets_a_private_tmp_folder() -> None:
    env = {"HOME": "/home/ann", "XDG_RUNTIME_DIR": "relative/ignored"}  # XDG: a relative path is invalid
    run_dir = paths.default_run_dir(euid=1000, environ=env)
    assert run_dir.endswith("/gpoeo-rt-1000") and not run_dir.startswith("/run/")


def test_client_lookup_order() -> None:
    user = {"XDG_RUNTIME_DIR": "/run/user/1000"}
    # the caller's own daemon first (only when it answers), then the host's root daemon
    assert paths.client_run_dirs(euid=1000, environ=user) == ["/run/user/1000/gpoeo-rt", "/run/gpoeo-rt"]
    assert paths.client_run_dirs(euid=0, environ=user) == ["/run/gpoeo-rt"]
    # the environment, then an explicit folder, each alone
    with_env = {**user, "GPOEO_RT_RUN_DIR": "/srv/g"}
    assert paths.client_run_dirs(euid=1000, environ=with_env) == ["/srv/g"]
    assert paths.client_run_dirs("/x", euid=1000, environ=with_env) == ["/x"]


# A user's uid: the real one, or 1000 when the tests run as root (the user's folders are then chowned to it).
AS_ROOT = os.geteuid() == 0
USER = os.geteuid() or 1000


def _own(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o755)  # whatever the umask
    if AS_ROOT:
        os.chown(folder, USER, -1)
    return folder


def test_daemon_config_defaults_follow_the_user(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(paths.os, "geteuid", lambda: USER)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.delenv("GPOEO_RT_RUN_DIR", raising=False)
    cfg = DaemonConfig()
    assert cfg.run_dir == str(tmp_path / "xdg" / "gpoeo-rt")
    assert cfg.state_dir == str(tmp_path / "home" / ".local" / "state" / "gpoeo-rt")
    assert load_config(overrides={"run_dir": "/elsewhere"}).run_dir == "/elsewhere"
    assert client_run_dirs(overrides={"run_dir": "/elsewhere"}) == ["/elsewhere"]
    assert client_run_dirs() == ["/run/gpoeo-rt"]  # the user's folder does not exist: not tried
    _own(tmp_path / "xdg" / "gpoeo-rt")
    assert client_run_dirs() == [str(tmp_path / "xdg" / "gpoeo-rt"), "/run/gpoeo-rt"]


# --- the lookup on live sockets: a user's job beside the host's daemon ----------------------------------------


@pytest.fixture
def host(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Path]:
    """A non-root caller whose own run dir is tmp/xdg/gpoeo-rt; the host's daemon lives in tmp/system."""
    system = tmp_path / "system"
    system.mkdir()
    monkeypatch.setattr(paths, "SYSTEM_RUN_DIR", str(system))
    monkeypatch.setattr(paths.os, "geteuid", lambda: USER)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "xdg"))
    monkeypatch.delenv("GPOEO_RT_RUN_DIR", raising=False)
    return {"system": system, "own": _own(tmp_path / "xdg" / "gpoeo-rt")}


def _listen(folder: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(folder / "markers.sock"))
    sock.setblocking(False)
    return sock


def _stale(folder: Path) -> None:
    """A socket file nobody listens on (left by a killed daemon)."""
    _listen(folder).close()


def _got(sock: socket.socket) -> bool:
    try:
        return sock.recv(256).startswith(b"gpoeo-mark1 ")
    except BlockingIOError:
        return False


def test_a_users_job_reaches_the_root_daemon(host: dict[str, Path]) -> None:
    system = _listen(host["system"])
    client = MarkerClient(gpu=0, min_interval_s=0.0)
    client.mark()
    assert _got(system) and client.path == str(host["system"] / "markers.sock")


def test_a_stale_socket_of_the_users_own_is_passed_over(host: dict[str, Path]) -> None:
    _stale(host["own"])
    system = _listen(host["system"])
    client = MarkerClient(gpu=0, min_interval_s=0.0)
    client.mark()
    assert _got(system)


def test_the_users_own_daemon_wins_when_it_answers(host: dict[str, Path]) -> None:
    own, system = _listen(host["own"]), _listen(host["system"])
    client = MarkerClient(gpu=0, min_interval_s=0.0)
    client.mark()
    assert _got(own) and not _got(system)


def test_a_folder_someone_else_made_in_the_users_place_is_not_used(
    host: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without $XDG_RUNTIME_DIR the user's folder is in the shared /tmp: another user could make it first."""
    planted, system = _listen(host["own"]), _listen(host["system"])
    monkeypatch.setattr(paths.os, "geteuid", lambda: USER + 1)  # the folder is not this caller's
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(host["own"].parent))
    client = MarkerClient(gpu=0, min_interval_s=0.0)
    client.mark()
    assert _got(system) and not _got(planted)
    host["own"].chmod(0o777)  # nor one that others can write to, even if the caller's
    monkeypatch.setattr(paths.os, "geteuid", lambda: USER)
    client = MarkerClient(gpu=0, min_interval_s=0.0)
    client.mark()
    assert _got(system) and not _got(planted)


def test_the_environment_pins_the_folder(host: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    system = _listen(host["system"])
    monkeypatch.setenv("GPOEO_RT_RUN_DIR", str(host["own"]))  # nothing listens there
    client = MarkerClient(gpu=0, min_interval_s=0.0)
    client.mark()
    assert client.sent == 0 and not _got(system)


def test_a_daemon_started_after_the_job_is_found(host: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    from gpoeo_rt.client import markers

    now = [0.0]
    monkeypatch.setattr(markers.time, "monotonic", lambda: now[0])
    client = MarkerClient(gpu=0, min_interval_s=0.0)
    client.mark()
    assert client.sent == 0
    system = _listen(host["system"])
    now[0] += markers.RETRY_S
    client.mark()
    assert client.sent == 1 and _got(system)


@pytest.fixture
def status_server(host: dict[str, Path]) -> Iterator[ControlServer]:
    def handle(request: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, "status": {"pid": 1, "advise": True, "gpus": []}}

    server = ControlServer(host["system"], handle)
    server.start()
    yield server
    server.close()


def test_status_of_a_user_finds_the_root_daemon(host: dict[str, Path], status_server: ControlServer) -> None:
    _stale_status = host["own"] / "status.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(_stale_status))
    sock.close()
    result = runner.invoke(app, ["status", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["pid"] == 1


def test_status_without_any_daemon_names_every_place_tried(host: dict[str, Path]) -> None:
    result = runner.invoke(app, ["status"])
    assert result.exit_code == 1
    assert f"no gpoeo-rt daemon answers in {host['own']} or {host['system']}" in result.output
