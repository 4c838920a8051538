"""gpoeo's own GPU exceptions. Backends translate vendor errors into these once, at the device edge, so upper
layers never see `pynvml.NVMLError`."""

from __future__ import annotations


class GPUError(Exception):
    """Any failure talking to a GPU. `nvml_code` is the NVML return code when the error came from NVML."""

    def __init__(self, message: str, *, nvml_code: int | None = None) -> None:
        super().__init__(message)
        self.nvml_code = nvml_code


class GPUNoPermissionError(GPUError):
    """The caller lacks the privilege for this operation (setting or resetting clocks)."""

    HINT = (
        "setting GPU clocks needs root or CAP_SYS_ADMIN: run gpoeo-rt with --advise (read-only, prints the "
        "clocks it would choose) or as root (e.g. sudo, or docker run --cap-add SYS_ADMIN)"
    )

    def __init__(self, message: str = "", *, nvml_code: int | None = None) -> None:
        super().__init__(f"{message}: {self.HINT}" if message else self.HINT, nvml_code=nvml_code)


class GPUNotSupportedError(GPUError):
    """The GPU or driver does not support this operation (e.g. memory-clock locking before Ampere)."""


class GPULostError(GPUError):
    """The GPU fell off the bus or needs a reset; nothing more can be read from it."""


class GPUNotFoundError(GPUError):
    """No NVIDIA driver, NVML library or GPU with that index."""


class GPUInvalidArgumentError(GPUError):
    """A value the GPU refuses, e.g. a clock that is not in its supported clock table."""


class ClockWriteNotAllowedError(GPUError):
    """A clock write on a device opened read-only (the default). Only the controller, when the user asked it to
    set clocks, opens a device with `allow_clock_writes=True`."""
