"""Optional step markers from a training loop to the local gpoeo-rt daemon (`mark_step()`, `step`).

With markers the daemon times iterations exactly instead of from the power signal (which cannot resolve
iterations under ~40 ms). Nothing here blocks, raises into the training loop or imports numpy; without a daemon a
call costs a fraction of a microsecond. Framework callbacks: `gpoeo_rt.client.lightning`,
`gpoeo_rt.client.huggingface` (each imports only its own framework).
"""

from gpoeo_rt.client.markers import MARKER_SOCKET, MarkerClient, mark_step, marker_stats, step

__all__ = ["MARKER_SOCKET", "MarkerClient", "mark_step", "marker_stats", "step"]
