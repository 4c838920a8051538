"""Period detection: real H200 traces, synthetic jobs (property-based), aliasing, bad input, cost."""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpoeo_rt.detection.period import (
    DetectorConfig,
    PeriodEstimate,
    Verdict,
    _detect_folded,
    average_power_from_energy,
    count_confirms,
    counted_period_near,
    detect_period,
    fold_r2,
    min_resolvable_period,
    prepare_signal,
    stall_share,
    window_for_periods,
)
from gpoeo_rt.tracefile import read_polled, read_trace
from tests.runtime.synth import FUNDAMENTAL_SHAPES, Job, iteration_ends, sample, wandering_fast_jobs, window_for

TRACES = Path(__file__).resolve().parents[2] / "data" / "traces" / "h200"
DT = 0.02  # 50 Hz, NVML's buffered power on the H200
T_LO = min_resolvable_period(DT)  # 44 ms: twice the sampling interval plus the 10% guard band


def _window(folder: str, phase: int, offset_s: float, length_s: float = 10.0) -> tuple[np.ndarray, np.ndarray, float]:
    """`length_s` of the folder's best power signal, `offset_s` after the phase's first iteration."""
    trace = read_trace(TRACES / folder)
    assert trace.iterations is not None
    truth = trace.iterations.phases()[phase]
    t, p = trace.power.t_s, trace.power.power_w
    start = truth.start_s + offset_s
    m = (t >= start) & (t < start + length_s)
    return t[m], p[m], truth.period_s


# --------------------------------------------------------------------------------------------------------------
# Real traces (the targets)


@pytest.mark.parametrize(
    ("folder", "phase", "true_ms"),
    [("resnet_512", 0, 104.2), ("resnet_128_20", 0, 50.2), ("gpt_64", 0, 256.8), ("gpt_16-mlp_65536", 0, 72.0)],
)
@pytest.mark.parametrize("offset_s", [0.5, 2.0])
def test_real_buffered_traces_within_2_percent_from_10_s(
    folder: str, phase: int, true_ms: float, offset_s: float
) -> None:
    """10 s windows from the start of training. (resnet_128_20's iterations turn irregular 12-25 s in: 50-56 ms
    from one step to the next; windows reaching into that stretch are rejected as inconsistent, see the bench.)"""
    t, p, truth = _window(folder, phase, offset_s)
    assert truth * 1e3 == pytest.approx(true_ms, abs=0.1)  # the README's ground truth
    est = detect_period(t, p)
    assert est.verdict is Verdict.OK, est.message
    assert est.period_s == pytest.approx(truth, rel=0.02)
    assert est.window_s <= 10.0 + 0.02  # n samples of 20 ms
    assert 0.3 < est.confidence <= 1.0


@pytest.mark.parametrize("offset_s", [0.5, 3.0, 6.0])
def test_real_9_8_ms_mlp_phase_is_not_resolvable(offset_s: float) -> None:
    """50 Hz samples of a 9.8 ms iteration show an ~83 ms pattern that wanders: never report it."""
    t, p, truth = _window("gpt_16-mlp_65536", 1, offset_s)
    assert truth < 0.01
    est = detect_period(t, p)
    assert est.period_s is None, est.message
    assert est.verdict in (Verdict.TOO_SHORT, Verdict.APERIODIC, Verdict.ALIAS_RISK)


POLLED = [
    "polled10ms-resnet_128",
    "polled10ms-gpt_16",
    "polled10ms-mlp_65536",
    "polled10ms-gcn",
    "polled10ms-resnet_64-gpt_8",
    "polled10ms-mlp_16384-resnet_256",
]


@pytest.mark.parametrize("folder", POLLED)
@pytest.mark.parametrize("length_s", [10.0, 20.0])
@pytest.mark.parametrize("with_energy", [True, False])
def test_polled_power_never_yields_an_alias(folder: str, length_s: float, with_energy: bool) -> None:
    """Polled power refreshes at 10 Hz: every true period here (3.6-72 ms) is under the 220 ms it resolves."""
    cols = read_polled(TRACES / folder, ("p_inst_mw", "energy_mj"))
    t, p, e = cols["t_s"], cols["p_inst_mw"] / 1e3, cols["energy_mj"] / 1e3
    for start in np.arange(t[0], t[-1] - length_s, 5.0):
        m = (t >= start) & (t < start + length_s)
        est = detect_period(t[m], p[m], energy_j=e[m] if with_energy else None)
        assert est.period_s is None, f"{folder} @ {start - t[0]:.0f} s: {est.message}"
        assert est.sample_interval_s == pytest.approx(0.1, rel=0.1)  # the refresh, not the 10 ms poll
        assert est.min_resolvable_s > 0.2


@pytest.mark.parametrize("folder", ["resnet_512", "gpt_64"])
def test_polled_power_of_buffered_folders_is_null_too(folder: str) -> None:
    """resnet_512's stable 104 ms iteration aliases to a clean ~2.5 s pattern in 10 Hz polled power."""
    cols = read_polled(TRACES / folder, ("p_inst_mw", "energy_mj"))
    t, p, e = cols["t_s"], cols["p_inst_mw"] / 1e3, cols["energy_mj"] / 1e3
    for start in np.arange(t[0] + 16.0, t[-1] - 20.0, 5.0):
        m = (t >= start) & (t < start + 20.0)
        assert detect_period(t[m], p[m], energy_j=e[m]).period_s is None
        assert detect_period(t[m], p[m]).period_s is None


def test_energy_counter_is_an_anti_aliasing_reference() -> None:
    """Its interval averages match the 50 Hz buffered power integrated over the same intervals."""
    trace = read_trace(TRACES / "resnet_512")
    assert trace.energy is not None
    ref = average_power_from_energy(trace.energy.t_s, trace.energy.energy_j)
    assert ref is not None
    assert ref.dt_s == pytest.approx(0.1, rel=0.05)
    t, p = trace.power.t_s, trace.power.power_w
    mids = ref.t_s[(ref.t_s > t[0] + 1) & (ref.t_s < t[-1] - 1)]
    cum = np.concatenate(([0.0], np.cumsum(0.5 * (p[1:] + p[:-1]) * np.diff(t))))
    a, b = mids - ref.dt_s / 2, mids + ref.dt_s / 2
    integrated = (np.interp(b, t, cum) - np.interp(a, t, cum)) / ref.dt_s
    avg = np.interp(mids, ref.t_s, ref.values)
    assert np.corrcoef(integrated, avg)[0, 1] > 0.98


# --------------------------------------------------------------------------------------------------------------
# Synthetic jobs: the 2% target across periods, noise, drift (property-based)


@st.composite
def jobs(draw: st.DrawFn) -> Job:
    period = math.exp(draw(st.floats(math.log(0.040), math.log(5.0))))
    shapes = FUNDAMENTAL_SHAPES + (("harmonic_rich",) if period >= 12 * DT else ())
    return Job(
        period_s=period,
        duration_s=window_for(period),
        shape=draw(st.sampled_from(shapes)),
        noise_w=draw(st.floats(0.0, 0.3)) * 120.0,  # up to 30% of the waveform's half-amplitude
        drift_w=draw(st.floats(0.0, 2.0)) * 120.0,  # warm-up drift up to twice the waveform's half-amplitude
        jitter=draw(st.floats(0.0, 0.005)),
        wander=draw(st.floats(0.0, 0.003)),
        timestamp_jitter_s=draw(st.sampled_from([0.0, 0.004])),
        seed=draw(st.integers(0, 2**16)),
    )


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(job=jobs())
def test_synthetic_periods_within_2_percent_or_null_only_at_the_nyquist_floor(job: Job) -> None:
    """Within 2% from max(10 periods, 10 s) of 50 Hz samples. The only null allowed: a true period in the guard
    band above Nyquist (40-44 ms) or within 5% of it (where the estimate may fall under the floor); everywhere
    else a null fails the test, and a wrong number always does."""
    t, p = sample(job)
    est = detect_period(t, p)
    if est.period_s is None:
        assert job.period_s < 1.05 * T_LO, f"{job}: {est.verdict}: {est.message}"
    else:
        assert est.period_s == pytest.approx(job.period_s, rel=0.02), f"{job}: {est.message}"


@pytest.mark.parametrize("period", [0.045, 0.05, 0.073, 0.1042, 0.2568, 0.6, 1.7, 5.0])
@pytest.mark.parametrize("shape", ["pulse", "sharp_dip", "sawtooth"])
def test_synthetic_grid_with_noise_and_drift(period: float, shape: str) -> None:
    job = Job(period_s=period, duration_s=window_for(period), shape=shape, noise_w=30, drift_w=200, wander=0.002)
    est = detect_period(*sample(job))
    assert est.period_s == pytest.approx(period, rel=0.02), est.message


def test_fundamental_not_a_harmonic_nor_the_drift() -> None:
    """gpt_64-like waveform (harmonics 1-3 of similar size) under a drift 2.5x the waveform's amplitude."""
    job = Job(period_s=0.2568, duration_s=10.0, shape="harmonic_rich", noise_w=20, drift_w=300, seed=3)
    est = detect_period(*sample(job))
    assert est.period_s == pytest.approx(0.2568, rel=0.01), est.message


def test_a_two_iteration_pattern_is_reported_as_the_iteration() -> None:
    """Every second iteration slightly different: the period is still one iteration."""
    job = Job(period_s=0.12, duration_s=10.0, shape="pulse", noise_w=5)
    t, p = sample(job)
    ends = iteration_ends(job)
    k = np.searchsorted(ends, t)
    p = p + np.where(k % 2 == 0, 8.0, 0.0)  # 8 W extra on even iterations
    est = detect_period(t, p)
    assert est.period_s == pytest.approx(0.12, rel=0.02), est.message


def test_harmonic_rich_300_ms_job_resolves_in_a_6_s_window() -> None:
    # 20 cycles of 15 samples, a waveform whose power sits in its 2nd-7th harmonics, noise of its own size: a
    # 1.2 s sub-window scores a variance fraction on 3 harmonics only, so its fold is compared with the whole
    # window's on those 3 (not all 7), and its period is located on every harmonic the waveform has. Before that
    # (fd7e418) 12 of these 20 windows were refused as inconsistent.
    resolved = 0
    for seed in range(20):
        rng = np.random.default_rng(seed)
        t = np.arange(0.0, 6.0, 0.02)
        phase = (t % 0.3) / 0.3
        shape = 200.0 * ((phase < 0.15) | ((phase > 0.5) & (phase < 0.55))) + 60.0 * (phase > 0.7)
        est = detect_period(t, 300.0 + shape + rng.normal(0.0, 90.0, len(t)), min_period_s=0.044)
        assert est.period_s is None or abs(est.period_s / 0.3 - 1.0) < 0.02, (seed, est.message)
        resolved += est.ok
    assert resolved >= 15


def test_a_fold_reports_the_spread_of_single_iterations() -> None:
    # 25 iterations of 300 ms: steady (0.3% per iteration) vs 6% per iteration. The sub-windows' periods tell
    # them apart, so two windows of the jittery job may differ by what chance allows (Controller._agreement).
    def spreads(jitter: float) -> list[float]:
        found = [detect_period(*sample(Job(0.3, 7.5, noise_w=10, jitter=jitter, seed=seed))) for seed in range(8)]
        return [e.spread for e in found if e.method == "fold"]

    steady, jittery = spreads(0.003), spreads(0.06)
    assert len(steady) == 8 and max(steady) < 0.01, steady
    assert len(jittery) >= 4 and 0.03 <= float(np.mean(jittery)) <= 0.09, jittery


def test_subsample_precision() -> None:
    """A period of 5.21 samples is found to far better than one sample (20 ms = 19%)."""
    job = Job(period_s=0.1042, duration_s=10.0, shape="pulse", noise_w=10, jitter=0.001)
    est = detect_period(*sample(job))
    assert est.period_s == pytest.approx(0.1042, rel=0.003)


# --------------------------------------------------------------------------------------------------------------
# Aliasing: periods under the floor


def test_fast_iterations_with_realistic_rate_wander_are_almost_never_reported() -> None:
    """Iterations of 4-20 ms alias at 50 Hz onto patterns whose period wanders 2.5-100x more than the iteration
    rate (the real 9.8 ms MLP: 0.55% between 2 s windows). With a 1% wander, at most 1 in 50 may slip through.
    (A perfectly stable iteration under 40 ms is indistinguishable from its alias in uniform samples: no test
    of the samples can reject it, so this is a rate, not a property.)"""
    rng = np.random.default_rng(7)
    reported = []
    for i in range(100):
        period = float(np.exp(rng.uniform(np.log(0.004), np.log(0.020))))
        job = Job(
            period_s=period,
            duration_s=10.0,
            shape=str(rng.choice((*FUNDAMENTAL_SHAPES, "harmonic_rich"))),
            noise_w=float(rng.uniform(0, 36)),
            drift_w=float(rng.uniform(0, 120)),
            wander=0.01,
            timestamp_jitter_s=float(rng.choice([0.0, 0.004])),
            seed=i,
        )
        est = detect_period(*sample(job))
        if est.period_s is not None:
            reported.append((period, est.period_s))
    assert len(reported) <= 2, reported


@pytest.mark.parametrize("period", [0.036, 0.040, 0.042])
def test_periods_under_the_floor_are_null_even_when_stable(period: float) -> None:
    """Under the guard band the detector never reports (its floor is 44 ms at 50 Hz)."""
    est = detect_period(*sample(Job(period_s=period, duration_s=10.0, shape="pulse", noise_w=5)))
    assert est.period_s is None or est.period_s >= T_LO
    assert est.period_s is None or abs(est.period_s / period - 1) > 0.02  # never mistaken for the true one...
    assert est.min_resolvable_s == pytest.approx(T_LO, rel=0.01)


def test_stair_step_power_without_energy_is_at_most_an_alias_risk() -> None:
    """A 10 Hz stair-step sampled every 10 ms (polled NVML power): a clean 600 ms pattern is still only a risk."""
    job = Job(period_s=0.6, duration_s=20.0, fs_hz=10.0, shape="pulse", noise_w=5)
    t10, p10 = sample(job)
    t = np.arange(t10[0], t10[-1], 0.01)
    p = p10[np.searchsorted(t10, t, side="right") - 1]
    est = detect_period(t, p)
    assert est.verdict is Verdict.ALIAS_RISK
    assert est.period_s is None
    assert est.sample_interval_s == pytest.approx(0.1, rel=0.02)
    # With an energy counter that agrees (integrating the same smooth waveform), the period is confirmed.
    fine = np.arange(t[0], t[-1], 0.001)
    from tests.runtime.synth import power_at

    energy = np.cumsum(power_at(job, fine)) * 0.001
    e_read = np.interp(t10, fine, energy)[np.searchsorted(t10, t, side="right") - 1]
    est2 = detect_period(t, p, energy_j=e_read)
    assert est2.verdict is Verdict.OK, est2.message
    assert est2.period_s == pytest.approx(0.6, rel=0.02)


# --------------------------------------------------------------------------------------------------------------
# A period that wanders within a band (the host-stall job), and what that must not let in


def _mean_iteration_s(trace_iterations: np.ndarray, start: float, end: float) -> float:
    """The true mean iteration time over [start, end): what a window's period is compared with when the
    iteration time drifts (the phase median is the README's truth, a single number for the whole phase)."""
    ends = np.sort(trace_iterations[(trace_iterations >= start) & (trace_iterations < end)])
    return float((ends[-1] - ends[0]) / (len(ends) - 1))


def test_real_host_stall_job_wandering_period_in_12_s_windows() -> None:
    """resnet_128_20's iteration time drifts from 50 to 53 ms in its last 10 s (50-56 ms from step to step): no
    one period fits a 12 s window there (the common-period test rejected 31 of these 35 windows), but each of
    its five 48-cycle sub-windows folds strongly at its own period, all within 5%: their mean is reported."""
    trace = read_trace(TRACES / "resnet_128_20")
    assert trace.iterations is not None
    truth = trace.iterations.phases()[0]
    t, p = trace.power.t_s, trace.power.power_w
    starts = np.arange(truth.start_s + 0.3, min(truth.end_s, float(t[-1])) - 12.0, 0.25)
    assert len(starts) >= 30
    wandering = 0
    for start in starts:
        m = (t >= start) & (t < start + 12.0)
        est = detect_period(t[m], p[m])
        assert est.period_s is not None, f"+{start - truth.start_s:.2f} s: {est.message}"
        local = _mean_iteration_s(trace.iterations.t_s, start, start + 12.0)
        assert est.period_s == pytest.approx(local, rel=0.02), est.message
        wandering += "wandering" in est.message
    assert wandering >= 25


@pytest.mark.parametrize(("folder", "phase"), [("gpt_16-mlp_65536", 1)])
@pytest.mark.parametrize("length_s", [6.0, 8.0, 11.0, 12.0, 16.0])
def test_wandering_acceptance_adds_nothing_on_real_9_8_ms_iterations(folder: str, phase: int, length_s: float) -> None:
    """The 9.8 ms MLP's alias (~83 ms here) wanders 4-16% across sub-windows that fold at 0.1-0.8: the band and
    long-sub-window tests must never turn one of its windows into a period (every window answers exactly as the
    common-period test alone does). The live traces' MLP phases are checked in test_live_h200_traces.py."""
    trace = read_trace(TRACES / folder)
    assert trace.iterations is not None
    truth = trace.iterations.phases()[phase]
    assert truth.period_s < 0.01
    t, p = trace.power.t_s, trace.power.power_w
    default, strict = DetectorConfig(), DetectorConfig(wander_band=0.0)  # the wandering acceptance off
    for start in np.arange(truth.start_s + 0.3, min(truth.end_s, float(t[-1])) - length_s, 0.5):
        m = (t >= start) & (t < start + length_s)
        est = detect_period(t[m], p[m])
        assert "wandering" not in est.message, est.message
        # The acceptance is part of the fold stage, the counting's input (counting does not read wander_band): the
        # fold stage answers the same with it off, to the last field, so the whole detection does.
        seg = prepare_signal(t[m], p[m]).longest
        assert seg is not None
        assert repr(_detect_folded(seg, default, None)) == repr(_detect_folded(seg, strict, None))


def _stall_job(period_s: float, long_stall_s: float, seed: int, dt: float = 0.02) -> tuple[np.ndarray, ...]:
    """12 s of a job whose iterations are 2/3 compute (700 W falling to 400 W) and 1/3 host stall (125 W), of
    period_s (+-10 ms), but about one in eight waits long_stall_s more; and the true mean iteration time over the
    window."""
    rng = np.random.default_rng(seed)
    waits = [(long_stall_s if rng.random() < 0.12 else 0.0) + rng.uniform(-0.01, 0.01) for _ in range(200)]
    starts = np.cumsum([0.0] + [period_s + w for w in waits])
    t = np.arange(0.0, 12.0, dt)
    tau = t - starts[np.searchsorted(starts, t, side="right") - 1]
    compute = 2.0 * period_s / 3.0
    power = np.where(tau < compute, 700.0 - 300.0 * tau / compute, 125.0) + rng.normal(0.0, 5.0, len(t))
    inside = starts[(starts >= t[0]) & (starts <= t[-1])]
    return t, power, np.array((inside[-1] - inside[0]) / (len(inside) - 1))


def test_counted_period_near_a_fold_gives_the_mean_where_long_stalls_shorten_the_fold() -> None:
    """A fold lines up the typical iteration: a long host stall only moves the phase of what follows. Counted
    near the folded period, the window gives its mean iteration time (the span over the count): within 2% here,
    and, where stalls are shorter (0.3 s), nearer the mean than the fold wherever it gives a count (a long
    iteration counted as two leaves it up to 5% short on these jobs)."""
    t, p, truth = _stall_job(0.3, 0.5, seed=0)
    fold = detect_period(t, p)
    assert fold.method == "fold" and fold.period_s is not None and fold.period_s < 0.9 * float(truth)
    counted = counted_period_near(t, p, fold.period_s)
    assert counted is not None and counted[0] == pytest.approx(float(truth), rel=0.02)
    given = 0
    for seed in range(6):
        t, p, truth = _stall_job(0.3, 0.3, seed=seed)
        fold = detect_period(t, p)
        assert fold.period_s is not None, seed
        if (counted := counted_period_near(t, p, fold.period_s)) is not None:
            given += 1
            assert abs(counted[0] - float(truth)) < abs(fold.period_s - float(truth)), seed
    assert given >= 3
    # A steady job counts as it folds; cycles under 5 samples are not counted.
    t, p, truth = _stall_job(0.3, 0.0, seed=1)
    counted = counted_period_near(t, p, 0.3)
    assert counted is not None and counted[0] == pytest.approx(float(truth), rel=0.005)
    t, p, truth = _stall_job(0.08, 0.0, seed=2)
    assert counted_period_near(t, p, 0.08) is None


def _waiting_job(extra_s: dict[int, float]) -> tuple[np.ndarray, np.ndarray]:
    """12 s at 50 Hz of a steady 100 ms job (80 ms of compute, 700 W falling to 400 W, then 125 W), where iteration
    i waits extra_s[i] more."""
    rng = np.random.default_rng(3)
    starts = np.cumsum([0.0] + [0.1 + extra_s.get(i, 0.0) for i in range(200)])
    t = np.arange(0.0, 12.0, DT)
    tau = t - starts[np.searchsorted(starts, t, side="right") - 1]
    return t, np.where(tau < 0.08, 700.0 - 300.0 * tau / 0.08, 125.0) + rng.normal(0.0, 5.0, len(t))


def test_stall_share_is_the_time_in_long_waits() -> None:
    """A 1.2 s wait holds 10% of a 12 s window, two of them 20%; the steady job's own short waits (20 ms, under 0.6
    cycle) are no stall; an unusable signal: None."""
    for extra, share in (({85: 1.2}, 0.1), ({25: 1.2, 85: 1.2}, 0.2), ({}, 0.0)):
        assert stall_share(*_waiting_job(extra), 0.1) == pytest.approx(share, abs=0.01), extra
    assert stall_share(np.arange(10.0), np.ones(10), 0.1) is None


def _dipped_job(seed: int, undipped: range, stall_at: int | None) -> tuple[np.ndarray, np.ndarray]:
    """40 iterations of 160 ms sampled at 50 Hz: 8 samples of a ~600 W burst whose last is a 200 W dip between
    iterations, except where the samples miss it (`undipped`); iteration `stall_at` also waits 320 ms at idle."""
    rng = np.random.default_rng(seed)
    power: list[float] = []
    for i in range(40):
        burst = list(600.0 + 30.0 * rng.standard_normal(8))
        if i not in undipped:
            burst[-1] = 200.0
        power += burst + ([120.0] * 16 if i == stall_at else [])
    return np.arange(len(power)) * 0.02, np.asarray(power)


def test_a_count_advances_at_most_a_cycle_through_a_stall() -> None:
    """Through a host stall at idle the band-passed signal rings on at the band's frequency; the count's phase
    advances at most one cycle there: a wait is part of one iteration, not phantom cycles."""
    for seed in range(6):
        t, p = _dipped_job(seed, range(0), 14 + seed)
        counted = counted_period_near(t, p, 0.16)
        assert counted is not None and counted[0] == pytest.approx((40 * 8 + 16) * 0.02 / 40, rel=0.01), seed


def test_a_count_runs_on_where_samples_miss_the_dips_between_iterations() -> None:
    """Where the 50 Hz samples miss the short dips between iterations (held-out-19's +-10% transformers) the
    band-passed signal fades at the bursts' level: no wait, so the count's phase runs on (taken for a stall, it
    lost a cycle: +2.9 to +5.6% here, 8.6% on a held-out-19 baseline). It rings at the band's centre, a little
    faster than the cycles, so three undipped iterations may gain up to half a cycle (-2.6% here), or the counts
    at two band centres disagree and there is none (docs/jitter.md, session 24)."""
    counts = []
    for seed in range(6):
        t, p = _dipped_job(seed, range(12 + seed, 15 + seed), None)
        if (counted := counted_period_near(t, p, 0.16)) is not None:
            counts.append(counted[0])
            assert counted[0] == pytest.approx(0.16, rel=0.03), seed
    assert len(counts) >= 4, counts


def test_a_count_confirms_two_periods_only_where_it_agrees_with_both() -> None:
    t, p, truth = _stall_job(0.3, 0.0, seed=1)
    counted = count_confirms(t, p, (0.299, 0.301), agreement=0.02)
    assert counted is not None and counted[0] == pytest.approx(float(truth), rel=0.005)
    assert count_confirms(t, p, (0.296, 0.305), agreement=0.02) is not None  # each within 2% of the count
    assert count_confirms(t, p, (0.28, 0.32), agreement=0.02) is None  # their mean counts, but neither agrees
    t, p, truth = _stall_job(0.08, 0.0, seed=2)
    assert count_confirms(t, p, (0.08, 0.08), agreement=0.02) is None  # nothing counted


def test_synthetic_wandering_50_ms_jobs_report_their_mean_period() -> None:
    """50 ms iterations with 1% step-to-step jitter and a 1.5% slow wander, 12 s windows: the common-period test
    alone resolves 1 of 20; each is now within 2% of the window's true mean iteration time."""
    for seed in range(20):
        job = Job(period_s=0.051, duration_s=12.0, shape="pulse", noise_w=15, jitter=0.01, wander=0.015, seed=seed)
        t, p = sample(job)
        est = detect_period(t, p)
        assert est.period_s is not None, f"seed {seed}: {est.message}"
        assert est.period_s == pytest.approx(_mean_iteration_s(iteration_ends(job), t[0], t[-1]), rel=0.02)


@pytest.mark.xfail(
    strict=True,
    reason="regression kept visible: with cycle counting (issue 17) 9 of the 100 are reported, with the matched "
    "template 12 (10 on the code of 2026-12-05, 9 on that of 2026-12-07), above the bar of 5 this test held before "
    "(docs/jitter.md); strict, so it fails once the bar is met again",
)
def test_wandering_aliases_of_22_to_40_ms_iterations_stay_rare() -> None:
    """The known price of accepting a wandering period: 22-40 ms iterations alias at 50 Hz onto 44-170 ms
    patterns whose wander is theirs amplified only 1.2-6x, so a slightly wandering fast job can look like a
    wandering slower one (a perfectly steady one already looks like a steady one: no test of the samples can
    tell). With 0.5-3% wander, 12 s windows: the common-period test alone reports 2 of these 100, with the
    wandering acceptance (none at periods whose mirror-alias amplification is under 1.4x) 5; with cycle counting
    for jittery iterations (issue 17: a slightly wandering alias counts like a jittery job) 9, over the bar of 5;
    with the matched-template segmentation of jobs with host stalls, 12 (10 on the code of
    2026-12-05)."""
    reported = []
    for job in wandering_fast_jobs(duration_s=12.0):
        est = detect_period(*sample(job))
        if est.period_s is not None:
            reported.append((round(job.period_s * 1e3, 1), round(est.period_s * 1e3, 1)))
    assert len(reported) <= 5, reported


# --------------------------------------------------------------------------------------------------------------
# Verdicts, bad input, windows


def test_flat_signal() -> None:
    t = np.arange(0, 20, 0.02)
    rng = np.random.default_rng(0)
    assert detect_period(t, np.full_like(t, 77.0)).verdict is Verdict.FLAT
    est = detect_period(t, 77.0 + rng.normal(0, 0.05, len(t)))
    assert est.verdict is Verdict.FLAT and est.period_s is None


def test_aperiodic_random_walk() -> None:
    rng = np.random.default_rng(1)
    t = np.arange(0, 30, 0.02)
    est = detect_period(t, 400 + np.cumsum(rng.normal(0, 3, len(t))))
    assert est.period_s is None
    assert est.verdict in (Verdict.APERIODIC, Verdict.INSUFFICIENT_DATA)


def test_white_noise_has_no_period() -> None:
    rng = np.random.default_rng(2)
    t = np.arange(0, 30, 0.02)
    est = detect_period(t, 400 + rng.normal(0, 30, len(t)))
    assert est.period_s is None
    assert est.verdict is Verdict.TOO_SHORT  # sample-to-sample variation: faster than resolvable, or noise


def test_window_too_short_for_the_period_asks_for_more() -> None:
    job = Job(period_s=2.0, duration_s=12.0, shape="pulse", noise_w=5)
    est = detect_period(*sample(job))
    assert est.verdict is Verdict.INSUFFICIENT_DATA
    assert est.period_s is None
    assert est.suggested_window_s is not None and est.suggested_window_s >= 17.0  # >= 9 periods of ~2 s


@pytest.mark.parametrize(
    ("t", "p", "verdict", "words"),
    [
        ([], [], Verdict.INSUFFICIENT_DATA, "fewer than 2"),
        ([0.0, 0.02, 0.04], [1.0, 2.0], Verdict.BAD_INPUT, "3 timestamps but 2"),
        ([[0.0, 1.0], [2.0, 3.0]], [1.0, 2.0, 3.0, 4.0], None, None),  # 2-D is flattened, then too short
        (["a", "b"], [1.0, 2.0], Verdict.BAD_INPUT, "not numeric"),
        ([math.nan] * 50, [1.0] * 50, Verdict.INSUFFICIENT_DATA, "NaN"),
    ],
)
def test_bad_input_gives_a_verdict_not_an_exception(
    t: list, p: list, verdict: Verdict | None, words: str | None
) -> None:
    est = detect_period(t, p)
    assert est.period_s is None
    if verdict is not None:
        assert est.verdict is verdict
    if words is not None:
        assert words in est.message


def test_nan_samples_are_dropped_and_counted() -> None:
    t, p, truth = _window("resnet_512", 0, 1.0)
    p = p.copy()
    p[::17] = np.nan
    est = detect_period(t, p)
    assert est.period_s == pytest.approx(truth, rel=0.02)
    assert f"dropped {len(p[::17])} of {len(p)}" in est.message


def test_a_few_out_of_order_timestamps_are_sorted() -> None:
    t, p, truth = _window("resnet_512", 0, 1.0)
    t, p = t.copy(), p.copy()
    t[[100, 101]] = t[[101, 100]]
    p[[100, 101]] = p[[101, 100]]
    est = detect_period(t, p)
    assert est.period_s == pytest.approx(truth, rel=0.02)
    assert "sorted 1 out-of-order" in est.message


def test_scrambled_timestamps_are_refused() -> None:
    t, p, _ = _window("resnet_512", 0, 1.0)
    rng = np.random.default_rng(0)
    est = detect_period(rng.permutation(t), p)
    assert est.verdict is Verdict.BAD_INPUT
    assert "go backwards" in est.message


def test_duplicates_are_merged() -> None:
    t, p, truth = _window("resnet_512", 0, 1.0)
    est = detect_period(np.concatenate([t, t[:50]]), np.concatenate([p, p[:50]]))
    assert est.period_s == pytest.approx(truth, rel=0.02)
    assert "merged 50 duplicate" in est.message


def test_gap_splits_and_the_longest_stretch_is_used() -> None:
    job = Job(period_s=0.3, duration_s=40.0, shape="pulse", noise_w=5)
    t, p = sample(job)
    keep = (t < job.t0_s + 8) | (t > job.t0_s + 14)  # a 6 s hole
    est = detect_period(t[keep], p[keep])
    assert est.period_s == pytest.approx(0.3, rel=0.02)
    assert "gap" in est.message and "longest contiguous stretch" in est.message
    assert est.window_s < 27.0


def test_prepare_signal_resamples_irregular_stamps_onto_a_grid() -> None:
    t, p, _ = _window("resnet_512", 0, 1.0)
    prep = prepare_signal(t, p)
    assert prep.error is None and len(prep.segments) == 1
    seg = prep.segments[0]
    assert seg.dt_s == pytest.approx(0.02, rel=0.01)
    assert not seg.held
    assert abs(seg.n - len(t)) <= 3


def test_window_for_periods() -> None:
    assert window_for_periods(0.1, 10) == pytest.approx(1.0)
    assert window_for_periods(0.3, 5, min_window_s=2.0) == pytest.approx(2.1)  # 7 whole periods
    assert window_for_periods(4.0, 10, max_window_s=30.0) == pytest.approx(28.0)  # 7 fit
    assert window_for_periods(40.0, 3, max_window_s=30.0) == pytest.approx(40.0)  # at least one
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="period_s"):
            window_for_periods(bad, 5)
    with pytest.raises(ValueError, match="n_periods"):
        window_for_periods(1.0, 0)


def test_fold_r2_scores() -> None:
    t = np.arange(0, 10, 0.02)
    y = np.sin(2 * np.pi * t / 0.25)
    r2 = fold_r2(y, 0.02, [0.25, 0.5, 0.125, 0.31])
    assert r2[0] > 0.95 and r2[1] > 0.95  # the period and its multiple
    assert r2[2] < 0.05 and r2[3] < 0.05
    noise = np.random.default_rng(0).normal(size=5000)
    assert abs(fold_r2(noise, 0.02, [0.25])[0]) < 0.02  # bias-corrected


def test_config_bounds() -> None:
    job = Job(period_s=0.5, duration_s=10.0, shape="pulse", noise_w=5)
    t, p = sample(job)
    assert detect_period(t, p, max_period_s=0.3).period_s is None
    assert detect_period(t, p, min_period_s=0.6).period_s is None
    assert detect_period(t, p, config=DetectorConfig(max_period_s=1.0)).period_s == pytest.approx(0.5, rel=0.02)


def test_estimate_fields_are_consistent() -> None:
    t, p, _truth = _window("resnet_512", 0, 1.0)
    est = detect_period(t, p)
    assert isinstance(est, PeriodEstimate) and est.ok
    assert est.samples_used == pytest.approx(len(t), abs=3)
    assert est.n_periods == pytest.approx(est.window_s / est.period_s)
    assert len(est.sub_periods_s) == len(est.sub_fold_r2) >= 2
    assert est.level_w == pytest.approx(float(np.mean(p)), rel=0.01)


# --------------------------------------------------------------------------------------------------------------
# Cost


def test_60_s_window_costs_no_more_than_a_few_times_the_5_ms_target() -> None:
    """A guard against a gross regression (an accidental quadratic step), not the target's measurement: the target
    (a 60 s window at 50 Hz in <= 5 ms of CPU) is reported by scripts/bench_detection_cpu.py on an idle machine.
    In a loaded test run the other worker's hyperthread slows this one (5.95 ms here, 3.9 ms alone)."""
    trace = read_trace(TRACES / "resnet_512")
    t, p = trace.power.t_s, trace.power.power_w
    m = t >= t[-1] - 60.0  # the last 60 s (the trace's buffered part is 47 s: pad by synthetic continuation)
    t60, p60 = t[m], p[m]
    if t60[-1] - t60[0] < 59.0:
        job = Job(period_s=0.1042, duration_s=60.0, shape="pulse", noise_w=20)
        t60, p60 = sample(job)
    detect_period(t60, p60)  # warm-up
    # The fastest of 15 runs: CPU time of one detection, not of whatever else shares the machine's cores.
    runs = []
    for _ in range(15):
        c = time.process_time()
        detect_period(t60, p60)
        runs.append(time.process_time() - c)
    assert min(runs) <= 4 * 0.005, f"{min(runs) * 1e3:.2f} ms"


def test_a_wandering_period_reports_a_confidence_between_zero_and_one() -> None:
    """An OK verdict with confidence 0 would read as "no idea" in `trace detect`: a wandering mean is less certain
    than a steady period (its confidence is halved), not worthless."""
    confidences = []
    for seed in range(5):
        job = Job(period_s=0.051, duration_s=12.0, shape="pulse", noise_w=15, jitter=0.01, wander=0.015, seed=seed)
        est = detect_period(*sample(job))
        if "wandering" in est.message:
            confidences.append(est.confidence)
    assert confidences and all(0.05 < c <= 0.5 for c in confidences), confidences


@pytest.mark.parametrize("seed", range(4))
def test_a_segment_whose_stall_holds_a_second_burst_is_a_hidden_iteration(seed: int) -> None:
    """Iterations of a 4-sample burst and a 1-6 sample stall: segmented at every start, no stall holds a burst;
    with every fifth start left out (two iterations taken as one), each merged segment does; a burst that runs on
    past the template without a dip (a longer iteration) does not count."""
    from gpoeo_rt.detection import period

    rng = np.random.default_rng(seed)
    dt, compute_s = 0.02, 0.08
    y, starts = [], []
    for i in range(60):
        starts.append(len(y) * dt)
        burst = 4 + (3 if i % 7 == 3 else 0)  # every seventh iteration computes longer
        y += [1.0 + 0.05 * rng.normal() for _ in range(burst)] + [0.2] * int(rng.integers(1, 7))
    y_arr, starts_arr = np.asarray(y), np.asarray(starts)
    model = (np.ones(4), 0.2)
    assert period._hidden_bursts(y_arr, dt, starts_arr, compute_s, model) == 0
    merged = np.delete(starts_arr, np.arange(5, len(starts_arr) - 1, 5))
    n_merged = len(starts_arr) - len(merged)
    assert period._hidden_bursts(y_arr, dt, merged, compute_s, model) == n_merged
