"""Model inputs: every name a model may take, and how it is computed. The one definition both halves use.

A model's inputs (ONNX f0..fN) are named in its bundle manifest's `feature_names` (and, offline, in params.yaml
`features`). Each name is one of:
- a counter (`feat_*`, `gpoeo_rt.features.FEATURE_NAMES`), measured at the reference config; NaN when the GPU or the
  source cannot report it (the trees were trained with missing values);
- a clock input of the candidate config (`CLOCK_INPUTS`): its ratios to the reference clocks, or its absolute MHz;
- a derived input (`DERIVED_INPUTS`): a closed-form function of the two above that encodes the roofline-like scaling
  of time with the clocks, so that the trees need not learn it again for every SKU.

The pipeline's `features` stage and the runtime's `prediction.predictor.design_matrix` both call `input_columns`,
so a derived input is computed by the same code, in float64, on both sides; the model sees it as float32.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from gpoeo_rt.features import FEATURE_NAMES

FloatArray = npt.NDArray[np.float64]
Columns = Mapping[str, FloatArray]

# Inputs that describe the candidate config; `sm_ratio`/`mem_ratio` are clock / reference clock.
CLOCK_INPUTS: Final[tuple[str, ...]] = ("sm_ratio", "mem_ratio", "sm_clock_mhz", "mem_clock_mhz")


class UnknownInputError(ValueError):
    """A model input name that is neither a counter, a clock input nor a derived input."""


@dataclass(frozen=True)
class DerivedInput:
    """A derived input: its formula in words (documentation, and recorded nowhere else) and its computation."""

    formula: str
    compute: Callable[[Columns], FloatArray]


def _inv_sm_ratio(c: Columns) -> FloatArray:
    return np.asarray(1.0 / c["sm_ratio"], dtype=np.float64)


def _inv_mem_ratio(c: Columns) -> FloatArray:
    return np.asarray(1.0 / c["mem_ratio"], dtype=np.float64)


def _compute_term(c: Columns) -> FloatArray:
    return np.asarray(c["feat_sm_active"] * (1.0 / c["sm_ratio"] - 1.0), dtype=np.float64)


def _memory_term(c: Columns) -> FloatArray:
    return np.asarray(c["feat_dram_active"] * (1.0 / c["mem_ratio"] - 1.0), dtype=np.float64)


def _roofline_time(c: Columns) -> FloatArray:
    sm, dram = c["feat_sm_active"], c["feat_dram_active"]
    bound = np.maximum(sm / c["sm_ratio"], dram / c["mem_ratio"])
    return np.asarray(bound + (1.0 - np.maximum(sm, dram)), dtype=np.float64)


def _sm_ratio_sq(c: Columns) -> FloatArray:
    return np.asarray(c["sm_ratio"] ** 2, dtype=np.float64)


# name -> definition. NaN counters propagate (a derived input of a missing counter is missing, like the counter).
DERIVED_INPUTS: Final[dict[str, DerivedInput]] = {
    "inv_sm_ratio": DerivedInput("1 / sm_ratio", _inv_sm_ratio),
    "inv_mem_ratio": DerivedInput("1 / mem_ratio", _inv_mem_ratio),
    "compute_term": DerivedInput("feat_sm_active * (1 / sm_ratio - 1)", _compute_term),
    "memory_term": DerivedInput("feat_dram_active * (1 / mem_ratio - 1)", _memory_term),
    "roofline_time": DerivedInput(
        "max(feat_sm_active / sm_ratio, feat_dram_active / mem_ratio) + 1 - max(feat_sm_active, feat_dram_active)",
        _roofline_time,
    ),
    "sm_ratio_sq": DerivedInput("sm_ratio ** 2", _sm_ratio_sq),
}

BASE_INPUTS: Final[tuple[str, ...]] = (*FEATURE_NAMES, *CLOCK_INPUTS)


def check_input_names(names: Iterable[str], where: str) -> None:
    """Raise UnknownInputError naming the first input that cannot be computed, and `where` it was declared."""
    for name in names:
        if name not in BASE_INPUTS and name not in DERIVED_INPUTS:
            raise UnknownInputError(
                f"{where}: model input {name!r} is not a counter, a clock input or a known derived input "
                f"(derived inputs: {sorted(DERIVED_INPUTS)}; clock inputs: {list(CLOCK_INPUTS)})"
            )


def input_columns(names: Iterable[str], base: Columns, where: str) -> dict[str, FloatArray]:
    """The float64 column of every name in `names`, from `base` (every counter and clock input, equal-length
    arrays). Base names are passed through; derived names are computed from them. Unknown names raise
    UnknownInputError naming the input and `where` (a manifest, or params.yaml)."""
    names = list(names)
    check_input_names(names, where)
    out: dict[str, FloatArray] = {}
    for name in names:
        if name in DERIVED_INPUTS:
            out[name] = DERIVED_INPUTS[name].compute(base)
        else:
            out[name] = np.asarray(base[name], dtype=np.float64)
    return out
