"""NVML backend on nvidia-ml-py (module `pynvml`), imported lazily so the rest of the runtime imports fast.

NVML errors are translated here, once, into gpoeo's exceptions. Clock writes need an explicit opt-in
(`allow_clock_writes=True`); without it every write raises ClockWriteNotAllowedError before any NVML call, so a
reader can never change a GPU by accident. Measured on an H200 (data/traces/h200/README.md): buffered power comes
at 50 Hz, polled power/energy/GPM refresh at 10 Hz, an energy read costs ~4 ms, GPM needs >= 100 ms between samples.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable
from types import MappingProxyType
from typing import Any

import numpy as np

from gpoeo_rt.device.base import GPU, ClockTable, CounterSnapshot, PolledReading, PowerSamples
from gpoeo_rt.device.clock import Clock, WallClock
from gpoeo_rt.device.errors import (
    ClockWriteNotAllowedError,
    GPUError,
    GPUInvalidArgumentError,
    GPULostError,
    GPUNoPermissionError,
    GPUNotFoundError,
    GPUNotSupportedError,
)
from gpoeo_rt.features import FEATURE_NAMES, GPM_METRIC_TO_FEATURE

# NVML return codes (nvml.h); read from the module when it has them, these are the documented values.
_CODES: dict[str, int] = {
    "NVML_SUCCESS": 0,
    "NVML_ERROR_INVALID_ARGUMENT": 2,
    "NVML_ERROR_NOT_SUPPORTED": 3,
    "NVML_ERROR_NO_PERMISSION": 4,
    "NVML_ERROR_NOT_FOUND": 6,
    "NVML_ERROR_DRIVER_NOT_LOADED": 9,
    "NVML_ERROR_LIBRARY_NOT_FOUND": 12,
    "NVML_ERROR_FUNCTION_NOT_FOUND": 13,
    "NVML_ERROR_GPU_IS_LOST": 15,
    "NVML_ERROR_RESET_REQUIRED": 16,
    "NVML_ERROR_GPU_NOT_FOUND": 28,
}

# nvmlValueType_t -> the union member that holds the value.
_VALUE_MEMBER: dict[int, str] = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def _import_pynvml() -> Any:
    try:
        import pynvml
    except ImportError as exc:  # the runtime depends on nvidia-ml-py, but say so clearly if it is missing
        raise GPUNotFoundError(f"cannot import pynvml (install nvidia-ml-py): {exc}") from exc
    return pynvml


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# Set (to anything) on machines where gpoeo must never change a GPU setting.
FORBID_CLOCK_WRITES_ENV = "GPOEO_FORBID_CLOCK_WRITES"


class NVMLGPU(GPU):
    """One NVIDIA GPU through NVML.

    `nvml` is the pynvml module (tests inject a fake that records calls); `clock` gives now_s and must be wall time
    for real NVML; `monotonic_s` times GPM spacing and call durations.
    """

    def __init__(
        self,
        index: int = 0,
        *,
        allow_clock_writes: bool = False,
        nvml: Any | None = None,
        clock: Clock | None = None,
        monotonic_s: Callable[[], float] = time.monotonic,
        gpm_min_interval_s: float = 0.1,
        restore_clocks_on_close: bool = True,
    ) -> None:
        if allow_clock_writes and nvml is None and os.environ.get(FORBID_CLOCK_WRITES_ENV):
            # Defence in depth for shared or borrowed machines (and our own GPU test runs): with this variable set,
            # no code path can open the real NVML with clock writes enabled, whatever its arguments.
            raise ClockWriteNotAllowedError(
                f"{FORBID_CLOCK_WRITES_ENV} is set: refusing to open GPU {index} with clock writes allowed"
            )
        self._nvml = nvml if nvml is not None else _import_pynvml()
        self._allow_clock_writes = bool(allow_clock_writes)
        self._clock: Clock = clock if clock is not None else WallClock()
        self._monotonic_s = monotonic_s
        self._gpm_min_interval_s = gpm_min_interval_s
        self._restore_on_close = restore_clocks_on_close
        self._code = {name: int(getattr(self._nvml, name, value)) for name, value in _CODES.items()}
        self._index = index
        self._initialised = False
        self._handle: Any = None
        self._table: ClockTable | None = None
        self._sm_locked = False
        self._mem_locked = False
        # GPM state: two sample buffers swapped after each snapshot, so the newer one is the next baseline.
        self._gpm_supported: bool | None = None
        self._gpm_metric_ids: list[tuple[str, int]] = []
        self._gpm_samples: list[Any] = []
        self._gpm_prev_t_s: float | None = None
        self._gpm_prev_mono_s = -math.inf
        self._last_snapshot: CounterSnapshot | None = None

        self._call("initialise NVML", "nvmlInit")
        self._initialised = True
        try:
            count = int(self._call("count GPUs", "nvmlDeviceGetCount"))
            if not 0 <= index < count:
                raise GPUNotFoundError(f"no GPU with index {index}: NVML sees {count} GPU(s)")
            self._handle = self._call(f"open GPU {index}", "nvmlDeviceGetHandleByIndex", index)
            self._name = _text(self._call("read the GPU name", "nvmlDeviceGetName", self._handle))
            self._uuid = _text(self._call("read the GPU UUID", "nvmlDeviceGetUUID", self._handle))
        except BaseException:
            self.close()
            raise

    # --- error translation (the only place NVMLError is caught) ---

    def _translate(self, what: str, code: int, detail: str) -> GPUError:
        c = self._code
        message = f"{what}: {detail} (NVML error {code})"
        if code == c["NVML_ERROR_NO_PERMISSION"]:
            return GPUNoPermissionError(message, nvml_code=code)
        if code in (c["NVML_ERROR_NOT_SUPPORTED"], c["NVML_ERROR_FUNCTION_NOT_FOUND"]):
            return GPUNotSupportedError(message, nvml_code=code)
        if code in (c["NVML_ERROR_GPU_IS_LOST"], c["NVML_ERROR_RESET_REQUIRED"]):
            return GPULostError(f"{message}: the GPU is lost or needs a reset", nvml_code=code)
        if code in (
            c["NVML_ERROR_DRIVER_NOT_LOADED"],
            c["NVML_ERROR_LIBRARY_NOT_FOUND"],
            c["NVML_ERROR_GPU_NOT_FOUND"],
        ):
            return GPUNotFoundError(f"{message}: no NVIDIA driver or GPU available", nvml_code=code)
        if code == c["NVML_ERROR_INVALID_ARGUMENT"]:
            return GPUInvalidArgumentError(message, nvml_code=code)
        return GPUError(message, nvml_code=code)

    def _call(self, what: str, fn_name: str, *args: Any, none_on: tuple[int, ...] = ()) -> Any:
        """Call nvml.<fn_name>(*args); NVML errors become GPUError subclasses, codes in none_on return None."""
        fn = getattr(self._nvml, fn_name, None)
        if fn is None:  # an older nvidia-ml-py without this function
            raise GPUNotSupportedError(f"{what}: this nvidia-ml-py has no {fn_name}")
        try:
            return fn(*args)
        except self._nvml.NVMLError as exc:
            code = int(getattr(exc, "value", -1))
            if code in none_on:
                return None
            raise self._translate(what, code, str(exc)) from exc

    def _optional(self, what: str, fn_name: str, *args: Any) -> Any:
        """Like _call, but a value the GPU does not support reads as None."""
        try:
            return self._call(what, fn_name, *args)
        except GPUNotSupportedError:
            return None

    # --- identity ---

    @property
    def index(self) -> int:
        return self._index

    @property
    def name(self) -> str:
        return self._name

    @property
    def uuid(self) -> str:
        return self._uuid

    @property
    def allow_clock_writes(self) -> bool:
        return self._allow_clock_writes

    @property
    def clock(self) -> Clock:
        return self._clock

    # --- clocks (read) ---

    def supported_clocks(self) -> ClockTable:
        if self._table is None:
            h = self._handle
            mems = self._call("list memory clocks", "nvmlDeviceGetSupportedMemoryClocks", h) or []
            mapping: dict[int, list[int]] = {}
            for mem in mems:
                sms = self._call(
                    f"list SM clocks for memory {mem} MHz",
                    "nvmlDeviceGetSupportedGraphicsClocks",
                    h,
                    int(mem),
                    none_on=(self._code["NVML_ERROR_NOT_FOUND"],),
                )
                if sms:
                    mapping[int(mem)] = [int(s) for s in sms]
            if not mapping:
                raise GPUNotSupportedError(f"GPU {self._index} ({self._name}) reports no supported clocks")
            default_sm, default_mem = self._default_clocks(mapping)
            self._table = ClockTable.from_mapping(mapping, default_sm, default_mem)
        return self._table

    def _default_clocks(self, mapping: dict[int, list[int]]) -> tuple[int, int]:
        """Default application clocks via nvmlDeviceGetClock (not the deprecated GetDefaultApplicationsClock);
        the highest supported pair when unavailable or not in the table."""
        mem_max = max(mapping)
        fallback = (max(mapping[mem_max]), mem_max)
        clock_id = getattr(self._nvml, "NVML_CLOCK_ID_APP_CLOCK_DEFAULT", 2)
        try:
            sm = self._call(
                "read default SM clock", "nvmlDeviceGetClock", self._handle, self._clock_type("SM"), clock_id
            )
            mem = self._call(
                "read default memory clock", "nvmlDeviceGetClock", self._handle, self._clock_type("MEM"), clock_id
            )
        except GPULostError:
            raise
        except GPUError:
            return fallback
        if int(mem) in mapping and int(sm) in mapping[int(mem)]:
            return int(sm), int(mem)
        return fallback

    def _clock_type(self, which: str) -> int:
        return int(getattr(self._nvml, f"NVML_CLOCK_{which}", {"GRAPHICS": 0, "SM": 1, "MEM": 2}[which]))

    def current_clocks(self) -> tuple[int, int]:
        sm = self._call("read SM clock", "nvmlDeviceGetClockInfo", self._handle, self._clock_type("SM"))
        mem = self._call("read memory clock", "nvmlDeviceGetClockInfo", self._handle, self._clock_type("MEM"))
        return int(sm), int(mem)

    # --- power and energy ---

    def power_samples_since(self, t_s: float) -> PowerSamples:
        # NVML's lastSeenTimeStamp is CPU time in µs; round() recovers the exact stamp a caller got back from us.
        last_us = round(t_s * 1e6) if t_s > 0 else 0
        result = self._call(
            "read buffered power samples",
            "nvmlDeviceGetSamples",
            self._handle,
            int(getattr(self._nvml, "NVML_TOTAL_POWER_SAMPLES", 0)),
            last_us,
            none_on=(self._code["NVML_ERROR_NOT_FOUND"],),  # NOT_FOUND = no new samples
        )
        if not result:
            return PowerSamples.empty()
        value_type, samples = result
        member = _VALUE_MEMBER.get(int(value_type), "uiVal")
        stamps_us = np.fromiter((int(s.timeStamp) for s in samples), dtype=np.int64, count=len(samples))
        values_mw = np.fromiter(
            (float(getattr(s.sampleValue, member)) for s in samples), dtype=np.float64, count=len(samples)
        )
        keep = stamps_us > last_us
        stamps_us, values_mw = stamps_us[keep], values_mw[keep]
        stamps_us, first = np.unique(stamps_us, return_index=True)  # sorted, one value per stamp
        return PowerSamples(stamps_us / 1e6, values_mw[first] / 1000.0)

    def _field_mw(self, field_name: str, fallback: int) -> float:
        field_id = int(getattr(self._nvml, field_name, fallback))
        values = self._optional(f"read {field_name}", "nvmlDeviceGetFieldValues", self._handle, [field_id])
        if not values or int(values[0].nvmlReturn) != self._code["NVML_SUCCESS"]:
            return math.nan
        return float(values[0].value.uiVal)

    def power_w(self) -> float:
        power_mw = self._field_mw("NVML_FI_DEV_POWER_INSTANT", 186)
        if math.isnan(power_mw):  # older drivers: the polled power (instantaneous before Ampere)
            power_mw = float(self._call("read power", "nvmlDeviceGetPowerUsage", self._handle))
        return power_mw / 1000.0

    def energy_j(self) -> float:
        energy_mj = self._call("read the energy counter", "nvmlDeviceGetTotalEnergyConsumption", self._handle)
        return float(energy_mj) / 1000.0

    # --- counters (GPM, Hopper+) ---

    def _gpm_available(self) -> bool:
        if self._gpm_supported is None:
            self._gpm_supported = False
            try:
                support = self._call("query GPM support", "nvmlGpmQueryDeviceSupport", self._handle)
                self._gpm_supported = bool(getattr(support, "isSupportedDevice", 0))
            except GPULostError:
                raise
            except GPUError:
                pass  # pre-Hopper GPU or an old driver: no GPM, counters read NaN
            for metric, feature in GPM_METRIC_TO_FEATURE.items():
                metric_id = getattr(self._nvml, f"NVML_GPM_METRIC_{metric}", None)
                if metric_id is not None:
                    self._gpm_metric_ids.append((feature, int(metric_id)))
            if not self._gpm_metric_ids:
                self._gpm_supported = False
        return self._gpm_supported

    def counter_snapshot(self) -> CounterSnapshot:
        now = self.now_s()
        if not self._gpm_available():
            return CounterSnapshot(now, now, source="none")
        mono = self._monotonic_s()
        if self._last_snapshot is not None and mono - self._gpm_prev_mono_s < self._gpm_min_interval_s:
            return self._last_snapshot  # GPM refreshes every 100 ms: a sample sooner would read 0 or NaN
        try:
            snapshot = self._gpm_sample(now)
        except (GPULostError, GPUNotFoundError):
            raise
        except GPUError:
            self._gpm_supported = False  # GPM failed mid-run (as the probe saw on some hosts): stop asking
            self._free_gpm()
            snapshot = CounterSnapshot(now, now, source="none")
        self._gpm_prev_mono_s = mono
        self._last_snapshot = snapshot
        return snapshot

    def _gpm_sample(self, now: float) -> CounterSnapshot:
        if not self._gpm_samples:
            self._gpm_samples = [self._call("allocate a GPM sample", "nvmlGpmSampleAlloc") for _ in range(2)]
        previous, current = self._gpm_samples
        self._call("take a GPM sample", "nvmlGpmSampleGet", self._handle, current)
        start = self._gpm_prev_t_s
        self._gpm_samples = [current, previous]  # the newer sample is the next baseline
        self._gpm_prev_t_s = now
        if start is None:
            return CounterSnapshot(now, now, source="gpm")
        nvml = self._nvml
        query = nvml.c_nvmlGpmMetricsGet_t()
        query.version = int(getattr(nvml, "NVML_GPM_METRICS_GET_VERSION", 1))
        query.numMetrics = len(self._gpm_metric_ids)
        query.sample1 = previous
        query.sample2 = current
        for i, (_, metric_id) in enumerate(self._gpm_metric_ids):
            query.metrics[i].metricId = metric_id
        self._call("compute GPM metrics", "nvmlGpmMetricsGet", query)
        features = dict.fromkeys(FEATURE_NAMES, math.nan)
        for i, (feature, _) in enumerate(self._gpm_metric_ids):
            metric = query.metrics[i]
            if int(metric.nvmlReturn) == self._code["NVML_SUCCESS"]:  # per-metric status: never raise on it
                features[feature] = min(1.0, max(0.0, float(metric.value) / 100.0))  # GPM reports percent
        return CounterSnapshot(start, now, MappingProxyType(features), source="gpm")

    def _free_gpm(self) -> None:
        for sample in self._gpm_samples:
            with contextlib.suppress(GPUError):  # best effort while shutting GPM down
                self._call("free a GPM sample", "nvmlGpmSampleFree", sample)
        self._gpm_samples = []

    # --- the slow values together ---

    def poll(self) -> PolledReading:
        t0 = self._monotonic_s()
        now = self.now_s()
        p_inst_mw = self._field_mw("NVML_FI_DEV_POWER_INSTANT", 186)
        p_avg_mw = self._field_mw("NVML_FI_DEV_POWER_AVERAGE", 185)
        usage_mw = self._optional("read power usage", "nvmlDeviceGetPowerUsage", self._handle)
        energy_mj = self._optional("read the energy counter", "nvmlDeviceGetTotalEnergyConsumption", self._handle)
        util = self._optional("read utilization", "nvmlDeviceGetUtilizationRates", self._handle)
        sm, mem = self.current_clocks()
        counters = self.counter_snapshot()
        return PolledReading(
            t_s=now,
            power_instant_w=p_inst_mw / 1000.0,
            power_average_w=p_avg_mw / 1000.0,
            power_usage_w=math.nan if usage_mw is None else float(usage_mw) / 1000.0,
            energy_j=math.nan if energy_mj is None else float(energy_mj) / 1000.0,
            util_gpu_pct=math.nan if util is None else float(util.gpu),
            util_mem_pct=math.nan if util is None else float(util.memory),
            sm_clock_mhz=sm,
            mem_clock_mhz=mem,
            call_s=self._monotonic_s() - t0,
            counters=counters,
        )

    # --- clock writes (opt-in only) ---

    def running_pids(self) -> frozenset[int] | None:
        """Compute and graphics processes on this GPU (host pids); None when the driver cannot list them."""
        pids: set[int] = set()
        listed = False
        for fn_name in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            try:
                procs = self._call("list the processes on the GPU", fn_name, self._handle)
            except GPUNotSupportedError:
                continue
            listed = True
            pids.update(int(p.pid) for p in procs or [])
        return frozenset(pids) if listed else None

    def _require_writes(self, what: str) -> None:
        if not self._allow_clock_writes:
            raise ClockWriteNotAllowedError(
                f"refusing to {what} on GPU {self._index}: the device was opened read-only "
                "(allow_clock_writes=False); only `gpoeo-rt start` without --advise sets clocks"
            )

    def lock_clocks(self, sm_clock_mhz: int, mem_clock_mhz: int) -> None:
        self._require_writes(f"lock clocks to SM {sm_clock_mhz} / memory {mem_clock_mhz} MHz")
        table = self.supported_clocks()
        if not table.contains(sm_clock_mhz, mem_clock_mhz):
            raise GPUInvalidArgumentError(
                f"SM {sm_clock_mhz} / memory {mem_clock_mhz} MHz is not a supported clock pair of GPU {self._index}"
            )
        h, sm, mem = self._handle, int(sm_clock_mhz), int(mem_clock_mhz)
        try:  # memory first, then SM (as Zeus does): the SM list depends on the memory clock
            self._call(f"lock memory clock to {mem} MHz", "nvmlDeviceSetMemoryLockedClocks", h, mem, mem)
            self._mem_locked = True
        except GPUNotSupportedError:
            if len(table.mem_clocks_mhz) > 1:
                raise
            # Pre-Ampere GPUs cannot lock memory clocks; with one memory clock there is nothing to choose.
        self._call(f"lock SM clock to {sm} MHz", "nvmlDeviceSetGpuLockedClocks", h, sm, sm)
        self._sm_locked = True

    def reset_clocks(self) -> None:
        self._require_writes("reset clocks")
        self._call("reset SM clock", "nvmlDeviceResetGpuLockedClocks", self._handle)
        self._sm_locked = False
        with contextlib.suppress(GPUNotSupportedError):  # pre-Ampere: memory clocks were never locked
            self._call("reset memory clock", "nvmlDeviceResetMemoryLockedClocks", self._handle)
        self._mem_locked = False

    def close(self) -> None:
        """Restore clocks this object locked (when allowed), free GPM buffers and shut NVML down. Idempotent."""
        if not self._initialised:
            return
        try:
            if self._allow_clock_writes and self._restore_on_close and (self._sm_locked or self._mem_locked):
                self.reset_clocks()
        finally:
            self._free_gpm()
            self._initialised = False
            with contextlib.suppress(GPUError):  # nothing useful to do if shutdown fails
                self._call("shut NVML down", "nvmlShutdown")


def nvml_device_count(nvml: Any | None = None) -> int:
    """How many GPUs NVML sees (read-only; initialises and shuts NVML down around the query)."""
    module = nvml if nvml is not None else _import_pynvml()
    try:
        module.nvmlInit()
        try:
            return int(module.nvmlDeviceGetCount())
        finally:
            module.nvmlShutdown()
    except module.NVMLError as exc:
        raise GPUNotFoundError(f"cannot count GPUs through NVML: {exc}") from exc
