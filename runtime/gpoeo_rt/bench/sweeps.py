"""Reading a sweeps table (the pipeline's normalized schema) for the bench: CSV with the csv module, parquet with
pyarrow if it is installed. Rows are checked as they are read, and a bad value names the file, row and column."""

from __future__ import annotations

import csv
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

REQUIRED_COLUMNS: tuple[str, ...] = ("sku", "workload", "sm_clock_mhz", "mem_clock_mhz", "time_s", "power_w", "ref")
_POSITIVE: tuple[str, ...] = ("sm_clock_mhz", "mem_clock_mhz", "time_s", "power_w")
_TRUE, _FALSE = ("true", "1", "yes", "t"), ("false", "0", "no", "f", "")

Row = dict[str, object]
Groups = dict[tuple[str, str], list[Row]]


class SweepsFileError(ValueError):
    """A sweeps table the bench cannot use; the message names the file and, where there is one, the row (1-based,
    the header is row 1 in a CSV; data rows count from 1 in a parquet file) and the column."""


def _rows_csv(path: Path) -> tuple[list[str], Iterable[tuple[int, Mapping[str, object]]]]:
    fh = path.open(newline="")
    reader = csv.DictReader(fh)
    columns = list(reader.fieldnames or [])

    def rows() -> Iterable[tuple[int, Mapping[str, object]]]:
        with fh:
            yield from enumerate(reader, start=2)

    return columns, rows()


def _rows_parquet(path: Path) -> tuple[list[str], Iterable[tuple[int, Mapping[str, object]]]]:
    try:
        import pyarrow.parquet as pq  # optional: the slim runtime does not depend on it
    except ImportError as exc:
        raise SweepsFileError(
            f"{path}: reading parquet needs pyarrow (pip install pyarrow), or pass the CSV export of the table"
        ) from exc
    table = pq.read_table(path)
    return list(table.column_names), enumerate(table.to_pylist(), start=1)


def _number(path: Path, line: int, column: str, value: object) -> float:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise SweepsFileError(f"{path}: row {line}, column {column!r}: {value!r} is not a number") from None
    if column in _POSITIVE and not (math.isfinite(number) and number > 0):
        raise SweepsFileError(f"{path}: row {line}, column {column!r}: {value!r} must be a finite number > 0")
    return number


def _flag(path: Path, line: int, value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = "" if value is None else str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise SweepsFileError(f"{path}: row {line}, column 'ref': {value!r} is not a boolean (true/false)")


def read_sweeps_file(path: str | Path, skus: Sequence[str] | None = None) -> Groups:
    """Rows of a sweeps table grouped by (sku, workload), optionally only some SKUs. Values are checked (numbers
    > 0, a boolean ref) and converted; `feat_*` and other columns are passed through (empty -> missing). Every
    kept workload must have exactly one ref row (the default clocks every ratio is measured against)."""
    path = Path(path)
    if not path.is_file():
        raise SweepsFileError(f"{path}: no such sweeps file")
    if path.suffix.lower() in (".parquet", ".pq"):
        columns, rows = _rows_parquet(path)
    elif path.suffix.lower() == ".csv":
        columns, rows = _rows_csv(path)
    else:
        raise SweepsFileError(f"{path}: expected a .csv or .parquet sweeps table")
    missing = [c for c in REQUIRED_COLUMNS if c not in columns]
    if missing:
        raise SweepsFileError(f"{path}: missing column(s) {', '.join(map(repr, missing))} of the sweeps schema")
    groups: Groups = defaultdict(list)
    seen: dict[tuple[str, str, float, float], int] = {}
    ref_lines: dict[tuple[str, str], list[int]] = defaultdict(list)
    for line, raw in rows:
        sku, workload = str(raw.get("sku") or "").strip(), str(raw.get("workload") or "").strip()
        if not sku or not workload:
            raise SweepsFileError(f"{path}: row {line}: empty 'sku' or 'workload'")
        if skus is not None and sku not in skus:
            continue
        row: Row = {k: v for k, v in raw.items() if v is not None and v != ""}
        for column in _POSITIVE:
            row[column] = _number(path, line, column, raw.get(column))
        row["ref"] = _flag(path, line, raw.get("ref"))
        key = (sku, workload, float(row["sm_clock_mhz"]), float(row["mem_clock_mhz"]))  # type: ignore[arg-type]
        if key in seen:
            raise SweepsFileError(
                f"{path}: row {line}: {sku}/{workload} at SM {key[2]:g} / memory {key[3]:g} MHz repeats row {seen[key]}"
            )
        seen[key] = line
        if row["ref"]:
            ref_lines[(sku, workload)].append(line)
        groups[(sku, workload)].append(row)
    for (sku, workload), group in groups.items():
        refs = ref_lines.get((sku, workload), [])
        if len(refs) != 1:
            where = f"rows {', '.join(map(str, refs))}" if refs else f"none of its {len(group)} rows"
            raise SweepsFileError(f"{path}: {sku}/{workload} needs exactly one ref row (column 'ref'), {where}")
    if not groups:
        which = f" for SKU(s) {', '.join(skus)}" if skus is not None else ""
        raise SweepsFileError(f"{path}: no sweep rows{which}")
    return dict(groups)


def faster_at_lower_clock(rows: Sequence[Row]) -> float:
    """How much faster a lower SM clock runs than a higher one on the same memory clock, at most, in one job's
    measured table (0.0 when time never falls as the clock falls). Physics says time does not fall as a clock
    falls; tables where it falls by more than a few percent hold measurement noise or artefacts that the
    simulator replays as truth (docs/bench.md, "Tables that break physics")."""
    by_mem: dict[float, list[tuple[float, float]]] = {}
    for row in rows:
        mem = float(row["mem_clock_mhz"])  # type: ignore[arg-type]
        by_mem.setdefault(mem, []).append((float(row["sm_clock_mhz"]), float(row["time_s"])))  # type: ignore[arg-type]
    worst = 0.0
    for points in by_mem.values():
        times = [t for _, t in sorted(points)]
        slowest_above = 0.0
        for t in reversed(times):  # from the highest SM clock down
            if slowest_above > 0.0 and t > 0.0:
                worst = max(worst, slowest_above / t - 1.0)
            slowest_above = max(slowest_above, t)
    return worst
