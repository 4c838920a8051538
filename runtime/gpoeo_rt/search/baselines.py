"""The two baselines the controller can run instead of the measurement-led search (`Policy.SEARCH` and
`Policy.PREDICTION`), behind the same protocol (`gpoeo_rt.search.protocol.Search`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from gpoeo_rt.search.objectives import Objective, pick_config
from gpoeo_rt.search.protocol import NOISE_GAIN, Measurements

FloatArray = npt.NDArray[np.float64]


@dataclass
class DescentSearch:
    """Greedy coordinate descent without a model (what a pure search does): from the best measured config, probe
    the next lower SM clock at its memory clock; when that does not improve the objective (or breaks the bound),
    probe the next lower memory clock at the best SM clock; stop when neither does. Always one step at a time,
    so on a compute-light job it walks the whole SM range: slow to converge, and each probe costs energy/time.
    A lower SM clock measured no better than the best only by noise (`gain_tol`) does not stop the descent: it
    goes on below the lowest such tie, as the measurement-led search does."""

    sm_clock_mhz: FloatArray
    mem_clock_mhz: FloatArray
    objective: Objective
    max_slowdown: float
    max_probes: int = 12
    gain_tol: float = NOISE_GAIN
    _measurements: Measurements = field(default_factory=Measurements)

    def record(self, index: int, time_ratio: float, energy_ratio: float) -> None:
        self._measurements.record(index, time_ratio, energy_ratio)

    def measured(self, index: int) -> tuple[float, float] | None:
        return self._measurements.values.get(int(index))

    def measured_indices(self) -> list[int]:
        return list(self._measurements.values)

    def expected(self, index: int) -> tuple[float | None, float | None]:
        return None, None  # no model

    def _lower(self, index: int, *, along_sm: bool) -> int | None:
        sm, mem = self.sm_clock_mhz[index], self.mem_clock_mhz[index]
        if along_sm:
            mask = (self.mem_clock_mhz == mem) & (self.sm_clock_mhz < sm)
            key = self.sm_clock_mhz
        else:
            mask = (self.sm_clock_mhz == sm) & (self.mem_clock_mhz < mem)
            key = self.mem_clock_mhz
        candidates = np.flatnonzero(mask)
        return int(candidates[np.argmax(key[candidates])]) if candidates.size else None

    def next_probe(self) -> int | None:
        if len(self._measurements.values) > self.max_probes:  # the reference is not a probe
            return None
        best = self.best()
        for along_sm, start in ((True, self._lowest_tie(best)), (False, best)):
            step = self._lower(start, along_sm=along_sm)
            if step is not None and step not in self._measurements.values:
                return step
        return None

    def best(self) -> int:
        return self._measurements.best(self.objective, self.max_slowdown)

    def _lowest_tie(self, best: int) -> int:
        return self._measurements.lowest_tie(
            best, self.sm_clock_mhz, self.mem_clock_mhz, self.objective, self.max_slowdown, self.gain_tol
        )


@dataclass
class PredictedPick:
    """The predicted optimum, taken on faith: no probe (the prediction-only baseline)."""

    predicted_time_ratio: FloatArray
    predicted_energy_ratio: FloatArray
    objective: Objective
    max_slowdown: float
    _measurements: Measurements = field(default_factory=Measurements)

    def next_probe(self) -> int | None:
        return None

    def record(self, index: int, time_ratio: float, energy_ratio: float) -> None:
        self._measurements.record(index, time_ratio, energy_ratio)  # kept for the log; never changes its mind

    def measured(self, index: int) -> tuple[float, float] | None:
        return self._measurements.values.get(int(index))

    def measured_indices(self) -> list[int]:
        return list(self._measurements.values)

    def expected(self, index: int) -> tuple[float | None, float | None]:
        return float(self.predicted_time_ratio[index]), float(self.predicted_energy_ratio[index])

    def best(self) -> int:
        return pick_config(self.objective, self.predicted_time_ratio, self.predicted_energy_ratio, self.max_slowdown)
