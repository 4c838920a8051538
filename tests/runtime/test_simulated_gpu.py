"""The simulated GPU: a workload model that reacts to clocks like a GPU, with NVML's artefacts, in simulated time."""

from __future__ import annotations

import math
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from gpoeo_rt.device import (
    PRESET_NAMES,
    AnalyticWorkload,
    ClockWriteNotAllowedError,
    CounterSnapshot,
    GPUInvalidArgumentError,
    SimConfig,
    SimulatedGPU,
    SweepRangeError,
    SweepWorkload,
    h200_spec,
    has_gpm,
    open_gpu,
    parse_schedule,
    preset_workload,
)
from gpoeo_rt.device.simulated import lagged_waveform, work_waveform
from gpoeo_rt.features import FEATURE_NAMES
from gpoeo_rt.sampling import Sampler
from tests.runtime.sweep_rows import sweep_rows as _sweep_rows
from tests.runtime.sweep_rows import write_sweep_csv

QUIET = SimConfig(noise_frac=0.0, iteration_jitter=0.0, drift_frac=0.0, counter_noise=0.0)


def _sim(
    workload: str = "resnet50", *, config: SimConfig | None = None, seed: int | np.random.Generator = 0
) -> SimulatedGPU:
    gpu = open_gpu(0, simulate=workload, seed=seed, allow_clock_writes=True, sim_config=config)
    assert isinstance(gpu, SimulatedGPU)
    return gpu


def _mean_power(gpu: SimulatedGPU, seconds: float) -> float:
    t0 = gpu.now_s()
    gpu.clock.advance(seconds)
    samples = gpu.power_samples_since(t0)
    return float(samples.power_w.mean())


# --- the workload model ---


@pytest.mark.parametrize("name", [n for n in PRESET_NAMES if n != "idle"])
@pytest.mark.parametrize("mem", [2201, 3201])
def test_time_falls_and_power_rises_with_sm_clock(name: str, mem: int) -> None:
    workload = preset_workload(name)
    sms = h200_spec().clock_table.sm_clocks_mhz(mem)
    points = [workload.operating_point(sm, mem) for sm in sms]
    times = np.array([p.iteration_s for p in points])
    powers = np.array([p.power_w for p in points])
    assert np.all(np.diff(times) <= 1e-12)
    assert np.all(np.diff(powers) >= -1e-9)
    for p in points:
        assert 0.0 <= p.busy_fraction <= 1.0 and p.low_power_w < p.power_w
        assert all(0.0 <= p.features[f] <= 1.0 for f in FEATURE_NAMES)


def test_bound_types_react_to_the_right_clock() -> None:
    def slowdown(name: str, sm: int, mem: int) -> float:
        w = preset_workload(name)
        return w.operating_point(sm, mem).iteration_s / w.operating_point(1980, 3201).iteration_s

    # Compute-bound work slows with the SM clock, memory-bound work with the memory clock, host-bound work less.
    assert slowdown("resnet50", 990, 3201) > 1.6 > slowdown("resnet50_hoststall", 990, 3201)
    assert slowdown("membound", 990, 3201) < 1.2
    assert slowdown("membound", 1980, 2201) > 1.3 > 1.1 > slowdown("resnet50", 1980, 2201)
    # Memory-bound work saves energy at lower SM clocks for almost no time.
    membound = preset_workload("membound")
    e_hi = membound.operating_point(1980, 3201)
    e_lo = membound.operating_point(1200, 3201)
    assert e_lo.power_w * e_lo.iteration_s < 0.85 * e_hi.power_w * e_hi.iteration_s


def test_compute_bound_energy_has_an_interior_minimum() -> None:
    w = preset_workload("resnet50")
    sms = np.array(h200_spec().clock_table.sm_clocks_mhz(3201))
    energy = np.array([w.operating_point(sm, 3201).power_w * w.operating_point(sm, 3201).iteration_s for sm in sms])
    best = int(np.argmin(energy))
    assert 0 < best < len(sms) - 1  # race-to-idle is wrong at the top, leakage at the bottom


def test_analytic_workload_validates_shares() -> None:
    with pytest.raises(ValueError, match="<= 1"):
        AnalyticWorkload("x", h200_spec(), 0.1, 0.8, 0.5)


# --- the simulated device ---


def test_identity_clock_table_and_default_clocks() -> None:
    gpu = _sim()
    table = gpu.supported_clocks()
    assert table.mem_clocks_mhz == (2201, 3201) and len(table.sm_clocks_mhz(3201)) == 110
    assert gpu.current_clocks() == (1980, 3201)
    assert "H200" in gpu.name and gpu.uuid.startswith("GPU-simulated")


def test_writes_need_the_same_opt_in_as_real_hardware() -> None:
    gpu = open_gpu(0, simulate="resnet50")
    with pytest.raises(ClockWriteNotAllowedError):
        gpu.lock_clocks(1500, 3201)
    with pytest.raises(ClockWriteNotAllowedError):
        gpu.reset_clocks()
    with pytest.raises(GPUInvalidArgumentError):
        _sim().lock_clocks(1501, 3201)


def test_clock_change_takes_effect_after_the_settle_delay() -> None:
    gpu = _sim(config=SimConfig(settle_s=0.5, noise_frac=0.0, drift_frac=0.0))
    p_before = _mean_power(gpu, 5.0)
    t_set = gpu.now_s()
    gpu.lock_clocks(1005, 3201)
    assert gpu.current_clocks() == (1980, 3201)
    gpu.clock.advance(0.4)
    assert gpu.current_clocks() == (1980, 3201)
    gpu.clock.advance(0.2)
    assert gpu.current_clocks() == (1005, 3201)
    assert gpu.truth.effective_clocks(t_set + 0.49) == (1980, 3201)
    p_after = _mean_power(gpu, 5.0)
    assert p_after < 0.8 * p_before
    ends = gpu.truth.iterations(since_s=t_set + 1.0).t_s
    assert np.median(np.diff(ends)) == pytest.approx(gpu.truth.operating_point(gpu.now_s()).iteration_s, rel=0.02)
    gpu.reset_clocks()
    gpu.clock.advance(1.0)
    assert gpu.current_clocks() == (1980, 3201)
    assert [w[1:] for w in gpu.clock_writes] == [(1005, 3201), (1980, 3201)]


def test_a_clock_write_does_not_change_the_past() -> None:
    # The timeline runs ahead of now; a write rolls it back. What was observable before must not change.
    a, b = _sim(seed=3), _sim(seed=3)
    for gpu in (a, b):
        gpu.clock.advance(7.33)
        gpu.power_samples_since(0.0)
    a.lock_clocks(1200, 2201)
    a.clock.advance(3.0)
    b.clock.advance(3.0)
    sa, sb = a.power_samples_since(7.0), b.power_samples_since(7.0)
    upto = sa.t_s <= 7.33 + a.config.settle_s
    np.testing.assert_array_equal(sa.t_s, sb.t_s)
    np.testing.assert_array_equal(sa.power_w[upto], sb.power_w[upto])
    assert np.mean(sa.power_w[~upto]) < 0.8 * np.mean(sb.power_w[~upto])
    ta, tb = a.truth.iterations(), b.truth.iterations()
    before = ta.t_s <= 7.33
    np.testing.assert_array_equal(ta.t_s[before], tb.t_s[tb.t_s <= 7.33])


def test_phase_change() -> None:
    gpu = _sim("gpt,membound@20", config=SimConfig(drift_frac=0.0))
    gpu.clock.advance(40.0)
    record = gpu.truth.iterations()
    assert set(record.phase.tolist()) == {0, 1}
    first, second = record.t_s[record.phase == 0], record.t_s[record.phase == 1]
    assert np.median(np.diff(first)) == pytest.approx(0.2568, rel=0.01)
    assert np.median(np.diff(second)) == pytest.approx(0.08, rel=0.01)
    assert first[-1] <= 20.0 + 1e-9 < second[0] and gpu.truth.phase_at(19.9) == 0 and gpu.truth.phase_at(20.1) == 1
    assert record.iteration.tolist() == list(range(1, len(record) + 1))
    samples = gpu.power_samples_since(30.0)
    assert abs(samples.power_w.mean() - gpu.truth.operating_point(35.0).power_w) < 10.0


def test_slow_thermal_drift() -> None:
    gpu = _sim(config=SimConfig(noise_frac=0.0, drift_frac=0.04, drift_tau_s=120.0))
    early = _mean_power(gpu, 10.0)
    gpu.clock.advance(600.0)
    late = _mean_power(gpu, 10.0)
    assert 1.03 < late / early < 1.045  # warmed up by ~4 %


def test_nvml_artefacts_50hz_buffer_10hz_refresh() -> None:
    gpu = _sim()
    gpu.clock.advance(1.0)
    samples = gpu.power_samples_since(0.0)
    assert len(samples) == 50
    np.testing.assert_allclose(np.diff(samples.t_s), 0.02)
    assert np.ptp(samples.power_w) > 100.0  # the waveform within iterations is visible at 50 Hz
    # Polled power and energy change only on 100 ms refreshes.
    gpu.clock.advance_to(1.201)
    p, e = gpu.power_w(), gpu.energy_j()
    gpu.clock.advance(0.09)
    assert (gpu.power_w(), gpu.energy_j()) == (p, e)
    gpu.clock.advance(0.02)
    assert gpu.energy_j() > e
    # The driver's buffer is finite: reading too rarely loses samples.
    gpu.clock.advance(10.0)
    assert len(gpu.power_samples_since(0.0)) == gpu.config.buffer_capacity


def test_energy_counter_matches_power() -> None:
    gpu = _sim()
    e0 = gpu.energy_j()
    seen = []
    for _ in range(100):
        gpu.clock.advance(0.2)
        seen.append(gpu.power_samples_since(gpu.now_s() - 0.2).power_w)
    mean_power_w = float(np.concatenate(seen).mean())
    assert gpu.energy_j() - e0 == pytest.approx(mean_power_w * 20.0, rel=0.01)
    assert gpu.truth.energy_j() == pytest.approx(gpu.energy_j(), rel=1e-3)


def test_counter_snapshots() -> None:
    gpu = _sim()
    first = gpu.counter_snapshot()
    assert first.interval_s == 0 and all(math.isnan(v) for v in first.features.values())
    gpu.clock.advance(0.05)
    assert gpu.counter_snapshot() is first  # GPM needs >= 100 ms between samples
    gpu.clock.advance(1.0)
    snap = gpu.counter_snapshot()
    assert snap.interval_s == pytest.approx(1.05) and snap.source == "simulated"
    assert snap.features["feat_sm_active"] == pytest.approx(0.92 * 0.95, abs=0.03)
    # Lower memory clock on a compute-bound job: the DRAM busy fraction rises (same bytes, lower peak).
    gpu.lock_clocks(1980, 2201)
    gpu.clock.advance(2.0)
    gpu.counter_snapshot()
    gpu.clock.advance(2.0)
    assert gpu.counter_snapshot().features["feat_dram_active"] > snap.features["feat_dram_active"] * 1.2


def test_counters_only_where_a_real_gpu_of_that_name_has_nvml_gpm() -> None:
    """Realistic by default: NVML GPM exists on Hopper and later only, so a simulated V100 (a sweep-driven job)
    gives no counters, as the real one does; `counters` forces them on or off for experiments."""
    assert has_gpm("NVIDIA H200") and has_gpm("NVIDIA H100 80GB HBM3") and has_gpm("simulated synthetic-h200")
    assert has_gpm("NVIDIA GH200 480GB") and has_gpm("NVIDIA B200")
    assert not has_gpm("Tesla V100-SXM2-16GB") and not has_gpm("simulated quadro-rtx-8000")
    assert not has_gpm("NVIDIA A100-SXM4-80GB") and not has_gpm("NVIDIA GeForce RTX 4090")
    workload = SweepWorkload.from_rows(_sweep_rows(), workload="bert")

    def snapshot(gpu: SimulatedGPU) -> CounterSnapshot:
        gpu.counter_snapshot()
        gpu.clock.advance(1.0)
        return gpu.counter_snapshot()

    v100 = snapshot(SimulatedGPU(workload, config=QUIET))
    assert v100.source == "none" and all(math.isnan(v) for v in v100.features.values())
    forced = snapshot(SimulatedGPU(workload, config=replace(QUIET, counters="sweep")))
    assert forced.source == "simulated" and forced.features["feat_dram_active"] == pytest.approx(0.3)
    assert snapshot(_sim()).source == "simulated"  # the simulated H200
    assert snapshot(_sim(config=replace(QUIET, counters="none"))).source == "none"
    with pytest.raises(ValueError, match="simulated counters 'gpm'"):
        SimulatedGPU(workload, config=replace(QUIET, counters="gpm"))


def test_deterministic_with_a_seed_and_independent_of_query_pattern() -> None:
    def run(seed: int, step_s: float) -> np.ndarray:
        gpu = _sim(seed=seed)
        out = []
        last = 0.0
        while gpu.now_s() < 20.0 - 1e-9:
            gpu.clock.advance(step_s)
            s = gpu.power_samples_since(last)
            if len(s):
                last = float(s.t_s[-1])
                out.append(s.power_w)
        return np.concatenate(out)

    a = run(7, 0.25)
    np.testing.assert_array_equal(a, run(7, 0.25))
    np.testing.assert_allclose(a, run(7, 1.0), rtol=1e-12)
    assert not np.allclose(a, run(8, 0.25))
    gen_a = _sim(seed=np.random.default_rng(5))  # an injected Generator works too
    gen_b = _sim(seed=np.random.default_rng(5))
    gen_a.clock.advance(2.0)
    gen_b.clock.advance(2.0)
    np.testing.assert_array_equal(gen_a.power_samples_since(0).power_w, gen_b.power_samples_since(0).power_w)


def test_long_runs_keep_bounded_history() -> None:
    gpu = _sim(config=SimConfig(history_s=30.0))
    for _ in range(200):
        gpu.clock.advance(1.0)
        gpu.power_samples_since(gpu.now_s() - 1.0)
    assert gpu.truth.iterations_completed == pytest.approx(200 / 0.1042, rel=0.01)
    kept = gpu.truth.iterations()
    assert kept.t_s[0] > 100.0 and kept.iteration[-1] == gpu.truth.iterations_completed


def test_simulation_is_fast() -> None:
    # Loose guard only (the real figure is ~0.5 s CPU per simulated hour): 1 h of a 100 ms job, 1 s windows.
    gpu = _sim()
    sampler = Sampler(gpu)
    t0 = time.process_time()
    n = 0
    while gpu.now_s() < 3600.0:
        n += len(sampler.collect(1.0).t_s)
    assert n == 180_000
    assert time.process_time() - t0 < 20.0


# --- sweep-driven ---


def test_sweep_reproduces_measured_points_and_interpolates() -> None:
    w = SweepWorkload.from_rows(_sweep_rows(), sku="v100", workload="bert")
    for row in _sweep_rows()[:6]:
        op = w.operating_point(float(row["sm_clock_mhz"]), float(row["mem_clock_mhz"]))  # type: ignore[arg-type]
        assert op.iteration_s == row["time_s"] and op.power_w == row["power_w"]
        assert op.features["feat_dram_active"] == pytest.approx(row["feat_dram_active"])
        assert math.isnan(op.features["feat_fp16_active"])
    mid = w.operating_point(850.0, 877.0)
    assert mid.iteration_s == pytest.approx(1.75) and mid.power_w == pytest.approx(140.0)
    between = w.time_power(1000.0, 788.5)
    assert between == pytest.approx((1.5 * 1.075, (160.0 + 160.0 / 1.15) / 2))
    with pytest.raises(SweepRangeError):
        w.operating_point(1400.0, 877.0)
    with pytest.raises(SweepRangeError):
        w.operating_point(1000.0, 900.0)
    table = w.clock_table()
    assert table.mem_clocks_mhz == (700, 877) and table.sm_clocks_mhz(877) == (700, 1000, 1300)
    assert (table.default_sm_mhz, table.default_mem_mhz) == (1300, 877)
    grid = SweepWorkload.from_rows(_sweep_rows(), workload="bert", table="grid", sm_step_mhz=100).clock_table()
    assert grid.sm_clocks_mhz(877) == tuple(range(700, 1301, 100))
    scaled = SweepWorkload.from_rows(_sweep_rows(), workload="bert", iteration_s=0.2)
    assert scaled.operating_point(1300.0, 877.0).iteration_s == pytest.approx(0.2)
    assert scaled.operating_point(700.0, 877.0).iteration_s == pytest.approx(0.2 * 2.0 / 1.25)


def test_sweep_rows_are_validated() -> None:
    with pytest.raises(ValueError, match="one \\(sku, workload\\)"):
        SweepWorkload.from_rows(_sweep_rows())
    no_ref = [{**r, "ref": False} for r in _sweep_rows() if r["workload"] == "bert"]
    with pytest.raises(ValueError, match="exactly one ref"):
        SweepWorkload.from_rows(no_ref)


def test_sweep_driven_gpu_from_csv(tmp_path: Path) -> None:
    path = write_sweep_csv(tmp_path / "sweeps.csv", _sweep_rows())
    schedule = parse_schedule(f"{path}:v100:bert")
    gpu = SimulatedGPU(schedule, config=QUIET, allow_clock_writes=True)
    assert gpu.current_clocks() == (1300, 877) and "v100" in gpu.name
    with pytest.raises(GPUInvalidArgumentError):
        gpu.lock_clocks(1100, 877)  # not measured: the search can never ask for it
    gpu.lock_clocks(1000, 700)
    gpu.clock.advance(1.0)
    t_start = gpu.now_s()
    gpu.clock.advance(60.0)
    ends = gpu.truth.iterations(since_s=t_start).t_s
    assert np.mean(np.diff(ends)) == pytest.approx(1.5 * 1.15, rel=1e-6)
    # The mean power over whole iterations is the measured power.
    e0, e1 = ends[0], ends[-1]
    samples = gpu.power_samples_since(0.0)  # only the buffer's last 2.4 s: use the energy counter instead
    assert len(samples) == 120
    energy = gpu.truth.energy_j(e1) - gpu.truth.energy_j(e0)
    assert energy / (e1 - e0) == pytest.approx(160.0 / 1.15, rel=0.01)


def test_the_power_lag_keeps_each_iterations_energy_and_softens_a_host_stall() -> None:
    op = preset_workload("resnet50_hoststall").operating_point(1980, 3201)
    u = (np.arange(512) + 0.5) / 512
    work = work_waveform(u, op)
    seen = lagged_waveform(op, SimConfig().power_lag_s / op.iteration_s)
    assert np.mean(seen) == pytest.approx(np.mean(work), rel=1e-9) and np.mean(work) == pytest.approx(1.0, rel=0.01)
    low = op.low_power_w / op.power_w
    assert np.min(work) == pytest.approx(low)
    assert np.min(seen) > low + 0.05 and np.max(seen) < np.max(work)  # a 20 ms stall never reaches its low power
    # Without a lag, the simulator samples the work waveform itself.
    gpu = SimulatedGPU(preset_workload("resnet50_hoststall"), config=replace(QUIET, power_lag_s=0.0))
    gpu.clock.advance(2.0)
    assert np.min(gpu.power_samples_since(0.0).power_w) < op.low_power_w * 1.01
