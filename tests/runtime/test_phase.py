"""The controller's online phase-change check (`has_changed`) on synthetic jobs. Whole recorded traces are
replayed through the controller itself (tests/runtime/test_replay.py)."""

from __future__ import annotations

import pytest

from gpoeo_rt.detection.period import detect_period, period_persists
from gpoeo_rt.detection.phase import has_changed
from tests.runtime.synth import Job, sample

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


def test_a_held_period_that_still_folds_is_no_change_but_a_multiple_of_a_new_one_is() -> None:
    """A window whose own search fails (a wandering period) but that still folds at the reference's period is the
    same phase; a new job whose iterations are a third as long folds at the old period too, as a multiple."""
    ref = detect_period(*sample(Job(period_s=0.25, duration_s=10.0, noise_w=5, seed=1)))
    assert ref.period_s is not None
    t, p = sample(Job(period_s=0.25, duration_s=5.0, noise_w=5, seed=2, wander=0.02, jitter=0.02))
    kept, how = period_persists(t, p, ref.period_s, tolerance=0.1)
    assert kept is not None and abs(kept / 0.25 - 1.0) < 0.05, how
    t, p = sample(Job(period_s=0.25 / 3, duration_s=5.0, noise_w=5, seed=3, shape="sharp_dip"))
    kept, how = period_persists(t, p, ref.period_s, tolerance=0.1)
    assert kept is None and "multiple" in how
    t, p = sample(Job(period_s=0.009, duration_s=5.0, noise_w=10, seed=4, wander=0.01))
    assert period_persists(t, p, ref.period_s, tolerance=0.1)[0] is None
