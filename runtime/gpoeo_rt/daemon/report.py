"""`gpoeo-rt report LOG`: read a decision log (JSON lines) back, summarise it, and draw its timeline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpoeo_rt.controller.state import LOG_KEYS
from gpoeo_rt.daemon.accounting import SavingsMeter, bound_verdict


class LogError(ValueError):
    """A decision log that cannot be read; the message names the file and line."""


# Fields that are numbers (or null) in every decision, by their unit suffix; checked on reading so a damaged log
# is one error line instead of a failure deep in the summary.
_NUMBER_SUFFIXES = ("_s", "_w", "_j", "_mhz", "_ratio", "_pct")


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def read_log(path: str | Path) -> list[dict[str, Any]]:
    path = Path(path)
    try:
        lines = path.read_bytes().decode("utf-8").splitlines()
    except OSError as exc:
        raise LogError(f"{path}: cannot read the decision log: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise LogError(f"{path}: not a decision log (not UTF-8 text at byte {exc.start})") from None
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as exc:
            if number == len(lines):  # a daemon killed mid-write leaves a partial last line: say so, skip it
                raise LogError(f"{path}:{number}: incomplete last line (was the daemon killed while writing?)") from exc
            raise LogError(f"{path}:{number}: not a JSON object: {exc}") from exc
        if not isinstance(record, dict):
            raise LogError(f"{path}:{number}: not a gpoeo-rt decision (a JSON {type(record).__name__})")
        missing = [k for k in ("t_s", "state", "event", "sm_clock_mhz", "mem_clock_mhz") if k not in record]
        if missing:
            raise LogError(f"{path}:{number}: not a gpoeo-rt decision (missing {', '.join(missing)})")
        wrong = [k for k, v in record.items() if k.endswith(_NUMBER_SUFFIXES) and v is not None and not _is_number(v)]
        if wrong or not _is_number(record["t_s"]) or not isinstance(record["event"], str):
            raise LogError(f"{path}:{number}: not a gpoeo-rt decision (wrong type: {', '.join(wrong) or 't_s/event'})")
        records.append(record)
    if not records:
        raise LogError(f"{path}: the decision log is empty")
    return records


def summarise(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The log's figures (accounting.SavingsMeter): combined over its runs by time, downtime between runs never
    counted, and each run's own."""
    meter = SavingsMeter()
    for record in records:
        meter.feed(record)
    events: dict[str, int] = {}
    for record in records:
        events[str(record["event"])] = events.get(str(record["event"]), 0) + 1
    return {
        "decisions": len(records),
        "duration_s": float(records[-1]["t_s"]) - float(records[0]["t_s"]),
        "baseline": meter.baseline,
        "saving_pct": meter.saving_pct,
        "slowdown_pct": meter.slowdown_pct,
        "bound_pct": meter.bound_pct,
        "bound_verdict": meter.verdict(),
        "split": meter.split(),
        "energy": meter.energy(),
        "coverage": meter.total.coverage(),
        "witness": meter.total.witness(),
        "runs": [
            {
                "saving_pct": run.saving_pct,
                "slowdown_pct": run.slowdown_pct,
                "bound_verdict": bound_verdict(run.slowdown_pct, bound),
                "saved_j": round(run.saved_j, 1),
                "coverage": run.coverage(),
                "witness": run.witness(),
            }
            for run, bound in zip(meter.runs, meter.run_bounds, strict=True)
        ],
        "final_clocks": [records[-1]["sm_clock_mhz"], records[-1]["mem_clock_mhz"]],
        "final_locked": bool(records[-1].get("locked")),
        "events": events,
        "unknown_keys": sorted({k for r in records for k in r} - set(LOG_KEYS) - {"gpus"}),
    }


def plot_timeline(records: list[dict[str, Any]], out: str | Path, title: str = "") -> None:
    """Power, detected period and clocks over time, with each decision marked (matplotlib, lazily imported)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = float(records[0]["t_s"])
    t = [float(r["t_s"]) - t0 for r in records]

    def series(key: str, scale: float = 1.0) -> tuple[list[float], list[float]]:
        xs, ys = [], []
        for x, r in zip(t, records, strict=True):
            if r.get(key) is not None:
                xs.append(x)
                ys.append(float(r[key]) * scale)
        return xs, ys

    fig, axes = plt.subplots(3, 1, figsize=(12, 8), sharex=True)
    axes[0].plot(*series("power_w"), ".-", lw=0.8)
    axes[0].set_ylabel("power (W)")
    axes[1].plot(*series("period_s", 1e3), ".-", lw=0.8, color="tab:green")
    axes[1].set_ylabel("period (ms)")
    axes[2].step(t, [r["sm_clock_mhz"] for r in records], where="post", label="SM clock")
    axes[2].step(t, [r["mem_clock_mhz"] for r in records], where="post", label="memory clock")
    advised = series("advised_sm_clock_mhz")
    if advised[0]:
        axes[2].plot(*advised, "x", color="tab:red", label="advised SM clock")
    axes[2].set_ylabel("MHz")
    axes[2].set_xlabel("time since the first decision (s)")
    axes[2].legend(loc="lower right", fontsize=8)
    for x, r in zip(t, records, strict=True):
        if r["event"] not in ("hold", "probe_extend", "period_candidate", "idle"):
            for ax in axes:
                ax.axvline(x, color="0.85", lw=0.6, zorder=0)
            axes[0].annotate(
                str(r["event"]), (x, 1.0), xycoords=("data", "axes fraction"), rotation=90, fontsize=6, va="top"
            )
    fig.suptitle(title or "gpoeo-rt decisions")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
