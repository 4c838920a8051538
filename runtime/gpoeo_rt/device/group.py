"""A lockstep group: several GPUs of one data-parallel job seen as one device, so one controller decides for all.

A data-parallel job runs at the pace of its slowest GPU and every GPU repeats the same iteration, so the group's
summed power carries the common iteration period, and one clock decision applied to every member keeps them in
step. Members must have the same clock table (the same SKU) and share one time base.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from gpoeo_rt.device.base import GPU, ClockTable, CounterSnapshot, PolledReading, PowerSamples
from gpoeo_rt.device.clock import Clock
from gpoeo_rt.features import FEATURE_NAMES


class GroupGPU(GPU):
    """Reads are combined (power and energy summed, counters averaged); writes go to every member."""

    def __init__(self, members: Sequence[GPU]) -> None:
        if len(members) < 2:
            raise ValueError("a lockstep group needs at least two GPUs")
        table = members[0].supported_clocks()
        for gpu in members[1:]:
            if gpu.supported_clocks() != table:
                raise ValueError(
                    f"lockstep group: GPU {gpu.index} ({gpu.name}) has a different clock table from GPU "
                    f"{members[0].index} ({members[0].name}); a group must be one GPU model"
                )
        self.members = list(members)
        self._table = table

    @property
    def index(self) -> int:
        return self.members[0].index

    @property
    def indices(self) -> list[int]:
        return [gpu.index for gpu in self.members]

    @property
    def name(self) -> str:
        return f"{self.members[0].name} x{len(self.members)} (lockstep {','.join(map(str, self.indices))})"

    @property
    def uuid(self) -> str:
        return "+".join(gpu.uuid for gpu in self.members)

    @property
    def clock(self) -> Clock:
        return self.members[0].clock

    def supported_clocks(self) -> ClockTable:
        return self._table

    def current_clocks(self) -> tuple[int, int]:
        return self.members[0].current_clocks()

    def power_samples_since(self, t_s: float) -> PowerSamples:
        """The first member's sample times, each with the sum of every member's power at that time (the others
        interpolated). Only times every member already covers are returned; later ones come next call."""
        parts = [gpu.power_samples_since(t_s) for gpu in self.members]
        if any(len(p) == 0 for p in parts):
            # Keep what the first member returned for later: re-reading from t_s returns it again.
            return PowerSamples.empty()
        base = parts[0]
        covered = min(float(p.t_s[-1]) for p in parts)
        keep = base.t_s <= covered
        t = base.t_s[keep]
        total = base.power_w[keep].copy()
        for p in parts[1:]:
            total += np.interp(t, p.t_s, p.power_w)
        return PowerSamples(t, total)

    def power_w(self) -> float:
        return float(sum(gpu.power_w() for gpu in self.members))

    def energy_j(self) -> float:
        return float(sum(gpu.energy_j() for gpu in self.members))

    def counter_snapshot(self) -> CounterSnapshot:
        snaps = [gpu.counter_snapshot() for gpu in self.members]
        features = {}
        for name in FEATURE_NAMES:
            values = [s.features.get(name, math.nan) for s in snaps]
            finite = [v for v in values if math.isfinite(v)]
            features[name] = float(np.mean(finite)) if finite else math.nan
        first = snaps[0]
        return CounterSnapshot(first.start_s, first.end_s, features, first.source)

    def poll(self) -> PolledReading:
        polls = [gpu.poll() for gpu in self.members]
        first = polls[0]
        return PolledReading(
            t_s=first.t_s,
            power_instant_w=sum(p.power_instant_w for p in polls),
            power_average_w=sum(p.power_average_w for p in polls),
            power_usage_w=sum(p.power_usage_w for p in polls),
            energy_j=sum(p.energy_j for p in polls),
            util_gpu_pct=float(np.mean([p.util_gpu_pct for p in polls])),
            util_mem_pct=float(np.mean([p.util_mem_pct for p in polls])),
            sm_clock_mhz=first.sm_clock_mhz,
            mem_clock_mhz=first.mem_clock_mhz,
            call_s=sum(p.call_s for p in polls),
            counters=self.counter_snapshot(),
        )

    def lock_clocks(self, sm_clock_mhz: int, mem_clock_mhz: int) -> None:
        for gpu in self.members:
            gpu.lock_clocks(sm_clock_mhz, mem_clock_mhz)

    def reset_clocks(self) -> None:
        """Reset every member, even when one fails (the first error is raised after trying them all)."""
        errors: list[Exception] = []
        for gpu in self.members:
            try:
                gpu.reset_clocks()
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise errors[0]

    def close(self) -> None:
        errors: list[Exception] = []
        for gpu in self.members:
            try:
                gpu.close()
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise errors[0]
