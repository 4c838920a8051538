"""What the controller saved so far, from its own decisions (pure: a stream of decision-log records in, figures out).

Each decision's measured ratios (to the phase's baseline at reference clocks) hold from the previous decision to
this one; windows at reference clocks count as 1.0. So `saving_pct` is the measured energy per iteration saved,
time-weighted, exploration included, and `slowdown_pct` the matching time per iteration. Before the first baseline
nothing is known (None). In advise mode nothing changes: the figures stay at 0 and `advised_*` carries what the
model predicts the advice would give.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass
class SavingsMeter:
    weighted_energy: float = 0.0
    weighted_time: float = 0.0
    weight_s: float = 0.0
    last_t_s: float | None = None
    baselined: bool = False
    last: dict[str, Any] = field(default_factory=dict)  # the latest record with a measured period
    baseline: dict[str, float] | None = None
    advised_predicted: dict[str, float] | None = None

    def feed(self, record: dict[str, Any]) -> None:
        t = record.get("t_s")
        if not isinstance(t, int | float):
            return
        event = record.get("event")
        if event == "baseline" or event == "known_phase":
            period, power = record.get("period_s"), record.get("power_w")
            if isinstance(period, int | float) and isinstance(power, int | float):
                self.baseline = {
                    "period_s": float(period),
                    "power_w": float(power),
                    "energy_per_iteration_j": float(period) * float(power),
                }
            self.baselined = True
        if record.get("advised_sm_clock_mhz") is not None:
            pt, pe = record.get("predicted_time_ratio"), record.get("predicted_energy_ratio")
            if isinstance(pt, int | float) and isinstance(pe, int | float):
                self.advised_predicted = {"time_ratio": float(pt), "energy_ratio": float(pe)}
        if self.baselined and self.last_t_s is not None and t > self.last_t_s:
            e, tr = record.get("measured_energy_ratio"), record.get("measured_time_ratio")
            at_reference = not record.get("locked", False) and record.get("state") == "profiling"
            if isinstance(e, int | float) and isinstance(tr, int | float) and math.isfinite(e) and math.isfinite(tr):
                weight = t - self.last_t_s
                self.weighted_energy += weight * float(e)
                self.weighted_time += weight * float(tr)
                self.weight_s += weight
            elif at_reference:
                weight = t - self.last_t_s
                self.weighted_energy += weight
                self.weighted_time += weight
                self.weight_s += weight
        if record.get("period_s") is not None:
            self.last = record
        self.last_t_s = float(t)

    @property
    def saving_pct(self) -> float | None:
        return None if self.weight_s <= 0 else 100.0 * (1.0 - self.weighted_energy / self.weight_s)

    @property
    def slowdown_pct(self) -> float | None:
        return None if self.weight_s <= 0 else 100.0 * (self.weighted_time / self.weight_s - 1.0)

    def now(self) -> dict[str, float | None] | None:
        """The latest measured window: period, power, energy per iteration and ratios to the baseline."""
        rec = self.last
        if not rec:
            return None
        period, power = rec.get("period_s"), rec.get("power_w")
        energy = (
            float(period) * float(power) if isinstance(period, int | float) and isinstance(power, int | float) else None
        )
        return {
            "period_s": period,
            "power_w": power,
            "energy_per_iteration_j": energy,
            "time_ratio": rec.get("measured_time_ratio"),
            "energy_ratio": rec.get("measured_energy_ratio"),
        }
