# ruff: noqa: N802, N815 - the fake must use pynvml's camelCase names
"""A fake pynvml module for the NVML backend's tests: it records every call and never touches a GPU.

It implements the subset of nvidia-ml-py that gpoeo_rt.device.nvml uses, with the real module's constants and
exception classes (importing pynvml loads no library; only nvmlInit would, and the fake never calls it). Time is
the fake's own (`now_s`, `sleep`/`advance`): buffered power samples appear every 20 ms, the energy counter
integrates power, GPM metrics over two samples less than 100 ms apart read 0, as on an H200.

Errors are injected per function (`fail`), e.g. no permission, not supported, or the GPU lost mid-run; a call can
also be made to hang (`hang`: it blocks in real time until the test releases it), as NVML does on a GPU with Xid
errors.
Locked-clock state is kept so tests can assert the GPU ends at its default clocks.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml as _real

GPM_METRIC_MAX = 32


@dataclass
class FakeDevice:
    name: str = "NVIDIA H200"
    uuid: str = "GPU-fake-0000"
    mem_clocks_mhz: tuple[int, ...] = (3201, 2201)
    sm_clocks_mhz: tuple[int, ...] = tuple(range(1980, 344, -15))  # NVML lists them descending
    default_sm_mhz: int = 1980
    default_mem_mhz: int = 3201
    power_w: float = 450.0  # what the sensors read now
    util_gpu_pct: int = 90
    util_mem_pct: int = 40
    gpm_supported: bool = True
    gpm_percent: dict[int, float] = field(
        default_factory=lambda: {
            _real.NVML_GPM_METRIC_SM_UTIL: 88.0,
            _real.NVML_GPM_METRIC_SM_OCCUPANCY: 40.0,
            _real.NVML_GPM_METRIC_DRAM_BW_UTIL: 42.0,
            _real.NVML_GPM_METRIC_FP16_UTIL: 5.0,
            _real.NVML_GPM_METRIC_FP32_UTIL: 12.0,
            _real.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 50.0,
            # FP64 deliberately missing: its per-metric status is NOT_SUPPORTED
        }
    )
    mem_lock_supported: bool = True
    locked_sm_mhz: tuple[int, int] | None = None
    locked_mem_mhz: tuple[int, int] | None = None
    energy_mj: float = 46_455_354.0
    samples: list[tuple[int, int]] = field(default_factory=list)  # (timestamp µs, mW), the driver's ring buffer
    buffer_capacity: int = 120
    # Optional power signal: (t_s, device) -> W at that time (e.g. a periodic training job whose period and level
    # depend on the clocks); None: the constant power_w.
    waveform: Callable[[float, FakeDevice], float] | None = None
    pids: list[int] = field(default_factory=list)  # processes with a CUDA context on it (nvml*RunningProcesses)

    @property
    def sm_clock_mhz(self) -> int:
        return self.locked_sm_mhz[1] if self.locked_sm_mhz else self.default_sm_mhz

    @property
    def mem_clock_mhz(self) -> int:
        return self.locked_mem_mhz[1] if self.locked_mem_mhz else self.default_mem_mhz


@dataclass
class _Fault:
    code: int
    after_calls: int  # successful calls before the first failure
    times: int | None  # failures before it heals (None: never heals)


class _FakeGpmSample:
    def __init__(self) -> None:
        self.t_s: float | None = None
        self.device: FakeDevice | None = None
        self.freed = False


class _FakeMetricsGet:
    """Stands in for pynvml.c_nvmlGpmMetricsGet_t (positional metrics[i].metricId in, value/nvmlReturn out)."""

    def __init__(self) -> None:
        self.version = 0
        self.numMetrics = 0
        self.sample1: _FakeGpmSample | None = None
        self.sample2: _FakeGpmSample | None = None
        self.metrics = [SimpleNamespace(metricId=0, value=0.0, nvmlReturn=0) for _ in range(GPM_METRIC_MAX)]


class FakeNVML:
    """Pass an instance where the backend expects the pynvml module: `NVMLGPU(nvml=fake, clock=fake, ...)`."""

    NVMLError = _real.NVMLError
    c_nvmlGpmMetricsGet_t = _FakeMetricsGet

    def __init__(
        self,
        devices: list[FakeDevice] | None = None,
        *,
        root: bool = False,
        driver_loaded: bool = True,
        start_s: float = 1_796_218_500.0,
    ) -> None:
        self.devices = devices if devices is not None else [FakeDevice()]
        self.root = root
        self.driver_loaded = driver_loaded
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.initialised = 0
        self._t_s = start_s
        self._next_sample_s = start_s
        self._faults: dict[str, _Fault] = {}
        self._hangs: dict[str, threading.Event] = {}
        self._ok_calls: dict[str, int] = {}
        self.gpm_sample_times: list[float] = []

    def __getattr__(self, name: str) -> Any:
        """The real module's NVML_* constants: same names, same values. Anything else is missing, as a function
        an old binding lacks would be."""
        value = getattr(_real, name, None) if name.startswith("NVML_") else None
        if not isinstance(value, int):
            raise AttributeError(name)
        return value

    # --- test controls ---

    def now_s(self) -> float:
        return self._t_s

    def advance(self, dt_s: float) -> None:
        """Let fake time pass: power samples every 20 ms, the energy counter integrates power."""
        end = self._t_s + dt_s
        while self._next_sample_s + 0.02 <= end + 1e-9:
            self._next_sample_s += 0.02
            for dev in self.devices:
                if dev.waveform is not None:
                    dev.power_w = dev.waveform(self._next_sample_s, dev)
                    dev.energy_mj += dev.power_w * 0.02 * 1000.0
                dev.samples.append((round(self._next_sample_s * 1e6), round(dev.power_w * 1000)))
                del dev.samples[: -dev.buffer_capacity]
        for dev in self.devices:
            if dev.waveform is None:
                dev.energy_mj += dev.power_w * dt_s * 1000.0
        self._t_s = end

    def sleep(self, dt_s: float) -> None:
        self.advance(max(dt_s, 0.0))

    def fail(self, fn_name: str, code: int, *, after_calls: int = 0, times: int | None = None) -> None:
        """Make fn_name raise NVMLError(code) after `after_calls` more successful calls, `times` times."""
        self._ok_calls[fn_name] = 0
        self._faults[fn_name] = _Fault(code, after_calls, times)

    def hang(self, fn_name: str) -> threading.Event:
        """Make every call of fn_name block until the returned event is set (at most 60 s, a safety net)."""
        release = self._hangs[fn_name] = threading.Event()
        return release

    def names_called(self) -> list[str]:
        return [name for name, _ in self.calls]

    def writes(self) -> list[tuple[str, tuple[Any, ...]]]:
        return [(n, a) for n, a in self.calls if n.startswith(("nvmlDeviceSet", "nvmlDeviceReset"))]

    # --- plumbing ---

    def _enter(self, fn_name: str, *args: Any) -> None:
        self.calls.append((fn_name, args))
        release = self._hangs.get(fn_name)
        if release is not None:
            release.wait(60.0)
        fault = self._faults.get(fn_name)
        if fault is not None:
            done = self._ok_calls.get(fn_name, 0)
            if done >= fault.after_calls:
                if fault.times is not None:
                    fault.times -= 1
                    if fault.times <= 0:
                        del self._faults[fn_name]
                raise _real.NVMLError(fault.code)
            self._ok_calls[fn_name] = done + 1
        if fn_name != "nvmlInit" and not self.initialised:
            raise _real.NVMLError(_real.NVML_ERROR_UNINITIALIZED)

    @staticmethod
    def _dev(handle: Any) -> FakeDevice:
        assert isinstance(handle, FakeDevice), f"not a device handle: {handle!r}"
        return handle

    # --- the pynvml subset ---

    def nvmlInit(self) -> None:
        self._enter("nvmlInit")
        if not self.driver_loaded:
            raise _real.NVMLError(_real.NVML_ERROR_LIBRARY_NOT_FOUND)
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.initialised -= 1

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeDevice:
        self._enter("nvmlDeviceGetHandleByIndex", index)
        if not 0 <= index < len(self.devices):
            raise _real.NVMLError(_real.NVML_ERROR_INVALID_ARGUMENT)
        return self.devices[index]

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[SimpleNamespace]:
        self._enter("nvmlDeviceGetComputeRunningProcesses", handle)
        return [SimpleNamespace(pid=pid, usedGpuMemory=1 << 30) for pid in self._dev(handle).pids]

    def nvmlDeviceGetName(self, handle: Any) -> str:
        self._enter("nvmlDeviceGetName", handle)
        return self._dev(handle).name

    def nvmlDeviceGetUUID(self, handle: Any) -> bytes:
        self._enter("nvmlDeviceGetUUID", handle)
        return self._dev(handle).uuid.encode()  # older bindings return bytes: the backend must cope

    def nvmlDeviceGetSupportedMemoryClocks(self, handle: Any) -> list[int]:
        self._enter("nvmlDeviceGetSupportedMemoryClocks", handle)
        return list(self._dev(handle).mem_clocks_mhz)

    def nvmlDeviceGetSupportedGraphicsClocks(self, handle: Any, mem_mhz: int) -> list[int]:
        self._enter("nvmlDeviceGetSupportedGraphicsClocks", handle, mem_mhz)
        dev = self._dev(handle)
        if mem_mhz not in dev.mem_clocks_mhz:
            raise _real.NVMLError(_real.NVML_ERROR_NOT_FOUND)
        return list(dev.sm_clocks_mhz)

    def nvmlDeviceGetClock(self, handle: Any, clock_type: int, clock_id: int) -> int:
        self._enter("nvmlDeviceGetClock", handle, clock_type, clock_id)
        dev = self._dev(handle)
        if clock_id != _real.NVML_CLOCK_ID_APP_CLOCK_DEFAULT:
            raise _real.NVMLError(_real.NVML_ERROR_NOT_SUPPORTED)
        return dev.default_mem_mhz if clock_type == _real.NVML_CLOCK_MEM else dev.default_sm_mhz

    def nvmlDeviceGetClockInfo(self, handle: Any, clock_type: int) -> int:
        self._enter("nvmlDeviceGetClockInfo", handle, clock_type)
        dev = self._dev(handle)
        return dev.mem_clock_mhz if clock_type == _real.NVML_CLOCK_MEM else dev.sm_clock_mhz

    def nvmlDeviceGetSamples(self, handle: Any, sampling_type: int, last_seen_us: int) -> tuple[int, list[Any]]:
        self._enter("nvmlDeviceGetSamples", handle, sampling_type, last_seen_us)
        assert sampling_type == _real.NVML_TOTAL_POWER_SAMPLES
        newer = [(t, v) for t, v in self._dev(handle).samples if t > last_seen_us]
        if not newer:  # the real binding raises NOT_FOUND when nothing is new
            raise _real.NVMLError(_real.NVML_ERROR_NOT_FOUND)
        samples = [SimpleNamespace(timeStamp=t, sampleValue=SimpleNamespace(uiVal=v)) for t, v in newer]
        return _real.NVML_VALUE_TYPE_UNSIGNED_INT, samples

    def nvmlDeviceGetFieldValues(self, handle: Any, field_ids: list[Any]) -> list[Any]:
        self._enter("nvmlDeviceGetFieldValues", handle, tuple(field_ids))
        dev = self._dev(handle)
        out = []
        for fid in field_ids:
            fid = fid[0] if isinstance(fid, tuple) else fid
            ok = fid in (_real.NVML_FI_DEV_POWER_INSTANT, _real.NVML_FI_DEV_POWER_AVERAGE)
            out.append(
                SimpleNamespace(
                    fieldId=fid,
                    nvmlReturn=_real.NVML_SUCCESS if ok else _real.NVML_ERROR_NOT_SUPPORTED,
                    value=SimpleNamespace(uiVal=round(dev.power_w * 1000) if ok else 0),
                )
            )
        return out

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        self._enter("nvmlDeviceGetPowerUsage", handle)
        return round(self._dev(handle).power_w * 1000)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any) -> int:
        self._enter("nvmlDeviceGetTotalEnergyConsumption", handle)
        return int(self._dev(handle).energy_mj)

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        self._enter("nvmlDeviceGetUtilizationRates", handle)
        dev = self._dev(handle)
        return SimpleNamespace(gpu=dev.util_gpu_pct, memory=dev.util_mem_pct)

    # --- GPM ---

    def nvmlGpmQueryDeviceSupport(self, handle: Any) -> Any:
        self._enter("nvmlGpmQueryDeviceSupport", handle)
        return SimpleNamespace(version=1, isSupportedDevice=int(self._dev(handle).gpm_supported))

    def nvmlGpmSampleAlloc(self) -> _FakeGpmSample:
        self._enter("nvmlGpmSampleAlloc")
        return _FakeGpmSample()

    def nvmlGpmSampleFree(self, sample: _FakeGpmSample) -> None:
        self._enter("nvmlGpmSampleFree", sample)
        sample.freed = True

    def nvmlGpmSampleGet(self, handle: Any, sample: _FakeGpmSample) -> _FakeGpmSample:
        self._enter("nvmlGpmSampleGet", handle, sample)
        dev = self._dev(handle)
        if not dev.gpm_supported:
            raise _real.NVMLError(_real.NVML_ERROR_NOT_SUPPORTED)
        self.gpm_sample_times.append(self._t_s)
        sample.t_s, sample.device = self._t_s, dev
        return sample

    def nvmlGpmMetricsGet(self, query: _FakeMetricsGet) -> _FakeMetricsGet:
        self._enter("nvmlGpmMetricsGet", query)
        s1, s2 = query.sample1, query.sample2
        assert s1 is not None and s2 is not None and s1.t_s is not None and s2.t_s is not None
        assert s2.device is not None
        # GPM refreshes every 100 ms: two samples closer than that read the same counters (0 activity).
        same_refresh = math.floor(s1.t_s * 10 + 1e-6) == math.floor(s2.t_s * 10 + 1e-6)
        for i in range(query.numMetrics):
            metric = query.metrics[i]
            pct = s2.device.gpm_percent.get(metric.metricId)
            if pct is None:
                metric.nvmlReturn, metric.value = _real.NVML_ERROR_NOT_SUPPORTED, 0.0
            else:
                metric.nvmlReturn, metric.value = _real.NVML_SUCCESS, 0.0 if same_refresh else pct
        return query

    # --- clock writes (need root, like the real ones) ---

    def _write(self, fn_name: str, handle: Any, *args: int) -> FakeDevice:
        self._enter(fn_name, handle, *args)
        if not self.root:
            raise _real.NVMLError(_real.NVML_ERROR_NO_PERMISSION)
        return self._dev(handle)

    def nvmlDeviceSetGpuLockedClocks(self, handle: Any, min_mhz: int, max_mhz: int) -> None:
        dev = self._write("nvmlDeviceSetGpuLockedClocks", handle, min_mhz, max_mhz)
        if min_mhz > max_mhz or min_mhz not in dev.sm_clocks_mhz or max_mhz not in dev.sm_clocks_mhz:
            raise _real.NVMLError(_real.NVML_ERROR_INVALID_ARGUMENT)
        dev.locked_sm_mhz = (min_mhz, max_mhz)

    def nvmlDeviceResetGpuLockedClocks(self, handle: Any) -> None:
        self._write("nvmlDeviceResetGpuLockedClocks", handle).locked_sm_mhz = None

    def nvmlDeviceSetMemoryLockedClocks(self, handle: Any, min_mhz: int, max_mhz: int) -> None:
        dev = self._write("nvmlDeviceSetMemoryLockedClocks", handle, min_mhz, max_mhz)
        if not dev.mem_lock_supported:
            raise _real.NVMLError(_real.NVML_ERROR_NOT_SUPPORTED)
        if min_mhz > max_mhz or min_mhz not in dev.mem_clocks_mhz or max_mhz not in dev.mem_clocks_mhz:
            raise _real.NVMLError(_real.NVML_ERROR_INVALID_ARGUMENT)
        dev.locked_mem_mhz = (min_mhz, max_mhz)

    def nvmlDeviceResetMemoryLockedClocks(self, handle: Any) -> None:
        dev = self._write("nvmlDeviceResetMemoryLockedClocks", handle)
        if not dev.mem_lock_supported:
            raise _real.NVMLError(_real.NVML_ERROR_NOT_SUPPORTED)
        dev.locked_mem_mhz = None
