"""Where a gpoeo-rt daemon keeps its sockets (run dir) and its state, and where a client looks for it.

Standard library only: the step-marker client (run by unprivileged training jobs) and the daemon share these rules.

Defaults of `gpoeo-rt start`:
- root: run dir `/run/gpoeo-rt`, state dir `/var/lib/gpoeo-rt` (the host's daemon; the systemd unit's folders);
- anyone else: run dir `$XDG_RUNTIME_DIR/gpoeo-rt` (else `<tmp>/gpoeo-rt-<uid>`, which the daemon refuses unless
  it owns it and nobody else can write to it), state dir `$XDG_STATE_HOME/gpoeo-rt` (else
  `~/.local/state/gpoeo-rt`).

Where a client (`mark_step()`, `gpoeo-rt status`/`stop`/`set`) looks, first match wins:
1. an explicit run dir (the `run_dir=` argument, `--run-dir`, a config file's `run_dir`);
2. `$GPOEO_RT_RUN_DIR`;
3. the caller's own default run dir (above), when a daemon answers there: a user who started a daemon of their own;
4. the host's `/run/gpoeo-rt`: the root daemon, the usual case for a training job on a shared host.
With 1 or 2 only that folder is used; 3 and 4 are tried in order at every (re)connect, so a stale socket left by
a killed daemon is passed over and a daemon started after the job is found. The caller's own folder counts only
when it is the caller's (`owned_by_caller`): in a shared /tmp another user could have made it first.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Mapping

SYSTEM_RUN_DIR = "/run/gpoeo-rt"
SYSTEM_STATE_DIR = "/var/lib/gpoeo-rt"
RUN_DIR_ENV = "GPOEO_RT_RUN_DIR"  # the daemon's own setting (see gpoeo_rt.daemon.config)


def _env(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if environ is None else environ


def _euid(euid: int | None) -> int:
    return os.geteuid() if euid is None else euid


def default_run_dir(*, euid: int | None = None, environ: Mapping[str, str] | None = None) -> str:
    """The run dir `gpoeo-rt start` uses when none is set (see the module docstring)."""
    uid = _euid(euid)
    if uid == 0:
        return SYSTEM_RUN_DIR
    runtime = _env(environ).get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(runtime):
        return os.path.join(runtime, "gpoeo-rt")
    return os.path.join(tempfile.gettempdir(), f"gpoeo-rt-{uid}")


def default_state_dir(*, euid: int | None = None, environ: Mapping[str, str] | None = None) -> str:
    """The state dir `gpoeo-rt start` and `reset` use when none is set (see the module docstring)."""
    if _euid(euid) == 0:
        return SYSTEM_STATE_DIR
    env = _env(environ)
    state = env.get("XDG_STATE_HOME", "")
    if os.path.isabs(state):
        return os.path.join(state, "gpoeo-rt")
    home = env.get("HOME") or os.path.expanduser("~")
    return os.path.join(home, ".local", "state", "gpoeo-rt")


def client_run_dirs(
    explicit: str | os.PathLike[str] | None = None,
    *,
    euid: int | None = None,
    environ: Mapping[str, str] | None = None,
) -> list[str]:
    """The run dirs a client tries, in order (see the module docstring); never empty, no duplicates."""
    if explicit is not None:
        return [os.fspath(explicit)]
    from_env = _env(environ).get(RUN_DIR_ENV)
    if from_env:
        return [from_env]
    own = default_run_dir(euid=euid, environ=environ)
    return [own] if own == SYSTEM_RUN_DIR else [own, SYSTEM_RUN_DIR]


def owned_by_caller(directory: str, *, euid: int | None = None) -> bool:
    """A real directory of the caller's that nobody else can write to."""
    try:
        info = os.lstat(directory)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == _euid(euid) and not info.st_mode & 0o022


def usable_run_dir(directory: str, candidates: list[str], *, euid: int | None = None) -> bool:
    """Whether a client may use `directory`, one of `candidates` (client_run_dirs): an explicit folder or the
    host's always; the caller's own default folder only when it is the caller's (owned_by_caller)."""
    if len(candidates) == 1 or directory == SYSTEM_RUN_DIR:
        return True
    return owned_by_caller(directory, euid=euid)
