"""The optional Prometheus endpoint (`prometheus_port`): the daemon's status as metrics, read at scrape time.

Off by default; when on, it binds `prometheus_addr` (127.0.0.1 unless the operator says otherwise). It only reads:
nothing received over HTTP can reach the daemon's settings.

Conventions (what `promtool check metrics` checks): totals are counters (`_total`), the rest gauges with their
unit in the name; every series carries the stable labels `gpus` (NVML indices, "0" or "0,1" for a lockstep group)
and `uuid`; what changes (the controller's state, the mode) is its own state-set metric, one series per possible
value, so a state change moves a value instead of starting new series.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from gpoeo_rt.controller.state import State

StatusFn = Callable[[], dict[str, Any]]
Reader = Callable[[dict[str, Any]], Any]

LABELS = ("gpus", "uuid")
# The states a GPU entry of the status can report (daemon._worker_state: the controller's, or the worker's own).
STATES: tuple[str, ...] = ("starting", *(s.value for s in State), "refused", "stuck", "failed")
MODES: tuple[str, ...] = ("control", "advise")


def _ratio(key: str) -> Reader:
    return lambda g: None if g.get(key) is None else g[key] / 100.0


def _split(key: str) -> Reader:
    return lambda g: None if (v := (g.get("split") or {}).get(key)) is None else v / 100.0


def _energy(key: str) -> Reader:
    return lambda g: (g.get("energy") or {}).get(key)


# (metric name, help, how to read it from one GPU entry of the status)
_GAUGES: tuple[tuple[str, str, Reader], ...] = (
    (
        "gpoeo_saving_ratio",
        "Measured energy per iteration saved so far (fraction, exploration included)",
        _ratio("saving_so_far_pct"),
    ),
    (
        "gpoeo_held_saving_ratio",
        "Energy per iteration saved by the held decisions, over the time they were held (fraction)",
        _split("held_saving_pct"),
    ),
    (
        "gpoeo_exploration_cost_ratio",
        "Energy exploring (profiling, probes) used beyond reference, as a fraction of the job's reference energy",
        _split("exploration_cost_pct"),
    ),
    ("gpoeo_slowdown_ratio", "Measured time per iteration lost so far (fraction)", _ratio("slowdown_so_far_pct")),
    ("gpoeo_period_seconds", "Latest measured iteration period", lambda g: (g.get("now") or {}).get("period_s")),
    ("gpoeo_sm_clock_megahertz", "SM clock in effect", lambda g: (g.get("clocks") or [None, None])[0]),
    ("gpoeo_mem_clock_megahertz", "Memory clock in effect", lambda g: (g.get("clocks") or [None, None])[1]),
    ("gpoeo_locked", "1 while gpoeo holds a clock lock", lambda g: int(bool(g.get("locked")))),
    ("gpoeo_energy_saved_joules", "Energy saved so far (reference minus used joules)", _energy("saved_j")),
    (
        "gpoeo_counted_ratio",
        "Share of the run time the saving counts (the rest: suspect or unmeasured windows)",
        lambda g: (g.get("coverage") or {}).get("counted"),
    ),
)
# Energy as counters (joules over the time the figures count, every run of the daemon): what was used, and what
# the same work would have used at reference clocks; saved = reference - used (a counter cannot go down, and the
# saving can, while exploring).
_COUNTERS: tuple[tuple[str, str, Reader], ...] = (
    ("gpoeo_decisions", "Decisions taken by the GPU's controller", lambda g: g.get("decisions")),
    ("gpoeo_restarts", "Controller restarts after errors", lambda g: g.get("restarts")),
    ("gpoeo_energy_used_joules", "Energy used in the time the saving counts (ratio-based)", _energy("used_j")),
    (
        "gpoeo_energy_reference_joules",
        "Energy the same iterations would have used at reference clocks (minus used: saved)",
        _energy("reference_j"),
    ),
)


def _labels(g: dict[str, Any]) -> list[str]:
    return [",".join(map(str, g.get("gpus", []))), str(g.get("uuid", ""))]


class _StatusCollector:
    def __init__(self, status: StatusFn) -> None:
        self._status = status

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, StateSetMetricFamily

        gpus = self._status()["gpus"]
        kinds: tuple[tuple[type, tuple[tuple[str, str, Reader], ...]], ...] = (
            (GaugeMetricFamily, _GAUGES),
            (CounterMetricFamily, _COUNTERS),
        )
        for family_type, table in kinds:
            for name, doc, read in table:
                family = family_type(name, doc, labels=list(LABELS))
                for g in gpus:
                    if (value := read(g)) is not None:
                        family.add_metric(_labels(g), float(value))
                yield family
        for name, doc, key, values in (
            ("gpoeo_state", "The GPU controller's state", "state", STATES),
            ("gpoeo_mode", "control: gpoeo sets clocks; advise: it only recommends", "mode", MODES),
        ):
            states = StateSetMetricFamily(name, doc, labels=list(LABELS))
            for g in gpus:
                states.add_metric(_labels(g), {v: str(g.get(key)) == v for v in values})
            yield states


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
