"""The sampling layer over the simulated GPU and over the fake NVML backend; nothing here sleeps for real."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest

from gpoeo_rt.device import NVMLGPU, SimConfig, SimulatedGPU, open_gpu
from gpoeo_rt.sampling import ITERATIONS_FILE, Sampler, merge_windows, record_trace
from tests.runtime.fake_nvml import FakeNVML


def _sim(workload: str = "resnet50", config: SimConfig | None = None) -> SimulatedGPU:
    gpu = open_gpu(0, simulate=workload, seed=1, allow_clock_writes=True, sim_config=config)
    assert isinstance(gpu, SimulatedGPU)
    return gpu


def test_consecutive_windows_have_every_sample_once() -> None:
    gpu = _sim()
    sampler = Sampler(gpu)
    windows = [sampler.collect(2.0) for _ in range(5)]
    stamps = np.concatenate([w.t_s for w in windows])
    assert len(stamps) == 5 * 100
    np.testing.assert_allclose(np.diff(stamps), 0.02, atol=1e-9)
    for w in windows:
        assert w.duration_s == pytest.approx(2.0)
        assert np.all((w.t_s > w.start_s - 1e-9) & (w.t_s <= w.end_s + 1e-9))


def test_energy_is_read_once_per_window_and_matches_power() -> None:
    gpu = _sim()
    sampler = Sampler(gpu)
    windows = [sampler.collect(5.0) for _ in range(4)]
    assert gpu.stats.energy_reads == 4 + 1  # one baseline, then one per window
    for w in windows:
        assert w.counter_power_w == pytest.approx(w.mean_power_w, rel=0.02)
    assert sum(w.energy_j for w in windows) == pytest.approx(gpu.truth.energy_j(), rel=0.01)


def test_counters_cover_each_window() -> None:
    gpu = _sim()
    sampler = Sampler(gpu)
    sampler.collect(1.0)
    w = sampler.collect(1.0)
    assert w.counters.end_s == pytest.approx(w.end_s) and w.counters.interval_s == pytest.approx(1.0)
    assert 0.5 < w.counters.features["feat_sm_active"] <= 1.0


def test_iterations_from_an_injected_counter() -> None:
    gpu = _sim()
    assert Sampler(gpu).collect(1.0).iterations is None  # the reader interface knows no iterations
    sampler = Sampler(gpu, iteration_counter=lambda: gpu.truth.iterations_completed)
    counts = [sampler.collect(10.0).iterations for _ in range(3)]
    for n in counts:
        assert n is not None and abs(n - 10.0 / 0.1042) <= 1


def test_a_gap_between_windows_starts_fresh() -> None:
    gpu = _sim()
    sampler = Sampler(gpu)
    sampler.collect(1.0)
    gpu.clock.advance(3.0)  # something else used the time
    reads = gpu.stats.energy_reads
    w = sampler.collect(1.0)
    assert gpu.stats.energy_reads == reads + 2  # a new baseline
    assert w.t_s[0] > w.start_s and len(w.t_s) == 50
    assert w.energy_j == pytest.approx(w.mean_power_w * 1.0, rel=0.1)


def test_a_window_that_continues_the_last_holds_the_pause() -> None:
    """The daemon analyses a window before it asks for the next: a profiling window continues the last one, so
    the pause's samples (still in the driver's buffer) are not lost and the two windows' samples touch."""
    gpu = _sim()
    sampler = Sampler(gpu)
    first = sampler.collect(1.0)
    gpu.clock.advance(0.5)  # the analysis
    reads = gpu.stats.energy_reads
    w = sampler.collect(1.0, continue_within_s=2.0)
    assert gpu.stats.energy_reads == reads + 1  # no new baseline read
    assert w.start_s == first.end_s and w.duration_s == pytest.approx(1.5)
    stamps = np.concatenate([first.t_s, w.t_s])
    np.testing.assert_allclose(np.diff(stamps), 0.02, atol=1e-9)
    assert w.energy_j == pytest.approx(w.mean_power_w * 1.5, rel=0.1)
    gpu.clock.advance(3.0)  # longer than asked for: a fresh start, as without continue_within_s
    late = sampler.collect(1.0, continue_within_s=2.0)
    assert late.start_s > w.end_s + 2.9 and len(late.t_s) == 50


def test_merged_windows_are_the_one_window_they_span() -> None:
    gpu = _sim()
    sampler = Sampler(gpu, iteration_counter=lambda: gpu.truth.iterations_completed)
    sampler.collect(1.0)
    parts = [sampler.collect(s) for s in (1.0, 2.0, 3.0)]
    merged = merge_windows(parts)
    assert (merged.start_s, merged.end_s) == (parts[0].start_s, parts[-1].end_s)
    assert len(merged.t_s) == len(merged.power_w) == 300
    assert merged.energy_j == pytest.approx(sum(w.energy_j for w in parts))
    assert merged.iterations == sum(w.iterations or 0 for w in parts)
    active = [w.counters.features["feat_sm_active"] for w in parts]
    assert merged.counters.features["feat_sm_active"] == pytest.approx(np.average(active, weights=[1, 2, 3]))
    assert merge_windows(parts[:1]) is parts[0]
    with pytest.raises(ValueError):
        merge_windows([])


def test_the_energy_counter_is_read_through_a_window_when_asked() -> None:
    """Profiling windows read the counter every 100 ms (detection.counter compares its interval means with the
    samples'); windows that continue each other share the reading at their boundary."""
    gpu = _sim()
    sampler = Sampler(gpu)
    a = sampler.collect(3.0, energy_every_s=0.1)
    b = sampler.collect(2.0, energy_every_s=0.1)
    for w in (a, b):
        assert w.energy_t_s[0] == w.start_s and w.energy_t_s[-1] == pytest.approx(w.end_s)
        assert len(w.energy_t_s) == round(w.duration_s / 0.1) + 1
        assert np.all(np.diff(w.energy_read_j) > 0)  # the simulated counter refreshes at 10 Hz, as it is read
        assert w.energy_read_j[-1] - w.energy_read_j[0] == pytest.approx(w.energy_j)
    merged = merge_windows([a, b])
    assert len(merged.energy_t_s) == len(a.energy_t_s) + len(b.energy_t_s) - 1
    assert np.all(np.diff(merged.energy_t_s) > 0)
    reads = gpu.stats.energy_reads
    assert sampler.collect(1.0).energy_t_s.size == 0  # not asked: the one read per window
    assert gpu.stats.energy_reads == reads + 1


class _StaleOnce:
    """A device whose third energy read returns the second's value, as a read sitting on the refresh may."""

    def __init__(self, gpu: SimulatedGPU) -> None:
        self._gpu, self._reads, self._last = gpu, 0, 0.0

    def __getattr__(self, name: str) -> object:
        return getattr(self._gpu, name)

    def energy_j(self) -> float:
        self._reads += 1
        if self._reads != 3:
            self._last = self._gpu.energy_j()
        return self._last


def test_energy_reads_move_half_a_step_off_the_refresh_after_a_repeat() -> None:
    gpu = _sim()
    sampler = Sampler(_StaleOnce(gpu))  # type: ignore[arg-type]
    w = sampler.collect(2.0, energy_every_s=0.1)
    steps = np.round(np.diff(w.energy_t_s), 6)
    assert steps[1] == 0.1 and steps[2] == 0.05 and set(steps[3:-1]) == {0.1}  # reads 1 and 2 (from 0) repeat
    later = sampler.collect(1.0, energy_every_s=0.1)  # the next window keeps to the moved grid
    assert np.round((later.energy_t_s[1] - w.energy_t_s[3]) / 0.1, 6) % 1 == 0


class _StaleAt:
    """A device whose first energy read at or after each of `times_s` returns the read before it (a read that
    saw no refresh since the last)."""

    def __init__(self, gpu: SimulatedGPU, times_s: list[float]) -> None:
        self._gpu, self._times, self._last = gpu, sorted(times_s), 0.0

    def __getattr__(self, name: str) -> object:
        return getattr(self._gpu, name)

    def energy_j(self) -> float:
        if self._times and self._gpu.now_s() >= self._times[0] - 1e-9:
            self._times.pop(0)
            return self._last
        self._last = self._gpu.energy_j()
        return self._last


def test_a_window_that_continues_another_keeps_its_energy_reads_on_the_grid() -> None:
    """A window ends off the reads' grid (2.0 s, the grid at x.x5 s after a repeat); the next window continues it,
    and its first read on the grid repeats that end read. A repeat against a window's first reading says nothing
    about where the refreshes are: the grid stays, and the two windows are read as one window would be (before,
    the grid moved half a step at every joined window's start)."""
    gpu = _sim()
    t0 = gpu.now_s()
    sampler = Sampler(_StaleAt(gpu, [t0 + 0.2, t0 + 2.05]))  # type: ignore[arg-type]
    a = sampler.collect(2.0, energy_every_s=0.1)
    b = sampler.collect(1.0, continue_within_s=1.0, energy_every_s=0.1)
    on_grid = np.round((b.energy_t_s[1:-1] - a.energy_t_s[3]) / 0.1, 6) % 1
    assert b.energy_t_s[0] == a.energy_t_s[-1] and np.all(on_grid == 0), b.energy_t_s - t0


def test_draining_too_rarely_loses_samples() -> None:
    gpu = _sim()
    lossy = Sampler(gpu, drain_period_s=5.0).collect(5.0)
    assert len(lossy.t_s) == gpu.config.buffer_capacity  # the driver kept only the last 2.4 s
    assert len(Sampler(gpu).collect(5.0).t_s) == 250


def test_phase_change_is_visible_in_windows() -> None:
    gpu = _sim("resnet50,membound@10", SimConfig(drift_frac=0.0))
    sampler = Sampler(gpu)
    before = sampler.collect(10.0)
    sampler.collect(1.0)
    after = sampler.collect(9.0)
    assert after.mean_power_w < before.mean_power_w - 30.0
    assert after.counters.features["feat_dram_active"] > 2 * before.counters.features["feat_dram_active"]


def test_invalid_arguments() -> None:
    gpu = _sim()
    with pytest.raises(ValueError):
        Sampler(gpu, drain_period_s=0.0)
    with pytest.raises(ValueError):
        Sampler(gpu).collect(0.0)


def test_sampler_over_the_nvml_backend_with_a_fake() -> None:
    fake = FakeNVML()
    fake.devices[0].power_w = 400.0
    with NVMLGPU(0, nvml=fake, clock=fake, monotonic_s=fake.now_s) as gpu:
        sampler = Sampler(gpu)
        first = sampler.collect(1.0)
        second = sampler.collect(1.0)
    assert len(first.t_s) + len(second.t_s) == 100
    assert second.energy_j == pytest.approx(400.0, abs=1.0)
    assert second.counters.features["feat_sm_active"] == pytest.approx(0.88)
    assert math.isnan(second.counters.features["feat_fp64_active"])
    assert fake.names_called().count("nvmlDeviceGetTotalEnergyConsumption") == 3
    assert fake.writes() == []


def test_record_trace_keeps_all_true_iterations_of_a_long_recording(tmp_path: Path) -> None:
    gpu = _sim(config=SimConfig(history_s=5.0))  # the simulator forgets older iterations: the recorder must not
    summary = record_trace(gpu, tmp_path, 30.0)
    assert summary.n_buffered == 1500 and summary.n_polled == 300
    with (tmp_path / ITERATIONS_FILE).open() as fh:
        numbers = [int(row["iteration"]) for row in csv.DictReader(fh)]
    assert numbers == list(range(1, len(numbers) + 1)) and len(numbers) == summary.n_iterations
    assert summary.n_iterations == pytest.approx(30.0 / 0.1042, abs=2)
