"""Seeded synthetic power traces of training jobs, for the detection tests only.

A job is a sequence of iterations whose durations jitter around the period (and may wander slowly); within each
iteration the power follows a waveform of the iteration's phase. The sampler reads the instantaneous power, as
NVML's buffered power samples do (which is what makes iterations shorter than two samples alias).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

SHAPES = ("pulse", "sharp_dip", "harmonic_rich", "sawtooth", "sine")
# Shapes whose sampled waveform keeps a real fundamental; harmonic_rich (gpt_64's measured harmonic mix) only
# where its six harmonics are below Nyquist (see test_period.py's test_harmonic_rich_near_nyquist_is_a_known_limit).
FUNDAMENTAL_SHAPES = ("pulse", "sharp_dip", "sawtooth", "sine")


def waveform(shape: str, phase: FloatArray, rng_phases: FloatArray | None = None, period_s: float = 1.0) -> FloatArray:
    """Power shape in [-1, 1]-ish as a function of the phase within an iteration (0..1)."""
    u = phase % 1.0
    if shape == "sine":
        return np.sin(2 * np.pi * u)
    if shape == "sawtooth":  # power ramps up through the step, then drops (e.g. a growing kernel mix)
        return 2.0 * u - 1.0
    if shape == "pulse":  # compute plateau, then a low stretch (data loading, host work): smooth edges
        edge = 0.04
        rise = 0.5 * (1 + np.tanh((u - 0.15) / edge))
        fall = 0.5 * (1 + np.tanh((0.75 - u) / edge))
        return 2.0 * rise * fall - 1.0
    if shape == "sharp_dip":  # mostly busy, with a short dip at the optimizer step / sync (like the transformer)
        # The dip lasts 3% of the iteration but never less than ~6 ms: on the H200 traces no sampled waveform is
        # dominated by content above Nyquist (the in-band fundamental carries 83% of gpt_16's 72 ms waveform,
        # whose dip is its sharpest feature), so power features shorter than that are not what NVML reports.
        width = max(0.03, 0.006 / period_s)
        return 1.0 - 2.0 * np.exp(-0.5 * (((u - 0.9 + 0.5) % 1.0 - 0.5) / width) ** 2)
    if shape == "harmonic_rich":
        # Six harmonics of similar size, as measured on the transformer trace (gpt_64: variance shares 0.26, 0.22,
        # 0.24, 0.10, 0.10, 0.08 for harmonics 1-6): with drift, the raw spectrum's top peak is not the period.
        phases = rng_phases if rng_phases is not None else np.linspace(0.3, 2.1, 6)
        amps = np.sqrt(np.array([0.26, 0.22, 0.24, 0.10, 0.10, 0.08]) / 0.26)
        out = np.zeros_like(u)
        for k in range(6):
            out += amps[k] * np.cos(2 * np.pi * (k + 1) * u + phases[k])
        return out / 2.5
    raise ValueError(f"unknown shape {shape!r}")


@dataclass(frozen=True)
class Job:
    period_s: float
    duration_s: float
    fs_hz: float = 50.0
    shape: str = "pulse"
    base_w: float = 450.0
    amplitude_w: float = 120.0  # half the peak-to-peak of the waveform
    noise_w: float = 0.0  # white measurement noise (std, W)
    drift_w: float = 0.0  # slow level drift over the trace: warm-up exponential plus a linear ramp (W)
    jitter: float = 0.003  # per-iteration relative std of the iteration time (real traces: 0.1-0.7%)
    wander: float = 0.0  # slow relative wander of the iteration rate (random walk, std over the trace)
    timestamp_jitter_s: float = 0.0  # irregular sample instants (NVML's stamps move by a few ms)
    t0_s: float = 1000.0
    seed: int = 0


def iteration_ends(job: Job) -> FloatArray:
    """End times of the iterations covering [t0, t0 + duration] (plus one on either side)."""
    rng = np.random.default_rng([job.seed, 1])
    n = int(job.duration_s / job.period_s * 1.2) + 8
    wander = np.cumsum(rng.normal(0.0, 1.0, n))
    wander = (wander - wander.mean()) / max(float(wander.std()), 1e-12) * job.wander if job.wander > 0 else 0.0
    durations = job.period_s * (1.0 + wander) * (1.0 + rng.normal(0.0, job.jitter, n))
    durations = np.maximum(durations, 0.2 * job.period_s)
    start = job.t0_s - job.period_s * rng.uniform(0.0, 1.0) - job.period_s
    return start + np.cumsum(durations)


def power_at(job: Job, t: FloatArray, ends: FloatArray | None = None) -> FloatArray:
    """Instantaneous power at times t (noise-free)."""
    ends = iteration_ends(job) if ends is None else ends
    k = np.clip(np.searchsorted(ends, t), 1, len(ends) - 1)
    phase = (t - ends[k - 1]) / (ends[k] - ends[k - 1])
    rng = np.random.default_rng([job.seed, 2])
    shape_phases = rng.uniform(0, 2 * np.pi, 6)
    p = job.base_w + job.amplitude_w * waveform(job.shape, phase, shape_phases, job.period_s)
    if job.drift_w:
        rel = (t - job.t0_s) / job.duration_s
        p = p + job.drift_w * (0.6 * (1.0 - np.exp(-rel / 0.3)) + 0.4 * rel)
    return p


def sample(job: Job) -> tuple[FloatArray, FloatArray]:
    """(t_s, power_w) as a 1/fs sampler reads them, with measurement noise and timestamp jitter."""
    rng = np.random.default_rng([job.seed, 3])
    n = round(job.duration_s * job.fs_hz)
    t = job.t0_s + np.arange(n) / job.fs_hz
    if job.timestamp_jitter_s:
        t = t + rng.uniform(-job.timestamp_jitter_s, job.timestamp_jitter_s, n)
        t.sort()
    p = power_at(job, t)
    if job.noise_w:
        p = p + rng.normal(0.0, job.noise_w, n)
    return t, p


def window_for(period_s: float) -> float:
    """The target's window: 10 periods or 10 s, whichever is longer."""
    return max(10.0 * period_s, 10.0)


def wandering_fast_jobs(duration_s: float, n: int = 100, seed: int = 3) -> Iterator[Job]:
    """Jobs of 22-40 ms iterations that wander 0.5-3% (seeded): at 50 Hz they alias onto 44-170 ms patterns whose
    cycles vary like a jittery job's (test_period.py's wandering-alias test, scripts/bench_alias_pairs.py)."""
    rng = np.random.default_rng(seed)
    for i in range(n):
        period = float(np.exp(rng.uniform(np.log(0.022), np.log(0.040))))
        yield Job(
            period_s=period,
            duration_s=duration_s,
            shape=str(rng.choice((*FUNDAMENTAL_SHAPES, "harmonic_rich"))),
            noise_w=float(rng.uniform(0, 36)),
            drift_w=float(rng.uniform(0, 120)),
            jitter=float(rng.uniform(0.001, 0.01)),
            wander=float(rng.choice([0.005, 0.01, 0.02, 0.03])),
            timestamp_jitter_s=float(rng.choice([0.0, 0.004])),
            seed=i,
        )
