"""Step markers as a measurement source: what a training loop reported about its iterations, per window.

A `MarkerSource` answers, for a time range on the device's clock, the markers received for that device: their
timestamps (the sender's clock, the same time base as the device's samples) and the sender's step counter (gaps are
lost markers). The daemon's marker channel and the simulated job's marker emitter implement it; the sampler asks it
once per window.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


class MarkerSource(Protocol):
    def markers_between(self, start_s: float, end_s: float) -> tuple[FloatArray, IntArray]:
        """(timestamps, step counters) of the markers with start_s <= t <= end_s, in time order."""
        ...


def no_markers() -> tuple[FloatArray, IntArray]:
    return np.empty(0, dtype=np.float64), np.empty(0, dtype=np.int64)
