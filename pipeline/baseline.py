"""Physics baseline, so the gain of the learned models is visible in the evaluation report.

Time: a share `s_c` of the reference time scales with 1/SM clock and a share `s_m` with 1/memory clock; the rest
(host, latency) does not: time_ratio = 1 + s_c (1/sm_ratio - 1) + s_m (1/mem_ratio - 1).
Power: power_ratio = 1 + a (sm_ratio - 1) + b (sm_ratio^2 - 1) + c (mem_ratio - 1) (dynamic power grows with f, and
with V^2 f once voltage scales).
Each coefficient is a linear function of the workload's reference counters, fitted by least squares on the
training workloads; that is the "fitted per workload from its counters" part.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

COUNTERS: tuple[str, ...] = ("feat_sm_active", "feat_dram_active", "feat_fp32_active", "feat_fp64_active")


def _counter_matrix(frame: pd.DataFrame) -> np.ndarray:
    # NaN counters (sources without them) contribute 0, leaving the intercept to carry the average behaviour.
    counters = frame[list(COUNTERS)].fillna(0.0).to_numpy(np.float64)
    return np.hstack([np.ones((len(frame), 1)), counters])


def _time_design(frame: pd.DataFrame) -> np.ndarray:
    x = _counter_matrix(frame)
    sm = (1.0 / frame["sm_ratio"].to_numpy() - 1.0)[:, None]
    mem = (1.0 / frame["mem_ratio"].to_numpy() - 1.0)[:, None]
    return np.hstack([x * sm, x * mem])


def _power_design(frame: pd.DataFrame) -> np.ndarray:
    x = _counter_matrix(frame)
    sm = frame["sm_ratio"].to_numpy()[:, None]
    mem = frame["mem_ratio"].to_numpy()[:, None]
    return np.hstack([x * (sm - 1.0), x * (sm**2 - 1.0), x * (mem - 1.0)])


@dataclass(frozen=True)
class PhysicsBaseline:
    time_coef: np.ndarray
    power_coef: np.ndarray

    @classmethod
    def fit(cls, frame: pd.DataFrame, ridge: float = 1e-3) -> PhysicsBaseline:
        def solve(design: np.ndarray, target: np.ndarray) -> np.ndarray:
            gram = design.T @ design + ridge * np.eye(design.shape[1])
            return np.linalg.solve(gram, design.T @ target)

        time_coef = solve(_time_design(frame), frame["time_ratio"].to_numpy() - 1.0)
        power_coef = solve(_power_design(frame), frame["power_ratio"].to_numpy() - 1.0)
        return cls(time_coef=time_coef, power_coef=power_coef)

    def predict(self, frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """(time_ratio, power_ratio) per row, floored at a small positive value."""
        time_ratio = 1.0 + _time_design(frame) @ self.time_coef
        power_ratio = 1.0 + _power_design(frame) @ self.power_coef
        return np.maximum(time_ratio, 1e-3), np.maximum(power_ratio, 1e-3)
