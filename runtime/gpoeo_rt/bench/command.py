"""What `gpoeo-rt bench` does, behind the typer command: read, run, summarise, write, plot."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpoeo_rt.bench.policies import BanditConfig, GpoeoPaperConfig, SweepConfig
from gpoeo_rt.bench.report import check_targets, format_table, headline, plot, summarize
from gpoeo_rt.bench.runner import (
    CLOCK_GRIDS,
    POLICIES,
    BenchInputError,
    BenchSettings,
    json_default,
    results_json,
    run_bench,
)
from gpoeo_rt.bench.sweeps import read_sweeps_file
from gpoeo_rt.figures import rounded
from gpoeo_rt.progress import Bars
from gpoeo_rt.tables import Column, fit, render


def require_matplotlib(option: str) -> None:
    """Before any work: an option that draws needs matplotlib (the pipeline extra)."""
    if importlib.util.find_spec("matplotlib") is None:
        raise BenchInputError(f"{option} needs matplotlib: pip install 'gpoeo[pipeline]' (or leave {option} out)")


def parse_list(text: str | None, what: str, allowed: Sequence[str] | None = None) -> list[str] | None:
    """A comma-separated option value (None: not given)."""
    if text is None:
        return None
    items = [p.strip() for p in text.split(",") if p.strip()]
    if not items:
        raise BenchInputError(f"{what}: empty list")
    bad = [p for p in items if allowed is not None and p not in allowed]
    if bad:
        raise BenchInputError(f"{what}: unknown {', '.join(map(repr, bad))}; choose from {', '.join(allowed or [])}")
    return items


def run_bench_command(
    *,
    sweeps: str | Path,
    policies: str | None,
    skus: str | None,
    max_slowdown: float,
    job_s: float,
    iteration_s: float,
    clock_grid: str = "measured",
    sm_step_mhz: int = 15,
    counters: str = "realistic",
    json_out: str | Path | None,
    plot_out: str | Path | None,
    metrics_out: str | Path | None = None,
    summary_out: str | Path | None = None,
    jobs: int,
    limit: int,
    seed: int,
    folds_root: str | Path,
    models_root: str | Path,
    sweep_iterations: int,
    bandit_round_iterations: int,
    bandit_exploration: float,
    bandit_switching_penalty: float,
    echo: Callable[[str], None] = print,
) -> dict[str, bool]:
    """Run the bench and report; returns the targets check (see report.check_targets)."""
    chosen = parse_list(policies, "--policy", POLICIES) or list(POLICIES)
    if clock_grid not in CLOCK_GRIDS:
        raise BenchInputError(f"--clock-grid: unknown {clock_grid!r}; choose from {', '.join(CLOCK_GRIDS)}")
    if sm_step_mhz < 1:
        raise BenchInputError(f"--sm-step-mhz: {sm_step_mhz} must be >= 1")
    if plot_out is not None:
        require_matplotlib("--plot")
    sku_list = parse_list(skus, "--sku")
    groups = read_sweeps_file(sweeps, sku_list)
    settings = BenchSettings(
        max_slowdown=max_slowdown,
        job_s=job_s,
        iteration_s=iteration_s,
        seed=seed,
        clock_grid=clock_grid,
        sm_step_mhz=sm_step_mhz,
        counters=counters,
        sweep=replace(SweepConfig(), profile_iterations=sweep_iterations, max_slowdown=max_slowdown),
        paper=replace(GpoeoPaperConfig(), time_loss_bound=max_slowdown),
        bandit=replace(
            BanditConfig(),
            round_iterations=bandit_round_iterations,
            exploration=bandit_exploration,
            switching_penalty=bandit_switching_penalty,
            max_slowdown=max_slowdown,
        ),
    )
    with Bars() as bars:  # a bar while a terminal watches (the bench takes minutes); nothing in a log
        run = run_bench(
            groups,
            chosen,
            settings,
            folds_root=Path(folds_root),
            models_root=Path(models_root),
            jobs=jobs,
            limit=limit,
            progress=bars.task("bench: simulated jobs"),
        )
    summary = summarize(run.results, chosen)
    targets = check_targets(summary, run.wall_s, max_slowdown)
    n_workloads = len({(r.sku, r.workload) for r in run.results})
    grid = "measured SM clocks" if clock_grid == "measured" else f"fine SM grid ({sm_step_mhz} MHz steps)"
    echo(
        fit(
            f"{n_workloads} workloads x {len(chosen)} policies, {job_s:g} s jobs, bound {max_slowdown:.1%}, {grid}, "
            f"{counters} counters: {run.wall_s:.1f} s wall with {jobs} process(es) (simulated jobs, not hardware)"
        )
    )
    if run.models:
        echo(fit("models: " + ", ".join(f"{n} workloads: {why}" for why, n in sorted(run.models.items()))))
    echo(format_table(summary))
    echo(fit("targets: " + ", ".join(f"{k}={'met' if v else 'MISSED'}" for k, v in targets.items())))
    meta = {
        "sweeps": str(sweeps),
        "policies": chosen,
        "settings": json.loads(json.dumps(settings, default=vars)),
        "simulated": True,
        "targets": targets,
    }
    if json_out is not None:
        Path(json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(json_out).write_text(results_json(run, summary, meta))
    if summary_out is not None:  # the summary without the per-run rows, and without the wall time (volatile)
        steady = {k: v for k, v in targets.items() if "wall" not in k}  # a wall-time verdict flips with the host
        compact = {**meta, "targets": steady, "jobs": run.jobs, "models": run.models, "summary": summary}
        _write_json(summary_out, rounded(compact))
    if metrics_out is not None:  # the headline `dvc metrics show` lists
        _write_json(metrics_out, headline(summary))
    if plot_out is not None:
        plot(summary, plot_out, max_slowdown, grid)
    return targets


def run_suite_command(
    *,
    sweeps: str | Path,
    sets: str | None,
    bounds: str,
    policies: str | None,
    job_s: float,
    iteration_s: float,
    clock_grid: str,
    sm_step_mhz: int,
    jobs: int,
    seed: int,
    thin: int,
    folds_root: str | Path,
    source_root: str | Path,
    models_root: str | Path,
    json_out: str | Path | None,
    metrics_out: str | Path | None,
    plot_out: str | Path | None,
    summary_out: str | Path | None = None,
    echo: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run the evaluation suite (bench.suite) and report; returns the headline."""
    from gpoeo_rt.bench.suite import SET_NAMES, build_sets, headline, plot_frontier, run_suite, suite_headlines

    chosen = parse_list(policies, "--policy", POLICIES) or list(POLICIES)
    set_names = parse_list(sets, "--set", SET_NAMES) or list(SET_NAMES)
    try:
        bound_values = [float(b) for b in parse_list(bounds, "--bounds") or []]
    except ValueError as exc:
        raise BenchInputError(f"--bounds: {bounds!r} is not a comma list of numbers") from exc
    if not bound_values or not all(0.0 < b < 1.0 for b in bound_values):
        raise BenchInputError(f"--bounds: {bounds!r}: each bound must be in (0, 1)")
    if plot_out is not None:
        require_matplotlib("--plot")
    needs_sweeps = any(name != "synthetic" for name in set_names)
    groups = read_sweeps_file(sweeps, None) if needs_sweeps else {}
    eval_sets = build_sets(groups, set_names, folds_root=Path(folds_root), source_root=Path(source_root), thin=thin)
    settings = BenchSettings(
        job_s=job_s, iteration_s=iteration_s, seed=seed, clock_grid=clock_grid, sm_step_mhz=sm_step_mhz
    )
    with Bars() as bars:
        result = run_suite(
            eval_sets,
            bound_values,
            chosen,
            settings,
            models_root=Path(models_root),
            jobs=jobs,
            progress=echo,
            bar=bars.task,
        )
    head = headline(result)
    echo(format_headline(head))
    meta = {"sweeps": str(sweeps), "clock_grid": clock_grid, "job_s": job_s, "simulated": True}
    if json_out is not None:
        Path(json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(json_out).write_text(json.dumps({**meta, **result}, indent=1, default=json_default))
    if summary_out is not None:  # per set and bound, every policy's figures
        _write_json(summary_out, head)
    if metrics_out is not None:  # the headline `dvc metrics show` lists: gpoeo-rt per set at one bound
        for set_name, figures in suite_headlines(result).items():
            _write_json(Path(metrics_out) / f"suite-{set_name}.json", figures)
    if plot_out is not None:
        plot_frontier(result, plot_out)
    return head


def _write_json(path: str | Path, payload: Any) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(payload, indent=1, default=json_default) + "\n")


HEADLINE_COLUMNS: tuple[Column, ...] = (
    Column("set", left=True),
    Column("policy", left=True),
    Column("pct_of_oracle", ".1f"),
    Column("saving_pct", ".2f"),
    Column("slowdown_pct", ".2f"),
    Column("over_bound_pct", ".1f"),
    Column("worst_pct", ".2f", drop=2),
    Column("converge_s", ".1f", drop=1),
)


def format_headline(head: dict[str, Any], *, tty: bool | None = None, width: int | None = None) -> str:
    """One row per set, bound and policy (the bench's vocabulary, gpoeo_rt.tables), then who dominates our
    policies, one line per set and bound."""
    rows = [
        {"set": key, "policy": policy, **row}
        for key, data in head.items()
        for policy, row in data.items()
        if isinstance(row, dict) and "pct_of_oracle" in row
    ]
    lines = [render(HEADLINE_COLUMNS, rows, tty=tty, width=width)]
    for key, data in head.items():
        verdicts = [f"{ours} by {', '.join(by)}" for ours, by in data["dominated_by"].items() if by]
        lines.append(f"{key}: dominated: {'; '.join(verdicts) or 'none'}")
    return "\n".join(lines)
