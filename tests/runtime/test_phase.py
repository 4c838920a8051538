"""Phase-change detection: the real two-phase H200 trace, synthetic level/period changes, the online check."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpoeo_rt.detection.period import Verdict, detect_period, prepare_signal
from gpoeo_rt.detection.phase import (
    PhaseConfig,
    detect_phases,
    has_changed,
    iteration_boundaries,
    level_change_points,
)
from gpoeo_rt.tracefile import read_trace
from tests.runtime.synth import Job, iteration_ends, sample

TRACES = Path(__file__).resolve().parents[2] / "data" / "traces" / "h200"


def _two_jobs(first: Job, second: Job) -> tuple[np.ndarray, np.ndarray]:
    t1, p1 = sample(first)
    t2, p2 = sample(second)
    return np.concatenate([t1, t2]), np.concatenate([p1, p2])


def test_real_gpt16_then_mlp_change_located_within_2_s_and_mlp_not_resolvable() -> None:
    trace = read_trace(TRACES / "gpt_16-mlp_65536")
    assert trace.iterations is not None and trace.energy is not None
    truth0, truth1 = trace.iterations.phases()
    true_change = 0.5 * (truth0.end_s + truth1.start_s)
    report = detect_phases(
        trace.power.t_s, trace.power.power_w, energy_j=trace.energy.energy_j, energy_t_s=trace.energy.t_s
    )
    assert report.error is None
    gpt = [ph for ph in report.phases if ph.period_s is not None and abs(ph.period_s / truth0.period_s - 1) <= 0.02]
    assert len(gpt) == 1, report.phases
    assert abs(gpt[0].end_s - true_change) <= 2.0
    assert abs(gpt[0].start_s - truth0.start_s) <= 2.0
    (after,) = [ph for ph in report.phases if abs(ph.start_s - gpt[0].end_s) < 1e-6]
    assert after.period_s is None  # 9.8 ms: not resolvable at 50 Hz, and not replaced by an alias
    assert after.verdict in (Verdict.TOO_SHORT, Verdict.ALIAS_RISK, Verdict.APERIODIC)
    assert after.end_s >= truth1.start_s + 10.0
    assert all(ph.period_s is None for ph in report.phases if ph.start_s >= gpt[0].end_s)


@pytest.mark.parametrize(("folder", "true_ms"), [("resnet_512", 104.2), ("gpt_64", 256.8), ("resnet_128_20", 50.2)])
def test_real_single_phase_traces(folder: str, true_ms: float) -> None:
    trace = read_trace(TRACES / folder)
    report = detect_phases(trace.power.t_s, trace.power.power_w)
    found = [ph for ph in report.phases if ph.period_s is not None and ph.level_w > 300]
    assert found, report.phases
    for ph in found:  # every phase with a period during training has the right one
        assert ph.period_s == pytest.approx(true_ms / 1e3, rel=0.02)
    assert max(ph.duration_s for ph in found) >= 9.0
    # Never a made-up period in training: other training-level phases are null (drifting, warm-up).
    assert all(ph.period_s is None or ph in found for ph in report.phases if ph.level_w > 300)


@pytest.mark.parametrize("folder", ["polled10ms-gpt_16", "polled10ms-resnet_64-gpt_8", "polled10ms-gcn"])
def test_real_polled_traces_have_no_phase_with_a_period(folder: str) -> None:
    trace = read_trace(TRACES / folder)
    energy = trace.energy
    assert energy is not None
    report = detect_phases(trace.power.t_s, trace.power.power_w, energy_j=energy.energy_j, energy_t_s=energy.t_s)
    assert report.phases
    assert all(ph.period_s is None for ph in report.phases), report.phases


@pytest.mark.parametrize(
    ("p1", "p2", "b1", "b2"),
    [(0.1, 0.15, 450, 450), (0.2, 0.3, 450, 450), (0.5, 0.8, 450, 450), (0.1, 0.1, 450, 600), (0.25, 0.1, 500, 380)],
)
def test_synthetic_changes_are_located_within_2_s(p1: float, p2: float, b1: float, b2: float) -> None:
    t, p = _two_jobs(
        Job(period_s=p1, duration_s=20.0, base_w=b1, noise_w=10, drift_w=30, seed=1),
        Job(period_s=p2, duration_s=20.0, base_w=b2, noise_w=10, seed=2, t0_s=1020.0),
    )
    report = detect_phases(t, p)
    assert len(report.phases) == 2, report.phases
    first, second = report.phases
    assert abs(first.end_s - 1020.0) <= 2.0
    assert first.period_s == pytest.approx(p1, rel=0.02)
    assert second.period_s == pytest.approx(p2, rel=0.02)


def test_change_to_an_unresolvable_period() -> None:
    t, p = _two_jobs(
        Job(period_s=0.1, duration_s=20.0, noise_w=10, seed=1),
        Job(period_s=0.011, duration_s=20.0, base_w=420, noise_w=10, wander=0.01, seed=2, t0_s=1020.0),
    )
    report = detect_phases(t, p)
    assert report.phases[0].period_s == pytest.approx(0.1, rel=0.02)
    assert abs(report.phases[0].end_s - 1020.0) <= 2.0
    assert all(ph.period_s is None for ph in report.phases[1:])


def test_no_change_is_one_phase() -> None:
    t, p = sample(Job(period_s=0.13, duration_s=40.0, shape="sharp_dip", noise_w=15, drift_w=40, wander=0.002))
    report = detect_phases(t, p)
    assert len(report.phases) == 1
    assert report.phases[0].period_s == pytest.approx(0.13, rel=0.02)


def test_level_change_points_are_precise() -> None:
    t, p = _two_jobs(
        Job(period_s=0.1, duration_s=15.0, base_w=450, noise_w=10, seed=1),
        Job(period_s=0.1, duration_s=15.0, base_w=560, noise_w=10, seed=2, t0_s=1015.0),
    )
    prep = prepare_signal(t, p)
    (cut,) = level_change_points(prep.segments[0])
    assert cut == pytest.approx(1015.0, abs=0.5)


def test_a_gap_ends_a_phase() -> None:
    t, p = sample(Job(period_s=0.2, duration_s=40.0, noise_w=5))
    keep = (t < 1015.0) | (t > 1020.0)
    report = detect_phases(t[keep], p[keep])
    assert any("gap" in n for n in report.notes)
    assert any(abs(ph.end_s - 1015.0) < 0.1 for ph in report.phases)
    assert all(not (ph.start_s < 1017.0 < ph.end_s) for ph in report.phases)


def test_bad_input_gives_an_error_not_an_exception() -> None:
    report = detect_phases([3.0, 1.0, 2.0, 0.0] * 10, np.ones(40))
    assert report.phases == () and report.error is not None
    assert detect_phases([], []).error is not None


def test_custom_config_is_used() -> None:
    t, p = _two_jobs(
        Job(period_s=0.1, duration_s=15.0, base_w=450, noise_w=10, seed=1),
        Job(period_s=0.1, duration_s=15.0, base_w=500, noise_w=10, seed=2, t0_s=1015.0),
    )
    assert len(detect_phases(t, p).phases) == 2  # +11% is a change by default...
    assert len(detect_phases(t, p, config=PhaseConfig(level_rel_change=0.2)).phases) == 1  # ...not at 20%


def test_iteration_boundaries_follow_the_iterations() -> None:
    job = Job(period_s=0.25, duration_s=20.0, shape="sharp_dip", noise_w=5, jitter=0.0)
    t, p = sample(job)
    (phase,) = detect_phases(t, p).phases
    marks = iteration_boundaries(t, p, phase)
    assert np.median(np.diff(marks)) == pytest.approx(0.25, rel=0.02)
    # The dip sits at 90% of each iteration: marks land there, within a sample or two.
    ends = iteration_ends(job)
    k = np.searchsorted(ends, marks)
    phase_in_iter = (marks - ends[k - 1]) / (ends[k] - ends[k - 1])
    assert np.median(np.abs(phase_in_iter - 0.9)) < 0.1
    assert iteration_boundaries(t, p, type(phase)(0, 1, None, 0.0, Verdict.FLAT, 1.0, "")).size == 0


def test_to_dict_is_json_ready() -> None:
    t, p = sample(Job(period_s=0.2, duration_s=20.0, noise_w=5))
    d = detect_phases(t, p).to_dict()
    (ph,) = d["phases"]  # type: ignore[misc]
    assert set(ph) >= {"start_s", "end_s", "period_s", "confidence"}
    assert ph["period_s"] == pytest.approx(0.2, rel=0.02)


# --------------------------------------------------------------------------------------------------------------
# has_changed: the controller's online check


def _ref_and_window(job_ref: Job, job_new: Job) -> tuple:
    t_ref, p_ref = sample(job_ref)
    t_new, p_new = sample(job_new)
    return detect_period(t_ref, p_ref), t_new, p_new


def test_unchanged() -> None:
    ref, t, p = _ref_and_window(
        Job(period_s=0.15, duration_s=10.0, noise_w=10, seed=1), Job(period_s=0.15, duration_s=10.0, noise_w=10, seed=2)
    )
    v = has_changed(ref, t, p)
    assert not v.changed and v.period_change is not None and v.period_change < 0.02


def test_level_change() -> None:
    ref, t, p = _ref_and_window(
        Job(period_s=0.15, duration_s=10.0, noise_w=10), Job(period_s=0.15, duration_s=10.0, base_w=600, noise_w=10)
    )
    v = has_changed(ref, t, p)
    assert v.changed and "power level" in v.reason and v.level_change > 0.15


def test_period_change() -> None:
    ref, t, p = _ref_and_window(
        Job(period_s=0.15, duration_s=10.0, noise_w=10), Job(period_s=0.2, duration_s=10.0, noise_w=10)
    )
    v = has_changed(ref, t, p)
    assert v.changed and "period moved" in v.reason and v.period_change == pytest.approx(1 / 3, rel=0.05)


def test_period_gone_or_appeared() -> None:
    ref, t, p = _ref_and_window(
        Job(period_s=0.15, duration_s=10.0, noise_w=10),
        Job(period_s=0.009, duration_s=10.0, noise_w=10, wander=0.01),
    )
    v = has_changed(ref, t, p)
    assert v.changed and "is gone" in v.reason
    v2 = has_changed(v.estimate, *sample(Job(period_s=0.15, duration_s=10.0, noise_w=10)))
    assert v2.changed and "appeared" in v2.reason


def test_unjudgeable_window_is_not_a_change() -> None:
    ref = detect_period(*sample(Job(period_s=0.15, duration_s=10.0, noise_w=10)))
    v = has_changed(ref, [0.0, 0.02], [1.0, 2.0])
    assert not v.changed and v.reason.startswith("cannot judge")
