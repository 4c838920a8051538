"""Source `zeus`: DNN training under GPU power limits (Zeus, NSDI'23), into the power-limit table.

Files (data/raw/zeus/trace/, see the folder's README): `summary_power_<gpu>.csv` with columns dataset,
network, batch_size, optimizer, power_limit [W], time_per_epoch [s], average_power [W]; one measurement per
(config, power limit).

- workload = "<network>/<dataset>-b<batch_size>-<optimizer>": the network before the '/' is the program,
  the same CV-group convention as the sweeps.
- time_s = time_per_epoch (seconds per training epoch, not per iteration: the files lack the iteration
  count), power_w = average_power, energy_j = time_s x power_w (energy per epoch; not measured separately).
- ref = the highest power limit measured for the workload (the GPU's maximum for every workload in these
  files; a workload without it would still get its highest present one, with a note).
- Average power above the limit (a few rows at the lowest limits: the limit is enforced as a moving
  average and the board may not get down to it) is kept as measured; the count is in the notes.
- A repeated (sku, workload, power_limit) key is an error: no rule picks one of two measurements.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from gpoeo_pipeline.schema import POWERLIMIT_COLUMNS, IngestError, SourceReport, conform
from gpoeo_pipeline.sources import POWERLIMIT_SOURCES, ParsedSource
from gpoeo_pipeline.sources.nvdvfs import (
    POWER_RANGE_W,
    RawRow,
    check_raw_files,
    check_unique,
    number,
    read_files,
    read_rows,
    text,
)

SOURCE = "zeus"
KEY: tuple[str, ...] = ("sku", "workload", "power_limit_w")

# path under data/raw/zeus/ -> sku. A CSV in the folder without an entry here is an error.
FILES: dict[str, str] = {
    "trace/summary_power_a40.csv": "a40",
    "trace/summary_power_p100.csv": "tesla-p100",
    "trace/summary_power_rtx6000.csv": "quadro-rtx-6000",
    "trace/summary_power_v100.csv": "tesla-v100",
}
COLUMNS: tuple[str, ...] = (
    "dataset",
    "network",
    "batch_size",
    "optimizer",
    "power_limit",
    "time_per_epoch",
    "average_power",
)
# Average power this far above the limit is counted in the notes (measured as is, so kept).
OVER_LIMIT_NOTE = 0.05


def _watts(label: str, row: RawRow, column: str) -> float:
    """A power value in W; outside (0, 1000] W is a unit or logging error (mW would show as > 1000)."""
    value = number(label, row, column)
    low, high = POWER_RANGE_W
    if not low < value <= high:
        raise IngestError(label, row.line, f"implausible {column} {value} W (expected in ({low}, {high}] W)")
    return value


def read_file(path: Path, label: str, sku: str) -> tuple[pd.DataFrame, int]:
    """Parse one trace file into power-limit rows (plus origin columns `_file`, `_line`)."""
    _, rows = read_rows(path, label, required=COLUMNS, allowed=COLUMNS)
    records: list[dict[str, object]] = []
    for row in rows:
        dataset, network, optimizer = (text(label, row, c) for c in ("dataset", "network", "optimizer"))
        batch = number(label, row, "batch_size")
        if batch <= 0 or not batch.is_integer():
            raise IngestError(label, row.line, f"batch_size={batch:g} is not a positive integer")
        time_s = number(label, row, "time_per_epoch")
        if time_s <= 0:
            raise IngestError(label, row.line, f"non-positive time_per_epoch {time_s} s")
        records.append(
            {
                "sku": sku,
                "workload": f"{network}/{dataset}-b{int(batch)}-{optimizer}",
                "power_limit_w": _watts(label, row, "power_limit"),
                "time_s": time_s,
                "power_w": _watts(label, row, "average_power"),
                "_file": label,
                "_line": row.line,
            }
        )
    return pd.DataFrame.from_records(records), len(rows)


def parse_files(files: Sequence[tuple[Path, str]], root: Path, source: str = SOURCE) -> ParsedSource:
    """Parse (path, sku) files; paths in messages and the report are relative to `root`."""
    report = SourceReport(source=source)
    parsed = read_files(files, root, read_file, report)
    frame = pd.concat([rows for _, _, rows in parsed], ignore_index=True)
    check_unique(frame, KEY)

    top = frame.groupby(["sku", "workload"])["power_limit_w"].transform("max")
    frame["ref"] = frame["power_limit_w"] == top
    sku_max = frame.groupby("sku")["power_limit_w"].transform("max")
    below = frame.loc[frame["ref"] & (top < sku_max)]
    if len(below):
        report.notes.append(
            f"{len(below)} workload(s) lack their GPU's max power limit; ref = their highest present: "
            + ", ".join(f"{r.sku} {r.workload} @ {r.power_limit_w:g} W" for r in below.itertuples())
        )
    over = frame["power_w"] > frame["power_limit_w"] * (1 + OVER_LIMIT_NOTE)
    report.notes.extend(
        [
            "time_s = time per epoch (s); energy_j = time_s x average_power (energy per epoch)",
            "ref = the highest power limit measured for each workload",
            f"{int(over.sum())} row(s) average more than {OVER_LIMIT_NOTE:.0%} above their power limit "
            "(kept as measured; per sku: "
            + ", ".join(f"{s} {n}" for s, n in frame.loc[over].groupby("sku").size().items())
            + ")",
        ]
    )
    frame["source"] = source
    frame["energy_j"] = frame["time_s"] * frame["power_w"]
    frame = frame.drop(columns=["_file", "_line"]).sort_values(list(KEY), kind="stable")
    frame = conform(frame, POWERLIMIT_COLUMNS, source)
    report.rows_kept = len(frame)
    return ParsedSource(frame, report)


def parse(raw_dir: Path) -> ParsedSource:
    """Parse data/raw/zeus/ (every file in FILES)."""
    check_raw_files(raw_dir, FILES, (), "zeus.FILES")
    return parse_files([(raw_dir / name, sku) for name, sku in FILES.items()], raw_dir.parent)


POWERLIMIT_SOURCES[SOURCE] = parse
