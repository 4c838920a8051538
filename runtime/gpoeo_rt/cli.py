"""The `gpoeo-rt` command line: it parses, calls into the layers below and prints; it holds no logic."""

import os
from typing import Annotated, Any, NoReturn

import typer

from gpoeo_rt import __version__

HELP_OPTIONS = {"help_option_names": ["-h", "--help"]}  # `-h` as well as `--help`, on every command
# rich_markup_mode=None on every Typer: help and usage errors as plain text: rich's boxed help cuts long
# option names and values at 80 columns (`--bandit-round-iter…`); click's plain help wraps, never cuts, and
# reads the same in a pipe.

app = typer.Typer(
    name="gpoeo-rt",
    context_settings=HELP_OPTIONS,
    rich_markup_mode=None,
    no_args_is_help=True,
    add_completion=False,
    help="gpoeo runtime: choose GPU clocks online to cut training energy within a slowdown bound.",
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"gpoeo-rt {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """gpoeo runtime: choose GPU clocks online to cut training energy within a slowdown bound."""


@app.command()
def version() -> None:
    """Print the version."""
    typer.echo(f"gpoeo-rt {__version__}")


trace_app = typer.Typer(
    context_settings=HELP_OPTIONS,
    rich_markup_mode=None,
    no_args_is_help=True,
    help="Record NVML traces (read-only) and detect iteration periods in them.",
)
app.add_typer(trace_app, name="trace")

# --- trace record (sampling layer) ---


@trace_app.command("record")
def trace_record(
    out_dir: Annotated[str, typer.Argument(help="Folder to write nvml_buffered.csv and nvml_polled.csv into.")],
    seconds: Annotated[float, typer.Option("--seconds", min=0.1, help="How long to record (s).")] = 30.0,
    gpu: Annotated[int, typer.Option("--gpu", min=0, help="NVML index of the GPU.")] = 0,
    simulate: Annotated[
        str | None,
        typer.Option(
            "--simulate",
            help="Record from a simulated GPU instead (simulated time, takes seconds): a preset "
            "(resnet50, resnet50_hoststall, gpt, membound, idle), a schedule like 'gpt,membound@30', "
            "or SWEEPS.csv:SKU:WORKLOAD. Also writes the true iterations.csv.",
        ),
    ] = None,
    poll_ms: Annotated[float, typer.Option("--poll-ms", min=1.0, help="Polling period of nvml_polled.csv.")] = 100.0,
    seed: Annotated[int, typer.Option("--seed", help="Random seed of the simulation.")] = 0,
) -> None:
    """Record NVML power, energy, clocks and GPM counters to CSV. Read-only: never changes GPU settings."""
    from gpoeo_rt.device import GPUError, open_gpu
    from gpoeo_rt.sampling import record_trace

    try:
        # open_gpu's default allow_clock_writes=False: recording can never change a clock.
        with open_gpu(gpu, simulate=simulate, seed=seed) as device:
            summary = record_trace(device, out_dir, seconds, poll_period_s=poll_ms / 1000.0)
    except GPUError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    except (ValueError, OSError) as exc:  # a bad --simulate value or an unwritable folder
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    truth = "" if summary.n_iterations is None else f", {summary.n_iterations} true iterations"
    typer.echo(
        f"recorded {summary.duration_s:.1f} s from {summary.device_name}: {summary.n_buffered} buffered power "
        f"samples, {summary.n_polled} polls{truth} -> {summary.out_dir}"
    )


# --- trace detect (detection layer) ---


@trace_app.command("detect")
def trace_detect(
    trace_dir: Annotated[str, typer.Argument(help="Trace folder (nvml_buffered.csv and/or nvml_polled.csv).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the phases as JSON.")] = False,
    plot: Annotated[
        str | None,
        typer.Option("--plot", help="Write a PNG of the power signal with the phases the daemon saw."),
    ] = None,
    bundles: Annotated[str | None, typer.Option("--bundles", help="Model bundle folder (default: installed).")] = None,
    gpu_name: Annotated[
        str, typer.Option("--gpu-name", help="GPU the trace was recorded on (picks the bundle, as the daemon does).")
    ] = "NVIDIA H200",
) -> None:
    """What the daemon would conclude on a recorded trace, phase by phase: the trace is replayed, read-only,
    through the daemon's own controller (advise mode). Period null: none it could trust, and why."""
    import json

    from gpoeo_rt.bench.replay import replay_phases
    from gpoeo_rt.device.errors import GPUError
    from gpoeo_rt.prediction.bundle import BundleError
    from gpoeo_rt.prediction.predictor import Predictor
    from gpoeo_rt.prediction.selection import select_bundle
    from gpoeo_rt.tracefile import TraceError, read_trace

    try:
        trace = read_trace(trace_dir)
        choice = select_bundle(_bundle_root(bundles), gpu_name)
        phases = replay_phases(trace_dir, Predictor(choice.manifest), name=gpu_name)
    except TraceError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    except (BundleError, GPUError, ValueError) as exc:
        typer.echo(f"error: {trace_dir}: {exc}", err=True)
        raise typer.Exit(1) from exc
    notes = list(trace.notes)
    if as_json:
        payload = {
            "trace": str(trace.path),
            "source": trace.power.source,
            "bundle": choice.manifest.name,
            "phases": [ph.to_dict() for ph in phases],
            "notes": notes,
        }
        typer.echo(json.dumps(payload, indent=2))
    else:
        t0 = float(trace.power.t_s.min()) if len(trace.power.t_s) else 0.0
        typer.echo(f"{trace.path} ({trace.power.source} power; replayed through the daemon's controller)")
        for note in notes:
            typer.echo(f"  note: {note}")
        for ph in phases:
            typer.echo(_phase_line(ph, t0))
    if plot is not None:
        _plot_detection(trace, phases, plot)


def _phase_line(ph: Any, t0: float) -> str:
    """One phase in at most two 80-column lines: span, period (or null and why), how it was timed."""
    import textwrap

    span = f"  {ph.start_s - t0:7.2f} - {ph.end_s - t0:7.2f} s"
    if ph.period_s is not None:
        how = f"{ph.timing}/{ph.method}" if ph.method else f"{ph.timing}"
        conf = "" if ph.confidence is None else f" conf {ph.confidence:.2f}"
        return f"{span}  period {ph.period_s * 1e3:8.2f} ms  {how}{conf}  {ph.conclusion}"
    why = {
        "fallback": "fallback",
        "idle": "idle",
        "unresolved": "the recording ended while profiling",
    }.get(ph.conclusion, ph.conclusion)
    head = f"{span}  period     null  {why}"
    if ph.conclusion == "idle" or not ph.reason:
        return head
    reason = ph.reason.removeprefix("no trustworthy period (")
    return "\n".join([head, *("      " + line for line in textwrap.wrap(reason, 74, max_lines=2))])


def _plot_detection(trace: object, phases: list[Any], out: str) -> None:
    """Draw the power, the phases the daemon saw (and, when recorded, the true iteration ends)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        typer.echo(
            "error: --plot needs matplotlib; install the pipeline extra: pip install 'gpoeo[pipeline]'", err=True
        )
        raise typer.Exit(1) from exc
    from gpoeo_rt.tracefile import Trace

    assert isinstance(trace, Trace)
    t, p = trace.power.t_s, trace.power.power_w
    t0 = float(t.min()) if len(t) else 0.0
    fig, ax = plt.subplots(figsize=(16, 5))
    ax.plot(t - t0, p, lw=0.6, color="tab:blue", label=f"power ({trace.power.source})")
    for i, ph in enumerate(phases):
        ax.axvspan(ph.start_s - t0, ph.end_s - t0, color=f"C{i % 2 + 2}", alpha=0.08)
        label = f"{ph.period_s * 1e3:.1f} ms" if ph.period_s is not None else f"null ({ph.conclusion})"
        ax.text(ph.start_s - t0, ax.get_ylim()[1], label, va="top", fontsize=8)
        if ph.concluded_s is not None:
            ax.axvline(ph.concluded_s - t0, color="tab:red", lw=0.8, ls=":")
    if trace.iterations is not None:
        it = trace.iterations.t_s
        ax.vlines(it - t0, 0.96, 1.0, transform=ax.get_xaxis_transform(), color="k", lw=0.4)
    ax.set_xlabel("time since first sample (s)")
    ax.set_ylabel("power (W)")
    ax.set_title(f"{trace.path.name}: the daemon's phases (red dotted: concluded); true iterations (black, top)")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    typer.echo(f"wrote {out}")


# --- the daemon: start, status, stop, set, reset ---

ConfigOption = Annotated[
    str | None,
    typer.Option("--config", help="TOML settings file (every flag can be set there, or as GPOEO_RT_<NAME>)."),
]
RunDirOption = Annotated[str | None, typer.Option("--run-dir", help="Folder of the daemon's sockets (run_dir).")]
LockDirOption = Annotated[
    str | None,
    typer.Option("--lock-dir", help="Host-wide per-GPU locks (default /run/gpoeo-rt-locks as root; lock_dir)."),
]


# The settings `reset` reads from the file and the environment (load_config's `only`).
RESET_SETTINGS = ("gpus", "group", "simulate", "sim_gpus", "state_dir", "run_dir", "lock_dir")


def _config(file: str | None, only: tuple[str, ...] | None = None, **overrides: object) -> Any:
    from gpoeo_rt.daemon.config import ConfigError, load_config

    try:
        return load_config(file, overrides=overrides, only=only)
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc


def _client_run_dirs(config: str | None, run_dir: str | None) -> list[str]:
    """Where status/stop/set look for the daemon (the lookup order of gpoeo_rt.client.paths)."""
    from gpoeo_rt.daemon.config import ConfigError, client_run_dirs

    try:
        return client_run_dirs(config, overrides={"run_dir": run_dir})
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc


def _request(run_dirs: list[str], payload: dict[str, Any]) -> dict[str, Any]:
    """Ask the first daemon that answers in `run_dirs`; one line naming every place tried when none does."""
    from gpoeo_rt.daemon.control import ControlError, NoDaemonError, request

    missing: list[str] = []
    for run_dir in run_dirs:
        try:
            reply = request(run_dir, payload)
            break
        except NoDaemonError as exc:
            missing.append(str(exc))
        except ControlError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from exc
    else:
        if len(missing) == 1:
            typer.echo(f"error: {missing[0]}", err=True)
        else:
            tried = " or ".join(run_dirs)
            typer.echo(f"error: no gpoeo-rt daemon answers in {tried} (start one, or pass --run-dir)", err=True)
        raise typer.Exit(1)
    if not reply.get("ok"):
        typer.echo(f"error: {reply.get('error', 'the daemon refused the request')}", err=True)
        raise typer.Exit(1)
    return reply


@app.command()
def start(
    config: ConfigOption = None,
    gpus: Annotated[str | None, typer.Option("--gpus", help="GPUs to manage: all, or NVML indices like 0,2.")] = None,
    group: Annotated[
        str | None, typer.Option("--group", help="Lockstep group for one data-parallel job, e.g. 0,1,2,3.")
    ] = None,
    objective: Annotated[str | None, typer.Option("--objective", help="energy (default), edp or ed2p.")] = None,
    max_slowdown: Annotated[
        float | None, typer.Option("--max-slowdown", help="Allowed slowdown vs the job's own reference, e.g. 0.05.")
    ] = None,
    policy: Annotated[str | None, typer.Option("--policy", help="hybrid (default), prediction or search.")] = None,
    advise: Annotated[
        bool | None, typer.Option("--advise/--no-advise", help="Decide and log, but never set clocks.")
    ] = None,
    simulate: Annotated[
        str | None,
        typer.Option(
            "--simulate",
            help="Run against a simulated GPU running WORKLOAD (a preset: resnet50, gpt, membound...; a schedule "
            "'gpt,membound@600'; or SWEEPS.csv:SKU:WORKLOAD). Simulated time; no GPU is touched.",
        ),
    ] = None,
    sim_seconds: Annotated[
        float | None, typer.Option("--sim-seconds", help="With --simulate: simulated job length (default 1800).")
    ] = None,
    sim_speed: Annotated[
        float | None,
        typer.Option("--sim-speed", help="With --simulate: simulated seconds per real second (default: no pacing)."),
    ] = None,
    sim_markers: Annotated[
        bool | None,
        typer.Option("--sim-markers/--no-sim-markers", help="With --simulate: the simulated job sends step markers."),
    ] = None,
    bundles: Annotated[str | None, typer.Option("--bundles", help="Model bundle directory.")] = None,
    run_dir: RunDirOption = None,
    state_dir: Annotated[
        str | None, typer.Option("--state-dir", help="Clock state files and decision logs (state_dir).")
    ] = None,
    lock_dir: LockDirOption = None,
    socket_group: Annotated[
        str | None, typer.Option("--socket-group", help="Group allowed to control the daemon (default: root).")
    ] = None,
    marker_users: Annotated[
        str | None,
        typer.Option("--marker-users", help="Users whose step markers count for any GPU (else: jobs on the GPU)."),
    ] = None,
    marker_group: Annotated[
        str | None, typer.Option("--marker-group", help="Group whose step markers count for any GPU.")
    ] = None,
    prometheus_port: Annotated[
        int | None, typer.Option("--prometheus-port", help="Serve Prometheus metrics on this port (off by default).")
    ] = None,
    prometheus_addr: Annotated[
        str | None, typer.Option("--prometheus-addr", help="Address for the metrics (default 127.0.0.1).")
    ] = None,
) -> None:
    """Run the daemon in the foreground until SIGTERM/SIGINT or `gpoeo-rt stop`; clocks are always given back."""
    from gpoeo_rt.daemon.daemon import Daemon
    from gpoeo_rt.daemon.safety import AlreadyRunningError, LockDirError
    from gpoeo_rt.device import GPUError
    from gpoeo_rt.prediction.bundle import BundleError

    cfg = _config(
        config,
        gpus=gpus,
        group=group,
        objective=objective,
        max_slowdown=max_slowdown,
        policy=policy,
        advise=advise,
        simulate=simulate,
        sim_seconds=sim_seconds,
        sim_speed=sim_speed,
        sim_markers=sim_markers,
        bundles=bundles,
        run_dir=run_dir,
        state_dir=state_dir,
        lock_dir=lock_dir,
        socket_group=socket_group,
        marker_users=marker_users,
        marker_group=marker_group,
        prometheus_port=prometheus_port,
        prometheus_addr=prometheus_addr,
    )
    say = _say_err
    if os.geteuid() != 0:
        say(f"gpoeo-rt: not root: sockets in {cfg.run_dir}, clock state and decision logs in {cfg.state_dir}")
    daemon = Daemon(cfg, say=say)
    try:
        code = daemon.run()
    except AlreadyRunningError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(3) from exc
    except PermissionError as exc:
        typer.echo(f"error: {exc}; {_PERMISSION_HINT}", err=True)
        raise typer.Exit(1) from exc
    except (GPUError, BundleError, LockDirError, ValueError, OSError, ImportError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    _print_summary(daemon.status())
    raise typer.Exit(code)


# What to do about a folder the daemon may not write (a user given root's /run/gpoeo-rt or /var/lib/gpoeo-rt).
_PERMISSION_HINT = (
    "run as root, or leave --run-dir/--state-dir unset for a user's own folders ($XDG_RUNTIME_DIR/gpoeo-rt, "
    "~/.local/state/gpoeo-rt)"
)


def _say_err(line: str) -> None:
    typer.echo(line, err=True)


def _fmt(value: object, spec: str, suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def _clock_text(pair: object) -> str:
    return f"{pair[0]}/{pair[1]}" if isinstance(pair, list | tuple) and len(pair) == 2 else "-"


def _print_summary(status: dict[str, Any]) -> None:
    """The per-GPU table (gpoeo_rt.tables: fits a terminal, whole in a pipe or the journal), then the problems."""
    from gpoeo_rt.tables import Column, fit, render

    columns = (
        Column("gpus", left=True, label="GPU"),
        Column("state", left=True),
        Column("period_ms", ".1f", label="period_ms"),
        Column("timing", left=True, drop=3),
        Column("clocks", left=True, label="SM/mem_MHz"),
        Column("advised", left=True, drop=1, label="advised"),
        Column("baseline_j", ".3f", drop=2, label="base_J/it"),
        Column("now_j", ".3f", drop=2, label="now_J/it"),
        Column("saving_so_far_pct", ".1f"),
        Column("slowdown_so_far_pct", ".1f"),
    )
    rows = []
    for g in status["gpus"]:
        base, now = g["baseline"] or {}, g["now"] or {}
        period = now.get("period_s")
        rows.append(
            {
                "gpus": ",".join(map(str, g["gpus"])),
                "state": g["state"],
                "period_ms": None if period is None else period * 1e3,
                "timing": g.get("timing") or "-",
                "clocks": _clock_text(g["clocks"]),
                "advised": _clock_text(g.get("advised_clocks")),
                "baseline_j": base.get("energy_per_iteration_j"),
                "now_j": now.get("energy_per_iteration_j"),
                "saving_so_far_pct": g["saving_so_far_pct"],
                "slowdown_so_far_pct": g["slowdown_so_far_pct"],
            }
        )
    typer.echo(f"gpoeo-rt pid {status['pid']} ({'advise' if status['advise'] else 'control'} mode)")
    typer.echo(render(columns, rows))
    for g in status["gpus"]:
        for line in _accounting_lines(g):
            typer.echo(fit(f"GPU {','.join(map(str, g['gpus']))}: {line}", indent="    "))
        if g.get("stuck"):
            typer.echo(fit(f"GPU {g['gpus']}: stuck: NVML ({g['stuck']['call']}) silent for {g['stuck']['for_s']:g} s"))
        if g.get("error"):
            typer.echo(fit(f"GPU {g['gpus']}: last error: {g['error']}"))
        log = g.get("logging")
        if log and not log.get("logging"):
            why = f"{log.get('error')} ({log.get('dropped')} dropped)"
            typer.echo(fit(f"GPU {g['gpus']}: not logging decisions: {why}"))


@app.command()
def status(
    as_json: Annotated[bool, typer.Option("--json", help="Print the raw status as JSON.")] = False,
    config: ConfigOption = None,
    run_dir: RunDirOption = None,
) -> None:
    """Per GPU: state, detected period and its source (step markers or the power signal), clocks, baseline vs now
    per iteration, saving so far, slowdown."""
    import json

    reply = _request(_client_run_dirs(config, run_dir), {"cmd": "status"})
    if as_json:
        typer.echo(json.dumps(reply["status"], indent=2))
    else:
        _print_summary(reply["status"])


@app.command()
def stop(config: ConfigOption = None, run_dir: RunDirOption = None) -> None:
    """Ask the running daemon to give the clocks back and exit."""
    typer.echo(_request(_client_run_dirs(config, run_dir), {"cmd": "stop"})["message"])


@app.command("set")
def set_(
    objective: Annotated[str | None, typer.Option("--objective", help="energy, edp or ed2p.")] = None,
    max_slowdown: Annotated[float | None, typer.Option("--max-slowdown", help="e.g. 0.05.")] = None,
    config: ConfigOption = None,
    run_dir: RunDirOption = None,
) -> None:
    """Change the running daemon's objective or slowdown bound (root or socket_group only)."""
    run_dirs = _client_run_dirs(config, run_dir)
    payload: dict[str, Any] = {"cmd": "set"}
    if objective is not None:
        payload["objective"] = objective
    if max_slowdown is not None:
        payload["max_slowdown"] = max_slowdown
    typer.echo(_request(run_dirs, payload)["message"])


@app.command()
def reset(
    gpus: Annotated[str | None, typer.Option("--gpus", help="all (default) or NVML indices like 0,2.")] = None,
    config: ConfigOption = None,
    simulate: Annotated[str | None, typer.Option("--simulate", help="Reset simulated GPUs (see start).")] = None,
    state_dir: Annotated[str | None, typer.Option("--state-dir", help="Clock state files (state_dir).")] = None,
    run_dir: RunDirOption = None,
    lock_dir: LockDirOption = None,
    force: Annotated[
        bool, typer.Option("--force", help="Also reset GPUs a running gpoeo-rt holds (it would re-lock them).")
    ] = False,
) -> None:
    """Restore the default clocks now, on the given GPUs (default all) and on every GPU a clock state file names;
    each on its own: one that fails is reported and the others are restored."""
    from gpoeo_rt.daemon.daemon import reset_gpus
    from gpoeo_rt.device import GPUError

    cfg = _config(
        config,
        RESET_SETTINGS,
        gpus=gpus,
        simulate=simulate,
        state_dir=state_dir,
        run_dir=run_dir,
        lock_dir=lock_dir,
    )
    try:
        code = reset_gpus(cfg, force=force, say=typer.echo)
    except (GPUError, ValueError, OSError, RuntimeError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    raise typer.Exit(code)


# --- bundles and reports ---

bundles_app = typer.Typer(
    context_settings=HELP_OPTIONS,
    rich_markup_mode=None,
    no_args_is_help=True,
    help="List and verify the model bundles the runtime can load.",
)
app.add_typer(bundles_app, name="bundles")


def _bundle_root(path: str | None) -> Any:
    from pathlib import Path

    from gpoeo_rt.prediction.selection import default_bundle_dirs

    if path is not None:
        return Path(path)
    return next((d for d in default_bundle_dirs() if d.is_dir()), default_bundle_dirs()[0])


@bundles_app.command("list")
def bundles_list(
    path: Annotated[
        str | None, typer.Option("--bundles", help="Bundle directory (default: the installed one).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object instead of the text lines.")] = False,
) -> None:
    """One line per bundle: name, the GPUs it matches, its evaluation figures (not verified: see `verify`)."""
    import json

    from gpoeo_rt.prediction.bundle import BundleError, parse_manifest

    root = _bundle_root(path)
    if not root.is_dir():
        typer.echo(f"error: {root}: bundle directory not found", err=True)
        raise typer.Exit(1)
    entries: list[dict[str, Any]] = []
    for bundle_dir in sorted(p for p in root.iterdir() if (p / "manifest.json").exists()):
        try:
            m = parse_manifest(bundle_dir)
        except BundleError as exc:
            entries.append({"name": bundle_dir.name, "error": str(exc)})
            continue
        ev = m.raw.get("evaluation") or {}
        figures = {k: ev[k] for k in ("mape_time_pct", "mape_energy_pct") if isinstance(ev.get(k), int | float)}
        entries.append({"name": m.name, "nvml_names": list(m.nvml_names), "evaluation": figures})
    if as_json:
        typer.echo(json.dumps({"root": str(root), "bundles": entries}, indent=2))
        return
    from gpoeo_rt.tables import LABELS, fit

    typer.echo(f"bundles in {root}:")
    indent = " " * 19
    for e in entries:
        if "error" in e:
            typer.echo(fit(f"  {e['name']:16s} UNREADABLE: {e['error']}", indent=indent))
            continue
        figures_text = "  ".join(f"{LABELS.get(k, k)} {v:.1f}" for k, v in e["evaluation"].items())
        names = ", ".join(e["nvml_names"]) or "any GPU without its own bundle"
        line = f"  {e['name']:16s} {figures_text or 'no evaluation'}  for: {names}"
        typer.echo(fit(line, indent=indent))


@bundles_app.command("verify")
def bundles_verify(
    path: Annotated[
        str | None, typer.Option("--bundles", help="Bundle directory (default: the installed one).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object instead of the text lines.")] = False,
) -> None:
    """Check every bundle's manifest (and its seal), sha256 and feature schema; exit 1 if any fails."""
    import json

    from gpoeo_rt.prediction.bundle import BundleError, verify_bundle

    root = _bundle_root(path)
    dirs = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    if not dirs:
        typer.echo(f"error: {root}: no bundles found", err=True)
        raise typer.Exit(1)
    checked: list[dict[str, Any]] = []
    for bundle_dir in dirs:
        try:
            verify_bundle(bundle_dir, sealed=True)
            checked.append({"path": str(bundle_dir), "ok": True})
        except BundleError as exc:
            checked.append({"path": str(bundle_dir), "ok": False, "error": str(exc)})
    if as_json:
        typer.echo(json.dumps({"root": str(root), "bundles": checked}, indent=2))
    for c in [] if as_json else checked:
        typer.echo(f"ok      {c['path']}" if c["ok"] else f"FAILED  {c['path']}: {c['error']}")
    raise typer.Exit(0 if all(c["ok"] for c in checked) else 1)


def _joules(j: float) -> str:
    return f"{j / 1e3:.1f} kJ" if abs(j) < 1e6 else f"{j / 1e6:.2f} MJ"


def _accounting_lines(summary: dict[str, Any]) -> list[str]:
    """What the saving covers, the drift checks' cost, the energy counter's witness and the runs (report/status)."""
    cov, energy, witness = summary.get("coverage") or {}, summary.get("energy") or {}, summary.get("witness")
    lines = []
    verdict, bound = summary.get("bound_verdict"), summary.get("bound_pct")
    if verdict is not None and bound is not None:
        text = {"within": "within", "over": "OVER", "at the bound": "at"}[verdict]
        noise = " (within the claim's noise of it)" if verdict == "at the bound" else ""
        lines.append(f"slowdown {text} the {bound:g}% bound{noise}")
    if cov.get("counted") is not None:
        lines.append(
            f"counts {cov['counted']:.0%} of the time ({cov['at_reference']:.0%} at reference, "
            f"{cov['measured']:.0%} measured; {cov['excluded']:.0%} left out)"
        )
    split = summary.get("split") or {}
    if split.get("held_saving_pct") is not None:
        lines.append(f"held decisions: saving {split['held_saving_pct']:.1f}%, {split['held_share']:.0%} of the time")
    if split.get("exploration_cost_pct") is not None:
        cost, share = split["exploration_cost_pct"], split["exploring_share"]
        lines.append(f"exploring (probes, profiling): cost {cost:.1f} points, {share:.0%} of the time")
    if energy:
        lines.append(f"energy used {_joules(energy['used_j'])}, saved {_joules(energy['saved_j'])} (counted time)")
    if cov.get("drift_checks"):
        lines.append(f"drift checks: {cov['drift_checks']}, {cov['drift_check']:.1%} of the time at reference")
    if witness is not None:
        flag = f"  DISAGREE beyond {witness['tolerance_pct']:g}%" if witness["disagrees"] else ""
        lines.append(
            f"energy counter {_joules(witness['counter_j'])}, ratio-based {_joules(witness['ratio_based_j'])} "
            f"({witness['gap_pct']:+.1f}%){flag}"
        )
    if len(summary.get("runs") or []) > 1:
        run_s = f", {cov['duration_s']:.0f} s in all" if cov.get("duration_s") is not None else ""
        lines.append(f"{len(summary['runs'])} runs{run_s}, combined by time (downtime between them not counted)")
    return lines


@app.command()
def report(
    log: Annotated[str, typer.Argument(help="A decision log (JSON lines) written by `gpoeo-rt start`.")],
    plot: Annotated[str | None, typer.Option("--plot", help="Write a PNG timeline of the decisions.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Summarise a decision log (what was decided, measured saving and slowdown) and optionally plot it."""
    import json

    from gpoeo_rt.daemon.report import LogError, plot_timeline, read_log, summarise
    from gpoeo_rt.tables import LABELS, fit

    try:
        records = read_log(log)
    except LogError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    summary = summarise(records)
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
    else:
        base = summary["baseline"] or {}
        typer.echo(f"{log}: {summary['decisions']} decisions over {summary['duration_s']:.0f} s")
        if base:
            per_iteration = f"{base['period_s'] * 1e3:.1f} ms, {base['energy_per_iteration_j']:.2f} J"
            typer.echo(f"  baseline per iteration at reference clocks: {per_iteration}")
        typer.echo(
            f"  measured {LABELS['saving_pct']} {_fmt(summary['saving_pct'], '.1f')}, "
            f"{LABELS['slowdown_pct']} {_fmt(summary['slowdown_pct'], '.1f')} (exploration included)"
        )
        for line in _accounting_lines(summary):
            typer.echo(fit(f"  {line}", indent="    "))
        events = "events: " + ", ".join(f"{k} x{v}" for k, v in sorted(summary["events"].items()))
        typer.echo(fit(f"  {events}", indent="    "))
    if plot is not None:
        try:
            plot_timeline(records, plot, title=str(log))
        except ImportError as exc:
            typer.echo("error: --plot needs matplotlib: pip install 'gpoeo[pipeline]'", err=True)
            raise typer.Exit(1) from exc
        typer.echo(f"wrote {plot}")


# --- bench (replay benchmark; logic in gpoeo_rt.bench) ---


def _unreadable_sweeps(sweeps: str, exc: Exception) -> NoReturn:
    """A --sweeps file that is not a text CSV or a readable parquet file: one line; anything else propagates."""
    if isinstance(exc, UnicodeDecodeError):
        typer.echo(f"error: --sweeps {sweeps}: not a text CSV file ({exc.reason} at byte {exc.start})", err=True)
        raise typer.Exit(2) from exc
    if type(exc).__module__.startswith("pyarrow"):
        detail = str(exc).replace("\n", " ")[:200]  # a file that is not parquet, or a damaged one
        typer.echo(f"error: --sweeps {sweeps}: not a readable parquet file ({detail})", err=True)
        raise typer.Exit(2) from exc
    raise exc


@app.command("bench")
def bench(
    sweeps: Annotated[str, typer.Option("--sweeps", help="Sweeps table (normalized schema), .csv or .parquet.")],
    policy: Annotated[
        str | None,
        typer.Option(
            "--policy",
            help="Comma list (default all): default, oracle, gpoeo-rt, gpoeo-rt-markers, sweep, gpoeo-paper, bandit.",
        ),
    ] = None,
    sku: Annotated[str | None, typer.Option("--sku", help="Comma list of SKUs to run (default: every SKU).")] = None,
    max_slowdown: Annotated[float, typer.Option("--max-slowdown", min=0.0, max=1.0)] = 0.05,
    job_seconds: Annotated[float, typer.Option("--job-seconds", min=60.0, help="Simulated job length.")] = 1800.0,
    iteration_s: Annotated[float, typer.Option("--iteration-s", min=0.01, help="Iteration at reference.")] = 0.1,
    clock_grid: Annotated[
        str,
        typer.Option(
            "--clock-grid",
            help="Clocks of the simulated GPU: 'measured' (the sweep's) or 'fine' (every --sm-step-mhz between the "
            "measured min and max, interpolated).",
        ),
    ] = "measured",
    sm_step_mhz: Annotated[int, typer.Option("--sm-step-mhz", min=1, help="SM step of the fine grid.")] = 15,
    counters: Annotated[
        str,
        typer.Option(
            "--counters",
            help="Counters the simulated GPUs give: 'realistic' (NVML GPM on Hopper and later only, as real GPUs), "
            "'sweep' (the sweep's on every GPU) or 'none'.",
        ),
    ] = "realistic",
    json_out: Annotated[str | None, typer.Option("--json", help="Write per-run results and summary here.")] = None,
    plot_out: Annotated[str | None, typer.Option("--plot", help="Write a PNG comparing the policies.")] = None,
    metrics_out: Annotated[
        str | None, typer.Option("--metrics", help="Write the headline figures (DVC metrics) here.")
    ] = None,
    summary_out: Annotated[
        str | None, typer.Option("--summary", help="Write the summary table (no per-run rows) here.")
    ] = None,
    jobs: Annotated[int, typer.Option("--jobs", min=1, help="Worker processes.")] = 2,
    limit: Annotated[int, typer.Option("--limit", min=0, help="At most N workloads per SKU (0: all).")] = 0,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    folds_root: Annotated[str, typer.Option("--folds-root", help="Leave-out fold bundles.")] = "data/eval",
    models_root: Annotated[
        str | None, typer.Option("--models-root", help="Shipped bundles (default: the installed ones).")
    ] = None,
    sweep_iterations: Annotated[int, typer.Option("--sweep-iterations", min=2)] = 40,
    bandit_round_iterations: Annotated[int, typer.Option("--bandit-round-iterations", min=2)] = 25,
    bandit_exploration: Annotated[float, typer.Option("--bandit-exploration", min=0.0)] = 1.0,
    bandit_switching_penalty: Annotated[float, typer.Option("--bandit-switching-penalty", min=0.0)] = 0.002,
) -> None:
    """Replay benchmark on simulated jobs driven by measured sweeps: gpoeo-rt vs the oracle and baselines."""
    from gpoeo_rt.bench.command import run_bench_command
    from gpoeo_rt.bench.runner import BenchInputError
    from gpoeo_rt.bench.sweeps import SweepsFileError

    try:
        run_bench_command(
            sweeps=sweeps,
            policies=policy,
            skus=sku,
            max_slowdown=max_slowdown,
            job_s=job_seconds,
            iteration_s=iteration_s,
            clock_grid=clock_grid,
            sm_step_mhz=sm_step_mhz,
            counters=counters,
            json_out=json_out,
            plot_out=plot_out,
            metrics_out=metrics_out,
            summary_out=summary_out,
            jobs=jobs,
            limit=limit,
            seed=seed,
            folds_root=folds_root,
            models_root=str(_bundle_root(models_root)),
            sweep_iterations=sweep_iterations,
            bandit_round_iterations=bandit_round_iterations,
            bandit_exploration=bandit_exploration,
            bandit_switching_penalty=bandit_switching_penalty,
            echo=typer.echo,
        )
    except (SweepsFileError, BenchInputError, RuntimeError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    except Exception as exc:
        _unreadable_sweeps(sweeps, exc)


@app.command("bench-suite")
def bench_suite(
    sweeps: Annotated[str, typer.Option("--sweeps", help="Sweeps table (normalized schema), .csv or .parquet.")],
    sets: Annotated[
        str | None,
        typer.Option(
            "--set",
            help="Comma list (default all) of: in-distribution, leave-one-sku-out, leave-one-source-out, synthetic.",
        ),
    ] = None,
    bounds: Annotated[str, typer.Option("--bounds", help="Comma list of slowdown bounds.")] = "0.02,0.05,0.1",
    policy: Annotated[str | None, typer.Option("--policy", help="Comma list of policies (default all).")] = None,
    job_seconds: Annotated[float, typer.Option("--job-seconds", min=60.0, help="Simulated job length.")] = 1800.0,
    iteration_s: Annotated[float, typer.Option("--iteration-s", min=0.01, help="Iteration at reference.")] = 0.1,
    clock_grid: Annotated[str, typer.Option("--clock-grid", help="'measured' or 'fine'.")] = "fine",
    sm_step_mhz: Annotated[int, typer.Option("--sm-step-mhz", min=1, help="SM step of the fine grid.")] = 15,
    thin: Annotated[int, typer.Option("--thin", min=1, help="Leave-one-SKU-out: every N-th V100/RTX 8000 job.")] = 4,
    jobs: Annotated[int, typer.Option("--jobs", min=1, help="Worker processes.")] = 2,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    folds_root: Annotated[str, typer.Option("--folds-root", help="Leave-out fold bundles.")] = "data/eval",
    source_root: Annotated[
        str, typer.Option("--source-root", help="Leave-one-source-out fold bundles.")
    ] = "data/eval/source-holdout",
    models_root: Annotated[
        str | None, typer.Option("--models-root", help="Shipped bundles (default: the installed ones).")
    ] = None,
    json_out: Annotated[str | None, typer.Option("--json", help="Write every run and summary here.")] = None,
    metrics_out: Annotated[
        str | None,
        typer.Option("--metrics-dir", help="Write the headline figures (DVC metrics), suite-<set>.json, here."),
    ] = None,
    summary_out: Annotated[
        str | None, typer.Option("--summary", help="Write every policy's figures per set and bound here.")
    ] = None,
    plot_out: Annotated[str | None, typer.Option("--plot", help="Write the saving-vs-slowdown PNG.")] = None,
) -> None:
    """Every policy on in-distribution and out-of-distribution sets at several bounds (simulated jobs)."""
    from gpoeo_rt.bench.command import run_suite_command
    from gpoeo_rt.bench.runner import BenchInputError
    from gpoeo_rt.bench.sweeps import SweepsFileError

    try:
        run_suite_command(
            sweeps=sweeps,
            sets=sets,
            bounds=bounds,
            policies=policy,
            job_s=job_seconds,
            iteration_s=iteration_s,
            clock_grid=clock_grid,
            sm_step_mhz=sm_step_mhz,
            jobs=jobs,
            seed=seed,
            thin=thin,
            folds_root=folds_root,
            source_root=source_root,
            models_root=str(_bundle_root(models_root)),
            json_out=json_out,
            metrics_out=metrics_out,
            summary_out=summary_out,
            plot_out=plot_out,
            echo=typer.echo,
        )
    except (SweepsFileError, BenchInputError, RuntimeError, OSError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    except Exception as exc:
        _unreadable_sweeps(sweeps, exc)
