"""Summaries of a bench run: means per (SKU, policy) and over all SKUs, the issue's targets, a text table and a
PNG (matplotlib, imported only when a plot is asked for)."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from gpoeo_rt.bench.runner import PolicyResult
from gpoeo_rt.daemon.accounting import bound_verdict
from gpoeo_rt.tables import Column, render

ALL_SKUS = "all"


def summarize(results: Iterable[PolicyResult], policies: Sequence[str]) -> list[dict[str, Any]]:
    """One row per (sku, policy) and per ("all", policy), policies in the given order."""
    groups: dict[tuple[str, str], list[PolicyResult]] = defaultdict(list)
    for r in results:
        groups[(r.sku, r.policy)].append(r)
        groups[(ALL_SKUS, r.policy)].append(r)
    order = {p: i for i, p in enumerate(policies)}
    rows = []
    for (sku, policy), rs in sorted(groups.items(), key=lambda kv: (kv[0][0] == ALL_SKUS, kv[0][0], order[kv[0][1]])):
        saving = statistics.mean(r.saving for r in rs)
        oracle = statistics.mean(r.oracle_saving for r in rs)
        converge = [r.converge_s for r in rs]
        rows.append(
            {
                "sku": sku,
                "policy": policy,
                "workloads": len(rs),
                "saving_pct": 100 * saving,
                "oracle_saving_pct": 100 * oracle,
                "pct_of_oracle": 100 * saving / oracle if oracle > 0 else None,
                "regret_pct": 100 * statistics.mean(r.regret for r in rs),
                "mean_slowdown_pct": 100 * statistics.mean(r.slowdown for r in rs),
                "max_slowdown_pct": 100 * max(r.slowdown for r in rs),
                "violations": sum(r.violation for r in rs),
                "violations_pct": 100 * sum(r.violation for r in rs) / len(rs),
                "exploration_pct": 100 * statistics.mean(r.exploration_frac for r in rs),
                "mean_converge_s": statistics.mean(converge),
                "p95_converge_s": float(np.percentile(converge, 95)),
                "mean_probes": statistics.mean(r.probes for r in rs),
                **claim_errors(rs),
            }
        )
    return rows


OURS: tuple[str, ...] = ("gpoeo-rt", "gpoeo-rt-markers")
BASELINES: tuple[str, ...] = ("sweep", "gpoeo-paper", "bandit")


def dominance(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[str]]:
    """For each of our policies in `rows` (one summary row per policy), the baselines that dominate it: more
    saving at no more mean slowdown and no more runs over the bound (issue 16's frontier comparison)."""
    by_policy = {r["policy"]: r for r in rows}
    out: dict[str, list[str]] = {}
    for ours in OURS:
        mine = by_policy.get(ours)
        if mine is None:
            continue
        out[ours] = [
            name
            for name in BASELINES
            if (b := by_policy.get(name)) is not None
            and b["saving_pct"] > mine["saving_pct"]
            and b["mean_slowdown_pct"] <= mine["mean_slowdown_pct"]
            and b["violations"] <= mine["violations"]
        ]
    return out


def _verdict(r: PolicyResult) -> str | None:
    claimed = None if r.claimed_slowdown is None else 100 * r.claimed_slowdown
    return bound_verdict(claimed, None if r.max_slowdown is None else 100 * r.max_slowdown)


def claim_errors(results: Sequence[PolicyResult]) -> dict[str, float | None]:
    """How far the runtime's own claims (what `gpoeo-rt status` would say) are from the truth, in points: mean
    (bias) and worst of claimed minus true, for the saving and the slowdown; the runs over their bound whose claim
    said within it; the worst claimed saving of a run that ended at the reference clocks (issue 20: 0 +- 0.3).
    None for policies without claims."""
    claimed = [r for r in results if r.claimed_saving is not None and r.claimed_slowdown is not None]
    if not claimed:
        return dict.fromkeys((*CLAIM_KEYS, *CLAIM_HONESTY_KEYS))
    saving = [100 * (r.claimed_saving - r.saving) for r in claimed]  # type: ignore[operator]
    slowdown = [100 * (r.claimed_slowdown - r.slowdown) for r in claimed]  # type: ignore[operator]
    # Over the bound while the report says "within" (the claim beyond its noise below the bound; accounting.py).
    hidden = [r for r in claimed if r.violation and _verdict(r) == "within"]
    under = [r for r in claimed if r.violation and r.claimed_slowdown <= (r.max_slowdown or 0.0)]  # type: ignore[operator]
    at_reference = [100 * r.claimed_saving for r in claimed if r.final_clocks == r.reference_clocks]  # type: ignore[operator]
    held = _errors(claimed, "held_saving")
    cost = _errors(claimed, "exploration_cost")
    held_at_reference = [
        100 * r.claimed_held_saving
        for r in claimed
        if r.final_clocks == r.reference_clocks and r.claimed_held_saving is not None
    ]
    saving_bias, saving_worst = bias_and_worst(saving)
    slowdown_bias, slowdown_worst = bias_and_worst(slowdown)
    return {
        "claim_saving_bias_pts": saving_bias,
        "claim_saving_worst_pts": saving_worst,
        "claim_slowdown_bias_pts": slowdown_bias,
        "claim_slowdown_worst_pts": slowdown_worst,
        "claim_hidden_violations": len(hidden),
        "claim_under_bound_violations": len(under),
        "claim_at_reference_worst_pts": max(at_reference, key=abs) if at_reference else None,
        "claim_held_saving_bias_pts": held[0],
        "claim_held_saving_worst_pts": held[1],
        "claim_exploration_cost_bias_pts": cost[0],
        "claim_exploration_cost_worst_pts": cost[1],
        "claim_held_at_reference_worst_pts": max(held_at_reference, key=abs) if held_at_reference else None,
    }


def bias_and_worst(diffs: Sequence[float]) -> tuple[float | None, float | None]:
    """Mean and the largest in magnitude of claimed-minus-true differences; (None, None) when there are none."""
    return (statistics.mean(diffs), max(diffs, key=abs)) if diffs else (None, None)


def _errors(results: Sequence[PolicyResult], key: str) -> tuple[float | None, float | None]:
    """Mean and worst of claimed minus true `key` (points), over the runs where both are known."""
    return bias_and_worst(
        [
            100 * (claimed - true)
            for r in results
            if (claimed := getattr(r, "claimed_" + key)) is not None and (true := getattr(r, key)) is not None
        ]
    )


CLAIM_KEYS = ("claim_saving_bias_pts", "claim_saving_worst_pts", "claim_slowdown_bias_pts", "claim_slowdown_worst_pts")
# Also in the summaries where they apply: runs over the bound that the report calls within it (its claim beyond
# the claim's noise below the bound), and those whose claim is at all below it; the worst claimed saving of the runs
# gpoeo left at reference (None: there were none).
CLAIM_HONESTY_KEYS = (
    "claim_hidden_violations",
    "claim_under_bound_violations",
    "claim_at_reference_worst_pts",
    # The saving's two parts (the held decisions' saving, exploration's cost): claimed minus true, and the held
    # saving claimed for the runs left at reference (issue 20: 0.0 +- 0.3).
    "claim_held_saving_bias_pts",
    "claim_held_saving_worst_pts",
    "claim_exploration_cost_bias_pts",
    "claim_exploration_cost_worst_pts",
    "claim_held_at_reference_worst_pts",
)


def check_targets(summary: Sequence[Mapping[str, Any]], wall_s: float, max_slowdown: float) -> dict[str, Any]:
    """The targets on the all-SKU means, for gpoeo-rt (power-signal timing) and gpoeo-rt-markers (step markers)
    separately: >= 95% of the oracle, runs over the bound <= 5% and none more than 1 point over it, not dominated
    by any baseline (`dominance`); the bench in <= 300 s."""
    rows = [r for r in summary if r["sku"] == ALL_SKUS]
    by_policy = {r["policy"]: r for r in rows}
    dominated = dominance(rows)
    out: dict[str, Any] = {"bench_wall_s_le_300": wall_s <= 300.0}
    for ours_name, by in dominated.items():
        ours = by_policy[ours_name]
        key = ours_name.replace("-", "_")
        out[f"{key}_pct_of_oracle_ge_95"] = ours["pct_of_oracle"] is not None and ours["pct_of_oracle"] >= 95.0
        out[f"{key}_violations_le_5pct"] = ours["violations_pct"] <= 5.0
        out[f"{key}_worst_within_bound_plus_1"] = ours["max_slowdown_pct"] <= 100.0 * max_slowdown + 1.0
        out[f"{key}_not_dominated"] = not by
    return out


def headline(summary: Sequence[Mapping[str, Any]], policy: str = "gpoeo-rt") -> dict[str, Any]:
    """The few figures `dvc metrics show` lists for a bench run (all SKUs, one policy), under the names every
    headline file shares (pipeline/headline.py): % of the oracle's saving, mean slowdown, runs over the bound."""
    row = next((r for r in summary if r["sku"] == ALL_SKUS and r["policy"] == policy), None)
    if row is None:
        return {}
    of_oracle = row["pct_of_oracle"]
    return {
        "pct_of_oracle": None if of_oracle is None else round(float(of_oracle), 1),
        "slowdown_pct": round(float(row["mean_slowdown_pct"]), 2),
        "over_bound_pct": round(float(row["violations_pct"]), 1),
    }


# The bench table: sku, policy and the headline figures always; the rest as the terminal's width allows.
BENCH_COLUMNS: tuple[Column, ...] = (
    Column("sku", left=True),
    Column("policy", left=True),
    Column("workloads", "d", drop=3),
    Column("saving_pct", ".2f"),
    Column("oracle_saving_pct", ".2f", drop=4),
    Column("pct_of_oracle", ".1f"),
    Column("regret_pct", ".2f", drop=6),
    Column("mean_slowdown_pct", ".2f"),
    Column("max_slowdown_pct", ".2f", drop=1),
    Column("violations_pct", ".1f", drop=2),
    Column("exploration_pct", ".2f", drop=7),
    Column("mean_converge_s", ".1f", drop=2),
    Column("p95_converge_s", ".1f", drop=8),
    Column("mean_probes", ".1f", drop=9),
)


def format_table(summary: Sequence[Mapping[str, Any]], *, tty: bool | None = None, width: int | None = None) -> str:
    """The summary as a table (gpoeo_rt.tables: fits a terminal, whole in a pipe or a log)."""
    return render(BENCH_COLUMNS, summary, tty=tty, width=width)


def plot(summary: Sequence[Mapping[str, Any]], path: str | Path, max_slowdown: float, grid: str = "") -> None:
    """Bars per SKU (and all): mean net saving and mean slowdown per policy, with the bound."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise RuntimeError(f"--plot {path}: plotting needs matplotlib (pip install matplotlib)") from exc
    skus = list(dict.fromkeys(r["sku"] for r in summary))
    policies = list(dict.fromkeys(r["policy"] for r in summary))
    by = {(r["sku"], r["policy"]): r for r in summary}
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    width = 0.8 / max(len(policies), 1)
    x = np.arange(len(skus))
    for i, policy in enumerate(policies):
        for ax, key in zip(axes, ("saving_pct", "mean_slowdown_pct"), strict=True):
            values = [by[(s, policy)][key] if (s, policy) in by else np.nan for s in skus]
            ax.bar(x + (i - (len(policies) - 1) / 2) * width, values, width, label=policy)
    axes[0].set_ylabel("mean energy saving vs default, net of exploration (%)")
    axes[1].set_ylabel("mean slowdown (%)")
    axes[1].axhline(100 * max_slowdown, color="k", linestyle="--", linewidth=1, label="bound")
    for ax in axes:
        ax.set_xticks(x, skus)
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(fontsize=8)
    on = f", {grid}" if grid else ""
    fig.suptitle(f"gpoeo-rt bench: simulated jobs driven by measured sweeps{on} (simulated, not hardware)")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
