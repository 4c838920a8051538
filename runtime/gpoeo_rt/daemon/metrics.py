"""The optional Prometheus endpoint (`prometheus_port`): the daemon's status as gauges, read at scrape time.

Off by default; when on, it binds `prometheus_addr` (127.0.0.1 unless the operator says otherwise). It only reads:
nothing received over HTTP can reach the daemon's settings.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

StatusFn = Callable[[], dict[str, Any]]

# (metric name, help, how to read it from one GPU entry of the status)
_GAUGES: tuple[tuple[str, str, Callable[[dict[str, Any]], Any]], ...] = (
    (
        "gpoeo_saving_ratio",
        "Measured energy per iteration saved so far (fraction, exploration included)",
        lambda g: None if g["saving_so_far_pct"] is None else g["saving_so_far_pct"] / 100.0,
    ),
    (
        "gpoeo_slowdown_ratio",
        "Measured time per iteration lost so far (fraction)",
        lambda g: None if g["slowdown_so_far_pct"] is None else g["slowdown_so_far_pct"] / 100.0,
    ),
    ("gpoeo_period_seconds", "Latest measured iteration period", lambda g: (g["now"] or {}).get("period_s")),
    ("gpoeo_sm_clock_mhz", "SM clock in effect", lambda g: (g["clocks"] or [None, None])[0]),
    ("gpoeo_mem_clock_mhz", "Memory clock in effect", lambda g: (g["clocks"] or [None, None])[1]),
    ("gpoeo_locked", "1 while gpoeo holds a clock lock", lambda g: int(bool(g["locked"]))),
    ("gpoeo_decisions_total", "Decisions taken", lambda g: g["decisions"]),
    ("gpoeo_restarts_total", "Controller restarts after errors", lambda g: g["restarts"]),
)


class _StatusCollector:
    def __init__(self, status: StatusFn) -> None:
        self._status = status

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        gpus = self._status()["gpus"]
        for name, doc, read in _GAUGES:
            family = GaugeMetricFamily(name, doc, labels=["gpus", "state", "mode"])
            for g in gpus:
                value = read(g)
                if value is not None:
                    labels = [",".join(map(str, g["gpus"])), str(g["state"]), str(g["mode"])]
                    family.add_metric(labels, float(value))
            yield family


def start_exporter(status: StatusFn, port: int, addr: str = "127.0.0.1") -> tuple[Any, int]:
    """Serve the metrics; returns (server, bound port). Raises ImportError with the fix when the extra is missing."""
    try:
        from prometheus_client import CollectorRegistry, start_http_server
    except ImportError as exc:
        raise ImportError("the Prometheus endpoint needs prometheus-client: pip install 'gpoeo[metrics]'") from exc
    registry = CollectorRegistry()
    registry.register(_StatusCollector(status))  # type: ignore[arg-type]
    server, _thread = start_http_server(port, addr=addr, registry=registry)
    return server, int(server.server_port)
