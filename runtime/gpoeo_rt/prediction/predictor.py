"""Predict time and power ratios for a whole clock grid with one onnxruntime call per model.

Inputs are built in the manifest's feature order: the workload's counters (measured at the reference clocks) repeated
on every row, then the candidate config as ratios to the reference clocks (and absolute MHz for per-SKU bundles).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from gpoeo_rt.prediction.bundle import MODEL_FILES, BundleError, Manifest

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


class Predictor:
    """Holds one bundle's two ONNX sessions; cheap to call once per decision."""

    def __init__(self, manifest: Manifest) -> None:
        import onnxruntime as ort  # lazy: only a process that predicts pays for it

        options = ort.SessionOptions()
        # One thread: deterministic, and no thread pool competing with the training job for CPU.
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
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
        sm = np.asarray(sm_clock_mhz, dtype=np.float64)
        mem = np.asarray(mem_clock_mhz, dtype=np.float64)
        if sm.shape != mem.shape or sm.ndim != 1:
            raise ValueError(f"clock grid: sm and mem clock arrays must be equal 1-D, got {sm.shape}, {mem.shape}")
        columns: dict[str, FloatArray] = {
            "sm_ratio": sm / reference_sm_clock_mhz,
            "mem_ratio": mem / reference_mem_clock_mhz,
            "sm_clock_mhz": sm,
            "mem_clock_mhz": mem,
        }
        matrix = np.empty((sm.size, len(self.manifest.feature_names)), dtype=np.float32)
        for j, name in enumerate(self.manifest.feature_names):
            if name in columns:
                matrix[:, j] = columns[name]
            elif name.startswith("feat_"):
                value = counters.get(name)
                # A counter the GPU cannot report is NaN: the trees were trained with missing values.
                matrix[:, j] = np.nan if value is None else float(value)
            else:
                raise BundleError(f"{self.manifest.path}: feature {name!r} is not one the runtime can compute")
        return matrix

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
