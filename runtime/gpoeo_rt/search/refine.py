"""Model-guided local search: start at the predicted optimum, then let measurements correct the model.

Pure and clock-free: the caller measures the config `next_probe()` asks for (a whole number of iterations after the
clock change settles) and hands the result to `record()`. After each measurement the model's predictions for the
whole grid are recalibrated to this job (a per-job scale on log time ratio and on log power ratio, fitted to every
measured point), the best config is re-picked, and the next probe is either that pick or, once it is measured, its
unmeasured neighbour on the cheaper side. The final choice is always a MEASURED config, so the search never holds a
clock whose slowdown it has not seen.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from gpoeo_rt.search.objectives import Objective, objective_values, pick_config

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Probe:
    index: int
    time_ratio: float
    energy_ratio: float


@dataclass
class RefineSearch:
    """State of one search over a clock grid. Arrays are indexed like the grid the prediction was made for."""

    sm_clock_mhz: FloatArray
    mem_clock_mhz: FloatArray
    predicted_time_ratio: FloatArray
    predicted_energy_ratio: FloatArray
    objective: Objective
    max_slowdown: float
    max_probes: int = 6
    # Measured slowdowns within this margin of the bound are treated as at the bound (measurement noise).
    noise_margin: float = 0.005
    probes: list[Probe] = field(default_factory=list)

    def __post_init__(self) -> None:
        arrays = (self.sm_clock_mhz, self.mem_clock_mhz, self.predicted_time_ratio, self.predicted_energy_ratio)
        sizes = {np.asarray(a).shape for a in arrays}
        if len(sizes) != 1 or np.asarray(self.sm_clock_mhz).ndim != 1 or np.asarray(self.sm_clock_mhz).size == 0:
            raise ValueError(f"RefineSearch needs equal-length non-empty 1-D grid arrays, got shapes {sizes}")
        if self.max_probes < 1:
            raise ValueError(f"max_probes must be >= 1, got {self.max_probes}")

    # -- model correction -------------------------------------------------------------------------------------
    def _scale(self, predicted: FloatArray, measured: FloatArray) -> float:
        """Least-squares k in log(measured) = k log(predicted), through the reference point (0, 0)."""
        x = np.log(predicted)
        y = np.log(measured)
        denominator = float(np.dot(x, x))
        if denominator < 1e-12:
            return 1.0
        # Bounded: a few noisy probes must not turn the model upside down.
        return float(np.clip(np.dot(x, y) / denominator, 0.25, 4.0))

    def corrected(self) -> tuple[FloatArray, FloatArray]:
        """Predicted (time_ratio, energy_ratio) for every config, calibrated on this job's measurements and
        replaced by the measurements where they exist."""
        time_ratio = np.asarray(self.predicted_time_ratio, dtype=np.float64).copy()
        energy_ratio = np.asarray(self.predicted_energy_ratio, dtype=np.float64).copy()
        power_ratio = energy_ratio / time_ratio
        if self.probes:
            idx = np.array([p.index for p in self.probes])
            measured_time = np.array([p.time_ratio for p in self.probes])
            measured_power = np.array([p.energy_ratio / p.time_ratio for p in self.probes])
            k_time = self._scale(time_ratio[idx], measured_time)
            k_power = self._scale(power_ratio[idx], measured_power)
            time_ratio = np.exp(k_time * np.log(time_ratio))
            power_ratio = np.exp(k_power * np.log(power_ratio))
            energy_ratio = time_ratio * power_ratio
            time_ratio[idx] = measured_time
            energy_ratio[idx] = [p.energy_ratio for p in self.probes]
        return time_ratio, energy_ratio

    # -- the search ---------------------------------------------------------------------------------------------
    def measured(self) -> set[int]:
        return {p.index for p in self.probes}

    def _neighbours(self, index: int) -> list[int]:
        """Configs on the same memory clock, one SM step below and above `index` (cheaper side first)."""
        same_mem = np.flatnonzero(self.mem_clock_mhz == self.mem_clock_mhz[index])
        order = same_mem[np.argsort(self.sm_clock_mhz[same_mem])]
        position = int(np.flatnonzero(order == index)[0])
        below = [int(order[position - 1])] if position > 0 else []
        above = [int(order[position + 1])] if position + 1 < len(order) else []
        return below + above

    def next_probe(self) -> int | None:
        """The next config to measure, or None when the search has converged or spent its probes."""
        if len(self.probes) >= self.max_probes:
            return None
        time_ratio, energy_ratio = self.corrected()
        pick = pick_config(self.objective, time_ratio, energy_ratio, self.max_slowdown)
        done = self.measured()
        if pick not in done:
            return pick
        # The pick is measured: look one step to each side, unless the measurements already rule that side out.
        best = self.best()
        for neighbour in self._neighbours(best):
            if neighbour in done:
                continue
            slower = self.sm_clock_mhz[neighbour] < self.sm_clock_mhz[best]
            if slower and self.objective is Objective.ENERGY:
                best_slowdown = next(p.time_ratio for p in self.probes if p.index == best) - 1.0
                if best_slowdown >= self.max_slowdown - self.noise_margin:
                    continue  # already at the bound: going slower would break it
            values = objective_values(self.objective, time_ratio, energy_ratio)
            # Worth measuring only if the corrected model gives it a fair chance of beating the best.
            if values[neighbour] <= values[best] * 1.02:
                return neighbour
        return None

    def record(self, index: int, time_ratio: float, energy_ratio: float) -> None:
        if not (np.isfinite(time_ratio) and np.isfinite(energy_ratio) and time_ratio > 0 and energy_ratio > 0):
            raise ValueError(
                f"measurement for config {index} must be positive and finite: {time_ratio}, {energy_ratio}"
            )
        self.probes = [p for p in self.probes if p.index != index] + [Probe(index, time_ratio, energy_ratio)]

    def best(self) -> int:
        """The best MEASURED config (the reference must be among the measurements for a safe fallback)."""
        if not self.probes:
            raise ValueError("no config has been measured yet")
        idx = np.array([p.index for p in self.probes])
        time_ratio = np.array([p.time_ratio for p in self.probes])
        energy_ratio = np.array([p.energy_ratio for p in self.probes])
        return int(idx[pick_config(self.objective, time_ratio, energy_ratio, self.max_slowdown)])
