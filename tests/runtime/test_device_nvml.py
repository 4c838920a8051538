"""The NVML backend against a fake pynvml that records calls: no test here can touch a real GPU."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest

from gpoeo_rt.device import (
    NVMLGPU,
    ClockWriteNotAllowedError,
    GPUError,
    GPUInvalidArgumentError,
    GPULostError,
    GPUNoPermissionError,
    GPUNotFoundError,
    GPUNotSupportedError,
    open_gpu,
)
from gpoeo_rt.features import FEATURE_NAMES
from tests.runtime.fake_nvml import FakeDevice, FakeNVML


def _gpu(fake: FakeNVML, *, writes: bool = False, index: int = 0) -> NVMLGPU:
    return NVMLGPU(index, allow_clock_writes=writes, nvml=fake, clock=fake, monotonic_s=fake.now_s)


def test_importing_the_device_package_does_not_import_pynvml() -> None:
    import subprocess

    code = "import sys, gpoeo_rt.device, gpoeo_rt.sampling;print('pynvml' in sys.modules, 'onnxruntime' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_identity_and_clock_table() -> None:
    fake = FakeNVML()
    with _gpu(fake) as gpu:
        assert gpu.name == "NVIDIA H200"
        assert gpu.uuid == "GPU-fake-0000"  # bytes from the binding become str
        table = gpu.supported_clocks()
        assert table.mem_clocks_mhz == (2201, 3201)
        sms = table.sm_clocks_mhz(3201)
        assert sms[0] == 345 and sms[-1] == 1980 and len(sms) == 110 and list(sms) == sorted(sms)
        assert (table.default_sm_mhz, table.default_mem_mhz) == (1980, 3201)
        assert table.contains(1500, 2201) and not table.contains(1501, 2201)
        assert gpu.current_clocks() == (1980, 3201)
        gpu.supported_clocks()
        assert fake.names_called().count("nvmlDeviceGetSupportedMemoryClocks") == 1  # cached
    assert fake.initialised == 0  # shut down on close


def test_default_clocks_fall_back_to_the_highest_pair() -> None:
    fake = FakeNVML()
    fake.fail("nvmlDeviceGetClock", fake.NVML_ERROR_NOT_SUPPORTED)
    with _gpu(fake) as gpu:
        table = gpu.supported_clocks()
        assert (table.default_sm_mhz, table.default_mem_mhz) == (1980, 3201)


def test_writes_are_refused_without_opt_in_before_any_nvml_call() -> None:
    fake = FakeNVML(root=True)
    with _gpu(fake) as gpu:
        n_calls = len(fake.calls)
        with pytest.raises(ClockWriteNotAllowedError, match="read-only"):
            gpu.lock_clocks(1500, 3201)
        with pytest.raises(ClockWriteNotAllowedError):
            gpu.reset_clocks()
        assert len(fake.calls) == n_calls  # not even a read was made
    assert fake.writes() == []


def test_open_gpu_is_read_only_by_default() -> None:
    fake = FakeNVML(root=True)
    gpu = open_gpu(0, nvml=fake)
    try:
        with pytest.raises(ClockWriteNotAllowedError):
            gpu.lock_clocks(1500, 3201)
    finally:
        gpu.close()
    assert fake.writes() == []


def test_writes_with_opt_in_lock_memory_then_sm_and_close_restores_defaults() -> None:
    fake = FakeNVML(root=True)
    dev = fake.devices[0]
    gpu = _gpu(fake, writes=True)
    gpu.lock_clocks(1410, 2201)
    assert fake.writes() == [
        ("nvmlDeviceSetMemoryLockedClocks", (dev, 2201, 2201)),
        ("nvmlDeviceSetGpuLockedClocks", (dev, 1410, 1410)),
    ]
    assert gpu.current_clocks() == (1410, 2201)
    gpu.close()
    assert dev.locked_sm_mhz is None and dev.locked_mem_mhz is None
    assert (dev.sm_clock_mhz, dev.mem_clock_mhz) == (1980, 3201)
    assert fake.names_called()[-1] == "nvmlShutdown"


def test_reset_clocks() -> None:
    fake = FakeNVML(root=True)
    with _gpu(fake, writes=True) as gpu:
        gpu.lock_clocks(1005, 3201)
        gpu.reset_clocks()
        assert gpu.current_clocks() == (1980, 3201)
        assert [n for n, _ in fake.writes()][-2:] == [
            "nvmlDeviceResetGpuLockedClocks",
            "nvmlDeviceResetMemoryLockedClocks",
        ]


def test_unsupported_clock_pair_is_refused_before_nvml() -> None:
    fake = FakeNVML(root=True)
    with _gpu(fake, writes=True) as gpu:
        with pytest.raises(GPUInvalidArgumentError, match="not a supported clock pair"):
            gpu.lock_clocks(1001, 3201)
        assert fake.writes() == []


def test_no_permission_is_explained() -> None:
    fake = FakeNVML(root=False)
    with _gpu(fake, writes=True) as gpu:
        with pytest.raises(GPUNoPermissionError, match="CAP_SYS_ADMIN") as info:
            gpu.lock_clocks(1500, 3201)
        assert "--advise" in str(info.value) and info.value.nvml_code == fake.NVML_ERROR_NO_PERMISSION


def test_memory_lock_not_supported() -> None:
    # Pre-Ampere: memory locking is unsupported. With one memory clock that is fine, with several it is an error.
    fake = FakeNVML(
        root=True, devices=[FakeDevice(mem_clocks_mhz=(877,), default_mem_mhz=877, mem_lock_supported=False)]
    )
    with _gpu(fake, writes=True) as gpu:
        gpu.lock_clocks(1500, 877)
        assert fake.devices[0].locked_sm_mhz == (1500, 1500)
        gpu.reset_clocks()
    fake = FakeNVML(root=True, devices=[FakeDevice(mem_lock_supported=False)])
    with _gpu(fake, writes=True) as gpu, pytest.raises(GPUNotSupportedError):
        gpu.lock_clocks(1500, 2201)


def test_no_driver_and_bad_index() -> None:
    with pytest.raises(GPUNotFoundError, match="no NVIDIA driver"):
        _gpu(FakeNVML(driver_loaded=False))
    fake = FakeNVML()
    with pytest.raises(GPUNotFoundError, match="index 3"):
        _gpu(fake, index=3)
    assert fake.initialised == 0  # a failed open shuts NVML down again


def test_buffered_power_samples_since() -> None:
    fake = FakeNVML()
    fake.devices[0].power_w = 500.0
    with _gpu(fake) as gpu:
        assert len(gpu.power_samples_since(0.0)) == 0  # NOT_FOUND means "nothing new", not an error
        fake.advance(1.0)
        first = gpu.power_samples_since(0.0)
        assert len(first) == 50
        np.testing.assert_allclose(np.diff(first.t_s), 0.02, atol=2e-6)
        np.testing.assert_allclose(first.power_w, 500.0)
        fake.advance(0.1)
        newer = gpu.power_samples_since(float(first.t_s[-1]))
        assert len(newer) == 5 and newer.t_s[0] > first.t_s[-1]
        assert len(gpu.power_samples_since(float(newer.t_s[-1]))) == 0


def test_power_energy_and_poll() -> None:
    fake = FakeNVML()
    fake.devices[0].power_w = 300.0
    with _gpu(fake) as gpu:
        e0 = gpu.energy_j()
        fake.advance(2.0)
        assert gpu.energy_j() - e0 == pytest.approx(600.0, abs=1e-3)
        assert gpu.power_w() == pytest.approx(300.0)
        reading = gpu.poll()
        assert reading.power_instant_w == pytest.approx(300.0)
        assert reading.power_average_w == pytest.approx(300.0)
        assert (reading.sm_clock_mhz, reading.mem_clock_mhz) == (1980, 3201)
        assert reading.util_gpu_pct == 90


def test_gpm_snapshots_are_at_least_100ms_apart_and_map_to_features() -> None:
    fake = FakeNVML()
    with _gpu(fake) as gpu:
        first = gpu.counter_snapshot()
        assert first.source == "gpm" and first.interval_s == 0 and all(math.isnan(v) for v in first.features.values())
        fake.advance(0.05)
        assert gpu.counter_snapshot() is first  # too soon: no new GPM sample
        fake.advance(0.25)
        snap = gpu.counter_snapshot()
        assert snap.interval_s == pytest.approx(0.3)
        assert snap.features["feat_sm_active"] == pytest.approx(0.88)
        assert snap.features["feat_dram_active"] == pytest.approx(0.42)
        assert snap.features["feat_tensor_active"] == pytest.approx(0.50)
        assert math.isnan(snap.features["feat_fp64_active"])  # per-metric NOT_SUPPORTED: NaN, no exception
        assert set(snap.features) == set(FEATURE_NAMES)
        for _ in range(20):
            fake.advance(0.03)
            gpu.counter_snapshot()
        assert min(np.diff(fake.gpm_sample_times)) >= 0.1 - 1e-9
    assert fake.names_called().count("nvmlGpmSampleFree") == 2


def test_gpm_unsupported_reads_nan() -> None:
    fake = FakeNVML(devices=[FakeDevice(gpm_supported=False)])
    with _gpu(fake) as gpu:
        fake.advance(0.5)
        snap = gpu.counter_snapshot()
        assert snap.source == "none" and all(math.isnan(v) for v in snap.features.values())
        assert "nvmlGpmSampleGet" not in fake.names_called()


def test_gpm_failing_mid_run_is_disabled_not_fatal() -> None:
    fake = FakeNVML()
    fake.fail("nvmlGpmMetricsGet", fake.NVML_ERROR_UNKNOWN)
    with _gpu(fake) as gpu:
        gpu.counter_snapshot()
        fake.advance(0.2)
        assert gpu.counter_snapshot().source == "none"
        fake.advance(0.2)
        gpu.counter_snapshot()
        assert fake.names_called().count("nvmlGpmMetricsGet") == 1


def test_gpu_lost_mid_run() -> None:
    fake = FakeNVML()
    fake.fail("nvmlDeviceGetSamples", fake.NVML_ERROR_GPU_IS_LOST, after_calls=2)
    with _gpu(fake) as gpu:
        fake.advance(0.1)
        gpu.power_samples_since(0.0)
        gpu.power_samples_since(0.0)
        with pytest.raises(GPULostError, match="lost"):
            gpu.power_samples_since(0.0)
    fake = FakeNVML()
    fake.fail("nvmlGpmSampleGet", fake.NVML_ERROR_GPU_IS_LOST, after_calls=1)
    with _gpu(fake) as gpu:
        gpu.counter_snapshot()
        fake.advance(0.2)
        with pytest.raises(GPULostError):
            gpu.counter_snapshot()


@pytest.mark.parametrize(
    ("code_name", "error"),
    [
        ("NVML_ERROR_NOT_SUPPORTED", GPUNotSupportedError),
        ("NVML_ERROR_FUNCTION_NOT_FOUND", GPUNotSupportedError),
        ("NVML_ERROR_NO_PERMISSION", GPUNoPermissionError),
        ("NVML_ERROR_GPU_IS_LOST", GPULostError),
        ("NVML_ERROR_DRIVER_NOT_LOADED", GPUNotFoundError),
        ("NVML_ERROR_UNKNOWN", GPUError),
    ],
)
def test_error_mapping(code_name: str, error: type[GPUError]) -> None:
    fake = FakeNVML()
    code = getattr(fake, code_name)
    fake.fail("nvmlDeviceGetClockInfo", code)
    with _gpu(fake) as gpu:
        with pytest.raises(error) as info:
            gpu.current_clocks()
        assert info.value.nvml_code == code
        assert not isinstance(info.value, fake.NVMLError)  # never leaks the vendor exception type


def test_forbid_variable_blocks_real_nvml_with_clock_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpoeo_rt.device.nvml import FORBID_CLOCK_WRITES_ENV, NVMLGPU

    monkeypatch.setenv(FORBID_CLOCK_WRITES_ENV, "1")
    # Refused before pynvml is even imported, so this holds on machines with and without a GPU.
    with pytest.raises(ClockWriteNotAllowedError, match=FORBID_CLOCK_WRITES_ENV):
        NVMLGPU(0, allow_clock_writes=True)
