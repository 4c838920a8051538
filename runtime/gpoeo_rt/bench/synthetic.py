"""Synthetic jobs the training data lacks, as sweep rows on the simulated H200's clock table.

The models learn from CUDA micro-benchmarks, whose time mostly scales with one clock. Training jobs often do not:
they wait for the host, sit on a memory roofline, run into the power limit, or pay for memory clocks they do not
need. Four documented families, `PER_FAMILY` jobs each, parameters drawn from fixed ranges with a fixed seed (so
the set is the same everywhere). Times are relative to the reference iteration (x = f / f_ref, y = m / m_ref):

- `host_bound`: t = h + c/x + k/y; the host share h in [0.45, 0.85] (data loading, CPU work), the GPU share split
  between SM-clock time c (60-95%) and memory-clock time k.
- `memory_knee`: t = h + max(c/x, k/y), a roofline: flat until the SM clock falls below a knee x_k in [0.35, 0.7]
  of the reference (c = k x_k), then compute-bound; h in [0, 0.1].
- `power_saturating`: half the jobs are power-capped (the GPU runs at the clock where it meets its power limit,
  x_cap in [0.65, 0.85], whatever higher clock is set: time and power are flat above it); the other half overlap
  host and GPU work, t = max(h, c/x + k/y) with the host path h in [0.6, 0.9], so the GPU is busier, and its power
  higher, at lower clocks until its own time exceeds the host's.
- `memory_sensitive`: compute-bound (c in [0.5, 0.9]) with little memory-clock time (k in [0.01, 0.06]) but memory
  power that scales with the memory clock (mostly clock-tree power): the best config is at the lower memory clock.

Power follows the simulator's H200 model (`gpoeo_rt.device.workload`): idle + static leakage x V + SM power x V^2
(clock tree + switching at the work rate) + memory power, weighted by the busy share of the iteration; host time
draws near-idle power. Counters are what GPM would report: busy shares and activity rates. These jobs are
simulated, not measured: the set checks that decisions hold on shapes the models have never seen.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from gpoeo_rt.device.workload import GPUSpec, h200_spec
from gpoeo_rt.features import FEATURE_NAMES

FAMILIES: tuple[str, ...] = ("host_bound", "memory_knee", "power_saturating", "memory_sensitive")
PER_FAMILY = 10
SKU = "synthetic-h200"
SEED = 16


def _power_w(
    spec: GPUSpec,
    sm: float,
    mem: float,
    busy: float,
    sm_rate: float,
    mem_rate: float,
    *,
    mem_clock_share: float | None = None,
) -> float:
    """Mean power over an iteration that is busy `busy` of the time, with SM and memory work rates (1 = the
    reference rate) while busy."""
    v = spec.voltage(sm)
    cts = spec.clock_tree_share
    mcs = cts if mem_clock_share is None else mem_clock_share
    sm_w = spec.sm_dynamic_w * v * v * (cts * sm / spec.max_sm_mhz + (1 - cts) * 0.8 * min(sm_rate, 1.5))
    mem_w = spec.mem_dynamic_w * (mcs * mem / spec.max_mem_mhz + (1 - mcs) * 0.6 * min(mem_rate, 1.5))
    idle_w = spec.idle_power(sm)
    busy_w = idle_w + spec.static_power_w * v + sm_w + mem_w
    return busy * busy_w + (1 - busy) * 1.1 * idle_w


def _counters(busy: float, sm_rate: float, mem_rate: float) -> dict[str, float]:
    values = (
        0.95 * busy,
        0.45 * busy,
        min(1.0, 0.6 * mem_rate) * busy,
        0.05 * busy,
        min(1.0, 0.2 * sm_rate) * busy,
        0.0,
        min(1.0, 0.45 * sm_rate) * busy,
    )
    return dict(zip(FEATURE_NAMES, values, strict=True))


# (x, y) -> (time, busy share, SM work rate, memory work rate, the SM clock ratio the GPU really runs at)
Shape = Callable[[float, float], tuple[float, float, float, float, float]]


def _family_jobs(family: str, rng: np.random.Generator) -> list[tuple[str, Shape, float | None]]:
    """(name, shape, memory clock-tree share) of each job of a family."""
    jobs: list[tuple[str, Shape, float | None]] = []
    for i in range(PER_FAMILY):
        name = f"{family}/job{i:02d}"
        if family == "host_bound":
            h = rng.uniform(0.45, 0.85)
            u = rng.uniform(0.6, 0.95)
            jobs.append((name, _sum_shape(h, (1 - h) * u, (1 - h) * (1 - u)), None))
        elif family == "memory_knee":
            h = rng.uniform(0.0, 0.1)
            knee = rng.uniform(0.35, 0.7)
            k = 1.0 - h
            jobs.append((name, _roofline_shape(h, k * knee, k), None))
        elif family == "power_saturating":
            if i % 2 == 0:
                h = rng.uniform(0.0, 0.15)
                u = rng.uniform(0.6, 0.9)
                jobs.append((name, _capped_shape(h, (1 - h) * u, (1 - h) * (1 - u), rng.uniform(0.65, 0.85)), None))
            else:
                h = rng.uniform(0.6, 0.9)
                gpu = rng.uniform(0.35, 0.95) * h
                u = rng.uniform(0.7, 0.95)
                jobs.append((name, _overlap_shape(h, gpu * u, gpu * (1 - u)), None))
        elif family == "memory_sensitive":
            c = rng.uniform(0.5, 0.9)
            k = rng.uniform(0.01, 0.06)
            jobs.append((name, _sum_shape(1.0 - c - k, c, k), 0.7))
        else:
            raise ValueError(f"unknown synthetic family {family!r}; families: {', '.join(FAMILIES)}")
    return jobs


def _rates(c: float, k: float, busy_stretch: float) -> tuple[float, float]:
    """SM and memory work rates while busy, relative to the reference's: the work is fixed, so both fall as the
    busy time stretches (busy_stretch = busy time / busy time at the reference)."""
    return (1.0 / busy_stretch if c > 0 else 0.0), (1.0 / busy_stretch if k > 0 else 0.0)


def _sum_shape(h: float, c: float, k: float) -> Shape:
    def shape(x: float, y: float) -> tuple[float, float, float, float, float]:
        busy_time = c / x + k / y
        sm_rate, mem_rate = _rates(c, k, busy_time / (c + k))
        return h + busy_time, busy_time / (h + busy_time), sm_rate, mem_rate, x

    return shape


def _roofline_shape(h: float, c: float, k: float) -> Shape:
    def shape(x: float, y: float) -> tuple[float, float, float, float, float]:
        busy_time = max(c / x, k / y)
        # The work is fixed; at the reference the memory side takes the whole busy time (k > c).
        return h + busy_time, busy_time / (h + busy_time), (c / busy_time) / (c / k), k / busy_time, x

    return shape


def _capped_shape(h: float, c: float, k: float, x_cap: float) -> Shape:
    inner = _sum_shape(h, c, k)

    def shape(x: float, y: float) -> tuple[float, float, float, float, float]:
        return inner(min(x, x_cap), y)  # above the cap the GPU throttles to it: the set clock changes nothing

    return shape


def _overlap_shape(h: float, c: float, k: float) -> Shape:
    def shape(x: float, y: float) -> tuple[float, float, float, float, float]:
        busy_time = c / x + k / y
        sm_rate, mem_rate = _rates(c, k, busy_time / (c + k))
        t = max(h, busy_time)
        return t, busy_time / t, sm_rate, mem_rate, x

    return shape


def synthetic_rows(spec: GPUSpec | None = None, *, iteration_s: float = 0.1) -> list[dict[str, object]]:
    """Every synthetic job's sweep rows (the normalized sweeps schema), on the spec's whole clock table."""
    spec = spec or h200_spec()
    table = spec.clock_table
    f_ref, m_ref = table.default_sm_mhz, table.default_mem_mhz
    rng = np.random.default_rng(SEED)
    rows: list[dict[str, object]] = []
    for family in FAMILIES:
        for name, shape, mem_clock_share in _family_jobs(family, rng):
            t_ref = shape(1.0, 1.0)[0]
            for sm, mem in table.pairs():
                t, busy, sm_rate, mem_rate, x_run = shape(sm / f_ref, mem / m_ref)
                power = _power_w(spec, x_run * f_ref, mem, busy, sm_rate, mem_rate, mem_clock_share=mem_clock_share)
                rows.append(
                    {
                        "sku": SKU,
                        "source": "synthetic",
                        "workload": name,
                        "sm_clock_mhz": float(sm),
                        "mem_clock_mhz": float(mem),
                        "time_s": iteration_s * t / t_ref,
                        "power_w": power,
                        "ref": (sm, mem) == (f_ref, m_ref),
                        **_counters(busy, sm_rate, mem_rate),
                    }
                )
    return rows
