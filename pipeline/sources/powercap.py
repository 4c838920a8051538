"""Source `powercap-ada`: 7 GPU workloads under 21 power caps on an RTX 4000 Ada (Adaptive GPU Power Capping).

Files (data/raw/powercap-ada/Dataset/, see the folder's README): `results_powertest_single_<k>.csv`, one
workload each (unnamed upstream: workload id `workload-<k>`), no header, one row per power cap. Columns, as
inferred upstream and checked here: cap_mW, cap_mW (a duplicate, which must equal the first), wall_s,
energy_kJ, avg_W, avg_temp_C. Line numbers are data rows counted from 1 (there is no header).

- time_s = wall_s, power_w = avg_W, energy_j = energy_kJ x 1000 (measured, not time x power). A row whose
  measured energy differs from avg_W x wall_s by more than ENERGY_RTOL is rejected (a mismatch means the
  columns do not mean what they are inferred to mean for that row); all upstream rows agree within 2%.
- ref = the 130 W cap (the board's default, = its TDP). A workload without a 130 W row is rejected row by
  row, since its ratios would have no common base.
- File 7 has 5 columns (no duplicate cap) but the same meaning otherwise (energy matches avg_W x wall_s
  within 1.2%), so it is parsed with that layout. Its caps run 65..120 W, then 30..60 W (two partial runs
  concatenated) and it has no 125 or 130 W row, so its 19 rows are rejected by the reference rule; the notes
  say so. At caps 30-35 W it also draws 35-36 W, while every other workload cannot go below 40-46 W there,
  another sign it was measured under different conditions.
- Kept as measured, with a note: at caps below the board's floor (30-40 W) power sits at 40-46 W and time
  stops changing, i.e. the cap is not reached.
- avg_temp_C is kept as x_avg_temp_c.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from gpoeo_pipeline.schema import POWERLIMIT_COLUMNS, IngestError, Rejection, SourceReport, conform
from gpoeo_pipeline.sources import POWERLIMIT_SOURCES, ParsedSource
from gpoeo_pipeline.sources.nvdvfs import POWER_RANGE_W, check_raw_files, check_unique, read_files

SOURCE = "powercap-ada"
SKU = "rtx-4000-ada"
KEY: tuple[str, ...] = ("sku", "workload", "power_limit_w")
REF_CAP_W = 130.0  # the RTX 4000 Ada's default power limit (its TDP)
# Measured energy vs avg power x wall time; upstream rows agree within 2% (power is sampled, energy counted).
ENERGY_RTOL = 0.05
# Average power this far above the cap is counted in the notes (the cap was not reached).
OVER_CAP_NOTE = 0.05

LAYOUTS: dict[int, tuple[str, ...]] = {
    6: ("cap_mw", "cap_mw_dup", "wall_s", "energy_kj", "avg_w", "avg_temp_c"),
    5: ("cap_mw", "wall_s", "energy_kj", "avg_w", "avg_temp_c"),
}


@dataclass(frozen=True)
class FileSpec:
    """One results file: its workload id and its number of columns (a key of LAYOUTS)."""

    workload: str
    columns: int


# path under data/raw/powercap-ada/ -> spec. A CSV in the folder without an entry here is an error.
FILES: dict[str, FileSpec] = {
    **{f"Dataset/results_powertest_single_{k}.csv": FileSpec(f"workload-{k}", 6) for k in range(7)},
    "Dataset/results_powertest_single_7.csv": FileSpec("workload-7", 5),
}


def _float(label: str, line: int, name: str, raw: str) -> float:
    """A finite float, or IngestError naming the file, line and column."""
    raw = raw.strip()
    if not raw:
        raise IngestError(label, line, f"missing value in required column {name!r}")
    try:
        value = float(raw)
    except ValueError:
        raise IngestError(label, line, f"non-numeric {name}={raw!r}") from None
    if not math.isfinite(value):
        raise IngestError(label, line, f"non-finite {name}={raw!r}")
    return value


def parse_row(label: str, line: int, record: list[str], spec: FileSpec) -> dict[str, object]:
    """One data record as a power-limit row (plus origin `_file`, `_line`); IngestError if malformed."""
    names = LAYOUTS[spec.columns]
    if len(record) != len(names):
        raise IngestError(label, line, f"expected {len(names)} fields, found {len(record)}")
    v = {name: _float(label, line, name, raw) for name, raw in zip(names, record, strict=True)}
    if "cap_mw_dup" in v and v["cap_mw_dup"] != v["cap_mw"]:
        raise IngestError(label, line, f"the two cap columns differ: {v['cap_mw']:g} vs {v['cap_mw_dup']:g}")
    low, high = POWER_RANGE_W
    # Caps are in mW: a value in W (or with an extra factor) falls outside any board's range.
    if not 1.0 <= v["cap_mw"] / 1000.0 <= high:
        raise IngestError(label, line, f"implausible cap {v['cap_mw']:g} mW (expected 1..1000 W in mW)")
    if not low < v["avg_w"] <= high:
        raise IngestError(label, line, f"implausible power {v['avg_w']} W (expected in ({low}, {high}] W)")
    if v["wall_s"] <= 0 or v["energy_kj"] <= 0:
        raise IngestError(label, line, f"non-positive time {v['wall_s']} s or energy {v['energy_kj']} kJ")
    return {
        "sku": SKU,
        "workload": spec.workload,
        "power_limit_w": v["cap_mw"] / 1000.0,
        "time_s": v["wall_s"],
        "power_w": v["avg_w"],
        "energy_j": v["energy_kj"] * 1000.0,
        "x_avg_temp_c": v["avg_temp_c"],
        "_file": label,
        "_line": line,
    }


def read_file(path: Path, label: str, spec: FileSpec) -> tuple[pd.DataFrame, int]:
    """Parse one headerless results file; returns its rows and the number of data rows read."""
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle)
        # line_num is the physical line just read (no quoted multi-line fields here); blank lines are no rows.
        records = [
            parse_row(label, reader.line_num, record, spec)
            for record in reader
            if any(field.strip() for field in record)
        ]
    if not records:
        raise IngestError(label, 1, "no data rows")
    return pd.DataFrame.from_records(records), len(records)


def finalize(frame: pd.DataFrame) -> tuple[pd.DataFrame, list[Rejection]]:
    """Apply the key, energy and reference rules; returns kept rows and rejections (in file order)."""
    frame = frame.reset_index(drop=True)
    check_unique(frame, KEY)
    rejected: dict[int, str] = {}
    gap = frame["energy_j"] / (frame["time_s"] * frame["power_w"]) - 1.0
    for index in frame.index[gap.abs() > ENERGY_RTOL]:
        rejected[index] = (
            f"energy inconsistent: measured energy is {gap[index]:+.1%} off avg power x wall time "
            f"(tolerance {ENERGY_RTOL:.0%})"
        )
    frame["ref"] = frame["power_limit_w"] == REF_CAP_W
    usable = ~frame.index.isin(list(rejected))
    has_ref = (frame["ref"] & usable).groupby([frame["sku"], frame["workload"]]).transform("any")
    for index in frame.index[~has_ref]:
        rejected.setdefault(index, f"no reference row (no usable {REF_CAP_W:g} W default-cap row for the workload)")
    rejections = [
        Rejection(str(frame.at[i, "_file"]), int(frame.at[i, "_line"]), reason)
        for i, reason in sorted(rejected.items())
    ]
    kept = frame.drop(index=list(rejected)).drop(columns=["_file", "_line"])
    kept["source"] = SOURCE
    kept = kept.sort_values(list(KEY), kind="stable")
    return conform(kept, POWERLIMIT_COLUMNS, SOURCE), rejections


def parse_files(files: Sequence[tuple[Path, FileSpec]], root: Path) -> ParsedSource:
    """Parse (path, spec) files; paths in messages and the report are relative to `root`."""
    report = SourceReport(source=SOURCE)
    parsed = read_files(files, root, read_file, report)
    for label, spec, frame in parsed:
        if spec.columns != 6:
            caps = " ".join(f"{c:g}" for c in frame["power_limit_w"])
            report.notes.append(
                f"{label}: {spec.columns}-column layout (no duplicate cap column), parsed; caps in file "
                f"order (W): {caps}"
            )
    frame, rejections = finalize(pd.concat([rows for _, _, rows in parsed], ignore_index=True))
    report.rejections.extend(rejections)
    report.rows_kept = len(frame)
    over = frame["power_w"] > frame["power_limit_w"] * (1 + OVER_CAP_NOTE)
    report.notes.extend(
        [
            "time_s = wall time of the run; energy_j = measured energy (energy_kJ x 1000); "
            f"ref = the {REF_CAP_W:g} W default cap",
            f"{int(over.sum())} kept row(s) average more than {OVER_CAP_NOTE:.0%} above the cap (caps "
            + ", ".join(f"{c:g}" for c in sorted(frame.loc[over, "power_limit_w"].unique()))
            + " W): the board does not get below its power floor there; kept as measured",
        ]
    )
    return ParsedSource(frame, report)


def parse(raw_dir: Path) -> ParsedSource:
    """Parse data/raw/powercap-ada/ (every file in FILES)."""
    check_raw_files(raw_dir, FILES, (), "powercap.FILES")
    parsed = parse_files([(raw_dir / name, spec) for name, spec in FILES.items()], raw_dir.parent)
    parsed.report.notes.append(
        "results_powertest_single_7.csv: two partial runs concatenated (caps 65-120 W, then 30-60 W) "
        "without a 130 W row, so all its rows are rejected for lack of a reference; it also reaches 35 W "
        "at a 30-35 W cap where the other workloads stay at 40-46 W (different conditions)"
    )
    return parsed


POWERLIMIT_SOURCES[SOURCE] = parse
