"""Reading a recorded NVML trace folder (the layout `gpoeo-rt trace record` writes), with the csv module only.

Layout (extra columns and extra signals are ignored, so the recorder may add fields):
- `nvml_buffered.csv`: long format `signal,t_s,value`; power samples have signal `power_mw`. Optional: a GPU or
  driver without buffered samples produces no such file.
- `nvml_polled.csv`: one row per poll, `t_s` plus one column per field (`p_inst_mw` is the instantaneous power).
- `iterations.csv`: optional ground truth, `t_s,phase,iteration` (the time each training iteration ended).
All `t_s` in one folder share one time base. Values that do not parse become NaN (counted in the notes) so that
one bad line degrades the answer instead of losing the trace; a missing column or file raises `TraceError`.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

BUFFERED_FILE = "nvml_buffered.csv"
POLLED_FILE = "nvml_polled.csv"
ITERATIONS_FILE = "iterations.csv"
BUFFERED_POWER_SIGNAL = "power_mw"
POLLED_POWER_COLUMN = "p_inst_mw"


class TraceError(Exception):
    """A trace folder or file that cannot be read; the message names the path (and line where it applies)."""


@dataclass(frozen=True)
class PowerSeries:
    """Power samples in watts. source is "buffered" (nvmlDeviceGetSamples, 50 Hz on an H200) or "polled"."""

    t_s: FloatArray = field(repr=False)
    power_w: FloatArray = field(repr=False)
    source: str
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class EnergySeries:
    """Cumulative energy counter readings (J), from the polled file: the period detector's anti-aliasing
    reference (its differences are true interval averages of power)."""

    t_s: FloatArray = field(repr=False)
    energy_j: FloatArray = field(repr=False)


@dataclass(frozen=True)
class Iterations:
    """Ground-truth iteration end times and the phase each belongs to."""

    t_s: FloatArray = field(repr=False)
    phase: IntArray = field(repr=False)

    def phases(self) -> list[PhaseTruth]:
        """Per phase: its span and its true period (median of the differences of iteration end times)."""
        out: list[PhaseTruth] = []
        for p in np.unique(self.phase):
            t = np.sort(self.t_s[self.phase == p])
            period = float(np.median(np.diff(t))) if len(t) >= 2 else math.nan
            out.append(PhaseTruth(int(p), float(t[0]), float(t[-1]), period, len(t)))
        return sorted(out, key=lambda ph: ph.start_s)


@dataclass(frozen=True)
class PhaseTruth:
    phase: int
    start_s: float  # end time of the phase's first iteration
    end_s: float  # end time of its last iteration
    period_s: float  # median iteration time
    n_iterations: int


@dataclass(frozen=True)
class Trace:
    path: Path
    power: PowerSeries
    iterations: Iterations | None
    energy: EnergySeries | None = None
    notes: tuple[str, ...] = ()


def _read_rows(path: Path, required: tuple[str, ...]) -> tuple[list[str], list[list[str]]]:
    try:
        with path.open(newline="") as fh:
            reader = csv.reader(fh)
            header = next(reader, None)
            if header is None:
                raise TraceError(f"{path}: empty file (no header line)")
            header = [h.strip() for h in header]
            missing = [c for c in required if c not in header]
            if missing:
                raise TraceError(f"{path}, line 1: missing column(s) {', '.join(missing)} (header: {','.join(header)})")
            return header, list(reader)
    except OSError as exc:
        raise TraceError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    except csv.Error as exc:
        raise TraceError(f"{path}: malformed CSV ({exc})") from exc
    except UnicodeDecodeError as exc:
        raise TraceError(f"{path}: not a text CSV file ({exc.reason})") from exc


# What a GPU can draw: a sample outside this is not a measurement (a unit mix-up, a corrupt or forged file), and
# detecting periods in it would only mislead, so the trace is refused.
MAX_PLAUSIBLE_POWER_W = 5000.0


def _check_power(path: Path, power_w: FloatArray, lines: npt.NDArray[np.int64]) -> None:
    """Refuse a power value no GPU can draw (NaN cells are only counted, as before)."""
    bad = np.flatnonzero(np.isfinite(power_w) & ((power_w < 0.0) | (power_w > MAX_PLAUSIBLE_POWER_W)))
    if len(bad):
        k = int(bad[0])
        raise TraceError(
            f"{path}, line {int(lines[k])}: power {power_w[k] * 1000.0:g} mW is not physically possible (expected "
            f"0 to {MAX_PLAUSIBLE_POWER_W * 1000:g} mW; {len(bad)} such sample(s))"
        )


def _to_float(cell: str) -> float:
    try:
        return float(cell)
    except ValueError:
        return math.nan


def _columns(path: Path, names: tuple[str, ...]) -> tuple[dict[str, FloatArray], int]:
    """The named columns as float arrays; the count of cells that did not parse (or were missing) is returned."""
    header, rows = _read_rows(path, names)
    pos = [header.index(c) for c in names]
    out = np.full((len(rows), len(names)), np.nan)
    for i, row in enumerate(rows):
        for j, k in enumerate(pos):
            if k < len(row):  # a short row leaves NaN
                out[i, j] = _to_float(row[k])
    return {c: out[:, j] for j, c in enumerate(names)}, int(np.isnan(out).sum())


def read_buffered_power(folder: str | Path) -> PowerSeries | None:
    """Buffered power samples (W), or None when the folder has no nvml_buffered.csv."""
    path = Path(folder) / BUFFERED_FILE
    if not path.is_file():
        return None
    header, rows = _read_rows(path, ("signal", "t_s", "value"))
    i_sig, i_t, i_v = header.index("signal"), header.index("t_s"), header.index("value")
    t: list[float] = []
    v: list[float] = []
    line: list[int] = []
    short = 0
    for i, row in enumerate(rows):
        if len(row) <= max(i_sig, i_t, i_v):
            short += 1
            continue
        if row[i_sig].strip() == BUFFERED_POWER_SIGNAL:
            t.append(_to_float(row[i_t]))
            v.append(_to_float(row[i_v]) / 1000.0)
            line.append(i + 2)  # the header is line 1
    ta, va = np.asarray(t, dtype=np.float64), np.asarray(v, dtype=np.float64)
    _check_power(path, va, np.asarray(line, dtype=np.int64))
    notes: list[str] = []
    if short:
        notes.append(f"{path.name}: skipped {short} short row(s)")
    n_nan = int((~np.isfinite(ta) | ~np.isfinite(va)).sum())
    if n_nan:
        notes.append(f"{path.name}: {n_nan} power sample(s) with unparseable time or value")
    if len(ta) == 0:
        return None
    return PowerSeries(ta, va, "buffered", tuple(notes))


def read_polled(folder: str | Path, columns: tuple[str, ...]) -> dict[str, FloatArray]:
    """Columns of nvml_polled.csv (always including t_s) as float arrays; raises TraceError if absent."""
    path = Path(folder) / POLLED_FILE
    if not path.is_file():
        raise TraceError(f"{path}: no such file")
    names = ("t_s", *tuple(c for c in columns if c != "t_s"))
    cols, _ = _columns(path, names)
    return cols


def read_polled_power(folder: str | Path) -> PowerSeries | None:
    """Polled instantaneous power (W), or None when the folder has no nvml_polled.csv."""
    path = Path(folder) / POLLED_FILE
    if not path.is_file():
        return None
    cols, n_bad = _columns(path, ("t_s", POLLED_POWER_COLUMN))
    notes = [f"{path.name}: {n_bad} unparseable cell(s)"] if n_bad else []
    power_w = cols[POLLED_POWER_COLUMN] / 1000.0
    _check_power(path, power_w, np.arange(2, len(power_w) + 2, dtype=np.int64))
    return PowerSeries(cols["t_s"], power_w, "polled", tuple(notes))


def read_polled_energy(folder: str | Path) -> EnergySeries | None:
    """The polled energy counter in joules, or None when there is no polled file or no energy_mj column."""
    path = Path(folder) / POLLED_FILE
    if not path.is_file():
        return None
    header, _ = _read_rows(path, ("t_s",))
    if "energy_mj" not in header:
        return None
    cols, _ = _columns(path, ("t_s", "energy_mj"))
    if not np.isfinite(cols["energy_mj"]).any():
        return None
    return EnergySeries(cols["t_s"], cols["energy_mj"] / 1000.0)


def read_iterations(folder: str | Path) -> Iterations | None:
    """Ground-truth iterations, or None when the folder has no iterations.csv. A missing phase column means
    a single phase 0."""
    path = Path(folder) / ITERATIONS_FILE
    if not path.is_file():
        return None
    header, _ = _read_rows(path, ("t_s",))
    names = ("t_s", "phase") if "phase" in header else ("t_s",)
    cols, _ = _columns(path, names)
    t = cols["t_s"]
    phase = cols.get("phase", np.zeros_like(t))
    ok = np.isfinite(t) & np.isfinite(phase)
    return Iterations(t[ok], phase[ok].astype(np.int64))


def read_power(folder: str | Path) -> PowerSeries:
    """The best power signal in a trace folder: buffered samples if present, else polled power (and say so)."""
    folder = Path(folder)
    buffered = read_buffered_power(folder)
    if buffered is not None:
        return buffered
    polled = read_polled_power(folder)
    if polled is None:
        raise TraceError(f"{folder}: neither {BUFFERED_FILE} (with {BUFFERED_POWER_SIGNAL} rows) nor {POLLED_FILE}")
    note = (
        f"no buffered power samples ({BUFFERED_FILE} absent or without {BUFFERED_POWER_SIGNAL}): using polled "
        f"{POLLED_POWER_COLUMN}, which refreshes slower and resolves only longer periods"
    )
    return PowerSeries(polled.t_s, polled.power_w, polled.source, (note, *polled.notes))


def read_trace(folder: str | Path) -> Trace:
    """Power (best available source), the energy counter and the ground-truth iterations (when recorded) of a
    trace folder."""
    folder = Path(folder)
    if not folder.exists():
        raise TraceError(f"{folder}: no such trace folder")
    if not folder.is_dir():
        raise TraceError(f"{folder}: not a folder (a trace is a folder holding {POLLED_FILE} and friends)")
    power = read_power(folder)
    iterations = read_iterations(folder)
    return Trace(folder, power, iterations, read_polled_energy(folder), power.notes)
