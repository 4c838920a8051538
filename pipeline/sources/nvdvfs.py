"""Source `nv-dvfs`: NV-DVFS-Benchmark SM-clock sweeps with DCGM counters (V100 and Quadro RTX 8000).

Files (data/raw/nv-dvfs/, see its README): `<gpu>-dvfs-real-profile.csv` (20 CUDA SDK / Rodinia apps x 10 SM
clocks) and `<gpu>-dvfs-microbenchmark-profile.csv` (138 microbenchmark configs x 10 SM clocks); the memory
clock is fixed. Columns: DCGM fields SMACT, SMOCC, TENSO, DRAMA, FP64A, FP32A, FP16A (fractions, averaged over
the run at that clock), argNo, average_power (W), benchmark, core_frequency (MHz), kernel, memory_frequency
(MHz), time (kernel time, ms).

The CSV reading and the key/reference rules here are shared with `nvdvfs_history` (same authors, same
layout).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np
import pandas as pd

from gpoeo_pipeline.schema import KEY_COLUMNS, SWEEP_COLUMNS, IngestError, Rejection, SourceReport, conform
from gpoeo_pipeline.sources import SWEEP_SOURCES, ParsedSource
from gpoeo_rt.features import DCGM_FIELD_TO_FEATURE, FEATURE_NAMES

SOURCE = "nv-dvfs"

# file name -> sku. Listed explicitly: a CSV that appears in the folder without an entry here is an error, so
# new data is never ignored by accident.
FILES: dict[str, str] = {
    "v100-dvfs-real-profile.csv": "tesla-v100",
    "v100-dvfs-microbenchmark-profile.csv": "tesla-v100",
    "rtx8000-dvfs-real-profile.csv": "quadro-rtx-8000",
    "rtx8000-dvfs-microbenchmark-profile.csv": "quadro-rtx-8000",
}

# NV-DVFS column -> feature, through the DCGM profiling field ids that the runtime reads too.
DCGM_COLUMNS: dict[str, str] = {
    "SMACT": DCGM_FIELD_TO_FEATURE[1002],
    "SMOCC": DCGM_FIELD_TO_FEATURE[1003],
    "TENSO": DCGM_FIELD_TO_FEATURE[1004],
    "DRAMA": DCGM_FIELD_TO_FEATURE[1005],
    "FP64A": DCGM_FIELD_TO_FEATURE[1006],
    "FP32A": DCGM_FIELD_TO_FEATURE[1007],
    "FP16A": DCGM_FIELD_TO_FEATURE[1008],
}
ID_COLUMNS: tuple[str, ...] = ("benchmark", "kernel", "argNo")
NUMBER_COLUMNS: tuple[str, ...] = ("core_frequency", "memory_frequency", "time", "average_power")
# The files have exactly these columns; anything else means a different export format, so it is an error.
EXPECTED_COLUMNS: frozenset[str] = frozenset(DCGM_COLUMNS) | frozenset(ID_COLUMNS) | frozenset(NUMBER_COLUMNS)

# Board power outside this range (W) is a unit or logging error (mW would show as > 1000 W).
POWER_RANGE_W: tuple[float, float] = (0.0, 1000.0)

# Columns compared to tell an exact repeat of a row (rejected) from a conflicting one (an error).
VALUE_COLUMNS: tuple[str, ...] = ("time_s", "power_w", *FEATURE_NAMES)


# ---- shared helpers (also used by nvdvfs_history) ----------------------------------------------------------


@dataclass(frozen=True)
class RawRow:
    """One data record of a CSV file: its 1-based line (header = 1) and its fields by column name."""

    line: int
    fields: dict[str, str]


def read_rows(
    path: Path, label: str, required: Collection[str], allowed: Collection[str] | None = None
) -> tuple[list[str], list[RawRow]]:
    """Read a CSV file into (header, rows), checking the header and every record's field count.

    `required` columns must be in the header; if `allowed` is given, no other column may be. Blank lines are
    not records; a file without any data record is an error. Raises IngestError naming `label` and the line.
    """
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if header is None:
            raise IngestError(label, 1, "empty file: no header")
        missing = [c for c in required if c not in header]
        if missing:
            raise IngestError(label, 1, f"missing required column(s) {missing}")
        if allowed is not None:
            unknown = [c for c in header if c not in allowed]
            if unknown:
                raise IngestError(label, 1, f"unknown column(s) {unknown}")
        if len(set(header)) != len(header):
            raise IngestError(label, 1, f"repeated column name in header {header}")
        rows: list[RawRow] = []
        for record in reader:
            # csv's line_num is the physical line just read; the data have no multi-line quoted fields.
            line = reader.line_num
            if not record or all(not field.strip() for field in record):
                continue
            if len(record) != len(header):
                raise IngestError(label, line, f"expected {len(header)} fields, found {len(record)}")
            rows.append(RawRow(line, dict(zip(header, record, strict=True))))
    if not rows:
        raise IngestError(label, 2, "no data rows")
    return header, rows


def number(label: str, row: RawRow, column: str, *, required: bool = True) -> float:
    """The row's value of `column` as a finite float; an empty optional value is NaN. Raises IngestError."""
    raw = row.fields[column].strip()
    if not raw:
        if required:
            raise IngestError(label, row.line, f"missing value in required column {column!r}")
        return math.nan
    try:
        value = float(raw)
    except ValueError:
        raise IngestError(label, row.line, f"non-numeric {column}={raw!r}") from None
    if not math.isfinite(value):
        raise IngestError(label, row.line, f"non-finite {column}={raw!r}")
    return value


def text(label: str, row: RawRow, column: str) -> str:
    """The row's non-empty string value of `column`. Raises IngestError if it is empty."""
    value = row.fields[column].strip()
    if not value:
        raise IngestError(label, row.line, f"missing value in required column {column!r}")
    return value


def check_measurement(label: str, row: RawRow, sm_mhz: float, mem_mhz: float, time_s: float, power_w: float) -> None:
    """Reject impossible clocks, times and powers with the file and line (no silent repair)."""
    if sm_mhz <= 0 or mem_mhz <= 0:
        raise IngestError(label, row.line, f"non-positive clock sm={sm_mhz} MHz mem={mem_mhz} MHz")
    if time_s <= 0:
        raise IngestError(label, row.line, f"non-positive time {time_s} s")
    low, high = POWER_RANGE_W
    if not low < power_w <= high:
        raise IngestError(label, row.line, f"implausible power {power_w} W (expected in ({low}, {high}] W)")


def check_fraction(label: str, row: RawRow, name: str, value: float) -> float:
    """A feature must be a fraction in [0, 1] (NaN allowed); values outside raise, they are never clipped."""
    if not math.isnan(value) and not 0.0 <= value <= 1.0:
        raise IngestError(label, row.line, f"{name}={value!r} outside [0, 1]")
    return value


def _same_values(a: pd.Series, b: pd.Series) -> bool:
    """Equal with NaN == NaN (an exact repeat of a row that lacks some counter is still an exact repeat)."""
    return all((pd.isna(x) and pd.isna(y)) or x == y for x, y in zip(a, b, strict=True))


def finalize(frame: pd.DataFrame, source: str) -> tuple[pd.DataFrame, list[Rejection]]:
    """Apply the key and reference rules to parsed rows (which carry their origin in `_file` and `_line`).

    - Key (sku, workload, sm, mem) repeated: an exact repeat of an earlier row (same time, power and counters)
      is rejected; a repeat with different values is an error, since there is no rule to pick one measurement.
    - Reference: the SKU's top config (its max SM clock and max memory clock over all its rows), so every
      workload of a SKU is normalised to the same clocks. A workload without a row there is rejected, row by
      row.
    Returns the kept rows with `ref` and `energy_j` set and the origin columns dropped, and the rejections.
    """
    rejections: list[Rejection] = []
    frame = frame.reset_index(drop=True)
    keys = list(KEY_COLUMNS)
    dup = frame.duplicated(keys, keep=False)
    drop: list[int] = []
    if dup.any():
        value_columns = [c for c in VALUE_COLUMNS if c in frame.columns] + sorted(
            c for c in frame.columns if c.startswith("x_")
        )
        for _, group in frame.loc[dup].groupby(keys, sort=False):
            first = group.iloc[0]
            for index, other in group.iloc[1:].iterrows():
                if _same_values(first[value_columns], other[value_columns]):
                    reason = f"exact duplicate of {first['_file']}:{first['_line']}"
                    rejections.append(Rejection(other["_file"], int(other["_line"]), reason))
                    drop.append(int(index))
                else:
                    key = {k: first[k] for k in keys}
                    raise IngestError(
                        other["_file"],
                        int(other["_line"]),
                        f"duplicate key {key} with different values than {first['_file']}:{first['_line']}",
                    )
    frame = frame.drop(index=drop)

    top_sm = frame.groupby("sku")["sm_clock_mhz"].transform("max")
    top_mem = frame.groupby("sku")["mem_clock_mhz"].transform("max")
    frame["ref"] = (frame["sm_clock_mhz"] == top_sm) & (frame["mem_clock_mhz"] == top_mem)
    has_ref = frame.groupby(["sku", "workload"])["ref"].transform("any")
    for _, row in frame.loc[~has_ref].iterrows():
        reason = "no reference config (workload lacks its SKU's max SM and memory clock)"
        rejections.append(Rejection(row["_file"], int(row["_line"]), reason))
    frame = frame.loc[has_ref].copy()

    frame["source"] = source
    frame["energy_j"] = frame["time_s"] * frame["power_w"]
    frame = frame.drop(columns=["_file", "_line"])
    for name in FEATURE_NAMES:
        if name not in frame.columns:
            frame[name] = np.nan
    frame = frame.sort_values(keys, kind="stable")
    return conform(frame, SWEEP_COLUMNS, source), rejections


SpecT = TypeVar("SpecT")  # what a parser needs to know about one file (its SKU, or a spec)


def check_unique(frame: pd.DataFrame, key: Sequence[str]) -> None:
    """Raise IngestError at the second row of the first repeated key, naming the first one's line."""
    dup = frame.duplicated(list(key), keep="first")
    if dup.any():
        second = frame.loc[dup].iloc[0]
        first = frame.loc[(frame[list(key)] == second[list(key)]).all(axis=1)].iloc[0]
        raise IngestError(
            second["_file"],
            int(second["_line"]),
            f"duplicate key {dict(second[list(key)])} (first at {first['_file']}:{first['_line']})",
        )


def read_files(
    files: Sequence[tuple[Path, SpecT]],
    root: Path,
    read_file: Callable[[Path, str, SpecT], tuple[pd.DataFrame, int]],
    report: SourceReport,
) -> list[tuple[str, SpecT, pd.DataFrame]]:
    """Read every (path, spec) file with `read_file`, recording it and its row count in `report`; returns
    (label, spec, rows) per file, labels being paths relative to `root` (as used in messages)."""
    parsed = []
    for path, spec in files:
        label = path.relative_to(root).as_posix()
        frame, count = read_file(path, label, spec)
        report.files.append(label)
        report.rows_read += count
        parsed.append((label, spec, frame))
    return parsed


def unexpected_csvs(raw_dir: Path, listed: Collection[str], skipped: Collection[str]) -> list[str]:
    """CSV files under `raw_dir` (relative paths) that are neither parsed nor deliberately skipped."""
    found = sorted(p.relative_to(raw_dir).as_posix() for p in raw_dir.rglob("*.csv"))
    return [f for f in found if f not in listed and f not in skipped]


def check_raw_files(raw_dir: Path, listed: Collection[str], skipped: Collection[str], owner: str) -> None:
    """Every CSV under `raw_dir` must be parsed or deliberately skipped (nothing is ignored silently), and every
    file a parser expects must be there. `owner` names the listing in messages (e.g. "zeus.FILES")."""
    stray = unexpected_csvs(raw_dir, listed, skipped)
    if stray:
        raise IngestError(raw_dir / stray[0], None, f"CSV not parsed: not listed in {owner} (parse it or skip it)")
    absent = [name for name in listed if not (raw_dir / name).is_file()]
    if absent:
        raise IngestError(raw_dir / absent[0], None, "expected raw file is missing")


# ---- nv-dvfs -----------------------------------------------------------------------------------------------


def read_file(path: Path, label: str, sku: str) -> tuple[pd.DataFrame, int]:
    """Parse one NV-DVFS profile CSV into schema rows (plus origin columns `_file`, `_line`).

    Returns the rows and the number of data rows read.
    """
    _, rows = read_rows(path, label, required=EXPECTED_COLUMNS, allowed=EXPECTED_COLUMNS)
    records: list[dict[str, object]] = []
    for row in rows:
        benchmark, kernel, arg = (text(label, row, c) for c in ID_COLUMNS)
        sm_mhz = number(label, row, "core_frequency")
        mem_mhz = number(label, row, "memory_frequency")
        time_s = number(label, row, "time") / 1e3  # kernel time is in ms
        power_w = number(label, row, "average_power")
        check_measurement(label, row, sm_mhz, mem_mhz, time_s, power_w)
        # DCGM fields may be empty (one V100 microbenchmark row has none): NaN features, timing still valid.
        features = {
            feature: check_fraction(label, row, column, number(label, row, column, required=False))
            for column, feature in DCGM_COLUMNS.items()
        }
        records.append(
            {
                "sku": sku,
                # benchmark/kernel/argNo names one run configuration (same inputs) at every clock; the text
                # before the first '/' is the program, which the features stage uses as the CV group.
                "workload": f"{benchmark}/{kernel}/{arg}",
                "sm_clock_mhz": sm_mhz,
                "mem_clock_mhz": mem_mhz,
                "time_s": time_s,
                "power_w": power_w,
                **features,
                "_file": label,
                "_line": row.line,
            }
        )
    return pd.DataFrame.from_records(records), len(rows)


def parse_files(files: Sequence[tuple[Path, str]], root: Path, source: str = SOURCE) -> ParsedSource:
    """Parse (path, sku) files; paths in messages and the report are relative to `root`."""
    report = SourceReport(source=source)
    parsed = read_files(files, root, read_file, report)
    frame, rejections = finalize(pd.concat([rows for _, _, rows in parsed], ignore_index=True), source)
    report.rejections.extend(rejections)
    report.rows_kept = len(frame)
    missing = frame[list(DCGM_COLUMNS.values())].isna().all(axis=1)
    if missing.any():
        report.notes.append(
            f"{int(missing.sum())} kept row(s) have no DCGM counters (features NaN): "
            + ", ".join(f"{r.sku} {r.workload} @ {r.sm_clock_mhz:g} MHz" for r in frame.loc[missing].itertuples())
        )
    return ParsedSource(frame, report)


def parse(raw_dir: Path) -> ParsedSource:
    """Parse data/raw/nv-dvfs/ (every file in FILES)."""
    check_raw_files(raw_dir, FILES, (), "nvdvfs.FILES")
    parsed = parse_files([(raw_dir / name, sku) for name, sku in FILES.items()], raw_dir.parent)
    parsed.report.notes.append(
        "not copied from upstream (not measurements, or duplicates of these): *-dvfs-real.csv / "
        "*-microbenchmark.csv (same rows + static PTX counts), fitted model parameters, preprocessed splits"
    )
    return parsed


SWEEP_SOURCES[SOURCE] = parse
