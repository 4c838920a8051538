"""Markdown tables of the bench suite's results (docs/bench.md): an overview (gpoeo-rt on every set and bound, on
all tables and on the tables that keep to physics), then one table per set and bound with every policy.

    python scripts/bench_tables.py [data/bench/results_ood.json]

Reads the suite's full results (`gpoeo-rt bench-suite --json`, the `bench_ood` stage's data/bench/results_ood.json).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

COLUMNS = (
    ("policy", "policy", "{}"),
    ("saving_pct", "saving", "{:.2f}%"),
    ("pct_of_oracle", "% of oracle", "{:.1f}%"),
    ("mean_slowdown_pct", "mean slowdown", "{:.2f}%"),
    ("max_slowdown_pct", "worst", "{:.2f}%"),
    ("violations_pct", "runs over", "{:.1f}%"),
    ("exploration_pct", "exploration", "{:.2f}%"),
    ("mean_converge_s", "final config at", "{:.1f} s"),
    ("mean_probes", "probes", "{:.1f}"),
)


def pct(table: dict, policy: str) -> str:
    value = table.get(policy, {}).get("pct_of_oracle")
    return "-" if value is None else f"{value:.1f}%"


def _dominated(data: dict, key: str) -> str:
    found = data.get(key, {}).get("gpoeo-rt") or []
    return "by " + ", ".join(found) if found else "no"


def overview(result: dict) -> None:
    """One row per set and bound: gpoeo-rt against its markers twin and sweep, on all tables and on physical ones."""
    print(
        "| set | bound | jobs | gpoeo-rt: % of oracle | mean slowdown | runs over | worst | final config at "
        "| markers: % of oracle | sweep: % of oracle | dominated | physical tables | gpoeo-rt there "
        "| markers there | sweep there | dominated there |"
    )
    print("|" + "---|" * 16)
    for set_name, per_bound in result["sets"].items():
        broken = len(result.get("tables_breaking_physics", {}).get(set_name, []))
        for bound, data in per_bound.items():
            rows = {r["policy"]: r for r in data["summary"] if r["sku"] == "all"}
            phys = {r["policy"]: r for r in data.get("summary_physical", [])}
            ours = rows["gpoeo-rt"]

            print(
                f"| {set_name} | {float(bound):.0%} | {ours['workloads']} | {pct(rows, 'gpoeo-rt')} "
                f"| {ours['mean_slowdown_pct']:.2f}% | {ours['violations_pct']:.1f}% | {ours['max_slowdown_pct']:.2f}% "
                f"| {ours['mean_converge_s']:.0f} s | {pct(rows, 'gpoeo-rt-markers')} | {pct(rows, 'sweep')} "
                f"| {_dominated(data, 'dominated')} | {ours['workloads'] - broken} | {pct(phys, 'gpoeo-rt')} "
                f"| {pct(phys, 'gpoeo-rt-markers')} | {pct(phys, 'sweep')} | {_dominated(data, 'dominated_physical')} |"
            )


def main(argv: list[str]) -> int:
    path = Path(argv[1] if len(argv) > 1 else "data/bench/results_ood.json")
    try:
        result = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        print(f"error: {path}: {exc} (run `dvc repro bench_ood` first)", file=sys.stderr)
        return 2
    overview(result)
    for set_name, per_bound in result["sets"].items():
        for bound, data in per_bound.items():
            rows = [r for r in data["summary"] if r["sku"] == "all" and r["policy"] != "default"]
            jobs = rows[0]["workloads"] if rows else 0
            dominated = {k: v for k, v in data["dominated"].items() if v}
            print(f"\n**{set_name}, bound {float(bound):.0%}** ({jobs} jobs; dominated: {dominated or 'none'})\n")
            physical = {r["policy"]: r for r in data.get("summary_physical", [])}
            broken = len(result.get("tables_breaking_physics", {}).get(set_name, []))
            dominated_physical = {k: v for k, v in data.get("dominated_physical", {}).items() if v}
            print(
                f"(last column: % of the oracle on the {jobs - broken} tables that keep to physics; "
                f"dominated there: {dominated_physical or 'none'})\n"
            )
            print("| " + " | ".join(title for _, title, _ in COLUMNS) + " | % of oracle, physical |")
            print("|" + "---|" * (len(COLUMNS) + 1))
            for r in rows:
                cells = [fmt.format(r[key]) if r[key] is not None else "-" for key, _, fmt in COLUMNS]
                kept = physical.get(r["policy"], {}).get("pct_of_oracle")
                cells.append("-" if kept is None else f"{kept:.1f}%")
                print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
