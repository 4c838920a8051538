"""The model's prediction turned into a search prior: smoothed, normalised to the reference, with a trust.

Pure: arrays in, arrays out. The controller calls the predictor (prediction layer) and hands the grid
prediction here; the search (`measured.MeasuredSearch`) decides how far to follow it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from gpoeo_rt.search.measured import Prior

FloatArray = npt.NDArray[np.float64]


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


def counter_trust(counters: Mapping[str, float], model_inputs: Sequence[str]) -> float:
    """Share of the model's counter inputs (`feat_*`) this job has: 1 when the GPU gave them all (the model can
    tell this job from others), 0 when it gave none (e.g. no NVML GPM before Hopper: the model only knows the
    average job). A model without counter inputs is trusted as far as it goes."""
    wanted = [name for name in model_inputs if name.startswith("feat_")]
    if not wanted:
        return 1.0
    present = sum(1 for name in wanted if math.isfinite(counters.get(name, math.nan)))
    return present / len(wanted)


def prior_from_prediction(
    sm_clock_mhz: FloatArray,
    mem_clock_mhz: FloatArray,
    ref_index: int,
    time_ratio: FloatArray,
    power_ratio: FloatArray,
    trust: float,
) -> Prior:
    """Grid predictions -> a search prior: the tree staircase smoothed, and both ratios divided by the model's
    own value at the reference (where the truth is 1 by definition, so that value is a bias every config shares)."""
    smooth_time = unstaircase(sm_clock_mhz, mem_clock_mhz, time_ratio)
    smooth_power = unstaircase(sm_clock_mhz, mem_clock_mhz, power_ratio)
    smooth_time = smooth_time / smooth_time[ref_index]
    energy = smooth_time * smooth_power / smooth_power[ref_index]
    why = "counters measured" if trust >= 1.0 else "no counters" if trust <= 0.0 else "some counters missing"
    return Prior(smooth_time, energy, float(np.clip(trust, 0.0, 1.0)), why)
