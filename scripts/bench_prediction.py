#!/usr/bin/env python3
"""Time one full-grid prediction (both models, one onnxruntime call each) per shipped bundle.

The grid is the local GPU's supported clock table when NVML sees one (read-only), else an H200-shaped one
(2 memory clocks x 110 SM clocks). Prints median and p95 of the wall time of `Predictor.predict_grid`.
Usage: python scripts/bench_prediction.py [--bundles models] [--repeats 500]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from gpoeo_rt.prediction.bundle import verify_bundle
from gpoeo_rt.prediction.predictor import Predictor


def grid() -> tuple[np.ndarray, np.ndarray, float, float, str]:
    try:
        from gpoeo_rt.device.nvml import NVMLGPU

        with NVMLGPU(0) as gpu:  # read-only: clock writes are not allowed on this object
            table = gpu.supported_clocks()
            pairs = list(table.pairs())
            return (
                np.array([p[0] for p in pairs], float),
                np.array([p[1] for p in pairs], float),
                float(table.default_sm_mhz),
                float(table.default_mem_mhz),
                f"{gpu.name} clock table",
            )
    except Exception as exc:  # no GPU here: the H200's shape
        sm = np.repeat(np.linspace(345, 1980, 110), 2)
        mem = np.tile([2619.0, 3201.0], 110)
        return sm, mem, 1980.0, 3201.0, f"synthetic H200-shaped grid ({type(exc).__name__})"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bundles", default="models")
    parser.add_argument("--repeats", type=int, default=500)
    args = parser.parse_args()
    sm, mem, ref_sm, ref_mem, what = grid()
    timings: dict[str, dict[str, float]] = {}
    results = {"grid": what, "configs": int(sm.size), "bundles": timings}
    for bundle_dir in sorted(p for p in Path(args.bundles).iterdir() if (p / "manifest.json").exists()):
        predictor = Predictor(verify_bundle(bundle_dir))
        counters = {f: 0.5 for f in predictor.manifest.feature_names if f.startswith("feat_")}
        for _ in range(50):
            predictor.predict_grid(counters, sm, mem, ref_sm, ref_mem)
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            predictor.predict_grid(counters, sm, mem, ref_sm, ref_mem)
            times.append(time.perf_counter() - t0)
        timings[bundle_dir.name] = {
            "median_ms": 1e3 * float(np.median(times)),
            "p95_ms": 1e3 * float(np.percentile(times, 95)),
        }
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
