"""A tiny measured-sweep table (two memory clocks x three SM clocks) for tests that need a sweep-driven GPU
without the DVC outputs (a fresh clone and CI have no data/processed/)."""

from __future__ import annotations

import csv
from pathlib import Path

from gpoeo_rt.features import FEATURE_NAMES

COLUMNS = ["sku", "source", "workload", "sm_clock_mhz", "mem_clock_mhz", "time_s", "power_w", "energy_j", "ref"]


def sweep_rows() -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for mem, mem_factor in ((877.0, 1.0), (700.0, 1.15)):
        for sm, t, p in ((700.0, 2.0, 120.0), (1000.0, 1.5, 160.0), (1300.0, 1.25, 210.0)):
            rows.append(
                {
                    "sku": "v100",
                    "source": "test",
                    "workload": "bert",
                    "sm_clock_mhz": sm,
                    "mem_clock_mhz": mem,
                    "time_s": t * mem_factor,
                    "power_w": p / mem_factor,
                    "energy_j": t * p,
                    "ref": sm == 1300.0 and mem == 877.0,
                    "feat_sm_active": 0.8,
                    "feat_dram_active": 0.3 * sm / 1300.0,
                }
            )
    rows.append({**rows[0], "workload": "other", "ref": True})
    return rows


def write_sweep_csv(path: Path, rows: list[dict[str, object]]) -> Path:
    """Write rows in the layout of data/processed/sweeps.csv (missing counters left empty)."""
    columns = COLUMNS + list(FEATURE_NAMES)
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns)
        writer.writeheader()
        for row in rows:
            writer.writerow({c: row.get(c, "") for c in columns})
    return path
