"""Predict time and power ratios for a whole clock grid with one onnxruntime call per model.

Inputs are built in the manifest's feature order (`design_matrix`): the workload's counters (measured at the reference
clocks) repeated on every row, the candidate config as ratios to the reference clocks (and absolute MHz for per-SKU
bundles), and the derived inputs of `gpoeo_rt.inputs`, computed by the same code as in the pipeline.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from gpoeo_rt.features import FEATURE_NAMES
from gpoeo_rt.inputs import UnknownInputError, check_input_names, input_columns
from gpoeo_rt.prediction.bundle import MANIFEST_NAME, MODEL_FILES, BundleError, Manifest

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class GridPrediction:
    """Predicted ratios to the reference config, one entry per candidate (sm_clock_mhz, mem_clock_mhz)."""

    sm_clock_mhz: FloatArray
    mem_clock_mhz: FloatArray
    time_ratio: FloatArray
    power_ratio: FloatArray

    @property
    def energy_ratio(self) -> FloatArray:
        return self.time_ratio * self.power_ratio

    def pareto_front(self) -> npt.NDArray[np.int64]:
        """Indices of the configs no other config beats on both predicted time and energy, fastest first."""
        order = np.lexsort((self.energy_ratio, self.time_ratio))
        front: list[int] = []
        best_energy = math.inf
        for index in order:
            if self.energy_ratio[index] < best_energy:
                front.append(int(index))
                best_energy = float(self.energy_ratio[index])
        return np.asarray(front, dtype=np.int64)


def design_matrix(
    manifest: Manifest,
    counters: Mapping[str, float | None],
    sm_clock_mhz: Sequence[float] | FloatArray,
    mem_clock_mhz: Sequence[float] | FloatArray,
    reference_sm_clock_mhz: float,
    reference_mem_clock_mhz: float,
) -> npt.NDArray[np.float32]:
    """The model inputs of every candidate config, in the manifest's feature order: the runtime's only place that
    builds them. Counters (measured at the reference) repeat on every row; a counter the GPU cannot report is NaN
    (the trees were trained with missing values). Derived inputs come from `gpoeo_rt.inputs.input_columns`, the
    definition the pipeline's features stage uses too; a name it does not know is a BundleError naming the input
    and the manifest."""
    sm = np.asarray(sm_clock_mhz, dtype=np.float64)
    mem = np.asarray(mem_clock_mhz, dtype=np.float64)
    if sm.shape != mem.shape or sm.ndim != 1:
        raise ValueError(f"clock grid: sm and mem clock arrays must be equal 1-D, got {sm.shape}, {mem.shape}")
    base: dict[str, FloatArray] = {
        "sm_ratio": sm / reference_sm_clock_mhz,
        "mem_ratio": mem / reference_mem_clock_mhz,
        "sm_clock_mhz": sm,
        "mem_clock_mhz": mem,
    }
    for name in FEATURE_NAMES:
        value = counters.get(name)
        base[name] = np.full(sm.size, np.nan if value is None else float(value), dtype=np.float64)
    try:
        columns = input_columns(manifest.feature_names, base, str(manifest.path / MANIFEST_NAME))
    except UnknownInputError as exc:
        raise BundleError(str(exc)) from exc
    matrix = np.empty((sm.size, len(manifest.feature_names)), dtype=np.float32)
    for j, name in enumerate(manifest.feature_names):
        matrix[:, j] = columns[name]
    return matrix


class Predictor:
    """Holds one bundle's two ONNX sessions; cheap to call once per decision."""

    def __init__(self, manifest: Manifest) -> None:
        import onnxruntime as ort  # lazy: only a process that predicts pays for it

        options = ort.SessionOptions()
        # One thread: deterministic, and no thread pool competing with the training job for CPU.
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        # An input the runtime cannot compute is refused here, before any session is built.
        try:
            check_input_names(manifest.feature_names, str(manifest.path / MANIFEST_NAME))
        except UnknownInputError as exc:
            raise BundleError(str(exc)) from exc
        self.manifest = manifest
        self._sessions: dict[str, Any] = {
            name: ort.InferenceSession(str(manifest.path / file_name), options, providers=["CPUExecutionProvider"])
            for name, file_name in MODEL_FILES.items()
        }

    def design_matrix(
        self,
        counters: Mapping[str, float | None],
        sm_clock_mhz: Sequence[float] | FloatArray,
        mem_clock_mhz: Sequence[float] | FloatArray,
        reference_sm_clock_mhz: float,
        reference_mem_clock_mhz: float,
    ) -> npt.NDArray[np.float32]:
        return design_matrix(
            self.manifest,
            counters,
            sm_clock_mhz,
            mem_clock_mhz,
            reference_sm_clock_mhz,
            reference_mem_clock_mhz,
        )

    def predict_grid(
        self,
        counters: Mapping[str, float | None],
        sm_clock_mhz: Sequence[float] | FloatArray,
        mem_clock_mhz: Sequence[float] | FloatArray,
        reference_sm_clock_mhz: float,
        reference_mem_clock_mhz: float,
    ) -> GridPrediction:
        x = self.design_matrix(counters, sm_clock_mhz, mem_clock_mhz, reference_sm_clock_mhz, reference_mem_clock_mhz)
        outputs = {}
        for name, session in self._sessions.items():
            (raw,) = session.run(None, {session.get_inputs()[0].name: x})
            values = np.asarray(raw, dtype=np.float64).reshape(-1)
            outputs[name] = np.exp(values) if self.manifest.target_transform == "log" else values
        return GridPrediction(
            sm_clock_mhz=np.asarray(sm_clock_mhz, dtype=np.float64),
            mem_clock_mhz=np.asarray(mem_clock_mhz, dtype=np.float64),
            time_ratio=outputs["time"],
            power_ratio=outputs["power"],
        )
