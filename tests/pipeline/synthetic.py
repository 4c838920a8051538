"""A small synthetic sweeps table with known physics, for testing the model stages without the real data."""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpoeo_rt.features import FEATURE_NAMES


def synthetic_sweeps(
    n_programs: int = 6,
    variants: int = 2,
    sku: str = "sim-gpu",
    seed: int = 0,
    sm_clocks: tuple[float, ...] = (600, 900, 1200, 1500),
) -> pd.DataFrame:
    """Workloads whose compute share drives how time scales with the SM clock (memory clock fixed)."""
    rng = np.random.default_rng(seed)
    ref_sm = max(sm_clocks)
    rows = []
    for program in range(n_programs):
        for variant in range(variants):
            share = float(rng.uniform(0.1, 0.95))
            base_time = float(rng.uniform(0.01, 1.0))
            base_power = float(rng.uniform(100, 250))
            feats = {name: np.nan for name in FEATURE_NAMES}
            feats.update(
                feat_sm_active=share,
                feat_dram_active=1.0 - share,
                feat_sm_occupancy=0.5,
                feat_tensor_active=0.0,
            )
            for sm in sm_clocks:
                ratio = sm / ref_sm
                time_s = base_time * (share / ratio + (1.0 - share))
                power_w = base_power * (0.35 + 0.65 * share * ratio**2 + 0.65 * (1 - share) * ratio)
                rows.append(
                    {
                        "sku": sku,
                        "source": "synthetic",
                        "workload": f"prog{program}/v{variant}",
                        "sm_clock_mhz": float(sm),
                        "mem_clock_mhz": 877.0,
                        "time_s": time_s,
                        "power_w": power_w,
                        "energy_j": time_s * power_w,
                        "ref": sm == ref_sm,
                        **feats,
                    }
                )
    return pd.DataFrame(rows)
