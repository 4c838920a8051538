"""A workload running while the collector measures it, and where its iteration ends (step markers) come from.

- `ProcessRun`: a subprocess (a built-in workload, or the user's command) in its own process group, told where to
  log step markers by the environment variable GPOEO_STEP_MARKERS (one wall-clock timestamp, time.time(), per
  finished iteration and line). A user command that does not write them is timed from the power signal instead.
- `SimRun`: the simulated GPU runs the workload itself; its ground-truth iteration ends stand in for the step
  markers a training-loop hook would log.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

import numpy as np
import numpy.typing as npt

from gpoeo_pipeline.collect.store import CollectError
from gpoeo_rt.device import Clock, SimulatedGPU, WallClock

MARKERS_ENV = "GPOEO_STEP_MARKERS"
FloatArray = npt.NDArray[np.float64]


class WorkloadRun(Protocol):
    name: str

    def ensure_running(self) -> None:
        """Start the workload, or restart it if it ended on its own; raise CollectError if it failed."""

    def iteration_ends(self, start_s: float, end_s: float) -> FloatArray | None:
        """Iteration end times within (start_s, end_s] on the device's time base; None: no markers at all."""

    def stop(self) -> None: ...


class SimRun:
    """The workload a SimulatedGPU runs; `markers=False` hides the iteration ends (period timing only)."""

    def __init__(self, name: str, gpu: SimulatedGPU, *, markers: bool = True) -> None:
        self.name = name
        self._gpu = gpu
        self._markers = markers

    def ensure_running(self) -> None:
        return None

    def iteration_ends(self, start_s: float, end_s: float) -> FloatArray | None:
        if not self._markers:
            return None
        ends = self._gpu.truth.iterations(since_s=start_s).t_s
        return ends[ends <= end_s]

    def stop(self) -> None:
        return None


class ProcessRun:
    """A command run in its own process group; output goes to `log_path` (a pipe would fill and stall it)."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        work_dir: Path,
        *,
        env: Mapping[str, str] | None = None,
        max_restarts: int = 100,
        clock: Clock | None = None,
        startup_s: float = 30.0,
        wait_for_marker: bool = False,
    ) -> None:
        if not argv:
            raise CollectError(f"workload {name}: empty command")
        self.name = name
        self.argv = list(argv)
        slug = "".join(c if c.isalnum() else "_" for c in name)[:60]
        self.markers_path = work_dir / f"{slug}.markers"
        self.log_path = work_dir / f"{slug}.log"
        self._env = {**os.environ, **(env or {}), MARKERS_ENV: str(self.markers_path)}
        self._proc: subprocess.Popen[bytes] | None = None
        self._max_restarts = max_restarts
        self.starts = 0
        self._offset = 0  # bytes of the markers file already parsed
        self._ends: list[float] = []
        self._clock: Clock = clock if clock is not None else WallClock()
        self._startup_s = startup_s
        self._wait_for_marker = wait_for_marker

    def ensure_running(self) -> None:
        if self._proc is not None:
            code = self._proc.poll()
            if code is None:
                return
            if code != 0:
                raise CollectError(
                    f"workload {self.name}: command {self.argv} exited with status {code}; last output:\n"
                    + self._log_tail()
                )
        if self.starts > self._max_restarts:
            raise CollectError(f"workload {self.name}: command ended {self.starts} times; giving up")
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, env=self._env, start_new_session=True
            )
        self.starts += 1
        self._wait_started()

    def _wait_started(self) -> None:
        """Start-up (imports, CUDA init, model build) must not count as warm-up at the first config: a workload
        that writes markers is started once its first marker appears; any other after `startup_s`."""
        if not self._wait_for_marker:
            self._clock.sleep(self._startup_s)
            return
        before = len(self._ends)
        deadline = self._clock.now_s() + self._startup_s
        while self._clock.now_s() < deadline:
            self.iteration_ends(-math.inf, math.inf)
            if len(self._ends) > before:
                return
            if self._proc is not None and self._proc.poll() is not None:
                break
            self._clock.sleep(0.5)
        raise CollectError(
            f"workload {self.name}: no step marker within {self._startup_s:g} s of starting {self.argv}; last "
            "output:\n" + self._log_tail()
        )

    def _log_tail(self, n: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return "(no log)"

    def iteration_ends(self, start_s: float, end_s: float) -> FloatArray | None:
        if self.markers_path.exists():
            with self.markers_path.open("rb") as handle:
                handle.seek(self._offset)
                chunk = handle.read()
            complete = chunk[: chunk.rfind(b"\n") + 1]  # a line being written is read next time
            self._offset += len(complete)
            for number, line in enumerate(complete.splitlines(), start=1):
                try:
                    self._ends.append(float(line))
                except ValueError:
                    raise CollectError(
                        f"{self.markers_path}: step marker {line!r} (after {len(self._ends)} markers, line "
                        f"{number} of this read) is not a timestamp; ${MARKERS_ENV} takes one time.time() per line"
                    ) from None
        if not self._ends:
            return None
        ends = np.asarray(self._ends)
        return ends[(ends > start_s) & (ends <= end_s)]

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
