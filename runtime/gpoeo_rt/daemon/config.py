"""The daemon's settings: defaults, overridden by a TOML file, then by GPOEO_RT_* environment variables, then by
command-line flags. Every setting has the same name in all three (flag `--max-slowdown`, key `max_slowdown`,
variable `GPOEO_RT_MAX_SLOWDOWN`). Unknown keys and bad values are errors that name where they came from."""

from __future__ import annotations

import dataclasses
import math
import os
import tomllib
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from gpoeo_rt.client.paths import default_run_dir, default_state_dir

# The values of gpoeo_rt.search.objectives.Objective and gpoeo_rt.controller.state.Policy (a test keeps them equal):
# not imported, so that `gpoeo-rt status` does not pay for numpy.
OBJECTIVES = ("energy", "edp", "ed2p")
POLICIES = ("hybrid", "prediction", "search")
ENV_PREFIX = "GPOEO_RT_"


class ConfigError(ValueError):
    """A setting that cannot be used, with where it came from."""


@dataclass(frozen=True)
class DaemonConfig:
    gpus: str = "all"  # "all" or NVML indices "0,2"
    group: str | None = None  # "0,1,2,3": one lockstep decision for these GPUs (one data-parallel job)
    objective: str = "energy"
    max_slowdown: float = 0.05
    policy: str = "hybrid"
    advise: bool = False  # decide and log, never set clocks
    simulate: str | None = None  # run against a simulated GPU running this workload (preset, schedule, sweep)
    sim_seconds: float = 1800.0  # with simulate: stop after this much simulated job time
    sim_speed: float | None = None  # with simulate: simulated seconds per real second (None: as fast as possible)
    sim_gpus: int = 1  # with simulate: how many simulated GPUs
    sim_markers: bool = False  # with simulate: the simulated job sends step markers (as gpoeo_rt.client would)
    bundles: str | None = None  # model bundle directory (default: $GPOEO_BUNDLES, the shipped models/)
    # Sockets; clock state files (survive the process) and decision logs. Defaults: /run/gpoeo-rt and
    # /var/lib/gpoeo-rt as root, else per user ($XDG_RUNTIME_DIR/gpoeo-rt, ~/.local/state/gpoeo-rt): client/paths.py
    run_dir: str = field(default_factory=default_run_dir)
    state_dir: str = field(default_factory=default_state_dir)
    lock_dir: str | None = None  # host-wide per-GPU locks (default: /run/gpoeo-rt-locks as root; see safety.py)
    socket_group: str | None = None  # group allowed to control the daemon (default: root only)
    marker_users: str | None = None  # users (names or uids, "a,b") whose step markers count for any managed GPU
    marker_group: str | None = None  # group whose step markers count for any managed GPU (besides jobs on it)
    restart_backoff_s: float = 30.0  # after a controller error (clocks reset), wait this long, then start afresh
    max_restarts: int = 5  # consecutive failed restarts of one GPU's controller before giving it up
    log_max_mb: float = 16.0  # a decision log is rotated at this size (MiB)
    log_keep: int = 3  # rotated decision logs kept per GPU (the oldest is deleted)
    nvml_timeout_s: float = 10.0  # an NVML call that takes longer counts as hung (the GPU is reported stuck)
    prometheus_port: int | None = None  # serve Prometheus metrics on this port (needs prometheus-client)
    prometheus_addr: str = "127.0.0.1"  # loopback unless asked otherwise

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ConfigError(f"{f.name} {value}: must be a finite number")
        if self.objective not in OBJECTIVES:
            raise ConfigError(f"objective {self.objective!r}: expected one of {', '.join(OBJECTIVES)}")
        if self.policy not in POLICIES:
            raise ConfigError(f"policy {self.policy!r}: expected one of {', '.join(POLICIES)}")
        if not 0.0 <= self.max_slowdown < 1.0:
            raise ConfigError(f"max_slowdown {self.max_slowdown}: expected a fraction in [0, 1), e.g. 0.05 for 5%")
        if self.sim_seconds <= 0:
            raise ConfigError(f"sim_seconds {self.sim_seconds}: must be > 0")
        if self.sim_speed is not None and self.sim_speed <= 0:
            raise ConfigError(f"sim_speed {self.sim_speed}: must be > 0")
        if self.sim_gpus < 1:
            raise ConfigError(f"sim_gpus {self.sim_gpus}: must be >= 1")
        if self.log_max_mb <= 0 or self.log_keep < 0:
            raise ConfigError("log_max_mb must be > 0 and log_keep >= 0")
        if self.nvml_timeout_s <= 0:
            raise ConfigError(f"nvml_timeout_s {self.nvml_timeout_s}: must be > 0")
        if self.restart_backoff_s < 0 or self.max_restarts < 0:
            raise ConfigError("restart_backoff_s and max_restarts must be >= 0")
        if self.prometheus_port is not None and not 0 <= self.prometheus_port <= 65535:
            raise ConfigError(f"prometheus_port {self.prometheus_port}: expected a TCP port (0-65535)")
        parse_gpu_list(self.gpus, "gpus", allow_all=True)
        if self.group is not None:
            group = parse_gpu_list(self.group, "group", allow_all=False)
            if group is not None and len(group) < 2:
                raise ConfigError(f"group {self.group!r}: a lockstep group needs at least two GPUs")

    def resolved_lock_dir(self) -> Path:
        """Where the per-GPU locks are: lock_dir, else the host-wide default (safety.default_lock_dir)."""
        from gpoeo_rt.daemon.safety import default_lock_dir

        if self.lock_dir is not None:
            return Path(self.lock_dir)
        return default_lock_dir(simulated_state_dir=self.state_dir if self.simulate is not None else None)

    def gpu_indices(self, available: int) -> list[int]:
        """The NVML indices to manage (the group's when a group is set)."""
        chosen = parse_gpu_list(self.group if self.group is not None else self.gpus, "gpus", allow_all=True)
        indices = list(range(available)) if chosen is None else chosen
        missing = [i for i in indices if not 0 <= i < available]
        if missing:
            raise ConfigError(f"GPU index {missing[0]} does not exist: {available} GPU(s) present")
        return indices


def parse_gpu_list(text: str, what: str, *, allow_all: bool) -> list[int] | None:
    """'all' -> None; '0,2' -> [0, 2]."""
    if allow_all and text.strip() == "all":
        return None
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ConfigError(f"{what} {text!r}: expected 'all' or GPU indices like 0,2") from None
    if not values or any(v < 0 for v in values) or len(set(values)) != len(values):
        raise ConfigError(f"{what} {text!r}: expected distinct non-negative GPU indices like 0,2")
    return values


_FIELDS = {f.name: f for f in fields(DaemonConfig)}


def _convert(name: str, raw: Any, where: str, *, text: bool) -> Any:
    """A value from TOML (typed: `text` False, the type must be the field's) or the environment (text) as the
    field's type."""
    kind = str(_FIELDS[name].type)
    try:
        if kind.startswith("bool"):
            if isinstance(raw, bool):
                return raw
            if text and isinstance(raw, str):
                word = raw.strip().lower()
                if word in ("1", "true", "yes", "on"):
                    return True
                if word in ("0", "false", "no", "off"):
                    return False
            raise ValueError("expected true or false")
        if kind.startswith("float"):
            typed = isinstance(raw, int | float) and not isinstance(raw, bool)
            if not (typed or (text and isinstance(raw, str))):
                raise ValueError("expected a number")
            value = float(raw)
            if not math.isfinite(value):
                raise ValueError("expected a finite number")
            return value
        if kind.startswith("int"):
            if isinstance(raw, int) and not isinstance(raw, bool):
                return raw
            if text and isinstance(raw, str):
                return int(raw)
            raise ValueError("expected an integer")
        if isinstance(raw, str):
            return raw
        raise ValueError("expected a string")
    except ValueError as exc:
        shown = repr(raw) if isinstance(raw, str | int | float | bool) else f"a {type(raw).__name__}"
        raise ConfigError(f"{where}: {name} = {shown[:80]}: {exc}") from None


def load_config(
    file: str | Path | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    only: Collection[str] | None = None,
) -> DaemonConfig:
    """Defaults < TOML file < environment < overrides (command-line flags; None values are ignored).

    `only`: the settings this command uses (status, stop, set and reset); the file's and the environment's other
    keys are then not read at all, so a typo meant for `start`, or a stray GPOEO_RT_* variable, never keeps a
    status query or a reset from running."""
    values, sources = _gather(file, environ, overrides, only)
    try:
        return DaemonConfig(**values)
    except TypeError as exc:
        raise ConfigError(str(exc)) from None
    except ConfigError as exc:  # a value of the right type but out of range: say where it came from
        where = next((sources[n] for n in sorted(sources, key=len, reverse=True) if str(exc).startswith(n)), None)
        if where is None:
            raise
        raise ConfigError(f"{where}: {exc}") from None


def client_run_dirs(
    file: str | Path | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> list[str]:
    """The run dirs `status`, `stop` and `set` try, in order: the run_dir the file, the environment or a flag sets,
    else the client lookup of gpoeo_rt.client.paths (the caller's own daemon, then the host's)."""
    values, _ = _gather(file, environ, overrides, ("run_dir",))
    from gpoeo_rt.client.paths import client_run_dirs as lookup
    from gpoeo_rt.client.paths import usable_run_dir

    dirs = lookup(values.get("run_dir"), environ=environ)
    return [d for d in dirs if usable_run_dir(d, dirs)]


def _gather(
    file: str | Path | None,
    environ: Mapping[str, str] | None,
    overrides: Mapping[str, Any] | None,
    only: Collection[str] | None,
) -> tuple[dict[str, Any], dict[str, str]]:
    """The settings given by the file, the environment and the overrides, and where each came from."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}  # setting -> where its value came from, for errors found on the whole config
    wanted = set(_FIELDS) if only is None else set(only)
    if file is not None:
        path = Path(file)
        try:
            data = tomllib.loads(path.read_bytes().decode("utf-8"))
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read the config file: {exc.strerror}") from None
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start}): a TOML file must be UTF-8") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from None
        section = data.get("gpoeo-rt", data)  # a [gpoeo-rt] table, or keys at the top level
        if not isinstance(section, dict):
            raise ConfigError(f"{path}: [gpoeo-rt] must be a table")
        for key, raw in section.items():
            name = key.replace("-", "_")
            if only is None and name not in _FIELDS:
                raise ConfigError(f"{path}: unknown setting {key!r} (known: {', '.join(sorted(_FIELDS))})")
            if name in wanted:
                values[name] = _convert(name, raw, str(path), text=False)
                sources[name] = str(path)
    env = os.environ if environ is None else environ
    for key, raw in env.items():
        if not key.startswith(ENV_PREFIX):
            continue
        name = key[len(ENV_PREFIX) :].lower()
        if only is None and name not in _FIELDS:
            raise ConfigError(f"environment variable {key}: unknown setting (known: {', '.join(sorted(_FIELDS))})")
        if name in wanted:
            values[name] = _convert(name, raw, f"environment variable {key}", text=True)
            sources[name] = f"environment variable {key}"
    for name, raw in (overrides or {}).items():
        if raw is None:
            continue
        if name not in _FIELDS:
            raise ConfigError(f"unknown setting {name!r}")
        values[name] = raw
        sources[name] = "command line"
    return values, sources


def config_summary(config: DaemonConfig) -> dict[str, Any]:
    return dataclasses.asdict(config)
