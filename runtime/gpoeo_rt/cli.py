"""The `gpoeo-rt` command line: it parses, calls into the layers below and prints; it holds no logic."""

from typing import Annotated

import typer

from gpoeo_rt import __version__

app = typer.Typer(
    name="gpoeo-rt",
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
    no_args_is_help=True, help="Record NVML traces (read-only) and detect iteration periods in them."
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
        typer.Option("--plot", help="Write a PNG of the power signal with the detected iteration boundaries."),
    ] = None,
) -> None:
    """Find the phases of a recorded trace and the iteration period of each (null: not resolvable)."""
    import json

    from gpoeo_rt.detection.phase import detect_phases
    from gpoeo_rt.tracefile import TraceError, read_trace

    try:
        trace = read_trace(trace_dir)
    except TraceError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    energy = trace.energy
    report = detect_phases(
        trace.power.t_s,
        trace.power.power_w,
        energy_j=None if energy is None else energy.energy_j,
        energy_t_s=None if energy is None else energy.t_s,
    )
    if report.error is not None:
        typer.echo(f"error: {trace_dir}: no usable power samples: {report.error}", err=True)
        raise typer.Exit(1)
    notes = [*trace.notes, *report.notes]
    if as_json:
        payload = {"trace": str(trace.path), "source": trace.power.source, **report.to_dict(), "notes": notes}
        typer.echo(json.dumps(payload, indent=2))
    else:
        t0 = report.phases[0].start_s if report.phases else 0.0
        typer.echo(f"{trace.path} ({trace.power.source} power; times from its first sample)")
        for note in notes:
            typer.echo(f"  note: {note}")
        for ph in report.phases:
            period = f"{ph.period_s * 1e3:8.2f} ms" if ph.period_s is not None else "       null"
            typer.echo(
                f"  {ph.start_s - t0:7.2f} - {ph.end_s - t0:7.2f} s  period {period}  conf {ph.confidence:.2f}  "
                f"{ph.level_w:6.0f} W  {ph.verdict.value}"
            )
    if plot is not None:
        _plot_detection(trace, report, plot)


def _plot_detection(trace: object, report: object, out: str) -> None:
    """Draw the power, the phases and the detected (and, when recorded, the true) iteration boundaries."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        typer.echo(
            "error: --plot needs matplotlib; install the pipeline extra: pip install 'gpoeo[pipeline]'", err=True
        )
        raise typer.Exit(1) from exc
    from gpoeo_rt.detection.phase import PhaseReport, iteration_boundaries
    from gpoeo_rt.tracefile import Trace

    assert isinstance(trace, Trace) and isinstance(report, PhaseReport)
    t, p = trace.power.t_s, trace.power.power_w
    t0 = float(t[0]) if len(t) else 0.0
    fig, ax = plt.subplots(figsize=(16, 5))
    ax.plot(t - t0, p, lw=0.6, color="tab:blue", label=f"power ({trace.power.source})")
    for i, ph in enumerate(report.phases):
        ax.axvspan(ph.start_s - t0, ph.end_s - t0, color=f"C{i % 2 + 2}", alpha=0.08)
        label = f"{ph.period_s * 1e3:.1f} ms" if ph.period_s is not None else f"null ({ph.verdict.value})"
        ax.text(ph.start_s - t0, ax.get_ylim()[1], label, va="top", fontsize=8)
        marks = iteration_boundaries(t, p, ph)
        ax.vlines(marks - t0, 0.0, 0.04, transform=ax.get_xaxis_transform(), color="tab:red", lw=0.6)
    if trace.iterations is not None:
        it = trace.iterations.t_s
        ax.vlines(it - t0, 0.96, 1.0, transform=ax.get_xaxis_transform(), color="k", lw=0.4)
    ax.set_xlabel("time since first sample (s)")
    ax.set_ylabel("power (W)")
    ax.set_title(f"{trace.path.name}: detected iteration boundaries (red, bottom); true iterations (black, top)")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    typer.echo(f"wrote {out}")


# --- bench (replay benchmark; logic in gpoeo_rt.bench) ---


@app.command("bench")
def bench(
    sweeps: Annotated[str, typer.Option("--sweeps", help="Sweeps table (normalized schema), .csv or .parquet.")],
    policy: Annotated[
        str | None,
        typer.Option("--policy", help="Comma list of default,oracle,gpoeo-rt,sweep,gpoeo-paper,bandit (default all)."),
    ] = None,
    sku: Annotated[str | None, typer.Option("--sku", help="Comma list of SKUs to run (default: every SKU).")] = None,
    max_slowdown: Annotated[float, typer.Option("--max-slowdown", min=0.0, max=1.0)] = 0.05,
    job_seconds: Annotated[float, typer.Option("--job-seconds", min=60.0, help="Simulated job length.")] = 1800.0,
    iteration_s: Annotated[float, typer.Option("--iteration-s", min=0.01, help="Iteration at reference.")] = 0.1,
    json_out: Annotated[str | None, typer.Option("--json", help="Write per-run results and summary here.")] = None,
    plot_out: Annotated[str | None, typer.Option("--plot", help="Write a PNG comparing the policies.")] = None,
    metrics_out: Annotated[str | None, typer.Option("--metrics", help="Write the summary only (DVC metrics).")] = None,
    jobs: Annotated[int, typer.Option("--jobs", min=1, help="Worker processes.")] = 2,
    limit: Annotated[int, typer.Option("--limit", min=0, help="At most N workloads per SKU (0: all).")] = 0,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    folds_root: Annotated[str, typer.Option("--folds-root", help="Leave-out fold bundles.")] = "data/eval",
    models_root: Annotated[str, typer.Option("--models-root", help="Shipped bundles.")] = "models",
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
            json_out=json_out,
            plot_out=plot_out,
            metrics_out=metrics_out,
            jobs=jobs,
            limit=limit,
            seed=seed,
            folds_root=folds_root,
            models_root=models_root,
            sweep_iterations=sweep_iterations,
            bandit_round_iterations=bandit_round_iterations,
            bandit_exploration=bandit_exploration,
            bandit_switching_penalty=bandit_switching_penalty,
            echo=typer.echo,
        )
    except (SweepsFileError, BenchInputError, RuntimeError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
