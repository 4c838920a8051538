"""Statistics of a 50 Hz power waveform in a steady training phase, the same for a recording and a simulation.

They say how realistic the simulated GPU's power signal is (docs/bench.md, "Simulator waveform calibration"):
- `cv`: coefficient of variation of the samples (modulation depth plus noise);
- `peak_ratio`: spectral purity: the periodogram's peak at the iteration frequency over its median bin;
- `lag1`: lag-1 autocorrelation of the linearly detrended samples;
- `drift`: the linear trend over the whole steady window, in percent of the mean per minute;
- `wander`: std of means over ~1 s blocks of whole iterations, detrended, relative to the mean (slow power changes
  that are neither the iteration's shape nor the trend);
- `noise`: std of the samples minus the mean iteration profile (the samples folded on the true iteration ends
  into `PROFILE_BINS` phase bins), relative to the mean.
cv, peak_ratio and lag1 are medians over `SEGMENT` sample segments overlapping by half (so they do not depend on
the window's length). Samples are taken in order at their mean interval (NVML's timestamps jitter by +-10 ms around
20 ms without losing samples). Pure functions over arrays; `simulate_phase` and `recorded_phase` produce the arrays.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import numpy.typing as npt

from gpoeo_rt.device.clock import SimClock
from gpoeo_rt.device.simulated import SimConfig, SimulatedGPU
from gpoeo_rt.device.workload import AnalyticWorkload, SweepWorkload, Workload, preset_workload
from gpoeo_rt.tracefile import read_buffered_power, read_iterations

FloatArray = npt.NDArray[np.float64]

SEGMENT = 512  # samples per spectral segment (10.24 s at 50 Hz)
PEAK_BAND = 0.02  # the peak is searched within +-2% of the iteration frequency (at least +-1.5 bins)
PROFILE_BINS = 20  # phase bins of the mean iteration profile
WANDER_BLOCK_S = 1.0  # blocks of whole iterations of about this length
WARMUP_S = 2.0  # dropped after a phase's first iteration end (cuDNN autotuning, allocator growth)
MIN_SAMPLES = 256


@dataclass(frozen=True)
class WaveformStats:
    n_samples: int
    mean_w: float
    cv: float
    peak_ratio: float
    lag1: float
    drift: float  # % of the mean per minute
    wander: float
    noise: float

    def to_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items()}


def _segments(n: int, length: int = SEGMENT) -> list[slice]:
    """Segments of `length` samples overlapping by half, covering [0, n) (one shorter segment if n < length)."""
    if n <= length:
        return [slice(0, n)]
    step = length // 2
    starts = range(0, n - length + 1, step)
    return [slice(s, s + length) for s in starts]


def _detrend(x: FloatArray) -> FloatArray:
    i = np.arange(len(x), dtype=np.float64)
    slope, intercept = np.polyfit(i, x, 1)
    return np.asarray(x - (slope * i + intercept), dtype=np.float64)


def folded_frequency(freq_hz: float, fs_hz: float) -> float:
    """Where a frequency appears in a spectrum sampled at fs_hz (aliased into [0, fs/2])."""
    f = math.fmod(freq_hz, fs_hz)
    return min(f, fs_hz - f)


def coefficient_of_variation(p: FloatArray) -> float:
    return float(np.std(p) / np.mean(p))


def lag1_autocorrelation(p: FloatArray) -> float:
    x = _detrend(p)
    return float(np.dot(x[:-1], x[1:]) / np.dot(x, x))


def spectral_peak_ratio(p: FloatArray, dt_s: float, period_s: float) -> float:
    """Hann-windowed periodogram of the detrended samples: its largest bin within PEAK_BAND of the (folded)
    iteration frequency over the median of all bins but DC."""
    x = _detrend(p) * np.hanning(len(p))
    power = np.abs(np.fft.rfft(x)) ** 2
    freqs = np.fft.rfftfreq(len(p), dt_s)
    f0 = folded_frequency(1.0 / period_s, 1.0 / dt_s)
    half_band = max(PEAK_BAND * f0, 1.5 * freqs[1])
    band = np.abs(freqs - f0) <= half_band
    return float(power[band].max() / np.median(power[1:]))


def drift_pct_per_min(p: FloatArray, dt_s: float) -> float:
    t = np.arange(len(p)) * dt_s
    slope = np.polyfit(t, p, 1)[0]
    return float(slope / np.mean(p) * 60.0 * 100.0)


def wander(p: FloatArray, dt_s: float, period_s: float) -> float:
    """Std of the detrended means of consecutive blocks of whole iterations (about WANDER_BLOCK_S long), relative
    to the mean: the slow changes left after the iteration's own shape averages out."""
    iterations = max(1, round(WANDER_BLOCK_S / period_s))
    block = max(1, round(iterations * period_s / dt_s))
    n_blocks = len(p) // block
    if n_blocks < 3:
        return math.nan
    means = p[: n_blocks * block].reshape(n_blocks, block).mean(axis=1)
    return float(np.std(_detrend(means)) / np.mean(p))


def residual_noise(t: FloatArray, p: FloatArray, iteration_ends: FloatArray) -> float:
    """Std of the samples minus the mean iteration profile, relative to the mean. Each sample is placed at its
    phase within the (true) iteration it falls in; samples outside the iterations are left out."""
    ends = np.sort(iteration_ends)
    j = np.searchsorted(ends, t)
    inside = (j > 0) & (j < len(ends))
    t, p, j = t[inside], p[inside], j[inside]
    u = (t - ends[j - 1]) / (ends[j] - ends[j - 1])
    b = np.minimum((u * PROFILE_BINS).astype(np.int64), PROFILE_BINS - 1)
    counts = np.bincount(b, minlength=PROFILE_BINS)
    profile = np.bincount(b, p, minlength=PROFILE_BINS) / np.maximum(counts, 1)
    return float(np.std(p - profile[b]) / np.mean(p))


def waveform_stats(t: FloatArray, p: FloatArray, iteration_ends: FloatArray, period_s: float) -> WaveformStats:
    """All statistics of one steady window: samples (t, p) in order, the true iteration ends, the true period."""
    t, p = np.asarray(t, dtype=np.float64), np.asarray(p, dtype=np.float64)
    if len(p) < MIN_SAMPLES:
        raise ValueError(f"waveform statistics need >= {MIN_SAMPLES} samples, got {len(p)}")
    dt = float(t[-1] - t[0]) / (len(t) - 1)
    segs = [p[s] for s in _segments(len(p))]
    return WaveformStats(
        n_samples=len(p),
        mean_w=float(np.mean(p)),
        cv=float(np.median([coefficient_of_variation(x) for x in segs])),
        peak_ratio=float(np.median([spectral_peak_ratio(x, dt, period_s) for x in segs])),
        lag1=float(np.median([lag1_autocorrelation(x) for x in segs])),
        drift=drift_pct_per_min(p, dt),
        wander=wander(p, dt, period_s),
        noise=residual_noise(t, p, np.asarray(iteration_ends, dtype=np.float64)),
    )


# --- the arrays: a recorded phase, a simulated one ---


@dataclass(frozen=True)
class PhaseSamples:
    t_s: FloatArray
    power_w: FloatArray
    iteration_ends: FloatArray
    period_s: float  # median iteration time

    def stats(self) -> WaveformStats:
        return waveform_stats(self.t_s, self.power_w, self.iteration_ends, self.period_s)


def recorded_phase(folder: str | Path, phase: int, warmup_s: float = WARMUP_S) -> PhaseSamples:
    """A recorded phase's buffered power from warmup_s after its first iteration end to its last one (or the end
    of the samples)."""
    folder = Path(folder)
    power, iterations = read_buffered_power(folder), read_iterations(folder)
    if power is None or iterations is None:
        raise ValueError(f"{folder}: waveform statistics need nvml_buffered.csv and iterations.csv")
    ends = np.sort(iterations.t_s[iterations.phase == phase])
    if len(ends) < 2:
        raise ValueError(f"{folder}: phase {phase} has fewer than two iterations")
    keep = (power.t_s >= ends[0] + warmup_s) & (power.t_s <= ends[-1]) & np.isfinite(power.power_w)
    return PhaseSamples(power.t_s[keep], power.power_w[keep], ends, float(np.median(np.diff(ends))))


def simulate_phase(
    workload: Workload,
    duration_s: float,
    *,
    config: SimConfig | None = None,
    seed: int = 0,
    warmup_s: float = WARMUP_S,
) -> PhaseSamples:
    """A simulated GPU running the workload at default clocks on a SimClock: its buffered power samples from
    warmup_s to warmup_s + duration_s, read through the device interface as the sampler would (every second)."""
    clock = SimClock()
    gpu = SimulatedGPU(workload, clock=clock, config=config, seed=seed)
    t0 = clock.now_s()
    t_parts, p_parts = [], []
    last = t0
    while clock.now_s() < t0 + warmup_s + duration_s:
        clock.advance(1.0)
        samples = gpu.power_samples_since(last)
        last = clock.now_s()
        t_parts.append(samples.t_s)
        p_parts.append(samples.power_w)
    t, p = np.concatenate(t_parts), np.concatenate(p_parts)
    t, idx = np.unique(t, return_index=True)
    p = p[idx]
    ends = gpu.truth.iterations().t_s
    keep = (t >= t0 + warmup_s) & (t <= t0 + warmup_s + duration_s)
    return PhaseSamples(t[keep], p[keep], ends, float(np.median(np.diff(ends))))


def summarize(rows: Sequence[WaveformStats]) -> dict[str, float]:
    """Medians of each statistic over several windows (e.g. seeds)."""
    return {k: float(np.median([r.to_dict()[k] for r in rows])) for k in WaveformStats.__dataclass_fields__}


# --- the calibration: which simulated job imitates which recorded phase, and how close it must be ---


@dataclass(frozen=True)
class Tolerance:
    kind: str  # "rel": |sim / rec - 1| <= size; "factor": rec / size <= sim <= rec * size; "abs": |sim - rec| <= size
    size: float

    def interval(self, low: float, high: float) -> tuple[float, float]:
        """Accepted simulated values for recorded values spanning [low, high]."""
        if self.kind == "rel":
            return low * (1 - self.size), high * (1 + self.size)
        if self.kind == "factor":
            return low / self.size, high * self.size
        return low - self.size, high + self.size


# A simulated statistic passes when it lies within its tolerance of the span of the recordings of that job (two
# recordings of the same job differ by this much too: lag-1 of gpt_64 is -0.07 in one and -0.30 in the other).
TOLERANCES: dict[str, Tolerance] = {
    "cv": Tolerance("rel", 0.20),
    "peak_ratio": Tolerance("factor", 2.0),
    "lag1": Tolerance("abs", 0.10),
    "drift": Tolerance("abs", 1.5),  # %/min
    "wander": Tolerance("factor", 2.0),
    "noise": Tolerance("rel", 0.25),
}
STAT_NAMES: tuple[str, ...] = tuple(TOLERANCES)


@dataclass(frozen=True)
class CalibrationCase:
    """A recorded steady phase and the simulated job that imitates it (a preset at the phase's period, or a
    sweep-driven job with the sweep workloads' default waveform). role: "tuned" (defaults were fitted to it) or
    "held-out" (its parameters follow from the tuned ones by a stated rule, never fitted to it)."""

    name: str
    folder: str  # trace folder under each recording root
    phase: int
    job: str  # a preset name, or "sweep"
    role: str


CASES: tuple[CalibrationCase, ...] = (
    CalibrationCase("resnet_512", "resnet_512", 0, "resnet50", "tuned"),
    CalibrationCase("gpt_64", "gpt_64", 0, "gpt", "tuned"),
    CalibrationCase("resnet_512 (sweep)", "resnet_512", 0, "sweep", "tuned"),
    CalibrationCase("resnet_128_20", "resnet_128_20", 0, "resnet50_hoststall", "tuned"),
    CalibrationCase("gpt_16", "gpt_16-mlp_65536", 0, "gpt", "held-out"),
    CalibrationCase("mlp_65536", "gpt_16-mlp_65536", 1, "membound_fast", "held-out"),
    CalibrationCase("gpt_64 (sweep)", "gpt_64", 0, "sweep", "held-out"),
)
RECORDING_ROOTS: tuple[str, ...] = ("h200", "h200-live")  # under data/traces: two recordings of each job


def simulated_job(job: str, period_s: float, mean_w: float) -> Workload:
    """The simulated job of a case, running at the recorded period (and, for a sweep-driven job, mean power)."""
    if job == "sweep":
        row = {"sku": "h200", "workload": "calibration", "sm_clock_mhz": 1980, "mem_clock_mhz": 3201}
        row |= {"time_s": period_s, "power_w": mean_w, "ref": True}
        return SweepWorkload.from_rows([row])
    workload = preset_workload(job)
    if not isinstance(workload, AnalyticWorkload):
        raise ValueError(f"preset {job!r} has no iterations")
    return replace(workload, iteration_s=period_s)


@dataclass(frozen=True)
class CaseResult:
    case: CalibrationCase
    recorded: dict[str, WaveformStats]  # by recording root
    simulated: dict[str, float]  # medians over seeds

    def passes(self, stat: str) -> bool:
        values = [getattr(r, stat) for r in self.recorded.values()]
        lo, hi = TOLERANCES[stat].interval(min(values), max(values))
        return lo <= self.simulated[stat] <= hi

    @property
    def misses(self) -> list[str]:
        return [s for s in STAT_NAMES if not self.passes(s)]


def calibration_case(
    case: CalibrationCase,
    traces_dir: str | Path,
    *,
    seeds: int = 3,
    duration_s: float = 36.0,
    config: SimConfig | None = None,
) -> CaseResult:
    """Statistics of every recording of the case's phase under traces_dir, and of its simulated job (default
    SimConfig) at the first recording's period and mean power, median over seeds."""
    recorded = {
        root: recorded_phase(Path(traces_dir) / root / case.folder, case.phase).stats()
        for root in RECORDING_ROOTS
        if (Path(traces_dir) / root / case.folder).is_dir()
    }
    if not recorded:
        raise ValueError(f"{traces_dir}: no recording of {case.folder} under {', '.join(RECORDING_ROOTS)}")
    first = recorded_phase(Path(traces_dir) / next(iter(recorded)) / case.folder, case.phase)
    job = simulated_job(case.job, first.period_s, float(np.mean(first.power_w)))
    runs = [simulate_phase(job, duration_s, config=config, seed=s).stats() for s in range(seeds)]
    return CaseResult(case, recorded, summarize(runs))
