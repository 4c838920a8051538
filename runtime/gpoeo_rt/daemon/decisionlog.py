"""A GPU's decision log (`<state_dir>/decisions-<label>.jsonl`, one JSON line per decision), bounded and never fatal.

- Size cap: once the file reaches `max_bytes` it is rotated (`.1`, `.2`, ... up to `keep` old files; the oldest is
  deleted), so a GPU's logs never take more than (keep + 1) x max_bytes.
- A write that fails (a full disk, a removed folder, an I/O error) switches the log to "not logging": the record
  is counted as dropped, the daemon says so once, and it tries again after `retry_s`. Writing is never what stops a
  controller: clocks are managed the same whether the log works or not.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any


class DecisionLog:
    def __init__(
        self,
        path: Path,
        *,
        max_bytes: int = 16 << 20,
        keep: int = 3,
        retry_s: float = 60.0,
        say: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_bytes <= 0 or keep < 0:
            raise ValueError("max_bytes must be > 0 and keep >= 0")
        self.path = path
        self._max_bytes = max_bytes
        self._keep = keep
        self._retry_s = retry_s
        self._say = say
        self._clock = clock
        self._stream: IO[str] | None = None
        self._size = 0
        self._retry_at = -float("inf")
        self.error: str | None = None  # why it is not logging now
        self.dropped = 0
        self.rotations = 0

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._stream = self.path.open("a", encoding="utf-8")
        self._size = self._stream.tell()

    def _rotate(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None
        for k in range(self._keep, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{k}")
            newer = self.path.with_name(f"{self.path.name}.{k - 1}") if k > 1 else self.path
            if k == self._keep:
                with contextlib.suppress(FileNotFoundError):
                    older.unlink()
            with contextlib.suppress(FileNotFoundError):
                os.replace(newer, older)
        if self._keep == 0:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
        self.rotations += 1

    def write(self, record: dict[str, Any]) -> bool:
        """Append one record; False when it was dropped (see the module docstring). Never raises OSError."""
        line = json.dumps(record, allow_nan=False) + "\n"
        if self.error is not None and self._clock() < self._retry_at:
            self.dropped += 1
            return False
        try:
            if self._stream is None:
                self._open()
            assert self._stream is not None
            if self._size > 0 and self._size + len(line) > self._max_bytes:
                self._rotate()
                self._open()
                assert self._stream is not None
            self._stream.write(line)
            self._stream.flush()
            self._size += len(line.encode())
        except OSError as exc:
            self._fail(exc)
            return False
        if self.error is not None:
            if self._say is not None:
                self._say(f"gpoeo-rt: {self.path}: logging again ({self.dropped} decisions were not logged)")
            self.error = None
        return True

    def _fail(self, exc: OSError) -> None:
        self.dropped += 1
        if self._stream is not None:
            with contextlib.suppress(OSError):
                self._stream.close()  # may fail again flushing what is buffered
            self._stream = None
        first = self.error is None
        self.error = f"{exc.strerror or exc}"
        self._retry_at = self._clock() + self._retry_s
        if first and self._say is not None:
            self._say(
                f"gpoeo-rt: {self.path}: not logging decisions ({self.error}); clocks are managed as before; "
                f"trying again every {self._retry_s:g} s"
            )

    def summary(self) -> dict[str, Any]:
        return {"path": str(self.path), "logging": self.error is None, "error": self.error, "dropped": self.dropped}

    def close(self) -> None:
        if self._stream is not None:
            with contextlib.suppress(OSError):
                self._stream.close()
            self._stream = None
