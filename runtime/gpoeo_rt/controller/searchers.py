"""The searches the controller can run over a clock grid, behind one small protocol.

- `RefineSearch` (gpoeo_rt.search.refine): the hybrid: start at the predicted optimum, recalibrate on measurements.
- `DescentSearch`: the model-free baseline: step down from the reference one clock at a time while it pays.
- `PredictedPick`: the prediction-only baseline: the predicted optimum, never measured.

All take the reference as a measured probe (1.0, 1.0) before the first `next_probe()`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

from gpoeo_rt.search.objectives import Objective, pick_config
from gpoeo_rt.search.refine import RefineSearch

FloatArray = npt.NDArray[np.float64]


class Search(Protocol):
    def next_probe(self) -> int | None: ...

    def record(self, index: int, time_ratio: float, energy_ratio: float) -> None: ...

    def best(self) -> int: ...


def unstaircase(sm_clock_mhz: FloatArray, mem_clock_mhz: FloatArray, ratio: FloatArray) -> FloatArray:
    """Undo the staircase a tree model draws along the SM clock on a grid finer than its training clocks.

    The trees split at the clocks they were trained on, so one prediction holds from a training clock up to the
    next: on a 15 MHz grid, a 1365 MHz config gets the 1237 MHz prediction. The truth is smooth, so each run of
    equal predictions is anchored at its lowest clock and the grid is interpolated (log-linearly) between anchors,
    per memory clock. On the training clocks themselves every run has one config and nothing changes.
    """
    out = np.asarray(ratio, dtype=np.float64).copy()
    for mem in np.unique(mem_clock_mhz):
        idx = np.flatnonzero(mem_clock_mhz == mem)
        idx = idx[np.argsort(sm_clock_mhz[idx])]
        values = out[idx]
        starts = np.concatenate(([True], np.abs(np.diff(values)) > 1e-9 * np.abs(values[1:])))
        if starts.sum() < 2 or starts.all():
            continue
        anchors_sm = sm_clock_mhz[idx][starts]
        anchors_log = np.log(values[starts])
        out[idx] = np.exp(np.interp(sm_clock_mhz[idx], anchors_sm, anchors_log))
    return out


def expected_ratios(search: Search, index: int) -> tuple[float | None, float | None]:
    """What the search currently expects at `index` (time ratio, energy ratio); None where it has no model."""
    if isinstance(search, RefineSearch):
        time_ratio, energy_ratio = search.corrected()
        return float(time_ratio[index]), float(energy_ratio[index])
    if isinstance(search, PredictedPick):
        return float(search.predicted_time_ratio[index]), float(search.predicted_energy_ratio[index])
    return None, None


@dataclass
class DescentSearch:
    """Greedy coordinate descent without a model (what a pure search does): from the best measured config, probe
    the next lower SM clock at its memory clock; when that does not improve the objective (or breaks the bound),
    probe the next lower memory clock at the best SM clock; stop when neither does. Always one step at a time,
    so on a compute-light job it walks the whole SM range: slow to converge, and each probe costs energy/time."""

    sm_clock_mhz: FloatArray
    mem_clock_mhz: FloatArray
    objective: Objective
    max_slowdown: float
    max_probes: int = 12
    _measured: dict[int, tuple[float, float]] = field(default_factory=dict)

    def record(self, index: int, time_ratio: float, energy_ratio: float) -> None:
        if not (np.isfinite(time_ratio) and np.isfinite(energy_ratio) and time_ratio > 0 and energy_ratio > 0):
            raise ValueError(f"measurement for config {index} must be positive and finite")
        self._measured[int(index)] = (float(time_ratio), float(energy_ratio))

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
        if len(self._measured) > self.max_probes:  # the reference is not a probe
            return None
        best = self.best()
        for along_sm in (True, False):
            step = self._lower(best, along_sm=along_sm)
            if step is not None and step not in self._measured:
                return step
        return None

    def best(self) -> int:
        if not self._measured:
            raise ValueError("no config has been measured yet")
        idx = list(self._measured)
        time_ratio = np.array([self._measured[i][0] for i in idx])
        energy_ratio = np.array([self._measured[i][1] for i in idx])
        return idx[pick_config(self.objective, time_ratio, energy_ratio, self.max_slowdown)]


@dataclass
class PredictedPick:
    """The predicted optimum, taken on faith: no probe (the prediction-only baseline)."""

    predicted_time_ratio: FloatArray
    predicted_energy_ratio: FloatArray
    objective: Objective
    max_slowdown: float

    def next_probe(self) -> int | None:
        return None

    def record(self, index: int, time_ratio: float, energy_ratio: float) -> None:
        pass  # nothing to learn: it never changes its mind

    def best(self) -> int:
        return pick_config(self.objective, self.predicted_time_ratio, self.predicted_energy_ratio, self.max_slowdown)
