"""Runtime controller: profile the job at reference clocks, predict the clock grid, search, hold, guard.

`Controller.step()` advances one measurement window on the device's clock, so tests and the evaluation harness
(`gpoeo_rt.bench.simulate`) run whole jobs in simulated time.
"""

from gpoeo_rt.controller.controller import (
    Controller,
    ControllerConfig,
    ControllerStoppedError,
    LogSink,
    jsonl_sink,
)
from gpoeo_rt.controller.state import LOG_KEYS, Baseline, Decision, PhaseRecord, Policy, State

__all__ = [
    "LOG_KEYS",
    "Baseline",
    "Controller",
    "ControllerConfig",
    "ControllerStoppedError",
    "Decision",
    "LogSink",
    "PhaseRecord",
    "Policy",
    "State",
    "jsonl_sink",
]
