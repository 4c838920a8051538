"""Jittery jobs cut from recorded H200 phases (bench/jitter.py), and the detector's cycle counting on them."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpoeo_rt.bench.jitter import JitterSpec, make_jittered_trace
from gpoeo_rt.bench.replay import ReplayOutcome, hold_replay, profile_replay
from gpoeo_rt.controller import controller as controller_module
from gpoeo_rt.controller.controller import Controller
from gpoeo_rt.detection import DetectorConfig, counted_period_near, detect_period
from gpoeo_rt.prediction.predictor import Predictor
from gpoeo_rt.prediction.selection import select_bundle
from gpoeo_rt.tracefile import read_trace

TRACES = Path(__file__).resolve().parents[2] / "data/traces/h200"
# The construct the profiling paths below were found on: compute at full power the moment a stall ends. Recorded
# stalls end with a ~20 ms rise (test_synthetic_stalls_end_as_recorded_ones_do); with it most of these starts
# resolve by another path (one 1.4 s later), and the older construct still exercises each rule.
INSTANT_RISE = 0.0


def _returned(result: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    return result is not None


def _taken(
    monkeypatch: pytest.MonkeyPatch,
    path: str,
    applied: Callable[[Any, tuple[Any, ...], dict[str, Any]], object] = _returned,
) -> list[Any]:
    """What the controller's method `path` returned where it applied (`applied(result, args, kwargs)`; by default:
    it returned something, not None): a mechanism test checks that its start still reaches its path."""
    taken: list[Any] = []
    original = getattr(Controller, path)

    def spy(self: Controller, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        if applied(result, args, kwargs):
            taken.append(result)
        return result

    monkeypatch.setattr(Controller, path, spy)
    return taken


def _samples(spec: JitterSpec, folder: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The job's buffered power samples (times, watts) and its true iteration ends, in order."""
    make_jittered_trace(spec, folder)
    trace = read_trace(folder)
    assert trace.iterations is not None
    return trace.power.t_s, trace.power.power_w, np.sort(trace.iterations.t_s)


def _replayed(
    spec: JitterSpec, folder: Path, offset_s: float, predictor: Predictor
) -> tuple[ReplayOutcome, float, list[str]]:
    """Profiling replayed on the synthetic job `spec` (written to `folder`) from offset_s into its phase: the
    outcome, the device time it started at, and its events without their periods."""
    make_jittered_trace(spec, folder)
    start = 1000.0 + spec.lead_s + offset_s
    o = profile_replay(folder, start, predictor)
    return o, start, [e.split(":")[0] for e in o.events]


def _job(tmp_path: Path, period_s: float, jitter: float, tail: str = "uniform") -> Path:
    spec = JitterSpec(TRACES / "resnet_512", 0, period_s, jitter, tail, duration_s=30.0)
    folder = tmp_path / spec.name
    make_jittered_trace(spec, folder)
    return folder


@pytest.mark.parametrize("tail", ["uniform", "heavy"])
def test_jittered_trace_has_the_asked_mean_and_spread(tmp_path: Path, tail: str) -> None:
    trace = read_trace(_job(tmp_path, 0.1, 0.3, tail))
    assert trace.iterations is not None and trace.energy is not None
    lengths = np.diff(trace.iterations.t_s)
    assert abs(lengths.mean() / 0.1 - 1.0) < 0.05
    assert lengths.std() / lengths.mean() > 0.1  # really jittery: uniform +-30% gives ~0.17
    assert trace.power.source == "buffered"


@pytest.mark.parametrize("jitter", [0.1, 0.3])
def test_counted_period_is_the_windows_mean_iteration_time(tmp_path: Path, jitter: float) -> None:
    """The fold finds no period in most windows of a +-30% job; counting gives the window's mean instead."""
    trace = read_trace(_job(tmp_path, 0.1, jitter))
    assert trace.iterations is not None
    t, p, ends = trace.power.t_s, trace.power.power_w, trace.iterations.t_s
    errors = []
    for start in (1003.0, 1010.0, 1020.0):
        m = (t >= start) & (t < start + 6.0)
        est = detect_period(t[m], p[m])
        inside = ends[(ends >= start) & (ends <= start + 6.0)]
        truth = (inside[-1] - inside[0]) / (len(inside) - 1)
        if est.period_s is not None:
            errors.append(abs(est.period_s / truth - 1.0))
    assert len(errors) >= 2, "most 6 s windows must give a period"
    assert max(errors) < 0.02, errors


def test_a_matched_template_segments_iterations_with_long_stalls(tmp_path: Path) -> None:
    """+-50% host stalls (0-200 ms on 200 ms iterations): no period folds and the band-passed count fails its
    checks; the template of the compute burst segments the window's iterations instead."""
    spec = JitterSpec(TRACES / "resnet_512", 0, 0.2, 0.5, duration_s=60.0)
    t, p, ends = _samples(spec, tmp_path / "job")
    errors = []
    for start in (1005.0, 1020.0, 1035.0):
        m = (t >= start) & (t < start + 12.0)
        est = detect_period(t[m], p[m])
        inside = ends[(ends >= start) & (ends <= start + 12.0)]
        truth = (inside[-1] - inside[0]) / (len(inside) - 1)
        assert est.method == "template" and est.period_s is not None, est.message
        assert est.spread > 0.2  # uniform +-50%: 0.29
        errors.append(abs(est.period_s / truth - 1.0))
    assert max(errors) < 0.02, errors


def test_a_long_stall_near_a_windows_end_is_one_wait_not_counted_cycles(tmp_path: Path) -> None:
    """306 ms iterations, +-50% heavy-tailed stalls (held-out-28, 21.7 s in): a 6 s window ends with a 1.05 s stall
    at idle power, 0.9 s before its end. Detrended by a quartic, the stall rose above the wait level, the
    band-passed count rang on through it, and the window counted 282.5 ms where its iterations took 353.6 ms on
    average (-20%); two such counts paired into a baseline 9.7% short. Told on the power less a straight line,
    the stall is one wait: no count that far off (the window has no period; with the 6 s before it, a template
    segments 321.8 ms, truth 319.6 ms)."""
    spec = JitterSpec(TRACES.parent / "h200-live/resnet_512", 0, 0.306, 0.5, "heavy", seed=28)
    t, p, ends = _samples(spec, tmp_path / "job")
    start = 1000.0 + spec.lead_s + 21.7
    for a, b in ((9.0, 15.0), (3.0, 15.0)):
        m = (t >= start + a) & (t < start + b)
        inside = ends[(ends >= start + a) & (ends < start + b)]
        truth = float(np.diff(inside).mean())
        est = detect_period(t[m], p[m])
        assert est.period_s is None or abs(est.period_s / truth - 1.0) < 0.02, (a, b, est.message)
    assert est.period_s is not None, est.message  # the 12 s hold the stall among 36 segmented iterations


def test_a_count_over_two_windows_that_merges_the_shortest_iterations_yields_to_the_template(tmp_path: Path) -> None:
    """143 ms iterations, +-50% uniform stalls (held-out-29, 29.9 s in): over a 3 s window without a period and the
    6 s window after it, the band-passed count near their fold (155.7 ms) merged the shortest iterations (73-215
    ms) and counted 155.7 ms where they took 146.3 ms on average: a baseline 6.4% long. A matched template started
    at the count segments 60 iterations of 147.5 ms; where the two disagree by more than 3%, as in a window's own
    count, the template's mean stands."""
    spec = JitterSpec(TRACES.parent / "h200-live/gpt_16-mlp_65536", 0, 0.143, 0.5, "uniform", seed=29)
    t, p, ends = _samples(spec, tmp_path / "job")
    start = 1000.0 + spec.lead_s + 29.9
    m = (t >= start) & (t < start + 9.0)
    inside = ends[(ends >= start) & (ends < start + 9.0)]
    truth = float(np.diff(inside).mean())
    counted = counted_period_near(t[m], p[m], 0.1557)
    assert counted is not None
    assert abs(counted[0] / truth - 1.0) < 0.02, (counted, truth)


def test_heavy_tailed_stalls_that_inflate_the_spread_of_the_samples_still_segment(tmp_path: Path) -> None:
    """+-50% heavy-tailed stalls on 150 ms iterations: the stalls, now and then several iterations long, spread
    the samples so that the drop to the stall level is only ~1.2 of their stds, where aliases reach 1.4; against
    the template's misfit over the bursts it is 4-14 (aliases at most 5.4). Of the 12 s windows every 5 s, all but
    one segment, each within 2% (on 8 such jobs 64 of 72 windows; 54 before the count's phase ran on through quiet
    stretches at the bursts' level, docs/jitter.md, session 25; this test's four chosen windows hid a miss then)."""
    spec = JitterSpec(TRACES / "resnet_512", 0, 0.15, 0.5, "heavy", duration_s=60.0)
    t, p, ends = _samples(spec, tmp_path / "job")
    errors, missed = [], []
    for start in np.arange(1005.0, 1046.0, 5.0):
        m = (t >= start) & (t < start + 12.0)
        est = detect_period(t[m], p[m])
        inside = ends[(ends >= start) & (ends <= start + 12.0)]
        truth = (inside[-1] - inside[0]) / (len(inside) - 1)
        if est.period_s is None:
            missed.append((float(start), est.message))
            continue
        assert est.method == "template", (start, est.message)
        errors.append(abs(est.period_s / truth - 1.0))
    assert len(missed) <= 1, missed
    assert max(errors) < 0.02, errors


def _rise_after_long_stalls(folder: Path, stall_ends: np.ndarray, stalls: np.ndarray) -> np.ndarray:
    """How far the power has come back from its stall level toward the compute level (0 -> 1), in 5 ms bins
    0-20 ms after the ends of stalls >= 60 ms: the median sample per bin, against the median of the last 20 ms of
    the stall and of 30-50 ms after it."""
    power = read_trace(folder).power
    t, p = power.t_s, power.power_w
    rows = []
    for end in stall_ends[stalls >= 0.06]:
        low_p, high_p = p[(t >= end - 0.02) & (t < end)], p[(t >= end + 0.03) & (t < end + 0.05)]
        if len(low_p) == 0 or len(high_p) == 0:
            continue  # a recorded sample can be late enough to leave a 20 ms stretch empty
        low, high = float(np.median(low_p)), float(np.median(high_p))
        after = t - end
        for b in range(4):
            rows += [(b, (v - low) / (high - low)) for v in p[(after >= 0.005 * b) & (after < 0.005 * (b + 1))]]
    a = np.asarray(rows)
    return np.array([np.median(a[a[:, 0] == b, 1]) for b in range(4)])


@pytest.mark.parametrize("rise_tau_s", [0.012, 0.0])
def test_synthetic_stalls_end_as_recorded_ones_do(tmp_path: Path, rise_tau_s: float) -> None:
    """A real ResNet-50 on an H100 with 0-100 ms host stalls (seeded: train_workload.py draws them with
    random.Random(0)) against its twin cut from the steady recording of the same job: after a stall the power
    comes back over ~20 ms, in both. Without that rise (rise_tau_s 0) the twin jumps back at once, and its +-8%
    transformers resolved in 12-20 of 40 starts where the real ones did in 20 of 20 (docs/jitter.md, session 16)."""
    real = TRACES.parent / "h100-jitter/resnet_512_0-100"
    ends = read_trace(real).iterations.t_s  # logged after each stall's sleep
    draw = random.Random(0)
    real_rise = _rise_after_long_stalls(real, ends, np.array([draw.uniform(0.0, 0.1) for _ in ends]))
    mean_s = float(np.diff(ends).mean())
    spec = JitterSpec(
        TRACES.parent / "h100-jitter-8/gpt_48-resnet_512", 1, mean_s, 0.05 / mean_s, rise_tau_s=rise_tau_s
    )
    make_jittered_trace(spec, tmp_path / "twin")
    truth = np.loadtxt(tmp_path / "twin/iterations.csv", delimiter=",", skiprows=1)
    twin_rise = _rise_after_long_stalls(tmp_path / "twin", truth[:, 0] - truth[:, 4], truth[:, 3])
    assert real_rise[0] < 0.3 and real_rise[3] > 0.4, real_rise  # the recording itself: a slow rise
    close = np.abs(twin_rise - real_rise).max() < 0.15
    assert close == (rise_tau_s > 0), (twin_rise, real_rise)


def test_jitter_spec_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="tail"):
        JitterSpec(TRACES / "resnet_512", 0, 0.1, 0.3, "gaussian")
    with pytest.raises(ValueError, match="jitter"):
        JitterSpec(TRACES / "resnet_512", 0, 0.1, 1.5)


@pytest.fixture(scope="module")
def predictor() -> Predictor:
    return Predictor(select_bundle(Path(__file__).resolve().parents[2] / "models", "NVIDIA H200").manifest)


def test_profiling_a_30_percent_jittery_job_takes_baselines_of_its_mean_iteration_time(
    tmp_path: Path, predictor: Predictor
) -> None:
    spec = JitterSpec(TRACES / "resnet_512", 0, 0.1, 0.3)
    make_jittered_trace(spec, tmp_path / "job")
    outcomes = [profile_replay(tmp_path / "job", 1001.0 + s, predictor) for s in (0.5, 7.3, 14.1, 21.7, 29.9)]
    errors = [o.window_error for o in outcomes if o.conclusion == "baseline" and o.window_error is not None]
    assert len(errors) >= 3, [o.events for o in outcomes]  # before counting: none (three failed windows each)
    assert max(abs(e) for e in errors) < 0.02
    assert all(o.clock_writes == 0 for o in outcomes)


def test_a_50_percent_jittery_job_with_a_squeezed_compute_part_gets_no_wrong_baseline(
    tmp_path: Path, predictor: Predictor
) -> None:
    """Stalls down to zero leave some iteration boundaries without a dip, and the compute part is squeezed to
    50 ms (2.5 samples): a count of the visible ones would run 10-30% long. A baseline within 5% or none."""
    spec = JitterSpec(TRACES / "resnet_512", 0, 0.1, 0.5, duration_s=60.0)
    make_jittered_trace(spec, tmp_path / "job")
    outcomes = [profile_replay(tmp_path / "job", 1001.0 + s, predictor) for s in (0.5, 14.1, 29.9)]
    for o in outcomes:
        assert o.conclusion != "baseline" or abs(o.window_error or 0.0) <= 0.05, o.events


@pytest.mark.parametrize(
    ("source", "period_s", "jitter", "seed", "start_s"),
    [("h200-live/gpt_16-mlp_65536", 0.07, 0.3, 2, 29.9), ("h200-jitter/resnet_512", 0.25, 0.5, 2, 0.5)],
)
def test_a_biased_count_is_checked_by_a_template_segmentation(
    tmp_path: Path, predictor: Predictor, source: str, period_s: float, jitter: float, seed: int, start_s: float
) -> None:
    """Two held-out-2 starts (bench_jitter) whose two windows' counts agreed and were both long (+8.5%, +19.5% at
    fd7e418): a template segmentation started at each count disagrees, and the baseline is the template's."""
    spec = JitterSpec(TRACES.parent / source, 0, period_s, jitter, "uniform", seed=seed)
    make_jittered_trace(spec, tmp_path / "job")
    o = profile_replay(tmp_path / "job", 1000.0 + spec.lead_s + start_s, predictor, max_steps=60)
    assert o.conclusion == "baseline" and abs(o.window_error or 1.0) <= 0.03, o.events


def test_two_windows_of_segmented_iterations_are_not_refined_by_a_weak_fold_over_both(
    tmp_path: Path, predictor: Predictor
) -> None:
    """+-50% heavy-tailed 108 ms iterations: two windows segment within 0.2% of their means and pair; over both, the
    search narrowed to +-10% of them folds (r2 0.19) the typical iteration, 5.7% short of the mean. The pair's own
    kind of evidence refines it, or their average stands."""
    spec = JitterSpec(TRACES.parent / "h200-jitter/resnet_512", 0, 0.108, 0.5, "heavy", duration_s=80.0, seed=13)
    make_jittered_trace(spec, tmp_path / "job")
    outcome = profile_replay(tmp_path / "job", 1001.0 + 7.3, predictor)
    assert outcome.conclusion == "baseline", outcome.events
    assert abs(outcome.window_error or 1.0) <= 0.02, (outcome.events, outcome.window_error)


def test_holding_a_jittery_job_declares_no_phase_change(tmp_path: Path, predictor: Predictor) -> None:
    spec = JitterSpec(TRACES.parent / "h200-live" / "resnet_512", 0, 0.1, 0.1, seed=2)
    make_jittered_trace(spec, tmp_path / "job")
    run = hold_replay(tmp_path / "job", 0, predictor, duration_s=900.0, from_s=2.0)
    assert run.events.get("hold", 0) >= 20 and run.phase_changes == 0, run.events


def test_windows_too_short_to_count_alone_are_counted_as_one_run(
    tmp_path: Path, predictor: Predictor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 200 ms +-30% job: the 3 s and 6 s windows each fail alone (their folds wander); segmented over both (9 s, 45
    iterations of 10 samples) they stand alone: a baseline 9 s in (before the run: a candidate that a second 9 s window
    confirmed, 18 s in, or a 12 s window, then another, 33 s in: after the target's 20 s; from this start before the
    count's phase ran on through quiet stretches, a 12 s window 2.4% off). (From 0.5 s, the start this test used before,
    the 3 s window's count now runs on through quiet stretches and fails to pair: 15 s; docs/jitter.md, session 25.)
    (The longer window after one without a period is first looked at with it once it holds 3 s: a `longer_window` that
    finds no baseline standing alone.)"""
    spec = JitterSpec(TRACES / "resnet_512", 0, 0.2, 0.3, rise_tau_s=INSTANT_RISE)
    runs = _taken(monkeypatch, "_run_alone")
    o, start, events = _replayed(spec, tmp_path / "job", 5.9, predictor)
    assert events == ["no_period", "longer_window", "baseline"] and len(runs) == 1, o.events
    assert o.conclusion == "baseline" and o.concluded_s - start <= 10.0, o.events
    assert o.window_error is not None and abs(o.window_error) < 0.02


def test_a_fold_and_a_count_of_one_jittery_job_pair_where_their_joint_count_agrees(
    tmp_path: Path, predictor: Predictor
) -> None:
    """A 100 ms +-10% job folds in one window and counts in the next: two kinds of evidence, which pair only where
    the count over both windows agrees with each within 2% (before: 24 s of windows alternating fold and count)."""
    spec = JitterSpec(TRACES / "resnet_512", 0, 0.1, 0.1)
    o, start, _ = _replayed(spec, tmp_path / "job", 0.5, predictor)
    assert o.conclusion == "baseline" and o.concluded_s - start <= 10.0, o.events
    assert o.window_error is not None and abs(o.window_error) < 0.02


def test_a_counted_candidate_is_confirmed_by_36_of_its_periods(
    tmp_path: Path, predictor: Predictor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 100 ms +-30% job counted over a 6 s window (60 iterations): the second window holds 36 periods (3.6 s), as many
    as a count needs, not the 6 s the schedule happened to give the first (without the cap: a 6 s second window). Never
    shorter than the first window (3 s). (The +-10% job this test used before now counts in its first 3 s window:
    docs/jitter.md, session 25.) (The longer window after one without a period is first looked at with it once it holds
    3 s: a `longer_window` that finds no baseline standing alone.)"""
    spec = JitterSpec(TRACES / "resnet_512", 0, 0.1, 0.3, rise_tau_s=INSTANT_RISE)
    capped = _taken(monkeypatch, "_counted_second_window", lambda length_s, args, _: length_s < args[0])
    o, start, events = _replayed(spec, tmp_path / "job", 17.9, predictor)
    assert events == ["no_period", "longer_window", "period_candidate", "baseline"]
    assert capped and o.concluded_s - start == pytest.approx(9.0 + 36 * 0.1, abs=0.2), (capped, o.events)
    assert o.window_error is not None and abs(o.window_error) < 0.02


def _two_burst_job(seed: int, seconds: float = 14.0) -> tuple[float, np.ndarray, float]:
    """50 Hz power of iterations of two 110 ms bursts parted by a 40 ms dip, then a host stall of 0-200 ms: the
    sample interval, the samples and the mean iteration time."""
    rng = np.random.default_rng(seed)
    fine, level, ends, t = 0.001, [], [], 0.0
    while t < seconds:
        for dur, watts in ((0.11, 400.0), (0.04, 120.0), (0.11, 400.0), (rng.uniform(0.0, 0.2), 100.0)):
            n = round(dur / fine)
            level += [watts] * n
            t += n * fine
        ends.append(t)
    x = np.asarray(level)
    per = 20  # 1 ms steps per 20 ms sample
    y = x[: len(x) // per * per].reshape(-1, per).mean(axis=1) + rng.normal(0.0, 8.0, len(x) // per)
    return 0.02, y, float(np.mean(np.diff(ends)))


@pytest.mark.parametrize("seed", range(6))
def test_a_job_of_two_bursts_per_iteration_is_never_segmented_or_counted_at_half(seed: int) -> None:
    """Split at the dip, every iteration is two segments (the stall in every other one: their lengths alternate),
    which fit the samples as well as the whole iteration does, and the band-passed count runs at half the period.
    Started at the half, the template segments the whole iteration instead; a window's period is the whole
    iteration or none (before: a count at the half in 4 of these 6 windows, and pairs of them a baseline)."""
    from gpoeo_rt.detection import period

    dt, power_w, truth = _two_burst_job(seed)
    y = period._detrend(power_w, period._DETREND_DEGREE)
    cfg = period.DetectorConfig()
    half = period._segment_from(y, dt, truth / 2, cfg)
    assert half is not None and abs(half.period / (truth / 2) - 1.0) < 0.03 and half.alternation > 20.0
    whole = period._segment_count(y, dt, truth / 2, cfg)
    assert whole is None or (abs(whole.period / truth - 1.0) < 0.03 and whole.alternation < 5.0)
    est = detect_period(np.arange(len(power_w)) * dt, power_w)
    assert est.period_s is None or abs(est.period_s / truth - 1.0) < 0.03, est.message


def test_a_long_jittered_window_of_30_segmented_iterations_is_a_baseline_alone(
    tmp_path: Path, predictor: Predictor
) -> None:
    """300 ms iterations, +-30% stalls: 2 x 30 segmented iterations take 18 s, after the first windows; one
    window of them that no multiple or alternation explains gives the baseline (before: 4 of 5 starts late)."""
    spec = JitterSpec(TRACES / "resnet_512", 0, 0.3, 0.3, duration_s=60.0, rise_tau_s=INSTANT_RISE)
    make_jittered_trace(spec, tmp_path / "job")
    outcomes = [profile_replay(tmp_path / "job", 1001.0 + s, predictor) for s in (0.5, 7.3, 14.1, 21.7, 29.9)]
    ok = [
        o
        for o in outcomes
        if o.conclusion == "baseline" and abs(o.window_error or 1.0) <= 0.02 and o.concluded_s - o.start_s <= 20.0
    ]
    assert len(ok) >= 4, [(o.events, o.window_error, o.concluded_s - o.start_s) for o in outcomes]
    assert all(o.conclusion != "baseline" or abs(o.window_error or 0.0) <= 0.05 for o in outcomes)


def _near_periodic_gpt(tmp_path: Path) -> tuple[JitterSpec, Path]:
    """A 409 ms transformer with +-10% uniform stalls (held-out-33), whose first 14 s hold 34 iterations."""
    spec = JitterSpec(TRACES.parent / "h200-live/gpt_64", 0, 0.409, 0.1, "uniform", seed=33)
    return spec, tmp_path / "job"


def test_iterations_that_vary_little_are_segmented_where_a_template_agrees_with_their_count(tmp_path: Path) -> None:
    """No fold holds over the first 14 s of a 409 ms job with +-10% stalls; the count finds 407.8 ms over 33
    cycles, and a matched template started at it 406.7 ms over 34 iterations, but their lengths spread 6%, under
    the 12% a template needs without a count: the count waited for a second window. A template that agrees with a
    count that passed every check, where the energy counter shows the variation, gives the window's mean, and
    stands alone. A steady fast job's alias can give the same samples, not the counter's variation: without it,
    nothing changes."""
    spec, folder = _near_periodic_gpt(tmp_path)
    t, p, ends = _samples(spec, folder)
    start = 1000.0 + spec.lead_s + 0.5
    m = (t >= start) & (t < start + 14.0)
    inside = ends[(ends >= start) & (ends < start + 14.0)]
    truth = float(np.diff(inside).mean())
    judged = DetectorConfig(judge_stands_alone=True)
    est = detect_period(t[m], p[m], config=judged, variation_confirmed=True)
    assert est.method == "template" and est.stands_alone, est.message
    assert est.period_s is not None and abs(est.period_s / truth - 1.0) < 0.01, (est.period_s, truth)
    unconfirmed = detect_period(t[m], p[m], config=judged)
    assert unconfirmed.method == "count" and not unconfirmed.stands_alone, unconfirmed.message


def test_a_near_periodic_jittery_job_is_a_baseline_from_one_window_of_34_iterations(
    tmp_path: Path, predictor: Predictor
) -> None:
    """The 409 ms job above, 0.5 s in: the 3 s window guesses 1.22 s and asks for 11 s; the look at 11 s (27
    iterations) folds, not alone; the 11 s window, with the 3 s before it (34 iterations), now stands alone: a
    baseline 14 s in, within 1% (before: a candidate there, paired by a second 11 s window 25 s in)."""
    spec, folder = _near_periodic_gpt(tmp_path)
    o, start, events = _replayed(spec, folder, 0.5, predictor)
    assert events == ["longer_window", "longer_window", "baseline"], o.events
    assert o.concluded_s - start <= 14.5 and o.window_error is not None and abs(o.window_error) < 0.01


def test_a_segmentation_whose_edge_holds_its_longest_iteration_does_not_stand_alone(
    tmp_path: Path, predictor: Predictor
) -> None:
    """287 ms iterations, +-50% heavy-tailed stalls, from 0.5 s (held-out-26): the first 9 s segment into 30 iterations,
    each right, but the first start comes 0.6 s into the window, after a 0.6 s stall longer than every segment inside.
    Alone, that window was the baseline, 5.2% short of its iterations' mean (which the long one at the edge sets); now
    it is a candidate, and the next 9 s, with no such edge, stand alone within 2%. (The longer window after one without
    a period is first looked at with it once it holds 3 s: a `longer_window` that finds no baseline standing alone.)"""
    spec = JitterSpec(TRACES / "gpt_64", 0, 0.287, 0.5, "heavy", seed=26)
    o, start, events = _replayed(spec, tmp_path / "job", 0.5, predictor)
    assert events == ["no_period", "longer_window", "period_candidate", "baseline"]
    assert o.concluded_s - start <= 20.0 and o.window_error is not None and abs(o.window_error) < 0.02


def test_a_run_whose_windows_did_not_pair_stands_alone_as_one(tmp_path: Path, predictor: Predictor) -> None:
    """270 ms +-30% heavy-tailed stalls: a 3 s window asks for a longer one (a first look over 11 s finds a period
    that does not stand alone), whose count (275 ms) waits for a second; analysed together (14 s, ~50 iterations)
    the run stands alone: a baseline 14 s in (before: a second window of 10 s and a pair 2.5% off, 24 s in)."""
    spec = JitterSpec(TRACES / "resnet_512", 0, 0.27, 0.3, "heavy", duration_s=60.0, rise_tau_s=INSTANT_RISE)
    o, start, events = _replayed(spec, tmp_path / "job", 7.3, predictor)
    assert events == ["longer_window", "longer_window", "baseline"], o.events
    assert o.concluded_s - start <= 15.0 and o.window_error is not None and abs(o.window_error) < 0.01


def test_a_fold_then_a_window_without_a_period_pair_where_the_count_over_both_confirms_it(
    tmp_path: Path, predictor: Predictor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """160 ms +-10% uniform stalls, 6.3 s in: a fold is followed by a window whose phase diffused (it neither
    folds nor counts alone); the count over both windows confirms the fold: a baseline 6.2 s in (before the count's
    phase ran on through quiet stretches at the bursts' level: 42.6 s). (The start this
    test used before, 17.3 s, now pairs a window without a period and a fold the other way round
    (`_none_then_fold`), 9 s in, where it took 15 s; docs/jitter.md, session 25. Before that, the heavy-tailed job's
    start it used pairs its first two folds, 6% apart, by their measured spread:
    test_two_folds_of_a_jittery_job_pair_within_what_chance_allows.) The second window's first part, looked at with
    the candidate's (`_plan_alone_look`), does not stand alone."""
    spec = JitterSpec(TRACES / "gpt_16-mlp_65536", 0, 0.16, 0.1, "uniform", duration_s=60.0, rise_tau_s=INSTANT_RISE)
    confirmed = _taken(monkeypatch, "_fold_then_count")
    o, start, events = _replayed(spec, tmp_path / "job", 6.3, predictor)
    assert events == ["period_candidate", "longer_window", "baseline"] and len(confirmed) == 1, o.events
    assert o.concluded_s - start <= 6.5 and o.window_error is not None and abs(o.window_error) < 0.01


def _steady_gpt_186(tmp_path: Path) -> tuple[Path, float]:
    """A held-out-22 job and start: the steady recorded GPT re-timed to 186 ms, 0.5 s in (its second window strays
    in one sub-window)."""
    spec = JitterSpec(TRACES / "gpt_64", 0, 0.186, 0.0, seed=22)
    make_jittered_trace(spec, tmp_path / "job")
    return tmp_path / "job", 1000.0 + spec.lead_s + 0.5


def test_a_fold_then_a_window_that_strays_in_one_sub_window_pair_where_both_fold_as_one(
    tmp_path: Path, predictor: Predictor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A steady 186 ms GPT (fold r2 0.2-0.3): the 6 s window after the candidate's does not fold on one period in its
    1.2 s sub-windows (one gives 207 ms). Both windows as one fold at the candidate's period in every 2.4 s sub-window:
    a baseline 15 s in, within 0.5% (before: a 12 s and a 24 s window, 39 s; held-out-22). (The longer window after one
    without a period is first looked at with it once it holds 3 s: a `longer_window` that finds no baseline standing
    alone.)"""
    job, start = _steady_gpt_186(tmp_path)
    paired = _taken(monkeypatch, "_fold_over_both")
    o = profile_replay(job, start, predictor)
    assert [e.split(":")[0] for e in o.events] == ["no_period", "longer_window", "period_candidate", "baseline"]
    assert len(paired) == 1
    assert o.concluded_s - start <= 15.5 and o.window_error is not None and abs(o.window_error) < 0.005


def test_a_fold_then_a_window_in_long_waits_is_not_paired_by_their_fold(
    tmp_path: Path, predictor: Predictor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The start above where both windows as one would spend more than period_agreement of their samples in long
    host stalls (`stall_share`): a fold lines up the typical iteration, so the mean can be that much longer
    (held-out-24's 101 ms +-50% heavy-tailed job: 10%, the fold 6% short). The pair is refused; profiling goes
    on."""
    job, start = _steady_gpt_186(tmp_path)
    paired = _taken(monkeypatch, "_fold_over_both")
    monkeypatch.setattr(controller_module, "stall_share", lambda *args, **kwargs: 0.05)
    o = profile_replay(job, start, predictor)
    assert not paired and [e.split(":")[0] for e in o.events][:3] != ["no_period", "period_candidate", "baseline"]


def test_a_window_shorter_than_the_candidates_is_not_paired_by_their_fold(tmp_path: Path, predictor: Predictor) -> None:
    """A steady 181 ms GPT whose waveform nearly repeats every half iteration, 7.3 s in: the first 3 s fold at 89.8 ms,
    the 2 s after them fail, and both as one fold at 89.8 ms too. A window shorter than the candidate's adds less
    evidence than the candidate had: no pair (taken, the baseline was 50% short). The next 6 s fold at 180 ms: a
    baseline within 1%, 15.4 s in. (The longer window after one without a period is first looked at with it once it
    holds 3 s: a `longer_window` that finds no baseline standing alone.)"""
    spec = JitterSpec(TRACES.parent / "h200-live/gpt_64", 0, 0.181, 0.0, seed=21)
    o, start, events = _replayed(spec, tmp_path / "job", 7.3, predictor)
    assert events == ["period_candidate", "no_period", "longer_window", "period_candidate", "baseline"], o.events
    assert o.concluded_s - start <= 15.5 and o.window_error is not None and abs(o.window_error) < 0.01


def test_two_folds_of_a_jittery_job_pair_within_what_chance_allows(tmp_path: Path, predictor: Predictor) -> None:
    """160 ms +-10% heavy-tailed stalls: two folds 165.0 ms and 6% shorter, each near its own window's mean. A
    fold now reports the spread of single iterations its sub-windows show, so the pair is judged by what two means
    of so few iterations differ by by chance (Controller._agreement), not the steady 2%: a baseline 6.3 s in,
    within 2% of the mean over its windows (before: 9.6 s in, from the count over a third window). The look at the
    second window's first part with the first (`_plan_alone_look`) finds no baseline that stands alone."""
    spec = JitterSpec(TRACES / "gpt_16-mlp_65536", 0, 0.16, 0.1, "heavy", duration_s=60.0)
    o, start, events = _replayed(spec, tmp_path / "job", 0.5, predictor)
    assert events == ["period_candidate", "longer_window", "baseline"], o.events
    assert o.concluded_s - start <= 7.0 and o.window_error is not None and abs(o.window_error) < 0.02


def test_a_window_without_a_period_then_a_fold_pair_where_the_count_over_both_confirms_it(
    tmp_path: Path, predictor: Predictor
) -> None:
    """160 ms +-10% heavy-tailed stalls, 7.3 s in: the first 3 s window neither folds nor counts, the next 6 s one
    folds; the count over both confirms the fold: a baseline 9 s in (before: a third window, 15 s in). (The longer
    window after one without a period is first looked at with it once it holds 3 s: a `longer_window` that finds no
    baseline standing alone.)"""
    spec = JitterSpec(TRACES / "gpt_16-mlp_65536", 0, 0.16, 0.1, "heavy", duration_s=60.0, rise_tau_s=INSTANT_RISE)
    o, start, events = _replayed(spec, tmp_path / "job", 7.3, predictor)
    assert events == ["no_period", "longer_window", "baseline"], o.events
    assert o.concluded_s - start <= 10.0 and o.window_error is not None and abs(o.window_error) < 0.01


def test_a_longer_window_continues_the_one_too_short_for_the_period(tmp_path: Path, predictor: Predictor) -> None:
    """A steady 205 ms transformer whose weak waveform folds in no 3 s window: the longer window the controller asks for
    continues the first, and the two are analysed as one (9 s, 44 iterations), whose fold a second window as long
    confirms: a baseline 18 s in (before: 3 s and 6 s windows failed alone, then a 12 s window and a second, 33 s in).
    (The longer window after one without a period is first looked at with it once it holds 3 s: a `longer_window` that
    finds no baseline standing alone.)"""
    spec = JitterSpec(TRACES.parent / "h200-live" / "gpt_64", 0, 0.205, 0.0, seed=13)
    o, start, events = _replayed(spec, tmp_path / "job", 7.3, predictor)
    assert events == ["no_period", "longer_window", "period_candidate", "baseline"]
    assert o.concluded_s - start <= 18.5 and o.window_error is not None and abs(o.window_error) < 0.01


def test_a_longer_window_is_looked_at_once_it_and_the_windows_before_it_are_long_enough(
    tmp_path: Path, predictor: Predictor
) -> None:
    """360 ms iterations, +-50% heavy-tailed stalls, 14.1 s in: a 3 s and a 6 s window give no period, and the template
    asks for a 12 s window (30 iterations). The next window continues the 9 s, so once it holds the rest (3 s) the 12 s
    are analysed as one, and they stand alone: a baseline 12 s in (before: 33 s in). (The longer window after one
    without a period is first looked at with it once it holds 3 s: a `longer_window` that finds no baseline standing
    alone.)"""
    spec = JitterSpec(TRACES / "resnet_512", 0, 0.36, 0.5, "heavy", duration_s=60.0, rise_tau_s=INSTANT_RISE)
    o, start, events = _replayed(spec, tmp_path / "job", 14.1, predictor)
    assert events == ["no_period", "longer_window", "longer_window", "baseline"]
    assert o.concluded_s - start <= 12.5 and o.window_error is not None and abs(o.window_error) < 0.01


def test_a_longer_window_is_looked_at_again_every_3_s_on_its_way(tmp_path: Path, predictor: Predictor) -> None:
    """318 ms iterations, +-50% heavy-tailed stalls, 21.7 s in (held-out-30): the 3 s and 6 s windows give no
    period, and the next is to be 12 s long. Looked at with the 9 s before it once it holds 3 s, the 12 s hold a
    period that does not stand alone; 3 s later the 15 s (47 iterations) stand alone: a baseline 15 s in, within
    1% (before: the 12 s window alone stood, 21 s in)."""
    spec = JitterSpec(TRACES.parent / "h200-jitter/resnet_512", 0, 0.318, 0.5, "heavy", seed=30)
    o, start, events = _replayed(spec, tmp_path / "job", 21.7, predictor)
    assert events == ["no_period", "longer_window", "no_period", "longer_window", "baseline"], o.events
    assert o.concluded_s - start <= 15.5 and o.window_error is not None and abs(o.window_error) < 0.01


def test_an_early_look_that_finds_nothing_leaves_the_window_asked_for_as_it_was(
    tmp_path: Path, predictor: Predictor
) -> None:
    """A steady 410 ms transformer: its 3 s window asks for 7.5 s; the early look at 7.5 s (the 3 s and 4.5 s more)
    finds no period, so the window goes on to the 7.5 s asked for (10.5 s in), which with the first 3 s folds, and a
    second window confirms it: 21 s in, as without the look. (The candidate's look, at 33 iterations of it with the
    second window's first part, finds no baseline that stands alone either, nor its second look 3 s later.)"""
    spec = JitterSpec(TRACES / "gpt_64", 0, 0.41, 0.0, duration_s=60.0)
    o, start, events = _replayed(spec, tmp_path / "job", 0.5, predictor)
    looks = ["longer_window", "longer_window"]
    assert events == [*looks, "period_candidate", *looks, "baseline"], o.events
    assert abs(o.concluded_s - start - 21.0) < 0.1 and o.window_error is not None and abs(o.window_error) < 0.01


def test_a_candidates_second_window_is_looked_at_with_it_once_both_hold_33_iterations(
    tmp_path: Path, predictor: Predictor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 497 ms transformer, +-30% uniform stalls, 21.7 s in (held-out-27): the 3 s window guesses a 1 s period and
    asks for 9 s, whose look finds 509 ms not alone; the window goes on to 9 s (12 s in) and is a 518 ms candidate.
    Its second window (10.4 s) is first measured to the 5.1 s that make the run of windows 33 iterations long, and
    the run stands alone: a baseline 17.1 s in, within 0.5% (before: 22.4 s, from the pair)."""
    spec = JitterSpec(TRACES / "gpt_64", 0, 0.497, 0.3, seed=27)
    planned = _taken(monkeypatch, "_plan_alone_look", lambda result, args, kwargs: True)
    alone = _taken(monkeypatch, "_on_baseline", lambda result, args, kwargs: len(args[0]) == 1)
    o, start, events = _replayed(spec, tmp_path / "job", 21.7, predictor)
    assert events == ["longer_window", "longer_window", "period_candidate", "baseline"]
    assert len(planned) == 1 and len(alone) == 1
    assert o.concluded_s - start <= 17.5 and o.window_error is not None and abs(o.window_error) < 0.005


def test_a_candidates_look_stands_alone_only_where_it_holds_33_of_its_own_periods(
    tmp_path: Path, predictor: Predictor
) -> None:
    """153 ms iterations, +-30% heavy-tailed stalls, 14.1 s in (held-out-25): a 163.8 ms candidate over 3 s, and
    the look at 5.4 s (33 of its periods) segments 169.5 ms, standing alone, where the iterations took 157.6 ms
    (+7.6%: merged iterations and a 505 ms one at the span's end). 5.4 s hold only 32 periods of 169.5 ms: the look
    gives way, and the second window pairs with the candidate: within 2%, 6.3 s in."""
    spec = JitterSpec(TRACES.parent / "h200-jitter/resnet_512", 0, 0.153, 0.3, "heavy", seed=25)
    o, _, events = _replayed(spec, tmp_path / "job", 14.1, predictor)
    assert events == ["period_candidate", "longer_window", "baseline"], o.events
    assert o.window_error is not None and abs(o.window_error) < 0.02, o.window_error


def _stalled_resnet(tmp_path: Path) -> tuple[JitterSpec, Path]:
    """A held-out-18 job: ResNet-50 b128 iterations re-timed to 131 ms, +-50% heavy-tailed stalls (its counts look
    like an alias's: a clean fold on cycles spread 17%)."""
    spec = JitterSpec(TRACES.parent / "h200-live/resnet_128_20", 0, 0.131, 0.5, "heavy", seed=18)
    make_jittered_trace(spec, tmp_path / "job")
    return spec, tmp_path / "job"


def test_a_count_that_looks_like_an_alias_is_taken_where_the_energy_counter_shows_the_variation(
    tmp_path: Path,
) -> None:
    spec, folder = _stalled_resnet(tmp_path)
    trace = read_trace(folder)
    assert trace.iterations is not None
    t, p, ends = trace.power.t_s, trace.power.power_w, trace.iterations.t_s
    a = 1000.0 + spec.lead_s + 3.5
    m = (t >= a) & (t < a + 6.0)
    assert detect_period(t[m], p[m]).period_s is None
    assert "as an alias's are" in detect_period(t[m], p[m]).message
    est = detect_period(t[m], p[m], variation_confirmed=True)
    inside = ends[(ends >= a) & (ends <= a + 6.0)]
    assert est.method == "count" and est.period_s is not None, est.message
    assert abs(est.period_s / ((inside[-1] - inside[0]) / (len(inside) - 1)) - 1.0) < 0.02
    assert "the energy counter shows the variation" in est.message


def test_profiling_takes_the_count_only_with_an_energy_counter_that_varies_as_the_samples_do(
    tmp_path: Path, predictor: Predictor
) -> None:
    """The same samples with a counter that stays flat (what a steady fast twin's counter would do, docs/jitter.md,
    session 13) give no baseline: the count is still refused as an alias's."""
    spec, folder = _stalled_resnet(tmp_path)
    start = 1000.0 + spec.lead_s + 0.5
    o = profile_replay(folder, start, predictor)
    assert o.conclusion == "baseline" and o.concluded_s - start <= 14.0, o.events
    assert o.window_error is not None and abs(o.window_error) < 0.02
    polled = folder / "nvml_polled.csv"
    rows = polled.read_text().splitlines()
    col = rows[0].split(",").index("energy_mj")
    cells = [r.split(",") for r in rows[1:]]
    t0, e0, t1, e1 = (float(cells[i][j]) for i in (0, -1) for j in (0, col))
    for c in cells:  # the same energy in all, spent evenly
        c[col] = f"{e0 + (e1 - e0) * (float(c[0]) - t0) / (t1 - t0):.0f}"
    polled.write_text("\n".join([rows[0], *(",".join(c) for c in cells)]) + "\n")
    flat = profile_replay(folder, start, predictor)
    assert flat.conclusion != "baseline", flat.events


def test_a_pair_of_counted_windows_is_refined_by_a_segmentation_over_both(
    tmp_path: Path, predictor: Predictor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Held-out-18, 89 ms, +-30% heavy-tailed, 10.7 s in: a 3 s window counts 90.0 ms, the next agrees. Narrowed to
    +-10% of their mean the search over both finds nothing (its floor passes for the sampling's); the segmentation
    over both by the detector's own search gives the baseline, 89.7 ms (-0.04%; before the count's phase ran on
    through quiet stretches at the bursts' level, 24.2 s in). (From 14.1 s, the start this test used before, a 3 s
    window counted 101.9 ms of merged cycles, and this path refined it to +0.21%; that window's count now runs on,
    and its candidates pair with none: docs/jitter.md, session 25.)"""
    spec = JitterSpec(TRACES.parent / "h200-live/resnet_128_20", 0, 0.089, 0.3, "heavy", seed=18)
    make_jittered_trace(spec, tmp_path / "job")
    # The segmentation over both windows, by the detector's own search (no bounds).
    segmented = _taken(
        monkeypatch,
        "_estimate",
        lambda est, args, kwargs: (
            len(args[0]) == 2 and "min_period_s" not in kwargs and est.method == "template" and est.period_s
        ),
    )
    o = profile_replay(tmp_path / "job", 1000.0 + spec.lead_s + 10.7, predictor)
    assert o.conclusion == "baseline" and o.window_error is not None and abs(o.window_error) < 0.02, o.events
    assert segmented and o.period_s == segmented[-1].period_s, (segmented, o.events)


def test_a_pair_of_counted_windows_is_not_refined_by_a_count_over_both(tmp_path: Path, predictor: Predictor) -> None:
    """Held-out-19, a 362 ms +-10% transformer: two counts, 364.9 ms (truth 364.9) and 383.9 ms (truth 359.8), pair;
    a count over both windows is 381.6 ms (5.5% long): no better than the two, so their average stands (3.5%)."""
    spec = JitterSpec(TRACES / "gpt_64", 0, 0.362, 0.1, seed=19)
    make_jittered_trace(spec, tmp_path / "job")
    o = profile_replay(tmp_path / "job", 1000.0 + spec.lead_s + 0.5, predictor)
    assert o.conclusion == "baseline" and o.window_error is not None and abs(o.window_error) < 0.04, o.events


@pytest.mark.parametrize(("period_s", "start_s"), [(0.163, 0.5), (0.362, 7.3)])
def test_a_stretch_whose_samples_miss_the_iteration_dips_is_no_stall(
    tmp_path: Path, predictor: Predictor, period_s: float, start_s: float
) -> None:
    """held-out-19's +-10% transformers: for an iteration or two the 50 Hz samples miss the short dips between
    iterations, so the band-passed amplitude fades while the power stays at its usual level. Taken as a stall, each
    such stretch lost a cycle: baselines 8.6% and 6.3% long (c5dccbb). Only a quiet stretch at a stall's level is."""
    spec = JitterSpec(TRACES.parent / "h200-live/gpt_64", 0, period_s, 0.1, "uniform", seed=19)
    make_jittered_trace(spec, tmp_path / "job")
    o = profile_replay(tmp_path / "job", 1000.0 + spec.lead_s + start_s, predictor)
    assert o.conclusion == "baseline", o.events
    assert abs(o.window_error or 1.0) <= 0.02, (o.events, o.window_error)
