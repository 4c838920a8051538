"""Measurement-led search: measurements decide, the model only orders and shortens the search.

Pure and clock-free, like every search (`gpoeo_rt.search.protocol.Search`): the caller measures the config
`next_probe()` asks for and hands the ratios to `record()`; `best()` is always a MEASURED config.

What the search believes about an unmeasured config comes from three layers, refitted after every probe:
1. a per-job physical form, time ratio = 1 + b_sm (f_ref/f - 1) + b_mem (m_ref/m - 1) (b: the share of the
   iteration that scales with each clock) and power ratio = 1 + a (shape - 1), where the shape is the model's
   power curve (its SKU's voltage-frequency knowledge) or f^2 without a model; b and a are fitted to the probes,
   pulled towards the model's own values as far as the model is trusted (`Prior.trust`);
2. where the model is trusted and agrees with the probes, its own calibrated curves, blended in;
3. the residuals at measured configs, interpolated along the SM clock, so the belief passes through every
   measurement.
The next probe is chosen on the measurements first: time grows as clocks fall, so the configs within the bound
form an interval, and the best measured config has an unmeasured gap below and above it up to its measured
neighbours. A gap is probed while the belief expects a gain there, and the lower gap is always probed while the
best config's measured slowdown is far below the bound (the belief cannot talk the search out of clocks nobody
measured). Far from the bound a probe moves at least `min_jump` of the gap, so a wrong belief costs a bisection
step, not a crawl; near the bound it takes the lower config the belief expects to gain, else the next lower
clock. A lower clock that ties with the best within the noise does not count as bracketing the minimum. Every
other memory clock is visited once (nearest first), unless a config measured over the bound shows it slower
everywhere, and searched like the first when it wins.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from gpoeo_rt.search.objectives import Objective, objective_values
from gpoeo_rt.search.protocol import NOISE_GAIN, Measurements

FloatArray = npt.NDArray[np.float64]

_B_MAX = 1.6  # a share above 1 is possible (caches and latencies scale worse than the clock), not far above
_PSEUDO_X = 0.3  # a prior pseudo-probe sits at this clock-ratio excess (a typical probe)
_TIME_NOISE = 0.005  # log time ratio differences below this are measurement noise


@dataclass(frozen=True)
class Prior:
    """The model's ratios for every config of the grid (1 at the reference), and how far to trust them:
    1 = the GPU gave every counter the model reads, 0 = none (the model then knows only the average job)."""

    time_ratio: FloatArray
    energy_ratio: FloatArray
    trust: float
    why: str = ""


@dataclass
class MeasuredSearch:
    """State of one measurement-led search over a clock grid (arrays indexed like the grid)."""

    sm_clock_mhz: FloatArray
    mem_clock_mhz: FloatArray
    ref_index: int
    objective: Objective
    max_slowdown: float
    prior: Prior | None = None
    max_probes: int = 12  # probes after the reference
    accept_margin: float = 0.001  # a config is chosen only when its measured slowdown is this far within the bound
    gain_tol: float = NOISE_GAIN  # an expected gain below this is not worth a probe
    near_band: float = 0.015  # best within this of the accept limit: the belief may end the lower search
    min_headroom: float = 0.002  # below this headroom to the accept limit, the next lower clock is not tried
    min_jump: float = 0.3  # far from the bound, a probe moves at least this share of the gap
    mem_explore_tol: float = 0.01  # a memory clock's first visit ranks as this much expected gain
    _measurements: Measurements = field(init=False, repr=False)
    _visited_mem: set[float] = field(init=False, default_factory=set)

    def __post_init__(self) -> None:
        self.sm_clock_mhz = np.asarray(self.sm_clock_mhz, dtype=np.float64)
        self.mem_clock_mhz = np.asarray(self.mem_clock_mhz, dtype=np.float64)
        n = self.sm_clock_mhz.size
        if self.sm_clock_mhz.ndim != 1 or n == 0 or self.mem_clock_mhz.shape != self.sm_clock_mhz.shape:
            raise ValueError(
                f"MeasuredSearch needs equal-length non-empty 1-D clock arrays, got shapes "
                f"{self.sm_clock_mhz.shape} and {self.mem_clock_mhz.shape}"
            )
        if not 0 <= self.ref_index < n:
            raise ValueError(f"reference index {self.ref_index} is outside the grid of {n} configs")
        if self.prior is not None:
            shapes = {np.shape(self.prior.time_ratio), np.shape(self.prior.energy_ratio)}
            if shapes != {(n,)}:
                raise ValueError(f"the prior's ratios must have the grid's {n} entries, got shapes {shapes}")
            if not 0.0 <= self.prior.trust <= 1.0:
                raise ValueError(f"prior trust must be in [0, 1], got {self.prior.trust}")
        if self.max_probes < 0:
            raise ValueError(f"max_probes must be >= 0, got {self.max_probes}")
        sm_ref, mem_ref = self.sm_clock_mhz[self.ref_index], self.mem_clock_mhz[self.ref_index]
        self._measurements = Measurements(n)
        self._x = np.stack([sm_ref / self.sm_clock_mhz - 1.0, mem_ref / self.mem_clock_mhz - 1.0], axis=1)
        self._mems = np.unique(self.mem_clock_mhz)
        # Per memory clock: grid indices in rising SM order.
        self._lines = {m: self._line(m) for m in self._mems.tolist()}
        self._prior_fit = self._fit_prior()

    def _line(self, mem: float) -> npt.NDArray[np.int64]:
        idx = np.flatnonzero(self.mem_clock_mhz == mem)
        return idx[np.argsort(self.sm_clock_mhz[idx], kind="stable")]

    # -- the protocol -------------------------------------------------------------------------------------------
    def record(self, index: int, time_ratio: float, energy_ratio: float) -> None:
        self._measurements.record(index, time_ratio, energy_ratio)
        self._visited_mem.add(float(self.mem_clock_mhz[index]))

    def measured(self, index: int) -> tuple[float, float] | None:
        return self._measurements.values.get(int(index))

    def measured_indices(self) -> list[int]:
        return list(self._measurements.values)

    def expected(self, index: int) -> tuple[float | None, float | None]:
        time_ratio, energy_ratio = self.belief()
        return float(time_ratio[index]), float(energy_ratio[index])

    def best(self) -> int:
        """The best MEASURED config: within the bound less the accept margin, else the fastest measured."""
        return self._measurements.best(self.objective, self.max_slowdown - self.accept_margin)

    def next_probe(self) -> int | None:
        if not self._measurements.values:
            raise ValueError("record the reference before asking for a probe")
        if len(self._measurements.values) - (self.ref_index in self._measurements.values) >= self.max_probes:
            return None
        time_ratio, energy_ratio, weight = self._belief()
        values = self._values(time_ratio, energy_ratio)
        over_bound = self._known_over_bound()
        values[over_bound] = np.inf
        best = self.best()
        best_value = self._value_of(best)
        candidates: list[tuple[float, int]] = []  # (expected gain, index); forced probes get +inf
        line = self._lines[float(self.mem_clock_mhz[best])]
        position = self._pivot(line, best)
        sides = (
            self._lower_gap(line, position, values, best_value, weight),
            self._upper_gap(line, position, values, best_value),
        )
        for probe, gain in sides:
            if probe is not None:
                candidates.append((gain, probe))
        # Every memory clock is measured once (the belief knows least about them without counters), at the best
        # config's SM clock (the nearest on that line): the probe isolates the memory clock's own effect, and the
        # search moves to that line when it wins.
        ref_mem = float(self.mem_clock_mhz[self.ref_index])
        for mem in sorted(self._mems.tolist(), key=lambda m: abs(m - ref_mem)):
            if mem in self._visited_mem:
                continue
            other = self._lines[mem]
            open_configs = other[~over_bound[other]]
            if open_configs.size == 0:
                continue  # slower than a config measured over the bound, at every SM clock
            if len(self._visited_mem) >= 2 and not np.isfinite(values[open_configs]).any():
                continue  # two memory clocks measured fix the belief's memory share: over the bound all along
            distance = np.abs(self.sm_clock_mhz[open_configs] - self.sm_clock_mhz[best])
            pick = int(open_configs[np.argmin(distance)])
            gain = best_value - float(values[pick]) if np.isfinite(values[pick]) else 0.0
            candidates.append((max(gain, 0.0) + self.mem_explore_tol, pick))
            break  # the nearest unvisited memory clock first
        # A visited memory clock other than the best's stays in play: its best unmeasured config by the belief
        # (which now knows that clock's effect), when that beats the best measured one beyond the noise.
        best_mem = float(self.mem_clock_mhz[best])
        for mem in self._visited_mem - {best_mem}:
            other = self._lines[mem]
            unmeasured = [i for i in other[~over_bound[other]].tolist() if i not in self._measurements.values]
            if not unmeasured:
                continue
            pick = unmeasured[int(np.argmin(values[unmeasured]))]
            gain = best_value - float(values[pick])
            if gain > self.gain_tol:
                candidates.append((gain, pick))
        if not candidates:
            return None
        gain, probe = max(candidates)
        return probe

    # -- choosing within a gap ----------------------------------------------------------------------------------
    def _pivot(self, line: npt.NDArray[np.int64], best: int) -> int:
        """Where on the best config's SM line the gaps start: at the lowest measured config that ties with the
        best (`Measurements.lowest_tie`)."""
        tie = self._measurements.lowest_tie(
            best, self.sm_clock_mhz, self.mem_clock_mhz, self.objective, self._limit() - 1.0, self.gain_tol
        )
        return int(np.flatnonzero(line == tie)[0])

    def _limit(self) -> float:
        return 1.0 + self.max_slowdown - self.accept_margin

    def _value_of(self, index: int) -> float:
        t, e = self._measurements.values[index]
        if self.objective is Objective.ENERGY and t > self._limit():
            return math.inf
        return float(objective_values(self.objective, np.array([t]), np.array([e]))[0])

    def _known_over_bound(self) -> npt.NDArray[np.bool_]:
        """Configs with both clocks at or below those of a config measured over the bound: time only grows as
        clocks fall, so they are over it too (never worth a probe)."""
        mask = np.zeros(self.sm_clock_mhz.size, dtype=bool)
        if self.objective is not Objective.ENERGY:
            return mask
        for i, (t, _) in self._measurements.values.items():
            if t > self._limit():
                mask |= (self.sm_clock_mhz <= self.sm_clock_mhz[i]) & (self.mem_clock_mhz <= self.mem_clock_mhz[i])
        return mask

    def _values(self, time_ratio: FloatArray, energy_ratio: FloatArray) -> FloatArray:
        values = objective_values(self.objective, time_ratio, energy_ratio)
        if self.objective is Objective.ENERGY:
            values = np.where(time_ratio <= self._limit(), values, np.inf)
        return values

    def _lower_gap(
        self, line: npt.NDArray[np.int64], position: int, values: FloatArray, best_value: float, weight: float
    ) -> tuple[int | None, float]:
        """The probe worth taking below the best measured config (lower SM clocks), with its expected gain."""
        below = [p for p in range(position) if int(line[p]) in self._measurements.values]
        low_end = max(below) if below else -1
        gap = list(range(low_end + 1, position))
        if not gap:
            return None, 0.0
        gains = best_value - values[line[gap]]
        gain = float(np.max(gains))
        if self.objective is not Objective.ENERGY or (low_end >= 0 and self._value_of(int(line[low_end])) < math.inf):
            # The energy minimum is bracketed by measurements (or there is no bound): a gain must beat the noise.
            if not gain > self.gain_tol:
                return None, 0.0
            return int(line[gap[int(np.argmax(gains))]]), gain
        # Below lies the bound, not yet located by a measurement.
        headroom = self._limit() - self._measurements.values[int(line[position])][0]
        if headroom <= self.near_band:
            if gain > 0.0:
                return int(line[gap[int(np.argmax(gains))]]), gain
            # The belief puts the bound right here; one probe at the next lower clock settles it.
            return (int(line[position - 1]), 0.0) if headroom > self.min_headroom else (None, 0.0)
        # Far below the bound with lower clocks untried: a probe is owed whatever the belief says. A belief that
        # keeps wanting "one step more" costs a bisection-like step, not a crawl down the table.
        pick = gap[int(np.argmax(gains))] if gain > 0.0 else gap[len(gap) // 2]
        jump = max(1, math.ceil(self.min_jump * (1.0 - weight) * len(gap)))
        pick = max(min(pick, position - jump), low_end + 1)
        return int(line[pick]), math.inf

    def _upper_gap(
        self, line: npt.NDArray[np.int64], position: int, values: FloatArray, best_value: float
    ) -> tuple[int | None, float]:
        """The probe worth taking above the best measured config (only for an expected energy gain)."""
        above = [p for p in range(position + 1, len(line)) if int(line[p]) in self._measurements.values]
        high_end = min(above) if above else len(line)
        gap = list(range(position + 1, high_end))
        if not gap:
            return None, 0.0
        gains = best_value - values[line[gap]]
        gain = float(np.max(gains))
        if not gain > self.gain_tol:
            return None, 0.0
        return int(line[gap[int(np.argmax(gains))]]), gain

    # -- the belief ---------------------------------------------------------------------------------------------
    def _fit_prior(self) -> tuple[FloatArray, FloatArray]:
        """The prior compressed into the physical form: (b_sm, b_mem) and the power shape the per-job fit scales
        (the prior's own power scale is 1 by definition)."""
        x = self._x
        ref_mem = self.mem_clock_mhz == self.mem_clock_mhz[self.ref_index]
        power_shape = np.clip(self.sm_clock_mhz / self.sm_clock_mhz[self.ref_index], 0.05, None) ** 2 - 1.0
        if self.prior is None:
            return np.array([1.0, 0.3]), power_shape + 0.15 * (-x[:, 1] / (1.0 + x[:, 1]))
        t = np.asarray(self.prior.time_ratio, dtype=np.float64)
        p = np.asarray(self.prior.energy_ratio, dtype=np.float64) / t
        below = (x[:, 0] >= 0) & (x[:, 1] >= 0)
        b = np.zeros(2)
        # SM share from the reference memory clock's line, memory share from what is left at the others.
        sm_rows = below & ref_mem & (x[:, 0] > 0)
        if sm_rows.any():
            b[0] = float(np.dot(x[sm_rows, 0], t[sm_rows] - 1.0) / np.dot(x[sm_rows, 0], x[sm_rows, 0]))
        mem_rows = below & (x[:, 1] > 0)
        if mem_rows.any():
            rest = t[mem_rows] - 1.0 - b[0] * x[mem_rows, 0]
            b[1] = float(np.dot(x[mem_rows, 1], rest) / np.dot(x[mem_rows, 1], x[mem_rows, 1]))
        return np.clip(b, 0.0, _B_MAX), p - 1.0

    @staticmethod
    def _pseudo_weight(model_weight: float) -> float:
        """How many typical probes the prior's physical parameters are worth: a little even without a model
        (the memory share is unidentified until a second memory clock is measured), more as far as the model
        is trusted and agrees with the probes."""
        return 0.25 + 3.0 * model_weight

    def belief(self) -> tuple[FloatArray, FloatArray]:
        """Expected (time_ratio, energy_ratio) for every config, through every measurement."""
        time_ratio, energy_ratio, _ = self._belief()
        return time_ratio, energy_ratio

    def _belief(self) -> tuple[FloatArray, FloatArray, float]:
        """The belief and the weight the model's own curves had in it."""
        b0, power_shape = self._prior_fit
        idx = np.array(list(self._measurements.values), dtype=np.int64)
        t_meas = np.array([self._measurements.values[i][0] for i in idx.tolist()])
        e_meas = np.array([self._measurements.values[i][1] for i in idx.tolist()])
        x = self._x[idx]
        p_meas = e_meas / t_meas
        weight = self._model_weight(idx, t_meas)
        # Time: ridge fit of the shares towards the prior's (the reference row, x = 0, carries no information).
        w = self._pseudo_weight(weight) * _PSEUDO_X**2
        gram = x.T @ x + w * np.eye(2)
        b = np.linalg.solve(gram, x.T @ (t_meas - 1.0) + w * b0)
        b = np.clip(b, 0.0, _B_MAX)
        t_phys = 1.0 + self._x @ b
        # Power: the scale of the shape, fitted the same way.
        s = power_shape[idx]
        a = float((np.dot(s, p_meas - 1.0) + w * 1.0) / (np.dot(s, s) + w))  # pulled towards the prior's 1
        a = float(np.clip(a, 0.0, 3.0))
        p_phys = np.clip(1.0 + a * power_shape, 0.05, None)
        log_t, log_p = np.log(np.clip(t_phys, 0.05, None)), np.log(p_phys)
        if weight > 0.0 and self.prior is not None:
            t_prior = np.asarray(self.prior.time_ratio, dtype=np.float64)
            p_prior = np.asarray(self.prior.energy_ratio, dtype=np.float64) / t_prior
            log_t = (1 - weight) * log_t + weight * self._calibrated(np.log(t_prior), idx, np.log(t_meas))
            log_p = (1 - weight) * log_p + weight * self._calibrated(np.log(p_prior), idx, np.log(p_meas))
        log_t = self._through_measurements(log_t, idx, np.log(t_meas))
        log_e = self._through_measurements(log_t + log_p, idx, np.log(e_meas))
        return np.exp(log_t), np.exp(log_e), weight

    def _calibrated(self, log_prior: FloatArray, idx: npt.NDArray[np.int64], log_meas: FloatArray) -> FloatArray:
        """The prior's log-ratios scaled by one factor fitted to the measurements (bounded)."""
        xp = log_prior[idx]
        denominator = float(np.dot(xp, xp))
        if denominator < 1e-12:
            return log_prior
        return float(np.clip(np.dot(xp, log_meas) / denominator, 0.25, 4.0)) * log_prior

    def _model_weight(self, idx: npt.NDArray[np.int64], t_meas: FloatArray) -> float:
        """How much of the model's own curve to follow: its trust, less as it disagrees with the probes (the rms
        error of its calibrated time ratios, relative to how far the probes moved from the reference)."""
        if self.prior is None or self.prior.trust <= 0.0:
            return 0.0
        informative = idx != self.ref_index
        if not informative.any():
            return self.prior.trust
        log_prior = np.log(np.asarray(self.prior.time_ratio, dtype=np.float64))
        log_meas = np.log(t_meas[informative])
        calibrated = self._calibrated(log_prior, idx, np.log(t_meas))[idx][informative]
        error = float(np.sqrt(np.mean((calibrated - log_meas) ** 2)))
        scale = max(float(np.sqrt(np.mean(log_meas**2))), _TIME_NOISE)
        return self.prior.trust * math.exp(-((error / scale) ** 2))

    def _through_measurements(
        self, log_ratio: FloatArray, idx: npt.NDArray[np.int64], log_meas: FloatArray
    ) -> FloatArray:
        """Shift the curve by the residuals at measured configs, interpolated along each memory clock's SM line
        (held flat beyond the outermost measurements); lines without a measurement take the nearest line's."""
        out = log_ratio.copy()
        residual = dict(zip(idx.tolist(), (log_meas - log_ratio[idx]).tolist(), strict=True))
        measured_lines = [m for m in self._mems.tolist() if any(i in residual for i in self._lines[m].tolist())]
        if not measured_lines:
            return out
        for mem, line in self._lines.items():
            source = mem if mem in measured_lines else min(measured_lines, key=lambda m: abs(m - mem))
            src_line = [i for i in self._lines[source].tolist() if i in residual]
            sm = self.sm_clock_mhz[src_line]
            order = np.argsort(sm)
            shift = np.interp(self.sm_clock_mhz[line], sm[order], np.array([residual[i] for i in src_line])[order])
            out[line] += shift
        for i, r in residual.items():
            out[i] = log_ratio[i] + r  # exactly the measurement
        return out
