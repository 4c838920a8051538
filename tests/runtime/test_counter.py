"""The energy counter's interval means against the power samples' (detection/counter.py): a jittery job and its
steady twin give identical 50 Hz samples, and only the counter tells them apart."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpoeo_rt.detection import counter_check
from gpoeo_rt.tracefile import read_trace
from tests.runtime.synth import power_at, sample, wandering_fast_jobs

TRACES = Path(__file__).resolve().parents[2] / "data/traces"
SAMPLE_S = 0.02
FINE_S = 2e-4


def _waveform(u: np.ndarray, shape: str) -> np.ndarray:
    """One iteration's power over its phase u in [0, 1): a compute burst and a stall, or a smooth swing."""
    if shape == "burst":
        return np.where(u < 0.55, 600 + 80 * np.sin(2 * np.pi * u / 0.55 * 3), 200 + 400 * np.exp(-(u - 0.55) / 0.05))
    return 420 + 180 * np.cos(2 * np.pi * u) + 60 * np.cos(4 * np.pi * u + 1)


def _job_and_twin(
    period_s: float, jitter: float, shape: str, seed: int, seconds: float = 12.5
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Samples of a jittery job w(phi(t)) at 50 Hz, and the energy counter (10 Hz reads) of the job and of its twin
    w(1 - psi(t) mod 1) with psi = t / 20 ms - phi: a steady job of ~21-30 ms whose samples are the job's
    (docs/jitter.md, session 13)."""
    rng = np.random.default_rng(seed)
    lengths = period_s * (1.0 - jitter + 2.0 * jitter * rng.random(int(seconds / period_s * 1.6)))
    ends = np.cumsum(lengths)
    tf = np.arange(0.0, seconds, FINE_S)
    k = np.searchsorted(ends, tf, side="right")
    phi = k + (tf - np.concatenate(([0.0], ends[:-1]))[k]) / lengths[k]
    job = _waveform(phi % 1.0, shape)
    twin = _waveform(1.0 - (tf / SAMPLE_S - phi) % 1.0, shape)
    ts = np.arange(1, int(seconds / SAMPLE_S) - 1) * SAMPLE_S
    at = np.round(ts / FINE_S).astype(int)
    np.testing.assert_allclose(job[at], twin[at], atol=1e-6)  # the two jobs' samples are the same
    samples = job[at] + rng.normal(0.0, 2.0, len(ts))
    te = np.arange(0.05 + rng.uniform(0.0, 0.1), seconds - 0.05, 0.1)
    read = np.round(te / FINE_S).astype(int)
    return ts, samples, te, (np.cumsum(job) * FINE_S)[read], (np.cumsum(twin) * FINE_S)[read]


@pytest.mark.parametrize("shape", ["burst", "smooth"])
@pytest.mark.parametrize("jitter", [0.1, 0.5])
@pytest.mark.parametrize("period_s", [0.18, 0.35])
def test_the_counter_confirms_a_jittery_job_and_not_its_twin_with_the_same_samples(
    period_s: float, jitter: float, shape: str
) -> None:
    ts, samples, te, e_job, e_twin = _job_and_twin(period_s, jitter, shape, seed=1)
    inside = (ts >= 3.0) & (ts < 9.0)
    reads = (te >= 3.0) & (te < 9.0)
    job = counter_check(ts[inside], samples[inside], te[reads], e_job[reads])
    twin = counter_check(ts[inside], samples[inside], te[reads], e_twin[reads])
    assert job is not None and job.confirms(), job
    assert twin is not None and not twin.confirms(), twin
    assert job.swing == pytest.approx(twin.swing, rel=0.05)  # the samples vary alike (the lags may differ)


def test_a_read_off_the_grid_where_windows_were_joined_is_left_out() -> None:
    """Two windows joined into one keep the first's last read, off the reads' grid (at 6.0 s between reads at 5.95
    and 6.05 s): it splits one interval in two short ones that the lag search cannot place. Left out, the joined
    windows give the check that one window over both gives."""
    ts, samples, te, e_job, _ = _job_and_twin(0.18, 0.3, "burst", seed=3)
    inside, reads = (ts >= 3.0) & (ts < 9.0), (te >= 3.0) & (te < 9.0)
    one = counter_check(ts[inside], samples[inside], te[reads], e_job[reads])
    at = int(np.searchsorted(te[reads], 6.0))
    mid = 0.5 * (te[reads][at - 1] + te[reads][at])  # a read halfway between two on the grid
    e_mid = float(np.interp(mid, te[reads], e_job[reads]))
    joined_te = np.insert(te[reads], at, mid)
    joined_e = np.insert(e_job[reads], at, e_mid)
    joined = counter_check(ts[inside], samples[inside], joined_te, joined_e)
    assert one is not None and joined is not None
    assert (joined.correlation, joined.real_share, joined.intervals) == (one.correlation, one.real_share, one.intervals)


def test_no_twin_is_confirmed_from_50_to_500_ms() -> None:
    """Twins of jobs of 50-500 ms, +-10-50%, two waveforms, 6 s windows: the counter's means follow the samples' at
    a fraction of their size (share of the variation at most ~0.4), where a real job's hold all of it."""
    shares = []
    for period_s in (0.05, 0.07, 0.1, 0.13, 0.18, 0.25, 0.35, 0.5):
        for jitter in (0.1, 0.3, 0.5):
            for shape in ("burst", "smooth"):
                ts, samples, te, _, e_twin = _job_and_twin(period_s, jitter, shape, seed=2)
                for start in (0.0, 6.0):
                    inside, reads = (ts >= start) & (ts < start + 6.0), (te >= start) & (te < start + 6.0)
                    check = counter_check(ts[inside], samples[inside], te[reads], e_twin[reads])
                    assert check is not None
                    assert not check.confirms(), (period_s, jitter, shape, start, check)
                    if check.swing >= 0.05:  # (where the samples barely vary, the share is noise's)
                        shares.append(check.real_share)
    assert len(shares) > 50 and max(shares) < 0.5


def test_the_aliases_of_wandering_fast_jobs_are_not_confirmed() -> None:
    """test_period.py's 100 wandering 22-40 ms jobs (their 50 Hz aliases vary like jittery jobs' cycles; with drift
    up to 120 W, which the counter does show and the check leaves out as the detector does): none is confirmed."""
    checks = []
    for job in wandering_fast_jobs(12.0):
        t, p = sample(job)
        fine = job.t0_s + np.arange(0.0, 12.0, 1e-4)
        energy = np.cumsum(power_at(job, fine)) * 1e-4
        reads = job.t0_s + np.arange(0.05, 11.95, 0.1)
        checks.append(counter_check(t, p, reads, np.interp(reads, fine, energy)))
    assert sum(c is not None and c.swing >= 0.05 for c in checks) >= 20  # the samples do vary
    assert not any(c is not None and c.confirms() for c in checks)


def _windows(folder: Path, seconds: float = 6.0) -> list[tuple[np.ndarray, ...]]:
    """6 s windows of a recording's phase 0, with its energy counter read every 100 ms (as profiling reads it)."""
    trace = read_trace(folder)
    assert trace.energy is not None and trace.iterations is not None
    t, p = trace.power.t_s, trace.power.power_w
    te, ej = trace.energy.t_s, trace.energy.energy_j
    keep = np.searchsorted(te, np.arange(te[0], te[-1], 0.1))
    te, ej = te[keep], ej[keep]
    ends = trace.iterations.t_s[trace.iterations.phase == 0]
    out = []
    for a in np.arange(ends[0] + 1.0, ends[-1] - seconds, 3.0):
        m, r = (t >= a) & (t < a + seconds), (te >= a) & (te < a + seconds)
        out.append((t[m], p[m], te[r], ej[r]))
    return out


@pytest.mark.parametrize("job", ["h100-jitter-12/resnet_384_p100", "h200-jitter/resnet_512_0-104"])
def test_recorded_jobs_with_host_stalls_are_confirmed(job: str) -> None:
    checks = [counter_check(*w) for w in _windows(TRACES / job)]
    told = [c for c in checks if c is not None]  # (a recording's polls have gaps: fewer than 20 intervals there)
    assert len(told) >= 0.8 * len(checks) and all(c.confirms() for c in told), checks


@pytest.mark.parametrize("job", ["h200-live/mlp_65536", "h200-live/resnet_512"])
def test_recorded_aliases_and_steady_jobs_are_not(job: str) -> None:
    """The 9.8 ms MLP's samples alias onto slow patterns; a steady ResNet's barely vary: neither is confirmed."""
    checks = [counter_check(*w) for w in _windows(TRACES / job)]
    assert checks and not any(c is not None and c.confirms() for c in checks), checks


def test_reads_on_the_counters_refresh_are_left_out() -> None:
    """Reads that sit on the 10 Hz refresh see either side of it: a read that got the refresh before repeats the
    last value. Repeats are no interval, the interval before one is not trusted, and the job is still confirmed."""
    rng = np.random.default_rng(3)
    lengths = 0.25 * (0.7 + 0.6 * rng.random(80))
    ends = np.cumsum(lengths)
    tf = np.arange(0.0, 12.5, FINE_S)
    k = np.searchsorted(ends, tf, side="right")
    job = _waveform((k + (tf - np.concatenate(([0.0], ends[:-1]))[k]) / lengths[k]) % 1.0, "burst")
    ts = np.arange(50, 550) * SAMPLE_S
    samples = job[np.round(ts / FINE_S).astype(int)]
    te = np.arange(1.0, 11.0, 0.1)
    seen = te - np.where(np.arange(len(te)) % 5 == 2, 0.1, 0.0)  # every fifth read got the refresh before
    ej = (np.cumsum(job) * FINE_S)[np.round(seen / FINE_S).astype(int)]
    assert (np.diff(ej) == 0).sum() >= 15
    check = counter_check(ts, samples, te, ej)
    assert check is not None and check.confirms(), check


def test_unusable_input_gives_no_check() -> None:
    t = np.arange(0.0, 6.0, SAMPLE_S)
    p = 400.0 + 50.0 * np.sin(2 * np.pi * t / 0.3)
    te = np.arange(0.0, 6.0, 0.1)
    assert counter_check(t, p, te, te[:-1]) is None  # lengths differ
    assert counter_check(t, p, te[:10], 400.0 * te[:10]) is None  # too few intervals
    assert counter_check(t, np.full_like(t, 400.0), te, 400.0 * te) is None  # nothing varies
    assert counter_check(t, p, te, np.full_like(te, np.nan)) is None
