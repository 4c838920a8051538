"""Sampling layer: turns a device into time series (buffered power, energy, counters) over simulated or real time."""

from gpoeo_rt.sampling.markers import MarkerSource, no_markers
from gpoeo_rt.sampling.recorder import (
    BUFFERED_FILE,
    ITERATIONS_FILE,
    POLLED_COLUMNS,
    POLLED_FILE,
    RecordSummary,
    record_trace,
)
from gpoeo_rt.sampling.sampler import PowerWindow, Sampler, merge_windows

__all__ = [
    "BUFFERED_FILE",
    "ITERATIONS_FILE",
    "POLLED_COLUMNS",
    "POLLED_FILE",
    "MarkerSource",
    "PowerWindow",
    "RecordSummary",
    "Sampler",
    "merge_windows",
    "no_markers",
    "record_trace",
]
