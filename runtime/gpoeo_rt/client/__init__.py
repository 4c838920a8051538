"""Optional step markers from a training loop to the local gpoeo-rt daemon (`mark_step()`, `step`).

With markers the daemon times iterations exactly instead of from the power signal (which cannot resolve
iterations under ~40 ms). Nothing here blocks, raises into the training loop or imports numpy; without a daemon a
call costs a fraction of a microsecond. Framework callbacks: `gpoeo_rt.client.lightning`,
`gpoeo_rt.client.huggingface` (each imports only its own framework).
"""

import importlib
from types import ModuleType

from gpoeo_rt.client.markers import MARKER_SOCKET, MarkerClient, mark_step, marker_stats, step

__all__ = ["MARKER_SOCKET", "MarkerClient", "mark_step", "marker_stats", "step"]

_CALLBACK_MODULES = ("lightning", "huggingface")


def __getattr__(name: str) -> ModuleType:
    """`gpoeo_rt.client.lightning` works after a plain `import gpoeo_rt.client`: the framework modules are imported
    on first use only, so a job that uses neither framework never imports one."""
    if name in _CALLBACK_MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
