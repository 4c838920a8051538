"""Source `nv-dvfs-history`: NV-DVFS-Benchmark core x memory clock grids with power (older upstream commits).

Files (data/raw/nv-dvfs-history/<commit>/csvs/raw/, see the folder's README): one `*-Performance-Power.csv`
per GPU grid. Columns: an unnamed pandas index, appName, coreF (MHz), memF (MHz), argNo, kernel, time/ms
(kernel time), blocks, warps, ~45 nvprof metrics measured at each (coreF, memF) point, power/W (average board
power). The RTX 2070 SUPER file has time and power only. Metric names differ by file (sm_activity vs
sm_efficiency, executed_ipc vs ipc), so they are looked up per file.

nvprof metrics -> features (fractions in [0, 1], none clipped: a value outside raises). GPU constants are in
GPU_SPECS below.
- feat_sm_active = sm_activity or sm_efficiency: the fraction of time an SM has at least one resident warp,
  averaged over SMs, which is DCGM SMACT's definition. The files store it as a ratio (nvprof prints percent).
- feat_sm_occupancy = achieved_occupancy * feat_sm_active: achieved_occupancy counts resident warps per
  *active* cycle, DCGM SMOCC per *elapsed* cycle, so the idle cycles are folded back in. The raw value is kept
  as x_achieved_occupancy.
- feat_dram_active = (dram_read_throughput + dram_write_throughput) / peak DRAM bandwidth at that memory
  clock: DCGM DRAMA is the fraction of cycles the DRAM interface moves data, i.e. achieved over peak
  bandwidth. The peak scales with memF, so low-memory-clock points are not understated as they would be
  against a SKU-wide max.
- feat_fp32_active / feat_fp64_active = inst_fp_32 / inst_fp_64 (thread-level instruction counts per kernel)
  over the pipe capacity time * coreF * SMs * lanes per SM, i.e. the fraction of FP32 / FP64 lane-cycles used,
  which is what DCGM FP32A / FP64A report (check: BlackScholes at the reference clock gets 0.42 on P100; DCGM
  FP32A is 0.35 on V100; both have 64 FP32 lanes per SM).
- feat_fp16_active: NaN, no half-precision counter. feat_tensor_active: NaN (these GPUs have no tensor cores;
  NaN = "not measured", as for every other source without the counter).

Kept as x_* extras: x_achieved_occupancy, x_dram_gbps (read + write GB/s), x_ipc.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from gpoeo_pipeline.schema import IngestError, SourceReport
from gpoeo_pipeline.sources import SWEEP_SOURCES, ParsedSource
from gpoeo_pipeline.sources.nvdvfs import (
    RawRow,
    check_fraction,
    check_measurement,
    check_raw_files,
    finalize,
    number,
    read_files,
    read_rows,
    text,
)

SOURCE = "nv-dvfs-history"


@dataclass(frozen=True)
class GpuSpec:
    """Public spec-sheet constants that turn nvprof counts into fractions of the GPU's peak."""

    sms: int
    fp32_lanes_per_sm: int
    fp64_lanes_per_sm: int
    # Peak DRAM bytes per cycle of memF, the clock nvidia-smi reports (bus bytes x 2 transfers per cycle).
    dram_bytes_per_mem_cycle: float


GPU_SPECS: dict[str, GpuSpec] = {
    # GP102: 28 SMs x 128 FP32, FP64 at 1/32 rate; 352-bit GDDR5X, 484 GB/s at memF 5505.
    "gtx-1080ti": GpuSpec(sms=28, fp32_lanes_per_sm=128, fp64_lanes_per_sm=4, dram_bytes_per_mem_cycle=88.0),
    # GM204: 16 SMs x 128 FP32, FP64 at 1/32 rate; 256-bit GDDR5, 224 GB/s at memF 3505.
    "gtx-980": GpuSpec(sms=16, fp32_lanes_per_sm=128, fp64_lanes_per_sm=4, dram_bytes_per_mem_cycle=64.0),
    # GP100 (PCIe, 1328 MHz boost): 56 SMs x 64 FP32 + 32 FP64; 4096-bit HBM2, 732 GB/s at 715 MHz. Taken as
    # the 16 GB part: the measured peak (vectorAdd, 523 GB/s) would be an implausible 95% of the 12 GB part's
    # 3072-bit 549 GB/s.
    "tesla-p100": GpuSpec(sms=56, fp32_lanes_per_sm=64, fp64_lanes_per_sm=32, dram_bytes_per_mem_cycle=1024.0),
}


@dataclass(frozen=True)
class FileSpec:
    """What one raw grid file is: its SKU and whether it has the nvprof metrics."""

    sku: str
    has_counters: bool


# path under data/raw/nv-dvfs-history/ -> spec. The GTX 980 low and high grids are the same board and the same
# inputs (identical instruction counts per workload) and their (coreF, memF) points are disjoint (memF
# 500-1000 vs 2100-3900), so they merge into one `gtx-980` grid without duplicate keys; every workload is in
# both, and the SKU's reference is the high grid's top point (1500, 3900). The two were logged in different
# sessions (commits from 2019 and 2021), so low-grid ratios cross sessions; times agree across the seam
# (compute-bound kernels take the same time at core 700 in both grids).
FILES: dict[str, FileSpec] = {
    "c04f856/csvs/raw/gtx1080ti-dvfs-real-Performance-Power.csv": FileSpec("gtx-1080ti", has_counters=True),
    "c04f856/csvs/raw/gtx980-low-dvfs-real-small-workload-Performance-Power.csv": FileSpec(
        "gtx-980", has_counters=True
    ),
    "ea41783/csvs/raw/gtx980-high-dvfs-real-small-workload-Performance-Power.csv": FileSpec(
        "gtx-980", has_counters=True
    ),
    "c04f856/csvs/raw/p100-dvfs-real-Performance-Power.csv": FileSpec("tesla-p100", has_counters=True),
    "8f42473/csvs/raw/gtx2070s-dvfs-real-Performance-Power.csv": FileSpec("rtx-2070-super", has_counters=False),
}
# Present upstream but deliberately not parsed (and not copied into data/raw): no power column.
SKIPPED: dict[str, str] = {
    "ea41783/csvs/raw/titanx-dvfs-real-Performance.csv": "no power column",
}

BASE_COLUMNS: tuple[str, ...] = ("appName", "coreF", "memF", "argNo", "kernel", "time/ms", "power/W")
COUNTER_COLUMNS: tuple[str, ...] = (
    "achieved_occupancy",
    "dram_read_throughput",
    "dram_write_throughput",
    "inst_fp_32",
    "inst_fp_64",
)
# Metric name aliases across files (one of each pair must be present in a file with counters).
SM_ACTIVE_ALIASES: tuple[str, ...] = ("sm_activity", "sm_efficiency")
IPC_ALIASES: tuple[str, ...] = ("executed_ipc", "ipc")
# Every column seen in these exports; any other column means a different format, so it is an error.
KNOWN_COLUMNS: frozenset[str] = frozenset(
    (
        "",  # the unnamed index pandas wrote
        *BASE_COLUMNS,
        *COUNTER_COLUMNS,
        *SM_ACTIVE_ALIASES,
        *IPC_ALIASES,
        "blocks",
        "warps",
        "warp_execution_efficiency",
        "eligible_warps_per_cycle",
        "branch_efficiency",
        "cf_executed",
        "gld_throughput",
        "gld_transactions",
        "gld_transactions_per_request",
        "gst_throughput",
        "gst_transactions",
        "gst_transactions_per_request",
        "global_hit_rate",
        "dram_read_transactions",
        "dram_write_transactions",
        "l2_read_transactions",
        "l2_read_throughput",
        "l2_write_transactions",
        "l2_write_throughput",
        "shared_load_transactions",
        "shared_load_throughput",
        "shared_load_transactions_per_request",
        "shared_store_transactions",
        "shared_store_throughput",
        "shared_store_transactions_per_request",
        "l2_tex_read_throughput",
        "l2_tex_read_transactions",
        "l2_tex_write_throughput",
        "l2_tex_write_throughput.1",
        "tex_cache_hit_rate",
        "tex_cache_throughput",
        "tex_cache_transactions",
        "flop_count_dp",
        "flop_count_dp_fma",
        "flop_count_sp",
        "flop_count_sp_fma",
        "flop_count_sp_special",
        "inst_integer",
        "inst_executed",
        "inst_per_warp",
    )
)


def _alias(label: str, header: list[str], aliases: tuple[str, ...]) -> str:
    """The one column of `aliases` in `header`; raises IngestError (header line) if none or several."""
    present = [a for a in aliases if a in header]
    if len(present) != 1:
        raise IngestError(label, 1, f"need exactly one of the columns {list(aliases)}, found {present}")
    return present[0]


def counter_features(
    label: str,
    row: RawRow,
    spec: GpuSpec,
    sm_col: str,
    ipc_col: str,
    time_s: float,
    sm_mhz: float,
    mem_mhz: float,
) -> dict[str, float]:
    """The feat_* proxies and x_* extras of one row with nvprof metrics (mappings in the module docstring)."""
    sm_active = check_fraction(label, row, sm_col, number(label, row, sm_col))
    occupancy = check_fraction(label, row, "achieved_occupancy", number(label, row, "achieved_occupancy"))
    dram_gbps = number(label, row, "dram_read_throughput") + number(label, row, "dram_write_throughput")
    if dram_gbps < 0:
        raise IngestError(label, row.line, f"negative DRAM throughput {dram_gbps} GB/s")
    dram_peak_gbps = spec.dram_bytes_per_mem_cycle * mem_mhz * 1e6 / 1e9
    lane_cycles = time_s * sm_mhz * 1e6 * spec.sms
    fp32 = number(label, row, "inst_fp_32") / (lane_cycles * spec.fp32_lanes_per_sm)
    fp64 = number(label, row, "inst_fp_64") / (lane_cycles * spec.fp64_lanes_per_sm)
    return {
        "feat_sm_active": sm_active,
        "feat_sm_occupancy": occupancy * sm_active,
        "feat_dram_active": check_fraction(label, row, "DRAM throughput / peak", dram_gbps / dram_peak_gbps),
        "feat_fp32_active": check_fraction(label, row, "inst_fp_32 / FP32 lane-cycles", fp32),
        "feat_fp64_active": check_fraction(label, row, "inst_fp_64 / FP64 lane-cycles", fp64),
        "x_achieved_occupancy": occupancy,
        "x_dram_gbps": dram_gbps,
        "x_ipc": number(label, row, ipc_col),
    }


def read_file(path: Path, label: str, spec: FileSpec) -> tuple[pd.DataFrame, int]:
    """Parse one grid CSV into schema rows (plus origin columns `_file`, `_line`).

    Returns the rows and the number of data rows read.
    """
    required = BASE_COLUMNS + (COUNTER_COLUMNS if spec.has_counters else ())
    header, rows = read_rows(path, label, required=required, allowed=KNOWN_COLUMNS)
    gpu: GpuSpec | None = None
    sm_col = ipc_col = ""
    if spec.has_counters:
        if spec.sku not in GPU_SPECS:
            raise IngestError(label, None, f"no GPU_SPECS entry for {spec.sku!r} to normalise its counters")
        gpu = GPU_SPECS[spec.sku]
        sm_col = _alias(label, header, SM_ACTIVE_ALIASES)
        ipc_col = _alias(label, header, IPC_ALIASES)
    records: list[dict[str, object]] = []
    for row in rows:
        app, kernel, arg = (text(label, row, c) for c in ("appName", "kernel", "argNo"))
        sm_mhz = number(label, row, "coreF")
        mem_mhz = number(label, row, "memF")
        time_s = number(label, row, "time/ms") / 1e3
        power_w = number(label, row, "power/W")
        check_measurement(label, row, sm_mhz, mem_mhz, time_s, power_w)
        features = (
            counter_features(label, row, gpu, sm_col, ipc_col, time_s, sm_mhz, mem_mhz)
            if gpu is not None
            else {"x_achieved_occupancy": math.nan, "x_dram_gbps": math.nan, "x_ipc": math.nan}
        )
        records.append(
            {
                "sku": spec.sku,
                # appName/kernel/argNo names one run configuration (same inputs) at every grid point.
                "workload": f"{app}/{kernel}/{arg}",
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


def parse_files(files: Sequence[tuple[Path, FileSpec]], root: Path, source: str = SOURCE) -> ParsedSource:
    """Parse (path, spec) files; paths in messages and the report are relative to `root`."""
    report = SourceReport(source=source)
    parsed = read_files(files, root, read_file, report)
    report.notes.extend(
        f"{label}: time and power only, all feat_* NaN" for label, spec, _ in parsed if not spec.has_counters
    )
    frame, rejections = finalize(pd.concat([rows for _, _, rows in parsed], ignore_index=True), source)
    report.rejections.extend(rejections)
    report.rows_kept = len(frame)
    return ParsedSource(frame, report)


def parse(raw_dir: Path) -> ParsedSource:
    """Parse data/raw/nv-dvfs-history/ (every file in FILES)."""
    check_raw_files(raw_dir, FILES, SKIPPED, "nvdvfs_history.FILES or SKIPPED")
    parsed = parse_files([(raw_dir / name, spec) for name, spec in FILES.items()], raw_dir.parent)
    parsed.report.notes.extend(f"left out of data/raw, not parsed: {name} ({why})" for name, why in SKIPPED.items())
    parsed.report.notes.append(
        "gtx-980 merges the low (core 500-1000 x mem 500-1000) and high (core 700-1500 x mem 2100-3900) "
        "grids: same board and inputs, disjoint (core, mem) points; the reference (1500, 3900) is high-grid"
    )
    return parsed


SWEEP_SOURCES[SOURCE] = parse
