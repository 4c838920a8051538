"""Source `dlbench-dvfs`: Caffe training and cuDNN convolutions over core x memory clocks (dlbench_dvfs).

Files (data/raw/dlbench-dvfs/, see its README), all listed in FILES with their GPU:
- `caffe/excels/*.csv`: appName (caffe), coreF, memF (MHz), arg (the caffe command line), time/s (seconds per
  training iteration), power/W (average board power), and in some files Energy/J or energy/J (= time x power;
  checked, not used). One training configuration per file.
- `history/f3d8d32/conv/dvfs-conv.csv`: appName (conv-fft, conv-sgemm, conv-winograd), coreF, memF, argNo,
  time/us (one cuDNN forward pass), power/W, GFLOPS and GFLOPS/W (derived from time and power; not used).
No counters: every feat_* is NaN.

Decisions (also written to the report's notes):
- Clock offsets. `titanX-caffe-fc.csv` and `titanX-caffe-vgg.csv` store coreF/memF as offsets from the stock
  clocks (core -200..+200, mem -1000..+500 MHz). They are converted to absolute MHz with the base (1800, 4500)
  MHz, derived from the data: the offset VGG grid (5 core x 4 mem offsets, steps 100/500) becomes exactly the
  absolute grid of `titanX-vgg-logs-v2.csv` (core 1600..2000 x mem 3500..5000, same network and prototxt) and
  matches it point by point (time within 1.6%, mean 0.9%; power within 2%); every other whole-step base
  matches fewer points and worse (mean |log time ratio| >= 1.6%). The lab's other Titan X grid
  (nv-dvfs-history `titanx-dvfs-real-Performance.csv`) spans the same absolute range. The FC file (same GPU,
  same sweep script) gets the same base. An offset file whose values look absolute is an error.
- Overlaps. The Titan X has two GoogLeNet files (`titanX-caffe-googlenet`, a `caffe train` run at the P-state
  clocks 1607..1898, and `titanX-googlenet-logs-v2`, a `caffe time` run at 1600..2000) and two VGG files (one
  of them in offsets). They are separate runs with different commands, so both are kept, as distinct
  workloads `<model>/<file stem>`; the model before the '/' is their shared CV group, so no split separates
  them.
- GPUs. `titanX*` files are sku `gtx-titan-x`. Its memory clock reaches 5000 MHz, above the Maxwell GTX Titan
  X's 3505 MHz, so the board is a Pascal Titan X (GP102; same clock bins as the GTX 1080 Ti file); the sku
  name is kept as the project uses it. `dvfs-conv.csv` names no GPU; it is `gtx-980`: its core grid includes
  1126 MHz (the GTX 980's base clock) and its memory grid 2100..3800 MHz is the range of the lab's GTX 980
  grids (nv-dvfs-history, mem 2100..3900), below the GP102 boards' 3500..5000 range.
- Reference: each workload's own top point (its max core and max memory clock), because the files sweep
  different grids (e.g. Titan X 1607..1898 vs 1600..2000). A workload without a row there is rejected.
- A repeated (sku, workload, sm, mem) key is an error: no rule picks one of two measurements.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from gpoeo_pipeline.schema import KEY_COLUMNS, SWEEP_COLUMNS, IngestError, Rejection, SourceReport, conform
from gpoeo_pipeline.sources import SWEEP_SOURCES, ParsedSource
from gpoeo_pipeline.sources.nvdvfs import (
    check_measurement,
    check_raw_files,
    check_unique,
    number,
    read_files,
    read_rows,
    text,
)
from gpoeo_rt.features import FEATURE_NAMES

SOURCE = "dlbench-dvfs"

Layout = Literal["caffe", "conv"]

# Stock Titan X clocks that the offset files are relative to (derivation in the module docstring).
TITAN_X_BASE_MHZ: tuple[float, float] = (1800.0, 4500.0)


@dataclass(frozen=True)
class FileSpec:
    """What one raw file is: its GPU, column layout, model (caffe files) and clock convention."""

    sku: str
    layout: Layout
    model: str = ""  # caffe files: the network, used as the workload's CV group
    clock_base_mhz: tuple[float, float] | None = None  # (core, mem) to add when the file stores offsets


# path under data/raw/dlbench-dvfs/ -> spec. A CSV in the folder without an entry here is an error.
FILES: dict[str, FileSpec] = {
    "caffe/excels/gtx1080Ti-googlenet.csv": FileSpec("gtx-1080ti", "caffe", "googlenet"),
    "caffe/excels/gtx980-resnet.csv": FileSpec("gtx-980", "caffe", "resnet"),
    "caffe/excels/titanX-caffe-fc.csv": FileSpec("gtx-titan-x", "caffe", "fc", TITAN_X_BASE_MHZ),
    "caffe/excels/titanX-caffe-googlenet.csv": FileSpec("gtx-titan-x", "caffe", "googlenet"),
    "caffe/excels/titanX-caffe-resnet.csv": FileSpec("gtx-titan-x", "caffe", "resnet"),
    "caffe/excels/titanX-caffe-vgg.csv": FileSpec("gtx-titan-x", "caffe", "vgg", TITAN_X_BASE_MHZ),
    "caffe/excels/titanX-googlenet-logs-v2.csv": FileSpec("gtx-titan-x", "caffe", "googlenet"),
    "caffe/excels/titanX-vgg-logs-v2.csv": FileSpec("gtx-titan-x", "caffe", "vgg"),
    "history/f3d8d32/conv/dvfs-conv.csv": FileSpec("gtx-980", "conv"),
}

# layout -> (required columns, optional columns, time column, seconds per unit of the time column)
LAYOUTS: dict[Layout, tuple[tuple[str, ...], tuple[str, ...], str, float]] = {
    "caffe": (
        ("appName", "coreF", "memF", "arg", "time/s", "power/W"),
        ("Energy/J", "energy/J"),
        "time/s",
        1.0,
    ),
    "conv": (
        ("appName", "coreF", "memF", "argNo", "time/us", "power/W"),
        ("GFLOPS", "GFLOPS/W"),
        "time/us",
        1e-6,
    ),
}

# The stored energy column is time x power rounded; a larger gap means a shifted or mislabelled column.
ENERGY_RTOL = 1e-3


def _clocks(label: str, line: int, spec: FileSpec, core: float, mem: float) -> tuple[float, float]:
    """Absolute (sm, mem) MHz of a row; offsets are shifted by the file's base, never mixed with MHz."""
    if spec.clock_base_mhz is None:
        return core, mem
    base_core, base_mem = spec.clock_base_mhz
    # An offset is well below its base in magnitude; an absolute clock in an offset file is a mix-up.
    if abs(core) >= base_core or abs(mem) >= base_mem:
        raise IngestError(label, line, f"coreF={core:g}, memF={mem:g} look absolute, but this file stores offsets")
    return base_core + core, base_mem + mem


def read_file(path: Path, label: str, spec: FileSpec) -> tuple[pd.DataFrame, int]:
    """Parse one file into schema rows (plus origin columns `_file`, `_line`); returns rows and rows read."""
    required, optional, time_col, seconds = LAYOUTS[spec.layout]
    header, rows = read_rows(path, label, required=required, allowed=(*required, *optional))
    energy_cols = [c for c in optional if c in header and c.lower() == "energy/j"]
    if len(energy_cols) > 1:
        raise IngestError(label, 1, f"more than one energy column {energy_cols}")
    stem = Path(label).stem
    first_arg: str | None = None
    records: list[dict[str, object]] = []
    for row in rows:
        sm_mhz, mem_mhz = _clocks(label, row.line, spec, number(label, row, "coreF"), number(label, row, "memF"))
        time_s = number(label, row, time_col) * seconds
        power_w = number(label, row, "power/W")
        check_measurement(label, row, sm_mhz, mem_mhz, time_s, power_w)
        if energy_cols:
            stored = number(label, row, energy_cols[0])
            if not math.isclose(stored, time_s * power_w, rel_tol=ENERGY_RTOL):
                raise IngestError(
                    label, row.line, f"{energy_cols[0]}={stored:g} != time x power = {time_s * power_w:g}"
                )
        if spec.layout == "caffe":
            text(label, row, "appName")
            # The workload id is per file, which is only right if the file holds one command line.
            arg = text(label, row, "arg")
            first_arg = arg if first_arg is None else first_arg
            if arg != first_arg:
                raise IngestError(label, row.line, f"second configuration {arg!r} in a one-configuration file")
            workload = f"{spec.model}/{stem}"
        else:
            workload = f"{text(label, row, 'appName')}/{text(label, row, 'argNo')}"
        records.append(
            {
                "sku": spec.sku,
                "workload": workload,
                "sm_clock_mhz": sm_mhz,
                "mem_clock_mhz": mem_mhz,
                "time_s": time_s,
                "power_w": power_w,
                "_file": label,
                "_line": row.line,
            }
        )
    return pd.DataFrame.from_records(records), len(rows)


def finalize(frame: pd.DataFrame, source: str = SOURCE) -> tuple[pd.DataFrame, list[Rejection]]:
    """Check keys, mark each workload's top point as `ref` (else reject the workload), fill the rest."""
    keys = list(KEY_COLUMNS)
    frame = frame.reset_index(drop=True)
    check_unique(frame, keys)
    by_workload = frame.groupby(["sku", "workload"])
    frame["ref"] = (frame["sm_clock_mhz"] == by_workload["sm_clock_mhz"].transform("max")) & (
        frame["mem_clock_mhz"] == by_workload["mem_clock_mhz"].transform("max")
    )
    has_ref = frame.groupby(["sku", "workload"])["ref"].transform("any")
    rejections = [
        Rejection(
            str(r["_file"]),
            int(r["_line"]),
            "no reference config (workload lacks its own max core x mem point)",
        )
        for _, r in frame.loc[~has_ref].iterrows()
    ]
    frame = frame.loc[has_ref].copy()
    frame["source"] = source
    frame["energy_j"] = frame["time_s"] * frame["power_w"]
    for name in FEATURE_NAMES:
        frame[name] = np.nan
    frame = frame.drop(columns=["_file", "_line"]).sort_values(keys, kind="stable")
    return conform(frame, SWEEP_COLUMNS, source), rejections


def parse_files(files: Sequence[tuple[Path, FileSpec]], root: Path, source: str = SOURCE) -> ParsedSource:
    """Parse (path, spec) files; paths in messages and the report are relative to `root`."""
    report = SourceReport(source=source)
    parsed = read_files(files, root, read_file, report)
    for label, spec, _ in parsed:
        if spec.clock_base_mhz is not None:
            core, mem = spec.clock_base_mhz
            report.notes.append(
                f"{label}: clock offsets converted to absolute MHz with base core {core:g}, mem {mem:g} "
                "(derived from the matching absolute Titan X VGG grid; see dlbench.py)"
            )
    frame, rejections = finalize(pd.concat([rows for _, _, rows in parsed], ignore_index=True), source)
    report.rejections.extend(rejections)
    report.rows_kept = len(frame)
    return ParsedSource(frame, report)


def parse(raw_dir: Path) -> ParsedSource:
    """Parse data/raw/dlbench-dvfs/ (every file in FILES)."""
    check_raw_files(raw_dir, FILES, (), "dlbench.FILES")
    parsed = parse_files([(raw_dir / name, spec) for name, spec in FILES.items()], raw_dir.parent)
    parsed.report.notes.extend(
        [
            "no counters in this source: all feat_* NaN",
            "Titan X GoogLeNet and VGG are each measured in two files (different runs and commands): kept as "
            "distinct workloads '<model>/<file stem>' sharing the model as CV group",
            "dvfs-conv.csv identified as gtx-980 (core grid includes its 1126 MHz base clock; mem 2100-3800 MHz)",
            "reference = each workload's own max core x max mem point (the files sweep different grids)",
            "not copied from upstream: *-segment.csv (per-kernel times, no power), v100-vgg-logs-segment.csv (empty)",
        ]
    )
    return parsed


SWEEP_SOURCES[SOURCE] = parse
