"""The idle tail of a window (detection/activity.py): a job that ends inside the window, told from a host stall;
and the shift of its power level between halves: a job that starts or changes phase inside it."""

from __future__ import annotations

import numpy as np

from gpoeo_rt.detection import idle_tail_s, level_shift

DT = 0.02  # 50 Hz buffered power


def _job(stalls_s: list[float], compute_s: float = 0.15, idle_after_s: float = 0.0, seed: int = 0) -> np.ndarray:
    """Power of a job at 700 W whose iterations each wait stalls_s[i] at a 125 W idle, then idle_after_s of idle."""
    rng = np.random.default_rng(seed)
    parts = []
    for stall in stalls_s:
        parts += [np.full(round(compute_s / DT), 700.0), np.full(round(stall / DT), 125.0)]
    parts.append(np.full(round(idle_after_s / DT), 125.0))
    return np.concatenate(parts) + rng.normal(0.0, 2.0, sum(len(p) for p in parts))


def _t(p: np.ndarray) -> np.ndarray:
    return np.arange(len(p)) * DT


def test_a_window_that_ends_after_the_job_has_an_idle_tail() -> None:
    p = _job([0.04] * 20, idle_after_s=0.6)
    assert 0.55 <= idle_tail_s(_t(p), p) <= 0.7


def test_a_long_stall_mid_window_is_no_tail() -> None:
    stalls = [0.04] * 10 + [0.85] + [0.04] * 10
    p = _job(stalls)
    assert idle_tail_s(_t(p), p) == 0.0


def test_a_window_ending_in_a_stall_like_its_others_is_no_tail() -> None:
    # Heavy-tailed stalls: the window ends in a 0.6 s one, and holds one of 0.5 s.
    stalls = [0.05, 0.5, 0.05, 0.1, 0.05, 0.05, 0.2, 0.05, 0.6]
    p = _job(stalls)
    assert idle_tail_s(_t(p), p) == 0.0


def test_a_short_idle_end_is_no_tail() -> None:
    # Under min_tail_s: as short as a host stall can be.
    p = _job([0.0] * 20, idle_after_s=0.1)
    assert idle_tail_s(_t(p), p) == 0.0


def test_an_idle_or_a_steady_window_has_no_tail() -> None:
    rng = np.random.default_rng(1)
    idle = 125.0 + rng.normal(0.0, 2.0, 300)
    assert idle_tail_s(_t(idle), idle) == 0.0
    steady = 650.0 + 50.0 * np.sin(2 * np.pi * _t(idle) / 0.1) + rng.normal(0.0, 2.0, 300)
    assert idle_tail_s(_t(steady), steady) == 0.0


def test_nan_samples_and_tiny_windows_give_no_tail() -> None:
    p = _job([0.04] * 20, idle_after_s=1.0)
    p[::7] = np.nan
    assert idle_tail_s(_t(p), p) > 0.9
    assert idle_tail_s(_t(p)[:5], p[:5]) == 0.0


def test_a_warm_up_then_the_job_shifts_the_level_between_halves() -> None:
    # 3 s of an aperiodic warm-up at ~380 W, then 9 s of the job at ~590 W (real gpt_32-resnet_1024's ResNet start).
    rng = np.random.default_rng(0)
    p = np.concatenate([rng.normal(380.0, 60.0, 150), rng.normal(590.0, 60.0, 450)])
    assert 0.18 <= level_shift(_t(p), p) <= 0.23


def test_stalls_spread_over_the_window_shift_no_level() -> None:
    # Heavy-tailed stalls anywhere in the window: the halves' mean power differs by far less than a phase change.
    rng = np.random.default_rng(1)
    p = _job(list(rng.pareto(2.5, 60) * 0.1 + 0.02), seed=1)
    assert level_shift(_t(p), p) < 0.1


def test_level_shift_of_a_flat_or_tiny_window_is_zero() -> None:
    assert level_shift(_t(np.full(100, 300.0)), np.full(100, 300.0)) == 0.0
    assert level_shift(np.array([0.0]), np.array([300.0])) == 0.0
