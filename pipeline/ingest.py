"""DVC stage `ingest`: parse every raw source into one normalized sweeps table (and a power-limit table).

Outputs: data/processed/sweeps.parquet and .csv, data/processed/powerlimit.parquet, data/processed/ingest_report.json
(every rejected row with file, line and reason) and metrics/ingest.json (its counts, git-tracked).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from gpoeo_pipeline.headline import ingest_headline, write_headline
from gpoeo_pipeline.params import load_section
from gpoeo_pipeline.schema import (
    POWERLIMIT_COLUMNS,
    SWEEP_COLUMNS,
    conform,
    validate_sweeps,
)
from gpoeo_pipeline.sources import POWERLIMIT_SOURCES, SWEEP_SOURCES, ParsedSource, Parser, load_all, sweep_parser


def parse_sources(
    raw_root: Path, names: list[str], registry: dict[str, Parser], *, recognise: bool = False
) -> list[ParsedSource]:
    """Run the named parsers over `raw_root/<name>/`; an unknown name is an error that lists the known ones.

    With `recognise`, a name without a registered parser may be a folder that a known format recognises (a
    `gpoeo-collect` collection, named after its SKU)."""
    parsers = {n: registry.get(n) or (sweep_parser(raw_root, n) if recognise else None) for n in names}
    unknown = [n for n, p in parsers.items() if p is None]
    if unknown:
        formats = " or a gpoeo-collect folder (with collect.json)" if recognise else ""
        raise KeyError(f"params.yaml ingest: unknown sources {unknown}; known: {sorted(registry)}{formats}")
    return [parser(raw_root / name) for name, parser in parsers.items() if parser is not None]


def combine(parsed: list[ParsedSource], columns: dict[str, str], key: tuple[str, ...], where: str) -> pd.DataFrame:
    """Concatenate parsed sources into one validated table in schema order."""
    frames = [conform(p.frame, columns, f"{where}[{p.report.source}]") for p in parsed]
    table = pd.concat(frames, ignore_index=True, sort=False) if frames else pd.DataFrame(columns=list(columns))
    table = conform(table, columns, where)
    validate_sweeps(table, key_columns=key, where=where)
    return table.sort_values(list(key), kind="stable").reset_index(drop=True)


def summarize_report(report: dict[str, Any]) -> dict[str, Any]:
    """The git-tracked summary of the report: counts per source and per rejection reason (no row listings)."""
    summary: dict[str, Any] = {}
    for table in ("sweeps", "powerlimit"):
        summary[table] = {"rows": report[table]["rows"]}
        for entry in report[table]["sources"]:
            summary[table][entry["source"]] = {
                key: entry[key] for key in ("rows_read", "rows_kept", "rows_rejected", "rejected_by_reason")
            }
    return summary


def main() -> None:
    params = load_section("ingest")
    raw_root = Path(params["raw_dir"])
    out_dir = Path(params["out_dir"])
    out_dir.mkdir(parents=True, exist_ok=True)
    load_all()

    sweeps_parsed = parse_sources(raw_root, list(params["sweep_sources"]), SWEEP_SOURCES, recognise=True)
    sweeps = combine(sweeps_parsed, SWEEP_COLUMNS, ("sku", "workload", "sm_clock_mhz", "mem_clock_mhz"), "sweeps")
    sweeps.to_parquet(out_dir / "sweeps.parquet", index=False)
    sweeps.to_csv(out_dir / "sweeps.csv", index=False)

    pl_parsed = parse_sources(raw_root, list(params["powerlimit_sources"]), POWERLIMIT_SOURCES)
    powerlimit = combine(pl_parsed, POWERLIMIT_COLUMNS, ("sku", "workload", "power_limit_w"), "powerlimit")
    powerlimit.to_parquet(out_dir / "powerlimit.parquet", index=False)

    report = {
        "sweeps": {
            "rows": len(sweeps),
            "skus": sorted(sweeps["sku"].unique().tolist()),
            "sources": [p.report.as_dict() for p in sweeps_parsed],
        },
        "powerlimit": {
            "rows": len(powerlimit),
            "sources": [p.report.as_dict() for p in pl_parsed],
        },
    }
    (out_dir / "ingest_report.json").write_text(json.dumps(report, indent=2) + "\n")
    metrics_path = Path(params["metrics"])
    metrics_path.parent.mkdir(parents=True, exist_ok=True)
    summary = summarize_report(report)
    metrics_path.write_text(json.dumps(summary, indent=2) + "\n")
    write_headline("ingest", ingest_headline(summary))
    print(f"ingest: {len(sweeps)} sweep rows over {sweeps['sku'].nunique()} SKUs, {len(powerlimit)} power-limit rows")


if __name__ == "__main__":
    main()
