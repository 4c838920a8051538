"""The normalized sweeps schema: one row per (sku, workload, sm_clock_mhz, mem_clock_mhz).

Every source parser produces rows in this schema, `ingest` concatenates and validates them, and every later stage
(and the runtime's sweep-driven simulator) reads it. Units are in the names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from gpoeo_rt.features import FEATURE_NAMES

KEY_COLUMNS: tuple[str, ...] = ("sku", "workload", "sm_clock_mhz", "mem_clock_mhz")

# column -> pandas dtype. `feat_*` are fractions in [0, 1] (NaN where a source lacks the counter); extra
# source-specific counters may follow as `x_*` float columns.
SWEEP_COLUMNS: dict[str, str] = {
    "sku": "string",
    "source": "string",
    "workload": "string",
    "sm_clock_mhz": "float64",
    "mem_clock_mhz": "float64",
    "time_s": "float64",
    "power_w": "float64",
    "energy_j": "float64",
    "ref": "bool",
    **{name: "float64" for name in FEATURE_NAMES},
}

POWERLIMIT_COLUMNS: dict[str, str] = {
    "sku": "string",
    "source": "string",
    "workload": "string",
    "power_limit_w": "float64",
    "time_s": "float64",
    "power_w": "float64",
    "energy_j": "float64",
    "ref": "bool",
}


class IngestError(ValueError):
    """Bad raw input. The message always names the file and, where there is one, the line (1-based, header = 1)."""

    def __init__(self, path: Path | str, line: int | None, problem: str) -> None:
        where = f"{path}:{line}" if line is not None else f"{path}"
        super().__init__(f"{where}: {problem}")
        self.path = str(path)
        self.line = line
        self.problem = problem


@dataclass(frozen=True)
class Rejection:
    """A raw row that is read but deliberately not kept, with the rule that rejected it."""

    path: str
    line: int
    reason: str


@dataclass
class SourceReport:
    """What one source's parser read, kept and rejected; written to ingest_report.json."""

    source: str
    files: list[str] = field(default_factory=list)
    rows_read: int = 0
    rows_kept: int = 0
    rejections: list[Rejection] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        reasons: dict[str, int] = {}
        for rejection in self.rejections:
            reasons[rejection.reason] = reasons.get(rejection.reason, 0) + 1
        return {
            "source": self.source,
            "files": self.files,
            "rows_read": self.rows_read,
            "rows_kept": self.rows_kept,
            "rows_rejected": len(self.rejections),
            "rejected_by_reason": reasons,
            "rejected_rows": [{"file": r.path, "line": r.line, "reason": r.reason} for r in self.rejections],
            "notes": self.notes,
        }


def conform(frame: pd.DataFrame, columns: dict[str, str], where: str) -> pd.DataFrame:
    """Return `frame` with the schema's columns first, in order and dtype, then any `x_*` extras.

    Raises IngestError naming `where` if a schema column is missing or an unknown column is present.
    """
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise IngestError(where, None, f"missing schema columns {missing}")
    unknown = [c for c in frame.columns if c not in columns and not c.startswith("x_")]
    if unknown:
        raise IngestError(where, None, f"unknown columns {unknown} (extra counters must be named x_*)")
    extras = sorted(c for c in frame.columns if c.startswith("x_"))
    out = frame[list(columns) + extras].copy()
    for name, dtype in columns.items():
        out[name] = out[name].astype(dtype)
    for name in extras:
        out[name] = pd.to_numeric(out[name], errors="raise").astype("float64")
    return out.reset_index(drop=True)


def validate_sweeps(frame: pd.DataFrame, key_columns: tuple[str, ...] = KEY_COLUMNS, where: str = "sweeps") -> None:
    """Check the invariants every consumer relies on; raise IngestError naming the offending row's source."""
    for col in ("time_s", "power_w", "energy_j"):
        bad = frame.index[~(frame[col] > 0) | ~np.isfinite(frame[col])]
        if len(bad):
            row = frame.loc[bad[0]]
            raise IngestError(
                where,
                None,
                f"non-positive or non-finite {col}={row[col]!r} in {dict(row[list(key_columns)])}",
            )
    for name in FEATURE_NAMES:
        if name in frame.columns:
            values = frame[name].dropna()
            if len(values) and ((values < 0).any() or (values > 1.0 + 1e-9).any()):
                raise IngestError(where, None, f"{name} outside [0, 1]: {values.min()}..{values.max()}")
    duplicated = frame.duplicated(list(key_columns), keep=False)
    if duplicated.any():
        first = frame.loc[duplicated].iloc[0]
        raise IngestError(where, None, f"duplicate key {dict(first[list(key_columns)])}")
    refs = frame.groupby(["sku", "workload"], observed=True)["ref"].sum()
    if not (refs == 1).all():
        bad_groups = refs[refs != 1]
        raise IngestError(
            where, None, f"each (sku, workload) needs exactly one ref row; {bad_groups.head(5).to_dict()}"
        )
