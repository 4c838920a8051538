"""The `gpoeo-collect` command line: it parses, builds a backend, calls `collector.collect` and prints."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from gpoeo_pipeline.collect.rawformat import LOCK_FILE

app = typer.Typer(
    name="gpoeo-collect",
    add_completion=False,
    no_args_is_help=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    rich_markup_mode=None,  # plain help: wraps at 80 columns instead of cutting option names (as gpoeo-rt)
)

DEFAULT_SUITE = ("cnn", "transformer", "mlp", "gnn")


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower().replace("nvidia", "")).strip("-") or "gpu"


def _list_workloads(value: bool) -> None:
    if value:
        from gpoeo_pipeline.collect.workloads import BUILTINS

        for b in BUILTINS.values():
            sizes = ",".join(f"{k}={v}" for k, v in b.sizes.items())
            typer.echo(f"{b.name:12s} {b.description}\n{'':12s} sizes: {sizes}")
        raise typer.Exit()


class _RichProgress:
    def __init__(self) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
        from rich.progress import Progress as RichProgress

        self._bar = RichProgress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
        )
        self._task = self._bar.add_task("collecting", total=None)

    def start(self, total: int) -> None:
        self._bar.update(self._task, total=total)
        self._bar.start()

    def advance(self, description: str) -> None:
        self._bar.update(self._task, advance=1, description=description)

    def stop(self) -> None:
        self._bar.stop()


@app.command(context_settings={"allow_interspersed_args": False, "help_option_names": ["-h", "--help"]})
def main(
    command: Annotated[
        list[str] | None,
        typer.Argument(
            help="A user command to measure, after `--` (e.g. -- python train.py); timed by the step "
            "markers it writes to $GPOEO_STEP_MARKERS, else by the iteration period of its power."
        ),
    ] = None,
    sku: Annotated[str | None, typer.Option(help="SKU name of the rows (default: from the GPU name).")] = None,
    out: Annotated[
        Path | None,
        typer.Option(help="Output folder (default data/raw/<sku>, data/raw/<sku>-reference with --reference-only)."),
    ] = None,
    workloads: Annotated[
        str | None,
        typer.Option(
            help="Built-in workloads, comma-separated, each name[:size=N;...] with ';' between sizes, "
            "e.g. 'cnn:batch=64;width=32,mlp'. Default: all four unless a command is given."
        ),
    ] = None,
    name: Annotated[str | None, typer.Option(help="Workload name of the user command (default cmd/<program>).")] = None,
    reference_only: Annotated[
        bool,
        typer.Option(
            "--reference-only",
            help="Measure at the current clocks only; never sets any clock (the device is opened read-only).",
        ),
    ] = False,
    allow_clock_writes: Annotated[
        bool,
        typer.Option("--allow-clock-writes", help="Required for a sweep on a real GPU: it locks clocks (needs root)."),
    ] = False,
    restore_clocks: Annotated[
        bool,
        typer.Option(
            "--restore-clocks",
            help=f"Only reset the clocks an interrupted sweep left locked ({LOCK_FILE} in --out) and exit.",
        ),
    ] = False,
    simulate: Annotated[
        str | None,
        typer.Option(
            help="Simulated H200 in simulated time (no GPU, no sleeping): "
            "comma-separated presets (resnet50, resnet50_hoststall, gpt, "
            "membound); they are the workloads."
        ),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the simulation.")] = 0,
    gpu: Annotated[int, typer.Option(min=0, help="NVML index of the GPU.")] = 0,
    device: Annotated[str, typer.Option(help="torch device of the built-in workloads.")] = "cuda",
    sm_stride: Annotated[int, typer.Option(min=1, help="Measure every Nth supported SM clock.")] = 8,
    mem_clocks: Annotated[str | None, typer.Option(help="Memory clocks (MHz, comma-separated; default all).")] = None,
    settle: Annotated[float, typer.Option(min=0, help="Seconds after a clock change before warm-up.")] = 1.0,
    warmup: Annotated[float, typer.Option(min=0, help="Seconds of warm-up at each config.")] = 5.0,
    window: Annotated[float, typer.Option(min=0.1, help="Seconds per measurement window.")] = 10.0,
    repeats: Annotated[int, typer.Option(min=1, help="Windows per config (their spread is stored).")] = 3,
    timing: Annotated[str, typer.Option(help="auto | markers | period.")] = "auto",
    startup: Annotated[
        float,
        typer.Option(
            min=0,
            help="Seconds a user command gets to start before its first config (built-in workloads: the most "
            "to wait for their first step marker).",
        ),
    ] = 120.0,
    no_progress: Annotated[bool, typer.Option("--no-progress", help="No progress bar.")] = False,
    list_workloads: Annotated[
        bool,
        typer.Option(
            "--list-workloads", callback=_list_workloads, is_eager=True, help="List the built-in workloads and exit."
        ),
    ] = False,
) -> None:
    """Measure workloads at a grid of (SM, memory) clocks into data/raw/<sku>/ for `ingest` (resumable)."""
    from gpoeo_pipeline.collect.collector import (
        Backend,
        CollectionInterrupted,
        DeviceBackend,
        MeasureParams,
        SimBackend,
        collect,
        restore_stale_lock,
    )
    from gpoeo_pipeline.collect.store import ClockLockState, CollectError
    from gpoeo_pipeline.collect.workloads import parse_spec, workload_id
    from gpoeo_rt.device import GPUError

    try:
        params = MeasureParams(settle, warmup, window, repeats, timing)
        mems = [int(m) for m in mem_clocks.split(",")] if mem_clocks else None
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    writes = not reference_only
    backend: Backend
    names: list[str]
    if simulate is not None:
        if command or workloads:
            typer.echo("error: --simulate runs its presets; it takes no --workloads or command", err=True)
            raise typer.Exit(2)
        names = [p.strip() for p in simulate.split(",") if p.strip()]
        try:
            backend = SimBackend(seed=seed, allow_clock_writes=writes)
            for preset in names:  # fail fast on a bad preset name, before any file is written
                from gpoeo_rt.device import preset_workload

                preset_workload(preset)
        except ValueError as exc:
            typer.echo(f"error: --simulate: {exc}", err=True)
            raise typer.Exit(2) from exc
        default_sku = "simulated-h200"
    else:
        if writes and not (allow_clock_writes or reference_only):
            typer.echo(
                "error: a sweep locks GPU clocks: pass --allow-clock-writes (needs root), or measure "
                "read-only at the current clocks with --reference-only",
                err=True,
            )
            raise typer.Exit(2)
        commands: dict[str, list[str]] = {}
        try:
            specs = [s for s in (workloads or "").split(",") if s.strip()]
            if not specs and not command:
                specs = list(DEFAULT_SUITE)
            for spec in specs:
                builtin, sizes = parse_spec(spec.replace(";", ","))
                argv = [sys.executable, "-m", "gpoeo_pipeline.collect.workloads", builtin, "--device", device]
                for key, value in sizes.items():
                    argv += ["--size", f"{key}={value}"]
                commands[workload_id(builtin, sizes)] = argv
        except ValueError as exc:
            typer.echo(f"error: --workloads: {exc}", err=True)
            raise typer.Exit(2) from exc
        if command:
            commands[name or f"cmd/{Path(command[0]).name}"] = list(command)
        names = list(commands)
        try:
            from gpoeo_rt.device import open_gpu

            builtins = frozenset(commands) - ({name or f"cmd/{Path(command[0]).name}"} if command else set())
            backend = DeviceBackend(
                open_gpu(gpu, allow_clock_writes=writes), commands, marker_workloads=builtins, startup_s=startup
            )
        except GPUError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from exc
        default_sku = _slug(backend.device().name)
    sku_name = sku or default_sku
    out_dir = out or Path("data/raw") / (f"{sku_name}-reference" if reference_only else sku_name)
    progress = None if no_progress or restore_clocks else _RichProgress()
    try:
        if restore_clocks:
            restored = restore_stale_lock(ClockLockState(out_dir / LOCK_FILE), backend.device())
            typer.echo("clocks restored" if restored else f"nothing to restore: no {out_dir / LOCK_FILE}")
            return
        summary = collect(
            backend,
            names,
            out_dir,
            sku=sku_name,
            params=params,
            reference_only=reference_only,
            sm_stride=sm_stride,
            mem_clocks=mems,
            progress=progress,
            command_line=shlex.join(sys.argv),
        )
    except (CollectError, GPUError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    except CollectionInterrupted as exc:
        typer.echo(f"{exc}: clocks restored; run the same command again to resume", err=True)
        raise typer.Exit(130) from exc
    finally:
        if progress is not None:
            progress.stop()
        backend.close()
    if summary.restored_stale_lock:
        typer.echo("restored the clocks an interrupted run had left locked")
    if summary.torn is not None:
        typer.echo(f"cut off a torn last line (line {summary.torn.line}) of the results: see recovery.log")
    typer.echo(
        f"{len(summary.measured)} config(s) measured, {summary.already_done} already done, "
        f"{len(summary.failed)} failed -> {out_dir}"
    )
    for key, reason in summary.failed:
        typer.echo(f"failed {key}: {reason}", err=True)
    if summary.failed:
        raise typer.Exit(3)


if __name__ == "__main__":
    app()
