"""Jittery training jobs made from recorded steady H200 traces, with known ground truth.

Real jobs stall: a data loader or the host makes each iteration wait a variable time with the GPU nearly idle.
Recordings of such jobs cover a few periods and stalls (data/traces/*-jitter*); more are cut and re-joined from a
recorded steady phase: each synthetic iteration is a host stall (power decaying toward the idle level, as the
recorded 20 ms host-stall job shows) followed by one recorded iteration's samples, time-scaled so the job has the
wanted mean iteration time; they start from the stall's level and rise to the recording's over ~20 ms, as recorded
stalls end (without that rise, +-8% jobs were far harder to time than the real ones they imitate: docs/jitter.md,
session 16). Iteration times spread +-jitter x period around it: uniformly, or heavy-tailed (Pareto stalls, mostly
short, now and then several periods long). The result is written as a trace folder (`nvml_buffered.csv` at 50 Hz,
`nvml_polled.csv` with the 10 Hz energy counter, instantaneous power and the recorded GPM counters, `iterations.csv`
with each iteration's stall and compute time beside its end), which `ReplayGPU`, `gpoeo-rt trace detect` and the
benchmarks read like any recording. It is a construct, and is reported as one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from gpoeo_rt.sampling.recorder import POLLED_BASE_COLUMNS
from gpoeo_rt.tracefile import read_polled, read_trace

FloatArray = npt.NDArray[np.float64]

TAILS = ("uniform", "heavy")
_PARETO_ALPHA = 2.5  # heavy tail: finite variance, stalls up to ~10x their mean now and then
_GPM_PREFIX = "gpm_"


@dataclass(frozen=True)
class JitterSpec:
    """One synthetic job: `source`'s phase `phase` re-timed to iterations of mean `period_s`."""

    source: Path
    phase: int
    period_s: float
    jitter: float  # iteration times spread +-jitter x period_s (uniform), or stalls of mean jitter x period_s
    tail: str = "uniform"
    duration_s: float = 80.0
    seed: int = 0
    lead_s: float = 1.0  # idle before the first iteration
    idle_w: float = 120.0  # what an H200 draws between kernels for long (all recordings: ~118 W)
    stall_tau_s: float = 0.015  # power decays toward idle_w with this time constant during a stall
    rise_delay_s: float = 0.005  # after a stall the power stays at its stall level this long...
    rise_tau_s: float = 0.012  # ...then rises to the compute waveform with this time constant (0: at once)
    sample_s: float = 0.02  # buffered power samples (NVML on an H200: 50 Hz)
    poll_s: float = 0.02
    refresh_s: float = 0.1  # polled power and the energy counter refresh at 10 Hz

    def __post_init__(self) -> None:
        if self.tail not in TAILS:
            raise ValueError(f"tail must be one of {TAILS}, got {self.tail!r}")
        if not 0.0 <= self.jitter < 1.0:
            raise ValueError(f"jitter must be in [0, 1), got {self.jitter}")
        if self.period_s <= 0:
            raise ValueError(f"period_s must be positive, got {self.period_s}")

    @property
    def name(self) -> str:
        return (
            f"{self.source.parent.name}-{self.source.name}-p{self.phase}-{self.period_s * 1e3:.0f}ms-"
            f"{self.tail}{self.jitter * 100:.0f}-s{self.seed}"
        )


def stall_times(spec: JitterSpec, n: int, rng: np.random.Generator) -> FloatArray:
    """Host stalls of n iterations (s), of mean jitter x period."""
    scale = spec.jitter * spec.period_s
    if spec.tail == "uniform":
        return np.asarray(scale * rng.uniform(0.0, 2.0, n), dtype=np.float64)
    xm = (_PARETO_ALPHA - 1.0) / _PARETO_ALPHA  # mean 1
    x = xm * (1.0 - rng.uniform(0.0, 1.0, n)) ** (-1.0 / _PARETO_ALPHA)
    return np.asarray(scale * np.minimum(x, 12.0), dtype=np.float64)


def make_jittered_trace(spec: JitterSpec, out: str | Path) -> FloatArray:
    """Write the synthetic job's trace folder at `out`; returns its iteration end times."""
    src = read_trace(spec.source)
    if src.power.source != "buffered" or src.iterations is None:
        raise ValueError(f"{spec.source}: needs buffered power samples and iterations.csv")
    order = np.argsort(src.power.t_s)
    st, sp = src.power.t_s[order], src.power.power_w[order]
    ends = np.sort(src.iterations.t_s[src.iterations.phase == spec.phase])
    ends = ends[ends >= ends[0] + 1.0]  # past the phase's first second (warm-up)
    ends = ends[ends <= st[-1]]
    if len(ends) < 10:
        raise ValueError(f"{spec.source} phase {spec.phase}: fewer than 10 recorded iterations")
    durations = np.diff(ends)
    rng = np.random.default_rng([spec.seed, round(spec.period_s * 1e6), round(spec.jitter * 1e3)])
    compute_s = spec.period_s * (1.0 - spec.jitter)  # the mean stall is jitter x period
    scale = compute_s / float(np.median(durations))
    n = math.ceil(spec.duration_s / (spec.period_s * (1.0 - spec.jitter))) + 2
    stalls = stall_times(spec, n, rng)
    which = (int(rng.integers(len(durations))) + np.arange(n)) % len(durations)
    compute = durations[which] * scale
    # Iteration i: a stall [begin_i, begin_i + stall_i), then compute until end_i.
    end = spec.lead_s + np.cumsum(stalls + compute)
    begin = end - compute - stalls
    comp_start = end - compute
    keep = end <= spec.duration_s
    t_fine = np.arange(0.0, spec.duration_s, 0.001)
    power = _power_at(t_fine, begin, comp_start, end, ends[which], scale, st, sp, spec)
    _write(spec, Path(out), t_fine, power, (end[keep], stalls[keep], compute[keep]), rng)
    return np.asarray(end[keep], dtype=np.float64)


def _power_at(
    t: FloatArray,
    begin: FloatArray,
    comp_start: FloatArray,
    end: FloatArray,
    src_end: FloatArray,
    scale: float,
    st: FloatArray,
    sp: FloatArray,
    spec: JitterSpec,
) -> FloatArray:
    """Instantaneous power: recorded samples inside compute stretches, an exponential decay toward idle in stalls."""
    i = np.searchsorted(end, t, side="right")  # the iteration t falls in (len(end): after the last)
    out = np.full(len(t), spec.idle_w)
    inside = (i < len(end)) & (t >= begin[np.minimum(i, len(end) - 1)])
    k = np.minimum(i, len(end) - 1)
    computing = inside & (t >= comp_start[k])
    src_t = src_end[k] - (end[k] - t) / scale
    out[computing] = np.interp(src_t[computing], st, sp)
    stalling = inside & ~computing
    # Power at the stall's start: the end of the previous iteration (idle before the first one).
    prev_end_w = np.interp(src_end, st, sp)
    start_w = np.concatenate(([spec.idle_w], prev_end_w[:-1]))
    out[stalling] = _stall_w(start_w[k], t - begin[k], spec)[stalling]
    if spec.rise_tau_s > 0:
        # The compute waveform starts from the stall's last level and rises to it (recorded stalls rise so:
        # docs/jitter.md, session 16), not at once: a first-order blend, so never outside the two. As much as
        # the stall took the GPU toward idle: without a stall the recording's own iteration boundary stands.
        stall_s = comp_start - begin
        last_w = _stall_w(start_w, stall_s, spec)[k]
        idled = (1.0 - np.exp(-stall_s / spec.stall_tau_s))[k]
        held = idled * np.exp(-np.maximum(t - comp_start[k] - spec.rise_delay_s, 0.0) / spec.rise_tau_s)
        out[computing] = (held * last_w + (1.0 - held) * out)[computing]
    return out


def _stall_w(start_w: FloatArray, since_s: FloatArray, spec: JitterSpec) -> FloatArray:
    """Power `since_s` into a stall that began at `start_w`: an exponential decay toward idle_w."""
    return np.asarray(spec.idle_w + (start_w - spec.idle_w) * np.exp(-since_s / spec.stall_tau_s), dtype=np.float64)


def _write(
    spec: JitterSpec,
    out: Path,
    t_fine: FloatArray,
    power: FloatArray,
    truth: tuple[FloatArray, FloatArray, FloatArray],
    rng: np.random.Generator,
) -> None:
    """The trace folder; `truth` is each iteration's end time, stall and compute (s), all in iterations.csv."""
    ends, stalls, compute = truth
    out.mkdir(parents=True, exist_ok=True)
    t0 = 1000.0  # a monotonic-clock time base, as the polled10ms recordings have
    ts = np.arange(0.0, spec.duration_s - 0.002, spec.sample_s) + rng.uniform(-0.001, 0.001)
    ts = ts[ts >= 0]
    ps = np.interp(ts, t_fine, power) + rng.normal(0.0, 2.0, len(ts))  # NVML's sample noise: a few W
    with (out / "nvml_buffered.csv").open("w") as fh:
        fh.write("signal,t_s,value\n")
        fh.writelines(f"power_mw,{t0 + a:.6f},{b * 1e3:.0f}\n" for a, b in zip(ts, ps, strict=True))
    # Polls: the counters and instantaneous power refresh every refresh_s; GPM from the source's phase, in order.
    tp = np.arange(0.0, spec.duration_s - 0.002, spec.poll_s)
    refreshed = np.floor(tp / spec.refresh_s) * spec.refresh_s
    energy_j = np.concatenate(([0.0], np.cumsum(power[:-1]) * 0.001))
    e_at = 5.0e4 + np.interp(refreshed, t_fine, energy_j)
    p_inst = np.interp(refreshed, t_fine, power)
    src = read_polled(spec.source, ())
    names = [c for c in _header(spec.source) if c.startswith(_GPM_PREFIX)]
    gpm = read_polled(spec.source, tuple(names))
    src_it = read_trace(spec.source).iterations
    assert src_it is not None
    span = src_it.t_s[src_it.phase == spec.phase]
    rows = np.flatnonzero((src["t_s"] >= span.min() + 1.0) & (src["t_s"] <= span.max()))
    busy = tp >= spec.lead_s
    with (out / "nvml_polled.csv").open("w") as fh:
        fh.write(",".join([*POLLED_BASE_COLUMNS, *names]) + "\n")
        for j, a in enumerate(tp):
            r = rows[j % len(rows)]
            cells = [gpm[c][r] if busy[j] else 0.0 for c in names]
            fh.write(
                f"{t0 + a:.6f},{p_inst[j] * 1e3:.0f},{p_inst[j] * 1e3:.0f},{p_inst[j] * 1e3:.0f},{e_at[j] * 1e3:.0f},"
                f"{100 if busy[j] else 0},{50 if busy[j] else 0},1980,3201,20,"
                + ",".join("nan" if not math.isfinite(v) else f"{v:.3f}" for v in cells)
                + "\n"
            )
    with (out / "iterations.csv").open("w") as fh:
        fh.write("t_s,phase,iteration,stall_s,compute_s\n")
        fh.writelines(
            f"{t0 + e:.6f},0,{i + 1},{s:.6f},{c:.6f}\n"
            for i, (e, s, c) in enumerate(zip(ends, stalls, compute, strict=True))
        )


def _header(folder: Path) -> list[str]:
    with (folder / "nvml_polled.csv").open() as fh:
        return [h.strip() for h in fh.readline().split(",")]
