"""Crash-safe files of a collection: the append-only results file and the clock-lock state file.

A row is appended with one write() and fsynced before the next config starts, so a crash (or power loss) loses at
most the config being measured and can leave at most a torn last line. On reopening, a torn last line is cut off,
written to recovery.log with its text (never dropped silently) and its config is measured again.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpoeo_pipeline.collect.rawformat import HEADER_LINE, RECOVERY_FILE, RESULT_COLUMNS, ConfigKey, ResultRow, csv_line


class CollectError(RuntimeError):
    """A collection cannot go on; the message names the file (and line) or the setting at fault."""


def _fsync_dir(path: Path) -> None:
    # A new file's directory entry is durable only once the directory itself is fsynced.
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def parse_key(path: Path, line: int, record: dict[str, str]) -> ConfigKey:
    """The config key of a results record; raises CollectError naming the file and line if it is malformed."""
    workload = record["workload"].strip()
    if not workload:
        raise CollectError(f"{path}:{line}: empty workload")
    clocks: list[int | None] = []
    for column in ("config_sm_mhz", "config_mem_mhz"):
        raw = record[column].strip()
        try:
            clocks.append(int(raw) if raw else None)
        except ValueError:
            raise CollectError(f"{path}:{line}: non-integer {column}={raw!r}") from None
    return (workload, clocks[0], clocks[1])


@dataclass(frozen=True)
class TornLine:
    """A torn last line found (and cut off) on reopening: its 1-based line number and text."""

    line: int
    text: str


class ResultStore:
    """results.csv: which configs are done, and appending one more (durably)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.done: set[ConfigKey] = set()
        self.torn: TornLine | None = None
        self._open()

    def _open(self) -> None:
        path = self.path
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("x", encoding="utf-8") as handle:
                handle.write(HEADER_LINE)
                handle.flush()
                os.fsync(handle.fileno())
            _fsync_dir(path.parent)
            return
        data = path.read_bytes()
        if data and not data.endswith(b"\n"):
            self._cut_torn_line(data)
            data = path.read_bytes()
        text = data.decode("utf-8")
        lines = text.splitlines(keepends=True)
        if not lines:  # a crash between creating the file and writing its header
            with path.open("w", encoding="utf-8") as handle:
                handle.write(HEADER_LINE)
                handle.flush()
                os.fsync(handle.fileno())
            return
        if lines[0] != HEADER_LINE:
            raise CollectError(
                f"{path}:1: header does not match this gpoeo-collect's results format (expected "
                f"{HEADER_LINE.strip()!r}); collect into a new folder"
            )
        for number, record in enumerate(csv.reader(lines[1:]), start=2):
            if not record:
                continue
            if len(record) != len(RESULT_COLUMNS):
                raise CollectError(f"{path}:{number}: expected {len(RESULT_COLUMNS)} fields, found {len(record)}")
            key = parse_key(path, number, dict(zip(RESULT_COLUMNS, record, strict=True)))
            if key in self.done:
                raise CollectError(f"{path}:{number}: config {key} is already in the file (edited by hand?)")
            self.done.add(key)

    def _cut_torn_line(self, data: bytes) -> None:
        cut = data.rfind(b"\n") + 1
        fragment = data[cut:].decode("utf-8", errors="replace")
        line = data[:cut].count(b"\n") + 1
        self.torn = TornLine(line, fragment)
        # Record the fragment before cutting it off: a crash between the two leaves both, never neither.
        with (self.path.parent / RECOVERY_FILE).open("a", encoding="utf-8") as log:
            log.write(
                f"{now_iso()} {self.path.name}:{line}: torn last line ({len(data) - cut} bytes, the collector "
                f"stopped while writing it) cut off; its config is measured again. Text: {fragment!r}\n"
            )
            log.flush()
            os.fsync(log.fileno())
        with self.path.open("r+b") as handle:
            handle.truncate(cut)
            handle.flush()
            os.fsync(handle.fileno())

    def append(self, row: ResultRow) -> None:
        if row.key in self.done:
            raise CollectError(f"{self.path}: config {row.key} was already measured")
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(csv_line(row.fields()))
            handle.flush()
            os.fsync(handle.fileno())
        self.done.add(row.key)


class ClockLockState:
    """clock-lock.json: written (durably) before clocks are locked and removed once they are reset, so a collector
    killed in between (SIGKILL, power loss) leaves a record that the next run acts on before anything else."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> dict[str, Any] | None:
        if not self.path.exists():
            return None
        try:
            value = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            # Unreadable still means "clocks may be locked": callers treat it as locked on an unknown GPU.
            return {"gpu_uuid": None, "error": f"{self.path}: unreadable ({exc})"}
        return value if isinstance(value, dict) else {"gpu_uuid": None, "error": f"{self.path}: not an object"}

    def mark(self, gpu_uuid: str, gpu_index: int, sm_mhz: int, mem_mhz: int) -> None:
        payload = {
            "gpu_uuid": gpu_uuid,
            "gpu_index": gpu_index,
            "sm_clock_mhz": sm_mhz,
            "mem_clock_mhz": mem_mhz,
            "pid": os.getpid(),
            "since": now_iso(),
        }
        tmp = self.path.with_suffix(".tmp")
        with tmp.open("w", encoding="utf-8") as handle:
            json.dump(payload, handle)
            handle.flush()
            os.fsync(handle.fileno())
        tmp.replace(self.path)
        _fsync_dir(self.path.parent)

    def clear(self) -> None:
        if self.path.exists():
            self.path.unlink()
            _fsync_dir(self.path.parent)
