"""Session-wide safety: no test may open a real GPU with clock writes allowed, on any machine.

Clock-writing code is exercised only against the simulated GPU and the fake NVML (tests/runtime/fake_nvml.py);
this variable makes the real NVML backend refuse `allow_clock_writes=True` outright.
"""

import os

from gpoeo_rt.device.nvml import FORBID_CLOCK_WRITES_ENV

os.environ[FORBID_CLOCK_WRITES_ENV] = "1"
