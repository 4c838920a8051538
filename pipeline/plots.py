"""PNG plots for the evaluate stage (matplotlib, no network: DVC's HTML plots would fetch vega from a CDN)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: stages run on machines without a display
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd


def plot_pred_vs_measured(predictions: pd.DataFrame, out: Path, title: str) -> None:
    """Cross-validated predicted vs measured time, power and energy ratios, model and physics baseline."""
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2))
    for ax, target in zip(axes, ("time", "power", "energy"), strict=True):
        measured = predictions[f"{target}_ratio"]
        ax.scatter(
            measured,
            predictions[f"base_{target}_ratio"],
            s=4,
            alpha=0.35,
            label="physics baseline",
            color="tab:gray",
        )
        ax.scatter(measured, predictions[f"pred_{target}_ratio"], s=4, alpha=0.6, label="XGBoost (out-of-fold)")
        low, high = float(measured.min()), float(measured.max())
        ax.plot([low, high], [low, high], color="black", linewidth=0.8)
        ax.set_xlabel(f"measured {target} ratio")
        ax.set_ylabel(f"predicted {target} ratio")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.legend(fontsize=7)
    fig.suptitle(f"{title}: cross-validated predictions vs measurements")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def plot_pareto(
    predictions: pd.DataFrame, decisions: pd.DataFrame, out: Path, max_workloads: int, max_slowdown: float
) -> None:
    """Per workload: measured (time, energy) of every config, its measured Pareto front, the model's pick and
    the measured optimum within the slowdown bound."""
    keys = decisions[["sku", "workload"]].drop_duplicates()
    if len(keys) > max_workloads:  # an even spread, deterministic
        keys = keys.iloc[np.linspace(0, len(keys) - 1, max_workloads).round().astype(int)]
    n = len(keys)
    cols = min(4, n)
    rows_n = int(np.ceil(n / cols))
    fig, axes = plt.subplots(rows_n, cols, figsize=(3.4 * cols, 2.9 * rows_n), squeeze=False)
    for ax, (_, key) in zip(axes.flat, keys.iterrows(), strict=False):
        rows = predictions.loc[(predictions["sku"] == key["sku"]) & (predictions["workload"] == key["workload"])]
        rows = rows.sort_values("time_ratio")
        ax.scatter(rows["time_ratio"], rows["energy_ratio"], s=10, color="tab:gray", label="measured configs")
        front = rows.loc[rows["energy_ratio"] <= rows["energy_ratio"].cummin()]
        ax.plot(
            front["time_ratio"],
            front["energy_ratio"],
            color="tab:blue",
            linewidth=1,
            label="measured Pareto front",
        )
        decision = decisions.loc[(decisions["sku"] == key["sku"]) & (decisions["workload"] == key["workload"])].iloc[0]
        ax.scatter(
            [decision["pick_time_ratio"]],
            [decision["pick_energy_ratio"]],
            marker="x",
            s=60,
            color="tab:red",
            label="model pick",
        )
        best = rows.loc[
            rows["sm_clock_mhz"].eq(decision["best_sm_clock_mhz"])
            & rows["mem_clock_mhz"].eq(decision["best_mem_clock_mhz"])
        ]
        ax.scatter(
            best["time_ratio"],
            best["energy_ratio"],
            marker="o",
            s=60,
            facecolors="none",
            edgecolors="tab:green",
            label="measured optimum",
        )
        ax.axvline(1.0 + max_slowdown, color="tab:red", linewidth=0.6, linestyle="--")
        ax.set_title(str(key["workload"])[:32], fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=6)
    fig.supxlabel("time ratio (vs reference clocks)")
    fig.supylabel("energy ratio")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
