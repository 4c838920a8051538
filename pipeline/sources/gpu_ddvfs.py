"""Source `gpu-ddvfs`: Tesla P100 SM-clock sweep of 12 apps with per-kernel nvprof metrics (Ilager et al.).

File (data/raw/gpu-ddvfs/, see its README):
`src/prediction_models/clustering/final_data_categorical_converted.csv`, one row per (Application_name,
Kernel_Name, sm_clock): ~160 nvprof metrics of that kernel at that clock, joined with app-level values:
nvidia-smi dmon averages over the run (pwr [W], sm [% of time a kernel ran], pclk, mclk, ...) and `time` [s]
(the whole application's wall time). Two leading columns are pandas index leftovers. Memory clock 715 MHz
(fixed), 31 SM clocks 556..1316 MHz.

The schema wants one row per (sku, workload, sm, mem), so kernel rows are aggregated per (app, clock):
- time_s = `time`, power_w = `pwr`. Both are app-level, so they must be identical on every kernel row of one
  (app, clock) (they are; a difference is an error, since there is no rule to combine them).
- Carried-over rows. An app's rows at a clock include exact copies of other apps' kernel rows: ATAX's four
  rows are its 2 kernels plus 2MM's 2 rows, CORR's eight are its 4 plus ATAX's, and so on along the
  Polybench + particlefilter batch (the upstream merge never reset its kernel list; the authors' per-app
  averages include the copies). A copy repeats every nvprof metric of the original, field for field, at
  the same clock; the app that measured it is the one with the fewest rows at that clock (the chain
  starts at 2MM). Copies are rejected with that reason, leaving each app with its own kernels (2MM 2,
  ATAX 2, CORR 4, COVAR 3, GEMM 1, SYR 1, SYR2 1, particlefilter float 4 / naive 1, backprop 2, lavaMD 1,
  myocyte 1), which matches the programs' kernel counts.
- Features: kernel metrics averaged over the app's own kernels, weighted by each kernel's estimated elapsed
  time. nvprof has no kernel duration here, but ipc is instructions per *active* SM cycle and sm_efficiency
  the active fraction of elapsed cycles (Nsight Compute's nvprof metric mapping), so elapsed SM-cycles are
  proportional to inst_executed / (ipc x sm_efficiency); the SM count and clock cancel within one
  (app, clock).
  Per kernel, as fractions of *elapsed* cycles like the DCGM fields the runtime reads:
  - feat_sm_active = sm_efficiency / 100 (nvprof percent);
  - feat_sm_occupancy = achieved_occupancy x sm_active (achieved_occupancy is per active cycle);
  - feat_dram_active = dram_utilization / 10 (nvprof 0..10 level, already per elapsed cycle);
  - feat_fp16/fp32/fp64_active = half/single/double_precision_fu_utilization / 10 x sm_active (per active
    cycle on the 0..10 scale);
  - feat_tensor_active: NaN (no such counter; the P100 has no tensor cores).
  These describe the kernels while they run; the app's time also holds CPU work and setup, so the dmon
  kernel-busy fraction over the run is kept as x_dmon_sm_util, and the number of own kernel rows as
  x_kernel_rows.
- Reference: the default application clock 1189 MHz (present for every app); if an app lacked it, every app
  would use its max clock instead, with a note.
Report: rows_read counts raw kernel rows and rows_kept output (app, clock) rows, so the usual
rows_read == rows_kept + rejections does not hold; instead rows_read == aggregated kernel rows + rejections,
and the notes give both numbers.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from gpoeo_pipeline.schema import SWEEP_COLUMNS, IngestError, Rejection, SourceReport, conform
from gpoeo_pipeline.sources import SWEEP_SOURCES, ParsedSource
from gpoeo_pipeline.sources.nvdvfs import RawRow, check_measurement, check_raw_files, number, read_rows, text
from gpoeo_rt.features import FEATURE_NAMES

SOURCE = "gpu-ddvfs"
SKU = "tesla-p100"
CLUSTERING = "src/prediction_models/clustering"
FILE = f"{CLUSTERING}/final_data_categorical_converted.csv"
# Present and deliberately not parsed.
SKIPPED: dict[str, str] = {
    f"{CLUSTERING}/feature_set_avgd_ctg_converted_with_appname.csv": (
        "authors' per-app averages of the main file (over all rows, carried-over copies included)"
    ),
    f"{CLUSTERING}/feature_set_avgd_default_clock_ctg_converted_with_appname.csv": (
        "authors' per-app averages at 1189 MHz of the main file (carried-over copies included)"
    ),
    f"{CLUSTERING}/feature_set_normalisedavg_default_clock_ctg_converted_with_appname.csv": (
        "authors' normalised per-app averages of the main file"
    ),
    "src/prediction_models/dmon_columns.csv": "metadata: the nvidia-smi dmon column names",
}

# Application_name -> workload id. Listed explicitly, so an unknown app is an error rather than a new
# workload nobody checked. The particlefilter variants share their program (CV group) before the '/'.
APPS: dict[str, str] = {
    "2MM": "2MM",
    "ATAX": "ATAX",
    "CORR": "CORR",
    "COVAR": "COVAR",
    "GEMM": "GEMM",
    "SYR": "SYR",
    "SYR2": "SYR2",
    "backprop": "backprop",
    "lavaMD": "lavaMD",
    "myocyte": "myocyte",
    "particlefilter_float": "particlefilter/float",
    "particlefilter_naive": "particlefilter/naive",
}

APP_COLUMN = "Application_name"
# Pandas index leftovers (no meaning) and app-level columns (dmon averages and the app's time): neither
# describes a kernel, so neither is part of a kernel row's identity.
INDEX_COLUMNS: tuple[str, ...] = ("", "Unnamed: 0")
APP_LEVEL_COLUMNS: tuple[str, ...] = (
    "bar1", "dbecc", "dec", "enc", "fb", "gtemp", "mclk", "mem", "mem_clock_y", "pci", "pclk", "pviol",
    "pwr", "rxpci", "sbecc", "sm", "time", "tviol", "txpci",
)  # fmt: skip
FU_COLUMNS: dict[str, str] = {
    "half_precision_fu_utilization": "feat_fp16_active",
    "single_precision_fu_utilization": "feat_fp32_active",
    "double_precision_fu_utilization": "feat_fp64_active",
}
REQUIRED: tuple[str, ...] = (
    APP_COLUMN, "Kernel_Name", "sm_clock", "mem_clock_x", "time", "pwr", "sm",
    "inst_executed", "ipc", "sm_efficiency", "achieved_occupancy", "dram_utilization", *FU_COLUMNS,
)  # fmt: skip

DEFAULT_SM_MHZ = 1189.0  # the P100's default application clock (README, workload_settings.json times)


@dataclass(frozen=True)
class KernelRow:
    """One raw row: where it is, its (app, clock), app-level values, kernel identity, weight and features."""

    line: int
    app: str
    sm_mhz: float
    mem_mhz: float
    time_s: float
    power_w: float
    dmon_sm_util: float
    signature: tuple[str, ...]  # the raw text of every kernel metric: equal text = carried-over copy
    weight: float  # proportional to the kernel's elapsed time at this clock
    features: dict[str, float]


def _bounded(label: str, row: RawRow, column: str, high: float) -> float:
    """A required metric in [0, high]; out-of-range values raise (a unit or scale mix-up), never clipped."""
    value = number(label, row, column)
    if not 0.0 <= value <= high:
        raise IngestError(label, row.line, f"{column}={value!r} outside [0, {high:g}]")
    return value


def read_kernel_row(label: str, row: RawRow, metric_columns: list[str]) -> KernelRow:
    """Parse and check one raw row (formulas in the module docstring)."""
    app = text(label, row, APP_COLUMN)
    if app not in APPS:
        raise IngestError(label, row.line, f"unknown application {app!r} (add it to gpu_ddvfs.APPS)")
    sm_mhz = number(label, row, "sm_clock")
    mem_mhz = number(label, row, "mem_clock_x")
    time_s = number(label, row, "time")
    power_w = number(label, row, "pwr")
    check_measurement(label, row, sm_mhz, mem_mhz, time_s, power_w)
    sm_active = _bounded(label, row, "sm_efficiency", 100.0) / 100.0
    inst = number(label, row, "inst_executed")
    ipc = number(label, row, "ipc")
    if inst <= 0 or ipc <= 0 or sm_active <= 0:
        raise IngestError(
            label,
            row.line,
            f"inst_executed={inst:g}, ipc={ipc:g}, sm_efficiency={sm_active * 100:g}: all must be > 0",
        )
    features = {
        "feat_sm_active": sm_active,
        "feat_sm_occupancy": _bounded(label, row, "achieved_occupancy", 1.0) * sm_active,
        "feat_dram_active": _bounded(label, row, "dram_utilization", 10.0) / 10.0,
        **{feat: _bounded(label, row, col, 10.0) / 10.0 * sm_active for col, feat in FU_COLUMNS.items()},
    }
    return KernelRow(
        line=row.line,
        app=app,
        sm_mhz=sm_mhz,
        mem_mhz=mem_mhz,
        time_s=time_s,
        power_w=power_w,
        dmon_sm_util=_bounded(label, row, "sm", 100.0) / 100.0,
        signature=tuple(row.fields[c].strip() for c in metric_columns),
        weight=inst / (ipc * sm_active),
        features=features,
    )


GroupKey = tuple[str, float, float]  # (app, sm MHz, mem MHz)


def split_copies(label: str, rows: list[KernelRow]) -> tuple[list[KernelRow], list[Rejection]]:
    """Separate each app's own kernel rows from carried-over copies of other apps' rows.

    Rows with the same kernel metrics at the same clock are one measurement; it belongs to the app with the
    fewest rows at that clock (where the carry-over chain starts). Raises IngestError if that is a tie or if
    one app has the same kernel row twice.
    """
    sizes = Counter((r.app, r.sm_mhz, r.mem_mhz) for r in rows)
    same: dict[tuple[float, float, tuple[str, ...]], list[KernelRow]] = defaultdict(list)
    for r in rows:
        same[(r.sm_mhz, r.mem_mhz, r.signature)].append(r)
    own: list[KernelRow] = []
    rejections: list[Rejection] = []
    for group in same.values():
        seen: dict[str, KernelRow] = {}
        for r in group:
            if r.app in seen:
                raise IngestError(label, r.line, f"duplicate kernel row of {r.app} (same as line {seen[r.app].line})")
            seen[r.app] = r
        ranked = sorted(group, key=lambda r: (sizes[(r.app, r.sm_mhz, r.mem_mhz)], r.line))
        owner = ranked[0]
        if (
            len(ranked) > 1
            and sizes[(ranked[1].app, owner.sm_mhz, owner.mem_mhz)] == sizes[(owner.app, owner.sm_mhz, owner.mem_mhz)]
        ):
            raise IngestError(
                label,
                ranked[1].line,
                f"same kernel metrics as line {owner.line} in {ranked[1].app} and {owner.app}, with equally "
                "many rows at this clock: cannot tell which app measured it",
            )
        own.append(owner)
        reason = f"carried-over copy of {owner.app}'s kernel row (identical nvprof metrics at the same clock)"
        rejections.extend(Rejection(label, r.line, reason) for r in ranked[1:])
    return sorted(own, key=lambda r: r.line), sorted(rejections, key=lambda r: r.line)


def aggregate(label: str, rows: list[KernelRow], own: list[KernelRow]) -> pd.DataFrame:
    """One schema row per (app, clock): app-level time and power, time-weighted kernel features."""
    first_of: dict[GroupKey, KernelRow] = {}
    for r in rows:
        key = (r.app, r.sm_mhz, r.mem_mhz)
        first = first_of.setdefault(key, r)
        app_level = (r.time_s, r.power_w, r.dmon_sm_util)
        if app_level != (first.time_s, first.power_w, first.dmon_sm_util):
            raise IngestError(
                label,
                r.line,
                f"app-level time/pwr/sm {app_level} differ from line {first.line} for the same (app, clock)",
            )
    kernels: dict[GroupKey, list[KernelRow]] = defaultdict(list)
    for r in own:
        kernels[(r.app, r.sm_mhz, r.mem_mhz)].append(r)
    records: list[dict[str, object]] = []
    for key, first in first_of.items():
        group = kernels.get(key)
        if not group:
            raise IngestError(label, first.line, f"{key[0]} at {key[1]:g} MHz has no kernel rows of its own")
        weights = np.array([r.weight for r in group])
        features = {
            name: float(np.dot(weights, [r.features[name] for r in group]) / weights.sum())
            for name in group[0].features
        }
        records.append(
            {
                "sku": SKU,
                "workload": APPS[first.app],
                "sm_clock_mhz": first.sm_mhz,
                "mem_clock_mhz": first.mem_mhz,
                "time_s": first.time_s,
                "power_w": first.power_w,
                **features,
                "feat_tensor_active": np.nan,
                "x_dmon_sm_util": first.dmon_sm_util,
                "x_kernel_rows": float(len(group)),
            }
        )
    return pd.DataFrame.from_records(records)


def mark_reference(frame: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """Set `ref`: the default clock if every workload has it, else each workload's max clock."""
    at_default = frame["sm_clock_mhz"] == DEFAULT_SM_MHZ
    if frame.loc[at_default, "workload"].nunique() == frame["workload"].nunique():
        return frame.assign(ref=at_default), f"reference = default application clock {DEFAULT_SM_MHZ:g} MHz"
    top = frame.groupby("workload")["sm_clock_mhz"].transform("max")
    note = f"some app lacks the default {DEFAULT_SM_MHZ:g} MHz: reference = each app's max SM clock"
    return frame.assign(ref=frame["sm_clock_mhz"] == top), note


def parse_file(path: Path, root: Path, source: str = SOURCE) -> ParsedSource:
    """Parse the kernel-row CSV at `path`; paths in messages and the report are relative to `root`."""
    label = path.relative_to(root).as_posix()
    header, raw = read_rows(path, label, required=REQUIRED)
    metric_columns = [c for c in header if c not in (*INDEX_COLUMNS, APP_COLUMN, *APP_LEVEL_COLUMNS)]
    rows = [read_kernel_row(label, r, metric_columns) for r in raw]
    own, rejections = split_copies(label, rows)
    frame = aggregate(label, rows, own)
    frame, ref_note = mark_reference(frame)
    frame["source"] = source
    frame["energy_j"] = frame["time_s"] * frame["power_w"]
    for name in FEATURE_NAMES:
        if name not in frame.columns:
            frame[name] = np.nan
    frame = frame.sort_values(["sku", "workload", "sm_clock_mhz", "mem_clock_mhz"], kind="stable")
    frame = conform(frame, SWEEP_COLUMNS, source)
    report = SourceReport(source=source, files=[label], rows_read=len(rows), rows_kept=len(frame))
    report.rejections.extend(rejections)
    report.notes.extend(
        [
            f"{len(own)} raw kernel rows aggregated into {len(frame)} (app, clock) rows; "
            f"{len(rejections)} carried-over copies rejected; rows_read {len(rows)} = {len(own)} aggregated "
            f"+ {len(rejections)} rejected (rows_kept counts output rows)",
            "time_s = whole-application wall time and power_w = dmon average power, identical on every "
            "kernel row of one (app, clock); features = kernel metrics weighted by estimated kernel elapsed "
            "time (inst_executed / (ipc x sm_efficiency)), as elapsed-cycle fractions",
            ref_note,
        ]
    )
    return ParsedSource(frame, report)


def parse(raw_dir: Path) -> ParsedSource:
    """Parse data/raw/gpu-ddvfs/ (FILE; the other CSVs are listed in SKIPPED)."""
    check_raw_files(raw_dir, [FILE], SKIPPED, "gpu_ddvfs (FILE or SKIPPED)")
    parsed = parse_file(raw_dir / FILE, raw_dir.parent)
    parsed.report.notes.extend(f"not parsed: {name} ({why})" for name, why in SKIPPED.items())
    return parsed


SWEEP_SOURCES[SOURCE] = parse
