#!/usr/bin/env python3
"""Poll NVML read-only for a GPU's thermal drift: power, energy counter, temperature, clocks, throttle reasons.

Never changes a GPU setting (only nvmlDeviceGet* calls). Writes one CSV row per poll with wall-clock t_s, the time
base of train_workload.py and `gpoeo-rt trace record`.
Usage: record_thermal.py OUT_CSV SECONDS [POLL_MS]
"""

from __future__ import annotations

import sys
import time

import pynvml as nvml


def clock_reasons(handle: object) -> int:
    """The bitmask of why clocks are held down (the function's name changed across nvidia-ml-py versions)."""
    read = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
    read = read or nvml.nvmlDeviceGetCurrentClocksThrottleReasons
    return int(read(handle))


def main() -> None:
    out, seconds = sys.argv[1], float(sys.argv[2])
    poll_s = (float(sys.argv[3]) if len(sys.argv) > 3 else 200.0) / 1000
    nvml.nvmlInit()
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    end = time.monotonic() + seconds
    with open(out, "w") as log:
        log.write("t_s,power_usage_mw,energy_mj,temp_c,sm_clk,mem_clk,throttle_reasons\n")
        while time.monotonic() < end:
            t = time.time()
            power = nvml.nvmlDeviceGetPowerUsage(handle)
            energy = nvml.nvmlDeviceGetTotalEnergyConsumption(handle)
            temp = nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)
            sm = nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)
            mem = nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM)
            reasons = clock_reasons(handle)
            log.write(f"{t:.6f},{power},{energy},{temp},{sm},{mem},{reasons}\n")
            time.sleep(max(0.0, poll_s - (time.time() - t)))
    nvml.nvmlShutdown()


if __name__ == "__main__":
    main()
