"""`gpoeo-rt trace record`: write a device's NVML signals in the layout of the shared H200 traces (read-only).

- nvml_buffered.csv: `signal,t_s,value`, signal `power_mw`, every buffered sample (drained every 250 ms);
- nvml_polled.csv: one row per poll: t_s, p_inst_mw, p_avg_mw, p_usage_mw, energy_mj, util_gpu, util_mem, sm_clk,
  mem_clk, call_us and gpm_* (percent; nan when the GPM snapshot is stale or unavailable);
- iterations.csv (simulated GPU only): the ground truth `t_s,phase,iteration`.
gpoeo_rt.tracefile reads this layout back.
"""

from __future__ import annotations

import contextlib
import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from gpoeo_rt.device.base import CounterSnapshot, GPUReader, PolledReading
from gpoeo_rt.device.clock import Clock
from gpoeo_rt.device.simulated import SimulatedGPU
from gpoeo_rt.features import GPM_METRIC_TO_FEATURE

BUFFERED_FILE = "nvml_buffered.csv"
POLLED_FILE = "nvml_polled.csv"
ITERATIONS_FILE = "iterations.csv"
# GPM columns as the probe named them (gpm_ + the pynvml metric name, lower case), in the feature vocabulary's order.
GPM_COLUMNS: tuple[tuple[str, str], ...] = tuple(
    (f"gpm_{metric.lower()}", feature) for metric, feature in GPM_METRIC_TO_FEATURE.items()
)
# The polled file's columns before the GPM ones (every recording has these).
POLLED_BASE_COLUMNS: tuple[str, ...] = (
    "t_s",
    "p_inst_mw",
    "p_avg_mw",
    "p_usage_mw",
    "energy_mj",
    "util_gpu",
    "util_mem",
    "sm_clk",
    "mem_clk",
    "call_us",
)
POLLED_COLUMNS: tuple[str, ...] = (*POLLED_BASE_COLUMNS, *(column for column, _ in GPM_COLUMNS))
_EPS = 1e-9


@dataclass(frozen=True)
class RecordSummary:
    out_dir: Path
    device_name: str
    duration_s: float
    n_buffered: int
    n_polled: int
    n_iterations: int | None  # ground-truth iterations (simulated GPU only)


def _num(value: float, digits: int = 0) -> str:
    if not math.isfinite(value):
        return "nan"
    return str(round(value)) if digits == 0 else f"{value:.{digits}f}"


def _polled_row(reading: PolledReading, fresh_counters: bool) -> list[str]:
    counters: CounterSnapshot = reading.counters
    gpm = [_num(100.0 * counters.features[feature], 3) if fresh_counters else "nan" for _, feature in GPM_COLUMNS]
    return [
        f"{reading.t_s:.6f}",
        _num(reading.power_instant_w * 1000.0),
        _num(reading.power_average_w * 1000.0),
        _num(reading.power_usage_w * 1000.0),
        _num(reading.energy_j * 1000.0),
        _num(reading.util_gpu_pct),
        _num(reading.util_mem_pct),
        str(reading.sm_clock_mhz),
        str(reading.mem_clock_mhz),
        _num(reading.call_s * 1e6),
        *gpm,
    ]


class _BufferedWriter:
    def __init__(self, fh: TextIO, device: GPUReader, since_s: float) -> None:
        self._writer = csv.writer(fh, lineterminator="\n")
        self._writer.writerow(["signal", "t_s", "value"])
        self._device = device
        self._last_s = since_s
        self.count = 0

    def drain(self) -> None:
        samples = self._device.power_samples_since(self._last_s)
        for t, p in zip(samples.t_s.tolist(), samples.power_w.tolist(), strict=True):
            self._writer.writerow(["power_mw", f"{t:.6f}", _num(p * 1000.0)])
        if len(samples):
            self._last_s = float(samples.t_s[-1])
            self.count += len(samples)


class _IterationWriter:
    def __init__(self, fh: TextIO, device: SimulatedGPU, since_s: float) -> None:
        self._writer = csv.writer(fh, lineterminator="\n")
        self._writer.writerow(["t_s", "phase", "iteration"])
        self._truth = device.truth
        self._last_s = since_s
        self.count = 0

    def drain(self) -> None:
        record = self._truth.iterations(since_s=self._last_s)
        for t, phase, number in zip(record.t_s.tolist(), record.phase.tolist(), record.iteration.tolist(), strict=True):
            self._writer.writerow([f"{t:.6f}", phase, number])
        if len(record):
            self._last_s = float(record.t_s[-1])
            self.count += len(record)


def record_trace(
    device: GPUReader,
    out_dir: str | Path,
    duration_s: float,
    *,
    poll_period_s: float = 0.1,
    drain_period_s: float = 0.25,
    clock: Clock | None = None,
) -> RecordSummary:
    """Record duration_s of buffered power and polled values from a device, reading only.

    Polls every poll_period_s (the H200's polled values refresh at 10 Hz, and each poll reads the ~4 ms energy
    counter) and drains the buffered samples every drain_period_s (the driver keeps only ~2.4 s of them).
    """
    if duration_s <= 0 or poll_period_s <= 0 or drain_period_s <= 0:
        raise ValueError("duration_s, poll_period_s and drain_period_s must be > 0")
    clock = clock if clock is not None else device.clock
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    start = clock.now_s()
    end = start + duration_s
    n_polls = 0
    n_drains = 0
    last_counter_end: float | None = None
    with contextlib.ExitStack() as files:
        buffered = _BufferedWriter(files.enter_context((out / BUFFERED_FILE).open("w", newline="")), device, start)
        polled = csv.writer(files.enter_context((out / POLLED_FILE).open("w", newline="")), lineterminator="\n")
        polled.writerow(POLLED_COLUMNS)
        iterations = None
        if isinstance(device, SimulatedGPU):  # ground truth, written as it happens (the simulator keeps 10 min)
            fi = files.enter_context((out / ITERATIONS_FILE).open("w", newline=""))
            iterations = _IterationWriter(fi, device, start)
        while True:
            now = clock.now_s()
            next_poll = start + n_polls * poll_period_s
            if now >= next_poll - _EPS and now < end - _EPS:
                reading = device.poll()
                fresh = reading.counters.source != "none" and reading.counters.end_s != last_counter_end
                fresh = fresh and reading.counters.interval_s > 0
                last_counter_end = reading.counters.end_s
                polled.writerow(_polled_row(reading, fresh))
                n_polls += 1
                if start + n_polls * poll_period_s < now:  # late (a slow poll): skip missed slots, don't burst
                    n_polls = math.ceil((now - start) / poll_period_s)
            next_drain = start + (n_drains + 1) * drain_period_s
            if now >= next_drain - _EPS:
                buffered.drain()
                if iterations is not None:
                    iterations.drain()
                n_drains += 1
            if now >= end - _EPS:
                break
            wake = min(start + n_polls * poll_period_s, start + (n_drains + 1) * drain_period_s, end)
            clock.sleep(max(wake - clock.now_s(), 0.0))
        buffered.drain()
        if iterations is not None:
            iterations.drain()
    n_iterations = None if iterations is None else iterations.count
    return RecordSummary(out, device.name, clock.now_s() - start, buffered.count, n_polls, n_iterations)
