"""Step markers as the controller's period source: the detection helper, the simulated job's emitter, and the
controller's choice of source (markers when enough arrived, a phase keeps its source, markers that stop or appear)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gpoeo_rt.controller import Controller, ControllerConfig, Policy, State
from gpoeo_rt.controller.state import LOG_KEYS
from gpoeo_rt.detection import MARKERS, SIGNAL, Verdict, period_from_markers
from gpoeo_rt.device import (
    AnalyticWorkload,
    SimConfig,
    SimulatedGPU,
    SimulatedStepMarkers,
    SweepWorkload,
    preset_workload,
)
from gpoeo_rt.sampling.markers import FloatArray, IntArray, no_markers
from tests.runtime.sweep_rows import sweep_rows


def _job(
    iteration_s: float, seed: int = 0, *, jitter: bool = True, preset_name: str = "membound", lag_s: float | None = None
) -> SimulatedGPU:
    preset = preset_workload(preset_name)
    assert isinstance(preset, AnalyticWorkload)
    workload = dataclasses.replace(preset, iteration_s=iteration_s)
    config = SimConfig(subsample_jitter=jitter)
    config = config if lag_s is None else dataclasses.replace(config, power_lag_s=lag_s)
    return SimulatedGPU(workload, seed=seed, allow_clock_writes=True, config=config)


class _Window:
    """A MarkerSource that passes another one's markers only within [on_s, off_s)."""

    def __init__(self, inner: SimulatedStepMarkers, on_s: float = 0.0, off_s: float = np.inf) -> None:
        self.inner, self.on_s, self.off_s = inner, on_s, off_s

    def markers_between(self, start_s: float, end_s: float) -> tuple[FloatArray, IntArray]:
        t, seq = self.inner.markers_between(start_s, end_s)
        keep = (t >= self.on_s) & (t < self.off_s)
        return t[keep], seq[keep]


# --- period_from_markers --------------------------------------------------------------------------------------------


def test_marker_period_counts_steps_so_lost_markers_do_not_lengthen_it() -> None:
    seq = np.arange(1, 202)
    t = 0.01 * seq
    lost = np.ones(len(t), bool)
    lost[[5, 50, 51, 120]] = False
    est = period_from_markers(t[lost], seq[lost], start_s=0.0, end_s=2.02, level_w=300.0)
    assert est.ok and est.timing == MARKERS
    assert est.period_s == pytest.approx(0.01, rel=1e-9)
    assert est.level_w == 300.0


def test_marker_period_refuses_too_few_markers_or_half_a_window() -> None:
    t = 0.01 * np.arange(1, 9)
    few = period_from_markers(t, np.arange(1, 9), start_s=0.0, end_s=0.1)
    assert few.verdict is Verdict.INSUFFICIENT_DATA and few.period_s is None
    t = 0.01 * np.arange(1, 101)  # 1 s of markers in a 2 s window: the job stopped marking half-way
    half = period_from_markers(t, np.arange(1, 101), start_s=0.0, end_s=2.0)
    assert half.verdict is Verdict.INSUFFICIENT_DATA and "cover" in half.message
    assert period_from_markers(t, np.arange(1, 101), start_s=0.0, end_s=1.01).ok
    bad = period_from_markers(t, np.arange(3), start_s=0.0, end_s=2.0)
    assert bad.verdict is Verdict.BAD_INPUT


def test_marker_period_survives_a_restarted_counter() -> None:
    t = 0.02 * np.arange(100)
    seq = np.concatenate([np.arange(500, 550), np.arange(1, 51)])  # a new process with a fresh counter
    est = period_from_markers(t, seq, start_s=0.0, end_s=2.0)
    assert est.period_s == pytest.approx(0.02)


# --- the simulated job's markers ---------------------------------------------------------------------------------


def test_simulated_markers_follow_the_iterations_with_a_small_delay_whatever_the_query_pattern() -> None:
    gpu_a, gpu_b = _job(0.01, seed=3), _job(0.01, seed=3)
    a, b = (
        SimulatedStepMarkers(gpu_a, seed=1, min_interval_s=0.0),
        SimulatedStepMarkers(gpu_b, seed=1, min_interval_s=0.0),
    )
    gpu_a.clock.advance(10.0)
    t_a, seq_a = a.markers_between(0.0, 10.0)
    parts = []
    for k in range(20):
        gpu_b.clock.advance(0.5)
        parts.append(b.markers_between(0.5 * k, 0.5 * (k + 1)))
    t_b = np.concatenate([p[0] for p in parts])
    assert np.array_equal(t_a, t_b)
    assert np.all(np.diff(t_a) >= 0)  # one sender: timestamps never go back
    truth = gpu_a.truth.iterations()
    ends = dict(zip(truth.iteration.tolist(), truth.t_s.tolist(), strict=True))
    delay = t_a - np.array([ends[int(s)] for s in seq_a])
    assert 0 < np.median(delay) < 2e-4 and delay.max() < 5e-3
    assert 0.99 * len(truth) <= len(t_a) < len(truth)  # a little loss
    # Like the client, by default at most one marker per 50 ms, each numbered: every 5th or 6th 10 ms step.
    capped = SimulatedStepMarkers(gpu_a, seed=1)
    _, seq_c = capped.markers_between(0.0, 10.0)
    assert set(np.diff(seq_c)) <= {5, 6, 10, 11, 12} and 150 <= len(seq_c) <= 200


def test_subsample_jitter_unaliases_a_10ms_job_and_is_off_by_default() -> None:
    # A host stall in each step and no sensor lag: a waveform with sharp edges, which fixed sampling instants
    # alias (the calibrated waveform is smooth at 10 ms, a smooth profile through a 9 ms lag: 0.4% spread).
    stall = "resnet50_hoststall"
    fixed = _job(0.01, seed=2, jitter=False, preset_name=stall, lag_s=0.0)
    jittered = _job(0.01, seed=2, preset_name=stall, lag_s=0.0)
    op_power = fixed.truth.operating_point(0.0).power_w
    for gpu in (fixed, jittered):
        gpu.clock.advance(60.0)

    # The true energy of consecutive 2 s windows: fixed instants see the same two points of each iteration.
    def spread(gpu: SimulatedGPU) -> float:
        e = np.array([gpu.truth.energy_j(at_s=2.0 * k) for k in range(5, 30)])
        return float(np.std(np.diff(e) / 2.0) / op_power)

    assert spread(jittered) < 0.03 < spread(fixed)
    assert SimConfig().subsample_jitter is False


# --- the controller ------------------------------------------------------------------------------------------------


def _run(gpu: SimulatedGPU, markers: object | None, until_s: float, predictor: object | None = None) -> Controller:
    ctrl = Controller(
        gpu,
        config=ControllerConfig(policy=Policy.SEARCH),
        markers=markers,  # type: ignore[arg-type]
    )
    ctrl.run(until_s)
    return ctrl


def test_a_10ms_job_falls_back_without_markers_and_is_tuned_with_them() -> None:
    blind = _run(_job(0.01), None, 120.0)
    assert any(d.event == "fallback_reference" for d in blind.decisions)
    assert blind.clock_changes[-1][3] is False  # never left the reference
    gpu = _job(0.01)
    ctrl = _run(gpu, SimulatedStepMarkers(gpu), 120.0)
    baseline = ctrl.baseline
    assert baseline is not None and baseline.timing == MARKERS
    true_period = gpu.truth.operating_point(1.0).iteration_s
    assert baseline.period_s == pytest.approx(true_period, rel=0.005)
    assert not any(d.event == "fallback_reference" for d in ctrl.decisions)
    assert ctrl.state is State.HOLDING and ctrl.clocks != ctrl.reference
    timed = [d for d in ctrl.decisions if d.period_s is not None]
    assert timed and {d.timing for d in timed} == {MARKERS}
    record = ctrl.decisions[-1].to_dict()
    assert tuple(record) == LOG_KEYS and record["timing"] == MARKERS


def test_markers_that_stop_make_the_phase_reprofile_on_the_signal() -> None:
    gpu = _job(0.1)
    ctrl = _run(gpu, _Window(SimulatedStepMarkers(gpu), off_s=150.0), 400.0)
    events = [(d.t_s, d.event, d.timing) for d in ctrl.decisions]
    stopped = [d for d in ctrl.decisions if "step markers stopped" in d.reason]
    assert stopped and stopped[0].t_s > 150.0
    assert any(e == "phase_change" and t > 150.0 for t, e, _ in events)
    assert ctrl.baseline is not None and ctrl.baseline.timing == SIGNAL
    assert all(tm in (None, MARKERS) for t, _, tm in events if t < 150.0)


def test_markers_that_appear_while_holding_on_the_signal_take_over() -> None:
    gpu = _job(0.1)
    ctrl = _run(gpu, _Window(SimulatedStepMarkers(gpu), on_s=200.0), 500.0)
    appeared = [d for d in ctrl.decisions if d.event == "markers_appeared"]
    assert len(appeared) == 1 and appeared[0].t_s > 200.0
    assert ctrl.baseline is not None and ctrl.baseline.timing == MARKERS


def test_controller_refuses_markers_beside_its_own_sampler() -> None:
    from gpoeo_rt.sampling import Sampler

    gpu = _job(0.1)
    with pytest.raises(ValueError, match="markers"):
        Controller(
            gpu,
            config=ControllerConfig(policy=Policy.SEARCH),
            sampler=Sampler(gpu),
            markers=_Window(SimulatedStepMarkers(gpu)),
        )
    assert no_markers()[0].size == 0


def _faster_at_lower_clock() -> SimulatedGPU:
    """A measured table whose 1000 MHz row runs 20% faster than the 1300 MHz reference (what two real mixbench sweeps
    say): true in this simulator, so only the instrument decides whether the controller may believe it."""
    rows = [dict(r) for r in sweep_rows() if r["workload"] == "bert"]
    for row in rows:
        if row["sm_clock_mhz"] == 1000.0 and row["mem_clock_mhz"] == 877.0:
            row["time_s"], row["power_w"] = 1.0, 150.0
    workload = SweepWorkload.from_rows(rows, sku="v100", workload="bert", iteration_s=0.1)
    return SimulatedGPU(workload, seed=3, allow_clock_writes=True)


def test_a_speedup_at_lower_clocks_is_an_alias_on_the_signal_but_measured_by_markers() -> None:
    blind = _run(_faster_at_lower_clock(), None, 300.0)
    fallback = [d for d in blind.decisions if d.event == "fallback_reference"]
    assert fallback and "alias" in fallback[0].reason
    assert blind.clocks == blind.reference
    gpu = _faster_at_lower_clock()
    marked = _run(gpu, SimulatedStepMarkers(gpu, seed=3), 300.0)
    assert not any(d.event == "fallback_reference" for d in marked.decisions)
    assert marked.state is State.HOLDING and marked.clocks == (1000, 877)
    probe = next(d for d in marked.decisions if d.event == "probe" and (d.sm_clock_mhz, d.mem_clock_mhz) == (1000, 877))
    assert probe.timing == MARKERS and probe.measured_time_ratio == pytest.approx(0.8, abs=0.01)
