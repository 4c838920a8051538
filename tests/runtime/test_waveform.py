"""The waveform statistics, and the simulated GPU's power waveform against the recorded H200 traces."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from gpoeo_rt.bench.waveform import (
    CASES,
    STAT_NAMES,
    TOLERANCES,
    CaseResult,
    Tolerance,
    calibration_case,
    coefficient_of_variation,
    drift_pct_per_min,
    folded_frequency,
    lag1_autocorrelation,
    simulate_phase,
    spectral_peak_ratio,
    waveform_stats,
)
from gpoeo_rt.device import preset_workload

TRACES = Path(__file__).resolve().parents[2] / "data" / "traces"
needs_traces = pytest.mark.skipif(not (TRACES / "h200").is_dir(), reason="data/traces/h200 is not in this checkout")
DT = 0.02


def _tone(period_s: float, amplitude: float, noise: float, n: int = 1500, seed: int = 0) -> np.ndarray:
    t = np.arange(n) * DT
    rng = np.random.default_rng(seed)
    return 500.0 + amplitude * np.sin(2 * math.pi * t / period_s) + noise * rng.standard_normal(n)


# --- the statistics ---


def test_statistics_of_known_signals() -> None:
    tone = _tone(0.1042, 50.0, 0.0)
    assert coefficient_of_variation(tone) == pytest.approx(50.0 / math.sqrt(2) / 500.0, rel=0.01)
    assert lag1_autocorrelation(tone) == pytest.approx(math.cos(2 * math.pi * DT / 0.1042), abs=0.01)
    white = _tone(0.1042, 0.0, 20.0)
    assert abs(lag1_autocorrelation(white)) < 0.06
    # A clean line towers over the noise floor; the same line in more noise less so; noise alone has no line.
    clean, noisy = (
        spectral_peak_ratio(_tone(0.1042, 50, 2)[:512], DT, 0.1042),
        spectral_peak_ratio(_tone(0.1042, 50, 20)[:512], DT, 0.1042),
    )
    assert clean > 10 * noisy > 100 and spectral_peak_ratio(white[:512], DT, 0.1042) < 20
    ramp = 500.0 + np.arange(3000) * DT * (5.0 / 60.0)  # +5 W per minute on 500 W: 1 %/min
    assert drift_pct_per_min(ramp, DT) == pytest.approx(1.0, rel=0.01)


def test_the_iteration_frequency_folds_into_the_sampled_band() -> None:
    assert folded_frequency(9.6, 50.0) == pytest.approx(9.6)
    assert folded_frequency(1 / 0.0098, 50.0) == pytest.approx(1 / 0.0098 - 100.0)
    assert folded_frequency(40.0, 50.0) == pytest.approx(10.0)


def test_tolerance_intervals() -> None:
    assert Tolerance("rel", 0.2).interval(0.1, 0.2) == pytest.approx((0.08, 0.24))
    assert Tolerance("factor", 2.0).interval(100, 300) == pytest.approx((50, 600))
    assert Tolerance("abs", 0.1).interval(-0.3, -0.1) == pytest.approx((-0.4, 0.0))


def test_too_few_samples_is_an_error_that_says_so() -> None:
    with pytest.raises(ValueError, match="need >= 256 samples, got 10"):
        waveform_stats(np.arange(10) * DT, np.ones(10), np.arange(3) * 0.1, 0.1)


def test_simulated_statistics_are_deterministic_and_seeded() -> None:
    workload = preset_workload("resnet50")
    a, b = simulate_phase(workload, 12.0, seed=1), simulate_phase(workload, 12.0, seed=1)  # type: ignore[arg-type]
    c = simulate_phase(workload, 12.0, seed=2)  # type: ignore[arg-type]
    assert a.stats() == b.stats() and a.stats() != c.stats()
    assert np.allclose(np.diff(a.t_s), DT)  # every 20 ms sample, none lost, none twice


# --- the calibration against the recordings ---


def _result(name: str) -> CaseResult:
    case = next(c for c in CASES if c.name == name)
    return calibration_case(case, TRACES)


def _explain(result: CaseResult) -> str:
    lines = []
    for stat in result.misses:
        recorded = ", ".join(f"{root} {getattr(s, stat):.4g}" for root, s in result.recorded.items())
        tol = TOLERANCES[stat]
        lines.append(f"{stat}: simulated {result.simulated[stat]:.4g}, recorded {recorded} ({tol.kind} {tol.size})")
    return "; ".join(lines)


@needs_traces
@pytest.mark.parametrize("name", [c.name for c in CASES if c.role == "tuned"])
def test_tuned_jobs_match_the_recordings_within_tolerance(name: str) -> None:
    result = _result(name)
    assert set(result.recorded) == {"h200", "h200-live"}
    assert not result.misses, _explain(result)


@needs_traces
@pytest.mark.xfail(
    strict=True, reason="known gap (docs/bench.md, 'Simulator waveform calibration'): a held-out statistic misses"
)
@pytest.mark.parametrize("name", [c.name for c in CASES if c.role == "held-out"])
def test_held_out_jobs_match_the_recordings_within_tolerance(name: str) -> None:
    # Strict: a held-out job that comes within every tolerance fails here, so that the documented table is updated.
    result = _result(name)
    assert not result.misses, _explain(result)


def test_every_statistic_has_a_tolerance_and_every_preset_with_iterations_a_case_or_a_reason() -> None:
    assert set(STAT_NAMES) == set(TOLERANCES)
    simulated = {c.job for c in CASES}
    # membound (an 80 ms MLP) has no recording: it shares membound_fast's waveform, which mlp_65536 checks.
    assert simulated | {"membound"} >= {"resnet50", "resnet50_hoststall", "gpt", "membound_fast", "sweep"}
