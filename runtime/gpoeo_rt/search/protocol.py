"""The one protocol every search implements, so the controller never reads a search's private state.

A search is pure and clock-free: the caller measures the config `next_probe()` asks for (ratios to the phase's
baseline at reference clocks) and hands them to `record()`. The reference is recorded as (1.0, 1.0) first.
"""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np

from gpoeo_rt.search.objectives import Objective, objective_values, pick_config

# Objective (energy-ratio) differences below this are measurement noise: no search treats them as a gain.
NOISE_GAIN = 0.004


class Search(Protocol):
    def next_probe(self) -> int | None:
        """The next config to measure, or None when the search has converged or spent its probes."""
        ...

    def record(self, index: int, time_ratio: float, energy_ratio: float) -> None: ...

    def best(self) -> int:
        """The config to hold: a measured one, except for the prediction-only baseline."""
        ...

    def expected(self, index: int) -> tuple[float | None, float | None]:
        """What the search expects at `index` (time ratio, energy ratio); None where it has no model."""
        ...

    def measured(self, index: int) -> tuple[float, float] | None:
        """The recorded (time ratio, energy ratio) of `index`, if it was measured."""
        ...

    def measured_indices(self) -> list[int]: ...


class Measurements:
    """Recorded (time ratio, energy ratio) per config index: what every search keeps of its probes."""

    def __init__(self, size: int | None = None) -> None:
        self.values: dict[int, tuple[float, float]] = {}
        self._size = size

    def record(self, index: int, time_ratio: float, energy_ratio: float) -> None:
        if not (math.isfinite(time_ratio) and math.isfinite(energy_ratio) and time_ratio > 0 and energy_ratio > 0):
            raise ValueError(
                f"measurement for config {index} must be positive and finite: {time_ratio}, {energy_ratio}"
            )
        if self._size is not None and not 0 <= index < self._size:
            raise ValueError(f"config index {index} is outside the grid of {self._size} configs")
        self.values[int(index)] = (float(time_ratio), float(energy_ratio))

    def best(self, objective: Objective, max_slowdown: float) -> int:
        """The best recorded config within the bound (the fastest recorded one when none is)."""
        if not self.values:
            raise ValueError("no config has been measured yet")
        idx = list(self.values)
        time_ratio = np.array([self.values[i][0] for i in idx])
        energy_ratio = np.array([self.values[i][1] for i in idx])
        return idx[pick_config(objective, time_ratio, energy_ratio, max_slowdown)]

    def lowest_tie(
        self,
        best: int,
        sm_clock_mhz: np.ndarray,
        mem_clock_mhz: np.ndarray,
        objective: Objective,
        max_slowdown: float,
        gain_tol: float = NOISE_GAIN,
    ) -> int:
        """The lowest recorded SM clock below `best`, at its memory clock and within the bound, whose objective is
        within `gain_tol` of the best's (`best` itself when there is none): a lower clock measured no better only
        by noise does not end a search as if it bracketed the minimum."""
        mem, sm = mem_clock_mhz[best], sm_clock_mhz[best]
        below = [i for i in self.values if mem_clock_mhz[i] == mem and sm_clock_mhz[i] < sm]
        ratios = np.array([self.values[i] for i in [best, *below]])
        values = objective_values(objective, ratios[:, 0], ratios[:, 1])
        within = ratios[:, 0] <= 1.0 + max_slowdown if objective is Objective.ENERGY else values < np.inf
        ties = [i for k, i in enumerate(below, start=1) if within[k] and values[k] <= values[0] + gain_tol]
        return min(ties, key=lambda i: float(sm_clock_mhz[i]), default=best)
