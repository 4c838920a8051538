"""Objectives and the selection rule shared by the runtime's search and the pipeline's evaluation.

All inputs are ratios to the job's own reference configuration (time_ratio = time / time_ref, same for energy),
so a time ratio of 1.05 is a 5% slowdown.
"""

from __future__ import annotations

from enum import StrEnum

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


class Objective(StrEnum):
    ENERGY = "energy"  # minimize energy subject to time_ratio <= 1 + max_slowdown
    EDP = "edp"  # minimize energy * time
    ED2P = "ed2p"  # minimize energy * time^2


def objective_values(objective: Objective, time_ratio: FloatArray, energy_ratio: FloatArray) -> FloatArray:
    """The quantity to minimize for each config (lower is better)."""
    if objective is Objective.ENERGY:
        return np.asarray(energy_ratio, dtype=np.float64)
    if objective is Objective.EDP:
        return np.asarray(energy_ratio * time_ratio, dtype=np.float64)
    return np.asarray(energy_ratio * time_ratio**2, dtype=np.float64)


def pick_config(
    objective: Objective,
    time_ratio: FloatArray,
    energy_ratio: FloatArray,
    max_slowdown: float,
) -> int:
    """Index of the best config. For `energy`, only configs with time_ratio <= 1 + max_slowdown qualify; when none
    does, the fastest config is returned (never a config known to break the bound when a safer one exists)."""
    time_ratio = np.asarray(time_ratio, dtype=np.float64)
    energy_ratio = np.asarray(energy_ratio, dtype=np.float64)
    if time_ratio.shape != energy_ratio.shape or time_ratio.ndim != 1 or time_ratio.size == 0:
        raise ValueError(
            f"pick_config needs two equal-length non-empty 1-D arrays, got {time_ratio.shape} and {energy_ratio.shape}"
        )
    values = objective_values(objective, time_ratio, energy_ratio)
    if objective is Objective.ENERGY:
        feasible = time_ratio <= 1.0 + max_slowdown
        if not feasible.any():
            return int(np.argmin(time_ratio))
        values = np.where(feasible, values, np.inf)
    return int(np.argmin(values))
