"""Folders written by `gpoeo-collect` (`data/raw/<sku>/`, any folder name): recognised by their collect.json.

The format is described in `gpoeo_pipeline.collect.rawformat`. Rows map onto the schema one to one: a sweep row's
clocks are the locked config, a reference-only row's the clocks observed while it ran; time, power, energy and
counters are taken as measured (energy_j is the collector's time_s x power_w). The spread across repeats and the
observed clocks are kept as `x_*` columns. A torn last line (an interrupted collection that was not resumed) is an
error: resuming the collection repairs it and re-measures that config.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from gpoeo_pipeline.collect.rawformat import FORMAT, META_FILE, MODES, RESULT_COLUMNS, RESULTS_FILE, TIMINGS
from gpoeo_pipeline.schema import SWEEP_COLUMNS, IngestError, Rejection, SourceReport, conform
from gpoeo_pipeline.sources import SWEEP_FORMATS, ParsedSource
from gpoeo_pipeline.sources.nvdvfs import (
    check_fraction,
    check_measurement,
    check_raw_files,
    check_unique,
    number,
    read_rows,
    text,
)
from gpoeo_rt.features import FEATURE_NAMES

FORMAT_NAME = "gpoeo-collect"
EXTRA_COLUMNS: dict[str, str] = {  # raw column -> x_* column
    "time_rel_std": "x_time_rel_std",
    "power_rel_std": "x_power_rel_std",
    "repeats": "x_repeats",
    "iterations": "x_iterations",
    "window_s": "x_window_s",
}


def is_collection(raw_dir: Path) -> bool:
    return (raw_dir / META_FILE).is_file()


def read_meta(raw_dir: Path, label: str) -> dict[str, object]:
    try:
        meta = json.loads((raw_dir / META_FILE).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise IngestError(f"{label}/{META_FILE}", None, f"unreadable collection metadata: {exc}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        found = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
        raise IngestError(f"{label}/{META_FILE}", None, f"format {found!r}, expected {FORMAT!r}")
    if not isinstance(meta.get("sku"), str) or not meta["sku"]:
        raise IngestError(f"{label}/{META_FILE}", None, "missing 'sku'")
    return meta


def _clock(label: str, row_line: int, raw: str, column: str) -> float | None:
    raw = raw.strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise IngestError(label, row_line, f"non-integer {column}={raw!r}") from None
    return float(value)


def parse(raw_dir: Path) -> ParsedSource:
    """Parse one collection folder into schema rows (source = the folder's name, sku from collect.json)."""
    source = raw_dir.name
    root = raw_dir.parent
    label_dir = raw_dir.relative_to(root).as_posix()
    meta = read_meta(raw_dir, label_dir)
    check_raw_files(raw_dir, [RESULTS_FILE], (), f"the {FORMAT_NAME} format")
    path = raw_dir / RESULTS_FILE
    label = f"{label_dir}/{RESULTS_FILE}"
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        line = data.count(b"\n") + 1
        raise IngestError(
            label,
            line,
            "torn last line (the collection was interrupted while writing it): resume gpoeo-collect on "
            "this folder, which cuts it off, logs it to recovery.log and measures that config again",
        )
    _, rows = read_rows(path, label, required=RESULT_COLUMNS, allowed=RESULT_COLUMNS)
    report = SourceReport(source=source, files=[label], rows_read=len(rows))
    records: list[dict[str, object]] = []
    for row in rows:
        mode = text(label, row, "mode")
        if mode not in MODES:
            raise IngestError(label, row.line, f"mode={mode!r}, expected one of {list(MODES)}")
        timing = text(label, row, "timing")
        if timing not in TIMINGS:
            raise IngestError(label, row.line, f"timing={timing!r}, expected one of {list(TIMINGS)}")
        config_sm = _clock(label, row.line, row.fields["config_sm_mhz"], "config_sm_mhz")
        config_mem = _clock(label, row.line, row.fields["config_mem_mhz"], "config_mem_mhz")
        if (mode == "sweep") != (config_sm is not None and config_mem is not None):
            raise IngestError(label, row.line, f"mode={mode} but config clocks sm={config_sm} mem={config_mem}")
        observed_sm, observed_mem = number(label, row, "sm_clock_mhz"), number(label, row, "mem_clock_mhz")
        sm_mhz = observed_sm if config_sm is None else config_sm
        mem_mhz = observed_mem if config_mem is None else config_mem
        time_s, power_w = number(label, row, "time_s"), number(label, row, "power_w")
        check_measurement(label, row, sm_mhz, mem_mhz, time_s, power_w)
        energy_j = number(label, row, "energy_j")
        if not math.isclose(energy_j, time_s * power_w, rel_tol=1e-9):
            raise IngestError(label, row.line, f"energy_j={energy_j} is not time_s x power_w={time_s * power_w}")
        ref = text(label, row, "ref")
        if ref not in ("true", "false"):
            raise IngestError(label, row.line, f"ref={ref!r}, expected true or false")
        records.append(
            {
                "sku": meta["sku"],
                "workload": text(label, row, "workload"),
                "sm_clock_mhz": sm_mhz,
                "mem_clock_mhz": mem_mhz,
                "time_s": time_s,
                "power_w": power_w,
                "energy_j": energy_j,
                "ref": ref == "true",
                **{
                    name: check_fraction(label, row, name, number(label, row, name, required=False))
                    for name in FEATURE_NAMES
                },
                **{x: number(label, row, raw) for raw, x in EXTRA_COLUMNS.items()},
                "x_observed_sm_clock_mhz": observed_sm,
                "x_observed_mem_clock_mhz": observed_mem,
                "_file": label,
                "_line": row.line,
            }
        )
    frame = pd.DataFrame.from_records(records)
    check_unique(frame, ["sku", "workload", "sm_clock_mhz", "mem_clock_mhz"])
    refs = frame.groupby("workload")["ref"].transform("sum")
    for _, r in frame.loc[refs != 1].iterrows():
        reason = "workload has no reference row (interrupted before its reference config?)"
        if refs.loc[_] > 1:
            reason = f"workload has {int(refs.loc[_])} reference rows"
        report.rejections.append(Rejection(str(r["_file"]), int(r["_line"]), reason))
    frame = frame.loc[refs == 1].drop(columns=["_file", "_line"])
    frame["source"] = source
    report.rows_kept = len(frame)
    if frame[list(FEATURE_NAMES)].isna().all(axis=None) and len(frame):
        report.notes.append("no counters (feat_*) in this collection: the GPU had no GPM")
    out = conform(
        frame.sort_values(["workload", "sm_clock_mhz", "mem_clock_mhz"], kind="stable"), SWEEP_COLUMNS, source
    )
    return ParsedSource(out, report)


SWEEP_FORMATS.append((is_collection, parse))
