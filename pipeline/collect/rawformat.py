"""The raw format `gpoeo-collect` writes into `data/raw/<sku>/`, read back by `sources/gpoeo_collect.py`.

Files:
- `collect.json`: what was collected and how (format version, SKU, GPU, clock table defaults, the reference clocks,
  the measurement parameters, the workloads). Its presence marks a folder as a collection for `ingest`.
- `results.csv`: one row per (workload, clock config), appended and fsynced as each config is measured. A sweep
  row's `config_*_mhz` are the locked clocks; a reference-only row has them empty (nothing was set) and its
  `sm/mem_clock_mhz` are the clocks observed while it ran. Floats are written with repr(), so they read back
  bit for bit; an empty counter is NaN.
- `README.md`: provenance, rewritten by each run; `recovery.log`: torn last lines found on restart (kept, not parsed).
- `clock-lock.json`: exists only while the collector holds clocks locked (see `store.ClockLockState`).
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field

from gpoeo_rt.features import FEATURE_NAMES

FORMAT = "gpoeo-collect/1"
META_FILE = "collect.json"
RESULTS_FILE = "results.csv"
README_FILE = "README.md"
RECOVERY_FILE = "recovery.log"
LOCK_FILE = "clock-lock.json"

MODES: tuple[str, ...] = ("sweep", "reference")
TIMINGS: tuple[str, ...] = ("markers", "period")

RESULT_COLUMNS: tuple[str, ...] = (
    "workload",
    "mode",
    "config_sm_mhz",
    "config_mem_mhz",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "ref",
    "timing",
    "repeats",
    "iterations",
    "window_s",
    "time_s",
    "time_rel_std",
    "power_w",
    "power_rel_std",
    "energy_j",
    *FEATURE_NAMES,
    "measured_at",
)

# (workload, locked SM MHz, locked memory MHz); None, None for a reference-only measurement at unset clocks.
ConfigKey = tuple[str, int | None, int | None]


def _float(value: float) -> str:
    return "" if math.isnan(value) else repr(float(value))


@dataclass(frozen=True)
class ResultRow:
    """One measured config. time_s is the mean time per iteration over the repeats, power_w the mean power,
    energy_j the energy per iteration (time_s x power_w); *_rel_std are std / mean across repeats (0 for one)."""

    workload: str
    mode: str
    config_sm_mhz: int | None
    config_mem_mhz: int | None
    sm_clock_mhz: float
    mem_clock_mhz: float
    ref: bool
    timing: str
    repeats: int
    iterations: int
    window_s: float
    time_s: float
    time_rel_std: float
    power_w: float
    power_rel_std: float
    energy_j: float
    features: dict[str, float] = field(default_factory=dict)
    measured_at: str = ""

    @property
    def key(self) -> ConfigKey:
        return (self.workload, self.config_sm_mhz, self.config_mem_mhz)

    def fields(self) -> list[str]:
        config = ["" if v is None else str(v) for v in (self.config_sm_mhz, self.config_mem_mhz)]
        return [
            self.workload,
            self.mode,
            *config,
            _float(self.sm_clock_mhz),
            _float(self.mem_clock_mhz),
            "true" if self.ref else "false",
            self.timing,
            str(self.repeats),
            str(self.iterations),
            _float(self.window_s),
            _float(self.time_s),
            _float(self.time_rel_std),
            _float(self.power_w),
            _float(self.power_rel_std),
            _float(self.energy_j),
            *(_float(self.features.get(name, math.nan)) for name in FEATURE_NAMES),
            self.measured_at,
        ]


def csv_line(values: list[str]) -> str:
    """One complete CSV record with its newline: written in a single write() so a crash leaves at most a torn
    last line, never a torn middle one."""
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerow(values)
    return buffer.getvalue()


HEADER_LINE = csv_line(list(RESULT_COLUMNS))
