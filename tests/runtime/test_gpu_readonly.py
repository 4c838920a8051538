"""Read-only checks against a real NVIDIA GPU through the NVML backend. Skipped without a GPU and driver.

These tests only READ: the backend is opened with clock writes disallowed and no lock/reset method is called.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator

import numpy as np
import pytest

from gpoeo_rt.device import NVMLGPU, GPUNotSupportedError

pytestmark = pytest.mark.gpu


def _nvml_available() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no library, no driver or no GPU: nothing to test here
        return False
    try:
        return int(pynvml.nvmlDeviceGetCount()) > 0
    finally:
        pynvml.nvmlShutdown()


@pytest.fixture(scope="module")
def gpu() -> Iterator[NVMLGPU]:
    if not _nvml_available():
        pytest.skip("no NVIDIA GPU/driver (pynvml.nvmlInit failed)")
    device = NVMLGPU(0, allow_clock_writes=False)
    assert not device.allow_clock_writes
    try:
        yield device
    finally:
        device.close()


def test_identity_and_clocks(gpu: NVMLGPU) -> None:
    assert gpu.name and gpu.uuid.startswith(("GPU-", "MIG-"))
    table = gpu.supported_clocks()
    assert len(table) > 0 and table.contains(table.default_sm_mhz, table.default_mem_mhz)
    sm, mem = gpu.current_clocks()
    assert sm > 0 and mem > 0


def test_power_energy_and_buffered_samples(gpu: NVMLGPU) -> None:
    assert 0.0 < gpu.power_w() < 2000.0
    try:
        e0 = gpu.energy_j()
    except GPUNotSupportedError:
        pytest.skip("no energy counter (pre-Volta)")
    time.sleep(0.3)  # real hardware: let the 10 Hz counters refresh
    assert gpu.energy_j() >= e0
    samples = gpu.power_samples_since(0.0)
    if len(samples):
        assert np.all(np.diff(samples.t_s) > 0) and np.all(samples.power_w >= 0.0)
        assert abs(samples.t_s[-1] - gpu.now_s()) < 60.0  # NVML stamps are wall-clock time


def test_gpm_counters(gpu: NVMLGPU) -> None:
    gpu.counter_snapshot()
    time.sleep(0.25)  # GPM needs > 100 ms between samples
    snap = gpu.counter_snapshot()
    if snap.source == "none":
        pytest.skip("GPM not available on this GPU (Hopper+ only)")
    assert snap.interval_s > 0.1
    for value in snap.features.values():
        assert math.isnan(value) or 0.0 <= value <= 1.0


def test_poll(gpu: NVMLGPU) -> None:
    reading = gpu.poll()
    assert reading.sm_clock_mhz > 0 and reading.call_s >= 0.0
