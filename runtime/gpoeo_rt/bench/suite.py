"""The evaluation suite: every policy on the in-distribution set and on sets the models never saw, at several
slowdown bounds, compared on the saving-vs-slowdown frontier (`gpoeo-rt bench-suite`, DVC stage `bench_ood`).

Sets (each a group of simulated jobs and the rule that picks each job's honest model):
- `in-distribution`: the V100 and RTX 8000 sweeps, each workload with its leave-one-workload-out fold bundle;
- `leave-one-sku-out`: every SKU of the sweeps table judged by the generic model that never saw it (its
  leave-one-SKU-out fold, or the shipped generic bundle for SKUs it was never trained on); the two 158-workload
  SKUs are thinned to every `thin`-th workload so that no SKU dominates the mean;
- `leave-one-source-out`: workloads of a SKU with two sources, each judged by a model trained on the SKU's other
  source only (`pipeline/source_holdout.py` writes those bundles);
- `synthetic`: the job families of `bench.synthetic` on the simulated H200 (GPM counters, as a real one), with
  the shipped generic bundle (which never saw them).
Counters are realistic everywhere (NVML GPM on Hopper and later only). A policy is dominated on a set at a bound
when a baseline saves more with no more mean slowdown and no more runs over the bound.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gpoeo_rt.bench import synthetic
from gpoeo_rt.bench.report import ALL_SKUS, CLAIM_HONESTY_KEYS, CLAIM_KEYS, dominance, summarize
from gpoeo_rt.bench.runner import BenchInputError, BenchSettings, run_bench
from gpoeo_rt.bench.sweeps import Groups, faster_at_lower_clock

# A table whose time falls by more than this as the SM clock falls breaks physics (bench.sweeps.faster_at_lower_clock):
# each set also reports every policy on the tables that do not.
PHYSICS_TOLERANCE = 0.05

SET_NAMES: tuple[str, ...] = ("in-distribution", "leave-one-sku-out", "leave-one-source-out", "synthetic")
IN_DISTRIBUTION_SKUS: tuple[str, ...] = ("tesla-v100", "quadro-rtx-8000")


@dataclass(frozen=True)
class EvalSet:
    name: str
    groups: Groups
    folds_root: Path
    models: str  # runner.MODEL_SOURCES


def _thin(groups: Groups, skus: Sequence[str], every: int) -> Groups:
    """Every `every`-th workload (in name order) of the listed SKUs, all of the others."""
    kept: Groups = {}
    for sku in sorted({s for s, _ in groups}):
        keys = sorted(k for k in groups if k[0] == sku)
        step = every if sku in skus else 1
        kept.update({k: groups[k] for k in keys[::step]})
    return kept


def _source_held_out(groups: Groups, source_root: Path) -> Groups:
    """The workloads that a source-holdout fold index lists (their models never saw their source)."""
    kept: Groups = {}
    for index in sorted(source_root.glob("*/folds/index.json")):
        sku = index.parent.parent.name
        listed = json.loads(index.read_text()).get("folds", {})
        kept.update({(sku, w): groups[(sku, w)] for w in listed if (sku, w) in groups})
    if not kept:
        raise BenchInputError(
            f"{source_root}: no source-holdout fold index (run `dvc repro source_holdout` to build the bundles)"
        )
    return kept


def build_sets(
    groups: Groups,
    names: Sequence[str],
    *,
    folds_root: Path,
    source_root: Path,
    thin: int = 4,
) -> list[EvalSet]:
    sets = []
    for name in names:
        if name == "in-distribution":
            chosen = {k: v for k, v in groups.items() if k[0] in IN_DISTRIBUTION_SKUS}
            sets.append(EvalSet(name, chosen, folds_root, "sku-folds"))
        elif name == "leave-one-sku-out":
            sets.append(EvalSet(name, _thin(groups, IN_DISTRIBUTION_SKUS, thin), folds_root, "generic-folds"))
        elif name == "leave-one-source-out":
            sets.append(EvalSet(name, _source_held_out(groups, source_root), source_root, "sku-folds"))
        elif name == "synthetic":
            rows: dict[tuple[str, str], list[dict[str, object]]] = {}
            for row in synthetic.synthetic_rows():
                rows.setdefault((str(row["sku"]), str(row["workload"])), []).append(row)
            sets.append(EvalSet(name, rows, folds_root, "generic-folds"))
        else:
            raise BenchInputError(f"evaluation set {name!r}: choose from {', '.join(SET_NAMES)}")
        if not sets[-1].groups:
            raise BenchInputError(f"evaluation set {name!r} has no workloads in the sweeps table")
    return sets


def run_suite(
    sets: Sequence[EvalSet],
    bounds: Sequence[float],
    policies: Sequence[str],
    settings: BenchSettings,
    *,
    models_root: Path,
    jobs: int,
    progress: Callable[[str], None] | None = None,
    bar: Callable[[str], Callable[[int, int], None]] | None = None,
) -> dict[str, Any]:
    """Every set at every bound; returns {"sets": {set: {bound: {"summary", "dominated", "wall_s", "runs"}}}}.
    `progress` gets a line per set and bound; `bar(description)` gives the jobs' progress callback of each."""
    out: dict[str, Any] = {"bounds": list(bounds), "policies": list(policies), "sets": {}}
    for eval_set in sets:
        per_bound: dict[str, Any] = {}
        broken = {k for k, rows in eval_set.groups.items() if faster_at_lower_clock(rows) > PHYSICS_TOLERANCE}
        out.setdefault("tables_breaking_physics", {})[eval_set.name] = sorted(f"{sku}/{w}" for sku, w in broken)
        for bound in bounds:
            bounded = replace(
                settings,
                max_slowdown=bound,
                sweep=replace(settings.sweep, max_slowdown=bound),
                paper=replace(settings.paper, time_loss_bound=bound),
                bandit=replace(settings.bandit, max_slowdown=bound),
            )
            run = run_bench(
                eval_set.groups,
                policies,
                bounded,
                folds_root=eval_set.folds_root,
                models_root=models_root,
                jobs=jobs,
                models=eval_set.models,
                progress=None if bar is None else bar(f"{eval_set.name} at {bound:.0%}"),
            )
            summary = summarize(run.results, policies)
            overall = [r for r in summary if r["sku"] == ALL_SKUS]
            # the same on the tables that keep to physics (time does not fall as the clock falls)
            physical = [r for r in run.results if (r.sku, r.workload) not in broken]
            overall_physical = [r for r in summarize(physical, policies) if r["sku"] == ALL_SKUS] if physical else []
            per_bound[f"{bound:g}"] = {
                "summary": summary,
                "summary_physical": overall_physical,
                "dominated_physical": dominance(overall_physical) if overall_physical else {},
                "dominated": dominance(overall),
                "wall_s": run.wall_s,
                "models": run.models,
                "runs": [vars(r) for r in run.results],
            }
            if progress is not None:
                ours = next((r for r in overall if r["policy"] == "gpoeo-rt"), None)
                figure = f", gpoeo-rt {ours['pct_of_oracle']:.1f}% of the oracle" if ours else ""
                progress(f"{eval_set.name} at {bound:.0%}: {len(eval_set.groups)} jobs, {run.wall_s:.0f} s{figure}")
        out["sets"][eval_set.name] = per_bound
    return out


def headline(result: dict[str, Any]) -> dict[str, Any]:
    """The small metrics file: per set and bound, each policy's % of the oracle, mean saving and slowdown, runs
    over the bound, worst slowdown, time to its final config, exploration energy (% of the default run's), and
    who dominates our policies."""
    out: dict[str, Any] = {}
    for set_name, per_bound in result["sets"].items():
        for bound, data in per_bound.items():
            key = f"{set_name}@{float(bound):.0%}"
            rows = {r["policy"]: r for r in data["summary"] if r["sku"] == ALL_SKUS}
            out[key] = {
                "jobs": next(iter(rows.values()))["workloads"] if rows else 0,
                **{
                    policy: {
                        "pct_of_oracle": _round(r["pct_of_oracle"]),
                        "saving_pct": _round(r["saving_pct"]),
                        "slowdown_pct": _round(r["mean_slowdown_pct"]),
                        "over_bound_pct": _round(r["violations_pct"]),
                        "worst_pct": _round(r["max_slowdown_pct"]),
                        "converge_s": _round(r["mean_converge_s"]),
                        "exploration_pct": _round(r["exploration_pct"]),
                        **{k: _round(r[k]) for k in (*CLAIM_KEYS, *CLAIM_HONESTY_KEYS) if r.get(k) is not None},
                    }
                    for policy, r in rows.items()
                    if policy != "default"
                },
                "dominated_by": data["dominated"],
            }
    return out


# The set names as headline file stems (metrics/headline/suite-<stem>.json), short so `dvc metrics show` stays narrow.
HEADLINE_STEMS = {
    "in-distribution": "in-dist",
    "leave-one-sku-out": "sku-out",
    "leave-one-source-out": "source-out",
    "synthetic": "synthetic",
}
HEADLINE_BOUND = 0.05


def suite_headlines(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per set, gpoeo-rt's headline (bench.report.headline) at the 5% bound (else the first bound run)."""
    from gpoeo_rt.bench.report import headline as bench_headline

    out: dict[str, dict[str, Any]] = {}
    for set_name, per_bound in result["sets"].items():
        key = min(per_bound, key=lambda b: abs(float(b) - HEADLINE_BOUND))
        out[HEADLINE_STEMS.get(set_name, set_name)] = bench_headline(per_bound[key]["summary"])
    return out


def _round(value: float | None) -> float | None:
    return None if value is None else round(float(value), 2)


def plot_frontier(result: dict[str, Any], path: str | Path) -> None:
    """One panel per set: mean saving against mean slowdown, one line per policy through its bounds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sets = list(result["sets"])
    ncols = min(2, len(sets))
    nrows = -(-len(sets) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, 3.6 * nrows + 0.8), squeeze=False)
    for ax, set_name in zip(axes.flat, sets, strict=False):
        per_bound = result["sets"][set_name]
        for policy in result["policies"]:
            if policy == "default":
                continue
            points = []
            for data in per_bound.values():
                row = next(r for r in data["summary"] if r["sku"] == ALL_SKUS and r["policy"] == policy)
                points.append((row["mean_slowdown_pct"], row["saving_pct"]))
            xs, ys = zip(*sorted(points), strict=True)
            style = "-o" if policy.startswith("gpoeo-rt") else ("--" if policy == "oracle" else ":s")
            ax.plot(xs, ys, style, label=policy, markersize=4)
        ax.set_title(set_name, fontsize=10)
        ax.set_xlabel("mean slowdown (%)")
        ax.set_ylabel("mean energy saving (%)")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(sets) :]:
        ax.set_visible(False)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8, frameon=False)
    bounds = ", ".join(f"{b:.0%}" for b in result["bounds"])
    fig.suptitle(f"Saving vs slowdown, one point per bound ({bounds}); simulated jobs", fontsize=10)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
