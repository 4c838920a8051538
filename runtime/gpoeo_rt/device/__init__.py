"""Device layer: one GPU interface with an NVML backend and a simulated GPU, chosen in one place (`open_gpu`).

Importing this package does not import pynvml: the NVML backend loads it when a real GPU is opened.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from gpoeo_rt.device.base import (
    GPU,
    ClockController,
    ClockTable,
    CounterSnapshot,
    GPUReader,
    PolledReading,
    PowerSamples,
)
from gpoeo_rt.device.clock import Clock, SimClock, SleepInterruptedError, StoppableClock, WallClock
from gpoeo_rt.device.errors import (
    ClockWriteNotAllowedError,
    GPUError,
    GPUInvalidArgumentError,
    GPULostError,
    GPUNoPermissionError,
    GPUNotFoundError,
    GPUNotSupportedError,
)
from gpoeo_rt.device.group import GroupGPU
from gpoeo_rt.device.nvml import NVMLGPU
from gpoeo_rt.device.simulated import (
    COUNTER_MODES,
    SimConfig,
    SimulatedGPU,
    SimulatedStepMarkers,
    SimulationTruth,
    has_gpm,
)
from gpoeo_rt.device.workload import (
    PRESET_NAMES,
    AnalyticWorkload,
    GPUSpec,
    IdleWorkload,
    OperatingPoint,
    SweepRangeError,
    SweepWorkload,
    Workload,
    h200_spec,
    parse_schedule,
    preset_workload,
)

__all__ = [
    "COUNTER_MODES",
    "GPU",
    "NVMLGPU",
    "PRESET_NAMES",
    "AnalyticWorkload",
    "Clock",
    "ClockController",
    "ClockTable",
    "ClockWriteNotAllowedError",
    "CounterSnapshot",
    "GPUError",
    "GPUInvalidArgumentError",
    "GPULostError",
    "GPUNoPermissionError",
    "GPUNotFoundError",
    "GPUNotSupportedError",
    "GPUReader",
    "GPUSpec",
    "GroupGPU",
    "IdleWorkload",
    "OperatingPoint",
    "PolledReading",
    "PowerSamples",
    "SimClock",
    "SimConfig",
    "SimulatedGPU",
    "SimulatedStepMarkers",
    "SimulationTruth",
    "SleepInterruptedError",
    "StoppableClock",
    "SweepRangeError",
    "SweepWorkload",
    "WallClock",
    "Workload",
    "h200_spec",
    "has_gpm",
    "open_gpu",
    "parse_schedule",
    "preset_workload",
]


def open_gpu(
    index: int = 0,
    *,
    simulate: str | Workload | Sequence[tuple[float, Workload]] | None = None,
    allow_clock_writes: bool = False,
    seed: int | np.random.Generator = 0,
    spec: GPUSpec | None = None,
    sim_config: SimConfig | None = None,
    clock: SimClock | None = None,
    nvml: Any | None = None,
    lock_state_path: str | Path | None = None,
) -> GPU:
    """Open GPU `index`: the real one through NVML, or, with `simulate`, a simulated GPU running that workload
    (a preset name or schedule string for `parse_schedule`, a Workload, or [(start_s, Workload), ...]).

    Clock writes are refused unless `allow_clock_writes=True`, on both backends. `nvml` injects a pynvml-like
    module (tests pass a fake); `seed`, `spec`, `sim_config` and `clock` configure the simulation, and
    `lock_state_path` makes a simulated GPU's clock lock outlive the process, as a real GPU's does.
    """
    if simulate is None:
        return NVMLGPU(index, allow_clock_writes=allow_clock_writes, nvml=nvml)
    schedule = parse_schedule(simulate, spec) if isinstance(simulate, str) else simulate
    return SimulatedGPU(
        schedule,
        spec=spec,
        clock=clock,
        config=sim_config,
        seed=seed,
        allow_clock_writes=allow_clock_writes,
        index=index,
        lock_state_path=lock_state_path,
    )
