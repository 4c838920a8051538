"""Workload models for the simulated GPU: how iteration time, power and counters depend on SM and memory clocks.

Two kinds, behind one small protocol (`operating_point(sm, mem)`):
- `AnalyticWorkload`: compute / memory / host shares of the iteration at reference clocks, a GPU power model
  (idle power, leakage ~ V, SM dynamic power ~ f·V(f)², memory power ~ traffic) and counters that follow the
  clocks. Presets approximate the H200 traces (data/traces/h200).
- `SweepWorkload`: a measured sweep table (rows of the normalized sweeps schema for one sku and workload),
  interpolated between measured clocks. This is what benchmarks use.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, Protocol

import numpy as np

from gpoeo_rt.device.base import ClockTable
from gpoeo_rt.features import FEATURE_NAMES

# The busy profile of a typical training step, calibrated on a recorded ResNet-50 (docs/bench.md, "Simulator
# waveform calibration"): the default of analytic and sweep-driven workloads alike.
DEFAULT_MODULATION = 0.14
DEFAULT_HARMONIC_DECAY = 3.0


@dataclass(frozen=True)
class OperatingPoint:
    """What a workload does at one clock pair. Within an iteration the GPU is busy for busy_fraction of the time
    and draws low_power_w for the rest (host work, data loading); power_w is the mean over the iteration."""

    iteration_s: float  # math.inf: no iterations (an idle GPU)
    power_w: float
    busy_fraction: float
    low_power_w: float
    util_gpu: float  # fraction of time a kernel runs (what nvmlDeviceGetUtilizationRates reports, / 100)
    features: Mapping[str, float]  # feat_* fractions, NaN where the source has none
    # The busy part's power profile: busy mean x (1 + modulation x busy_profile(phase, harmonic_decay)).
    modulation: float = DEFAULT_MODULATION
    harmonic_decay: float = DEFAULT_HARMONIC_DECAY
    # Share of the low-power time that is one stall at the end of the iteration (a host stall); the rest is
    # spread over the busy part in gaps shorter than a 20 ms sample (launch gaps, overlapped host work).
    stall_share: float = 0.0


_HARMONICS = 8
# Fixed, irregular phases of the profile's harmonics (golden-ratio sequence): one reproducible shape family.
_HARMONIC_PHASES = 2.0 * math.pi * ((np.arange(1, _HARMONICS + 1) * 0.6180339887) % 1.0)


def busy_profile(x: np.ndarray, harmonic_decay: float) -> np.ndarray:
    """A zero-mean, unit-RMS periodic profile over the busy part (x in [0, 1]): harmonics 1.._HARMONICS with
    amplitudes n**-harmonic_decay. A large decay is one smooth swell per iteration (a clean spectral line, as
    ResNet-50 shows); a small one spreads the variation over many harmonics (as the transformer shows)."""
    n = np.arange(1, _HARMONICS + 1, dtype=np.float64)
    amplitude = n**-harmonic_decay
    amplitude /= math.sqrt(0.5 * float(np.sum(amplitude**2)))
    x = np.asarray(x, dtype=np.float64)
    return np.asarray(np.cos(2.0 * math.pi * np.multiply.outer(x, n) + _HARMONIC_PHASES) @ amplitude, dtype=np.float64)


class Workload(Protocol):
    @property
    def name(self) -> str: ...

    def operating_point(self, sm_clock_mhz: float, mem_clock_mhz: float) -> OperatingPoint: ...

    def clock_table(self) -> ClockTable | None:
        """The clocks this workload can be run at (a measured sweep), or None for any clock of the GPU."""
        ...


def _features(values: Mapping[str, float]) -> Mapping[str, float]:
    return MappingProxyType({name: float(values.get(name, math.nan)) for name in FEATURE_NAMES})


# --- the analytic model ---


@dataclass(frozen=True)
class GPUSpec:
    """Power model constants of one GPU. Powers in W; voltage is relative to its value at the highest SM clock."""

    name: str
    clock_table: ClockTable
    idle_power_w: float  # no work, default clocks
    static_power_w: float  # extra leakage and uncore power while busy, at the highest voltage
    sm_dynamic_w: float  # SM switching power at the highest clock and voltage, full activity
    mem_dynamic_w: float  # memory power at the highest memory clock, full traffic
    v_min: float  # relative voltage at and below the knee
    v_knee_mhz: float  # voltage is flat below this SM clock, rises linearly above
    clock_tree_share: float = 0.3  # share of dynamic power that scales with the clock whatever the work
    power_limit_w: float = math.inf

    @property
    def max_sm_mhz(self) -> float:
        return float(max(max(sms) for _, sms in self.clock_table.entries))

    @property
    def max_mem_mhz(self) -> float:
        return float(max(self.clock_table.mem_clocks_mhz))

    def voltage(self, sm_clock_mhz: float) -> float:
        x = (sm_clock_mhz - self.v_knee_mhz) / max(self.max_sm_mhz - self.v_knee_mhz, 1e-9)
        return self.v_min + (1.0 - self.v_min) * min(1.0, max(0.0, x))

    def idle_power(self, sm_clock_mhz: float) -> float:
        # Idle power falls a little with voltage (leakage); most of it is board and memory background.
        return self.idle_power_w * (0.75 + 0.25 * self.voltage(sm_clock_mhz))


def h200_spec() -> GPUSpec:
    """NVIDIA H200 SXM as measured (supported clocks, defaults, idle ~120 W, limit 700 W); the power split is a
    plausible model, not a measurement."""
    sm = tuple(range(345, 1981, 15))
    table = ClockTable(((2201, sm), (3201, sm)), default_sm_mhz=1980, default_mem_mhz=3201)
    return GPUSpec(
        name="NVIDIA H200 (simulated)",
        clock_table=table,
        idle_power_w=120.0,
        static_power_w=60.0,
        sm_dynamic_w=380.0,
        mem_dynamic_w=120.0,
        v_min=0.68,
        v_knee_mhz=1050.0,
        power_limit_w=700.0,
    )


@dataclass(frozen=True)
class AnalyticWorkload:
    """A training iteration split into compute-bound, memory-bound and host-bound time at reference clocks.

    Time scales as T = T_ref·(c·f_ref/f + m·fm_ref/fm + h). While busy, the GPU draws idle + leakage·V +
    SM power ∝ V²·(clock tree ∝ f + switching ∝ work rate) + memory power ∝ (clock share + traffic rate).
    `busy_features` are the feat_* counters while busy at reference clocks; reported counters are time averages
    over the iteration, scaled by how the work rate and peak rates move with the clocks.
    """

    name: str
    spec: GPUSpec
    iteration_s: float  # at reference clocks
    compute_share: float
    memory_share: float  # the host share is what is left
    sm_intensity: float = 0.85  # SM switching activity while busy at reference clocks, 0..1
    mem_intensity: float = 0.5  # memory traffic while busy at reference clocks, fraction of the peak
    busy_features: Mapping[str, float] = field(default_factory=dict)
    ref_sm_clock_mhz: float | None = None  # default: the GPU's default clocks
    ref_mem_clock_mhz: float | None = None
    modulation: float = DEFAULT_MODULATION  # relative RMS of the busy part's power profile (see busy_profile)
    harmonic_decay: float = DEFAULT_HARMONIC_DECAY
    stall_share: float = 0.0  # share of the host time that is one stall per iteration (OperatingPoint)

    def __post_init__(self) -> None:
        if not (self.iteration_s > 0 and self.compute_share >= 0 and self.memory_share >= 0):
            raise ValueError(f"{self.name}: iteration_s must be > 0 and shares >= 0")
        if self.compute_share + self.memory_share > 1.0 + 1e-9:
            raise ValueError(f"{self.name}: compute_share + memory_share must be <= 1")

    @property
    def host_share(self) -> float:
        return max(0.0, 1.0 - self.compute_share - self.memory_share)

    def clock_table(self) -> ClockTable | None:
        return None

    def operating_point(self, sm_clock_mhz: float, mem_clock_mhz: float) -> OperatingPoint:
        spec = self.spec
        f_ref = self.ref_sm_clock_mhz or spec.clock_table.default_sm_mhz
        fm_ref = self.ref_mem_clock_mhz or spec.clock_table.default_mem_mhz
        r_sm, r_mem = f_ref / sm_clock_mhz, fm_ref / mem_clock_mhz
        c, m, h = self.compute_share, self.memory_share, self.host_share
        busy_rel = c * r_sm + m * r_mem  # busy time relative to the reference iteration
        iteration_s = self.iteration_s * (busy_rel + h)
        busy_fraction = busy_rel / (busy_rel + h) if busy_rel + h > 0 else 0.0
        work_rate = (c + m) / busy_rel if busy_rel > 0 else 0.0  # work done per busy second, 1 at reference

        v = spec.voltage(sm_clock_mhz)
        f_n, fm_n = sm_clock_mhz / spec.max_sm_mhz, mem_clock_mhz / spec.max_mem_mhz
        cts = spec.clock_tree_share
        sm_w = (
            spec.sm_dynamic_w
            * v
            * v
            * (cts * f_n + (1 - cts) * self.sm_intensity * work_rate * f_ref / spec.max_sm_mhz)
        )
        mem_w = spec.mem_dynamic_w * (cts * fm_n + (1 - cts) * self.mem_intensity * work_rate)
        idle_w = spec.idle_power(sm_clock_mhz)
        busy_w = idle_w + spec.static_power_w * v + sm_w + mem_w
        low_w = idle_w * 1.1  # host phase: context alive, a little traffic
        power_w = busy_fraction * busy_w + (1 - busy_fraction) * low_w

        bf = self.busy_features
        scale = {  # how each busy-time counter moves with the clocks (rates over peak rates)
            "feat_sm_active": 1.0,
            "feat_sm_occupancy": 1.0,
            "feat_dram_active": work_rate * r_mem,
            "feat_fp16_active": work_rate * r_sm,
            "feat_fp32_active": work_rate * r_sm,
            "feat_fp64_active": work_rate * r_sm,
            "feat_tensor_active": work_rate * r_sm,
        }
        features = {
            name: min(1.0, float(bf[name]) * scale[name]) * busy_fraction if name in bf else math.nan
            for name in FEATURE_NAMES
        }
        return OperatingPoint(
            iteration_s,
            power_w,
            busy_fraction,
            low_w,
            busy_fraction,
            _features(features),
            self.modulation,
            self.harmonic_decay,
            self.stall_share,
        )


@dataclass(frozen=True)
class IdleWorkload:
    """No job: idle power, no iterations."""

    spec: GPUSpec
    name: str = "idle"

    def clock_table(self) -> ClockTable | None:
        return None

    def operating_point(self, sm_clock_mhz: float, mem_clock_mhz: float) -> OperatingPoint:
        power_w = self.spec.idle_power(sm_clock_mhz)
        zeros = dict.fromkeys(FEATURE_NAMES, 0.0)
        return OperatingPoint(math.inf, power_w, 0.0, power_w, 0.0, _features(zeros))


def _busy(sm: float, occ: float, dram: float, fp16: float, fp32: float, fp64: float, tensor: float) -> dict[str, float]:
    return dict(zip(FEATURE_NAMES, (sm, occ, dram, fp16, fp32, fp64, tensor), strict=True))


PRESET_NAMES: tuple[str, ...] = ("resnet50", "resnet50_hoststall", "gpt", "membound", "membound_fast", "idle")


def preset_workload(name: str, spec: GPUSpec | None = None) -> AnalyticWorkload | IdleWorkload:
    """Workloads shaped like the H200 traces (periods at default clocks: 104, 50, 257 ms; a memory-bound MLP)."""
    spec = spec or h200_spec()
    if name == "resnet50":  # ResNet-50 batch 512 bf16: compute-bound
        return AnalyticWorkload(
            name, spec, 0.1042, 0.78, 0.17, 0.85, 0.45, _busy(0.92, 0.45, 0.35, 0.05, 0.15, 0.0, 0.4)
        )
    if name == "resnet50_hoststall":  # batch 128 with a 20 ms host stall per step
        busy = _busy(0.9, 0.4, 0.35, 0.05, 0.15, 0.0, 0.35)
        return AnalyticWorkload(name, spec, 0.0502, 0.45, 0.12, 0.8, 0.45, busy, stall_share=1.0)
    if name == "gpt":  # 12-layer transformer LM, batch 64: mixed; a shallow profile spread over many harmonics
        busy = _busy(0.9, 0.35, 0.45, 0.1, 0.1, 0.0, 0.5)
        return AnalyticWorkload(name, spec, 0.2568, 0.62, 0.33, 0.8, 0.6, busy, modulation=0.09, harmonic_decay=-0.4)
    if name == "membound":  # large-batch fp32 MLP: memory-bound
        return AnalyticWorkload(name, spec, 0.08, 0.15, 0.8, 0.5, 0.85, _busy(0.95, 0.6, 0.85, 0.0, 0.3, 0.0, 0.0))
    if name == "membound_fast":  # the same MLP at a small batch: 12 ms steps, too fast for the power signal
        return AnalyticWorkload(name, spec, 0.012, 0.15, 0.8, 0.5, 0.85, _busy(0.95, 0.6, 0.85, 0.0, 0.3, 0.0, 0.0))
    if name == "idle":
        return IdleWorkload(spec)
    raise ValueError(f"unknown simulated workload {name!r}; presets: {', '.join(PRESET_NAMES)}")


# --- the measured-sweep model ---


class SweepRangeError(ValueError):
    """A clock outside the measured range of a sweep (the model refuses to extrapolate)."""


@dataclass(frozen=True)
class _Curve:
    """One memory clock's measurements, ascending in SM clock."""

    mem_clock_mhz: float
    sm_clock_mhz: np.ndarray
    time_s: np.ndarray
    power_w: np.ndarray
    features: np.ndarray  # (n, len(FEATURE_NAMES))

    def at(self, sm_clock_mhz: float) -> tuple[float, float, np.ndarray]:
        x = self.sm_clock_mhz
        if not x[0] - 1e-9 <= sm_clock_mhz <= x[-1] + 1e-9:
            raise SweepRangeError(
                f"SM clock {sm_clock_mhz} MHz is outside the measured {x[0]:g}-{x[-1]:g} MHz at memory "
                f"{self.mem_clock_mhz:g} MHz"
            )
        feats = np.array([np.interp(sm_clock_mhz, x, col) for col in self.features.T])
        return float(np.interp(sm_clock_mhz, x, self.time_s)), float(np.interp(sm_clock_mhz, x, self.power_w)), feats


def _float(row: Mapping[str, object], key: str) -> float:
    value = row.get(key, "")
    if value is None or value == "":
        return math.nan
    return float(value)  # type: ignore[arg-type]


def _bool(value: object) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes", "t")
    return bool(value)


class SweepWorkload:
    """A workload driven by a measured sweep: rows of the normalized sweeps schema for one (sku, workload).

    Time and power are interpolated linearly in SM clock within each measured memory clock and linearly between
    the two nearest measured memory clocks; at measured clocks they reproduce the table exactly. Clocks outside
    the measured range are refused (SweepRangeError), never extrapolated. `iteration_s` rescales time so the ref
    row's iteration takes that long (sweep sources measure different units of work); by default time_s is the
    iteration time. Counters are interpolated like time when every row has them, else taken from the ref row.
    The clock table is the measured clocks ("measured", so a search never asks for an unmeasured pair) or every
    `sm_step_mhz` within each memory clock's measured range ("grid").
    """

    def __init__(
        self,
        name: str,
        sku: str,
        curves: Sequence[_Curve],
        ref_clocks_mhz: tuple[float, float],
        *,
        iteration_s: float | None = None,
        busy_fraction: float = 0.85,
        low_power_ratio: float = 0.45,
        modulation: float = DEFAULT_MODULATION,
        harmonic_decay: float = DEFAULT_HARMONIC_DECAY,
        stall_share: float = 0.0,
        table: Literal["measured", "grid"] = "measured",
        sm_step_mhz: int = 15,
    ) -> None:
        self.name = name
        self.sku = sku
        self._curves = sorted(curves, key=lambda c: c.mem_clock_mhz)
        self.ref_clocks_mhz = ref_clocks_mhz
        ref_time_s = self._interpolate(*ref_clocks_mhz)[0]
        self._time_scale = iteration_s / ref_time_s if iteration_s else 1.0
        self._busy_fraction = busy_fraction
        self._low_power_ratio = low_power_ratio
        self._modulation = modulation
        self._harmonic_decay = harmonic_decay
        self._stall_share = stall_share
        self._table = self._make_table(table, sm_step_mhz)

    @classmethod
    def from_rows(
        cls,
        rows: Iterable[Mapping[str, object]],
        *,
        sku: str | None = None,
        workload: str | None = None,
        **options: Any,
    ) -> SweepWorkload:
        """Build from schema rows (dicts, e.g. csv.DictReader). Rows of other skus/workloads are skipped when
        sku/workload are given; otherwise the rows must hold exactly one (sku, workload)."""
        picked = [
            r
            for r in rows
            if (sku is None or str(r.get("sku")) == sku) and (workload is None or str(r.get("workload")) == workload)
        ]
        groups = {(str(r.get("sku")), str(r.get("workload"))) for r in picked}
        if len(groups) != 1:
            what = f"sku={sku!r} workload={workload!r}"
            raise ValueError(f"sweep rows for {what}: expected one (sku, workload), found {sorted(groups)[:5]}")
        (group_sku, group_workload) = groups.pop()
        points: dict[tuple[float, float], tuple[float, float, list[float], bool]] = {}
        for r in picked:
            key = (_float(r, "sm_clock_mhz"), _float(r, "mem_clock_mhz"))
            time_s, power_w = _float(r, "time_s"), _float(r, "power_w")
            if not (time_s > 0 and power_w > 0 and all(math.isfinite(k) for k in key)):
                raise ValueError(f"sweep row {key} of {group_workload}: time_s and power_w must be > 0")
            if key in points:
                raise ValueError(f"duplicate sweep row at SM/memory {key} MHz for {group_workload}")
            points[key] = (time_s, power_w, [_float(r, f) for f in FEATURE_NAMES], _bool(r.get("ref", False)))
        refs = [k for k, v in points.items() if v[3]]
        if len(refs) != 1:
            raise ValueError(f"sweep {group_sku}/{group_workload} needs exactly one ref row, found {len(refs)}")
        feats = np.array([v[2] for v in points.values()], dtype=np.float64)
        ref_feats = np.array(points[refs[0]][2])
        constant = ~np.isfinite(feats).all(axis=0)  # a counter some rows lack: use the ref row's value throughout
        curves = []
        for mem in sorted({k[1] for k in points}):
            keys = sorted(k for k in points if k[1] == mem)
            f = np.array([points[k][2] for k in keys], dtype=np.float64)
            f[:, constant] = ref_feats[constant]
            curves.append(
                _Curve(
                    mem,
                    np.array([k[0] for k in keys]),
                    np.array([points[k][0] for k in keys]),
                    np.array([points[k][1] for k in keys]),
                    f,
                )
            )
        return cls(group_workload, group_sku, curves, refs[0], **options)

    @classmethod
    def from_csv(cls, path: str | Path, sku: str, workload: str, **options: Any) -> SweepWorkload:
        """Read a sweeps CSV (the schema's columns; extra columns ignored) with the csv module."""
        with Path(path).open(newline="") as fh:
            return cls.from_rows(csv.DictReader(fh), sku=sku, workload=workload, **options)

    def _make_table(self, kind: str, sm_step_mhz: int) -> ClockTable:
        mapping: dict[int, list[int]] = {}
        for c in self._curves:
            measured = [round(s) for s in c.sm_clock_mhz]
            if kind == "grid":
                lo, hi = measured[0], measured[-1]
                measured = sorted(set(range(lo, hi + 1, sm_step_mhz)) | set(measured))
            elif kind != "measured":
                raise ValueError(f"clock table must be 'measured' or 'grid', not {kind!r}")
            mapping[round(c.mem_clock_mhz)] = measured
        return ClockTable.from_mapping(mapping, round(self.ref_clocks_mhz[0]), round(self.ref_clocks_mhz[1]))

    def clock_table(self) -> ClockTable:
        return self._table

    def _interpolate(self, sm_clock_mhz: float, mem_clock_mhz: float) -> tuple[float, float, np.ndarray]:
        mems = [c.mem_clock_mhz for c in self._curves]
        for c in self._curves:
            if abs(c.mem_clock_mhz - mem_clock_mhz) < 1e-9:
                return c.at(sm_clock_mhz)
        if not mems[0] < mem_clock_mhz < mems[-1]:
            raise SweepRangeError(f"memory clock {mem_clock_mhz} MHz is outside the measured {mems[0]:g}-{mems[-1]:g}")
        hi = int(np.searchsorted(mems, mem_clock_mhz))
        lo_curve, hi_curve = self._curves[hi - 1], self._curves[hi]
        w = (mem_clock_mhz - lo_curve.mem_clock_mhz) / (hi_curve.mem_clock_mhz - lo_curve.mem_clock_mhz)
        t0, p0, f0 = lo_curve.at(sm_clock_mhz)
        t1, p1, f1 = hi_curve.at(sm_clock_mhz)
        return (1 - w) * t0 + w * t1, (1 - w) * p0 + w * p1, (1 - w) * f0 + w * f1

    def time_power(self, sm_clock_mhz: float, mem_clock_mhz: float) -> tuple[float, float]:
        """(time_s, power_w) at a clock pair (time in the table's unit, times the iteration_s rescaling)."""
        time_s, power_w, _ = self._interpolate(sm_clock_mhz, mem_clock_mhz)
        return time_s * self._time_scale, power_w

    def operating_point(self, sm_clock_mhz: float, mem_clock_mhz: float) -> OperatingPoint:
        time_s, power_w, feats = self._interpolate(sm_clock_mhz, mem_clock_mhz)
        features = _features(dict(zip(FEATURE_NAMES, (float(x) for x in feats), strict=True)))
        sm_active = features["feat_sm_active"]
        util = sm_active if math.isfinite(sm_active) else self._busy_fraction
        return OperatingPoint(
            time_s * self._time_scale,
            power_w,
            self._busy_fraction,
            power_w * self._low_power_ratio,
            util,
            features,
            self._modulation,
            self._harmonic_decay,
            self._stall_share,
        )


def parse_schedule(text: str, spec: GPUSpec | None = None) -> list[tuple[float, Workload]]:
    """Parse a `--simulate` value: comma-separated items, each `NAME` or `NAME@START_S`, where NAME is a preset
    or `SWEEPS.csv:SKU:WORKLOAD`. The first item starts at 0 s. Example: `gpt,membound@30`."""
    schedule: list[tuple[float, Workload]] = []
    for i, raw in enumerate(item.strip() for item in text.split(",")):
        if not raw:
            raise ValueError(f"empty item in simulation schedule {text!r}")
        head, at, start = raw.rpartition("@")
        name, start_s = (head, float(start)) if at else (raw, 0.0)
        if i == 0 and start_s != 0.0:
            raise ValueError(f"the first simulated workload starts at 0 s, not {start_s}")
        if schedule and start_s <= schedule[-1][0]:
            raise ValueError(f"simulation schedule {text!r}: start times must increase")
        workload: Workload
        if ".csv:" in name:
            path, sku, sweep_workload = name.rsplit(":", 2)
            workload = SweepWorkload.from_csv(path, sku, sweep_workload)
        else:
            workload = preset_workload(name, spec)
        schedule.append((start_s, workload))
    return schedule
