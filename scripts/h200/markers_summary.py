#!/usr/bin/env python3
"""Summarise scripts/h200/validate_markers.sh output against the step-marker targets:
- the daemon's marker-timed period vs the job's true iteration time over the same window (target: within 1%);
- the markers' overhead on throughput, from in-process interleaved blocks without / with markers (target: <= 0.2%);
- the client's cost per call with and without a daemon.

Usage: markers_summary.py OUT_DIR   (prints a report and writes OUT_DIR/summary.json)
"""

from __future__ import annotations

import csv
import itertools
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

PERIOD_TOLERANCE = 0.01
OVERHEAD_TARGET_PCT = 0.2
WARMUP_BLOCKS = 2  # the first blocks of the overhead run (cudnn autotuning, allocator growth, clocks ramping)


def iterations(path: Path) -> list[tuple[float, int, int]]:
    with path.open() as fh:
        return [(float(r["t_s"]), int(r["phase"]), int(r.get("marked") or 0)) for r in csv.DictReader(fh)]


def true_period(rows: list[tuple[float, int, int]], start_s: float, end_s: float) -> float | None:
    """Mean time per iteration over the iterations ending in [start_s, end_s] (what the daemon measures)."""
    t = [ts for ts, _, _ in rows if start_s <= ts <= end_s]
    return (t[-1] - t[0]) / (len(t) - 1) if len(t) >= 3 else None


def job_summary(d: Path) -> dict[str, Any]:
    rows = iterations(d / "iterations.csv")
    decisions = [json.loads(x) for x in (d / "state" / "decisions-gpu0.jsonl").read_text().splitlines() if x.strip()]
    checks = []
    for r in decisions:
        if r.get("timing") != "markers" or not r.get("period_s") or not r.get("window_s"):
            continue
        truth = true_period(rows, r["t_s"] - r["window_s"], r["t_s"])
        if truth is None:
            continue
        checks.append(
            {
                "event": r["event"],
                "t_s": r["t_s"],
                "period_ms": 1e3 * r["period_s"],
                "true_ms": 1e3 * truth,
                "error_pct": 100.0 * (r["period_s"] / truth - 1.0),
            }
        )
    baselines = [c for c in checks if c["event"] in ("baseline", "known_phase")]
    status = json.loads((d / "status.json").read_text()) if (d / "status.json").exists() else {}
    gpu = (status.get("gpus") or [{}])[0]
    steps = len(rows)
    diffs = [b[0] - a[0] for a, b in itertools.pairwise(rows)]
    return {
        "job": d.name,
        "true_median_ms": 1e3 * statistics.median(diffs) if diffs else None,
        "true_mean_ms": 1e3 * statistics.fmean(diffs) if diffs else None,
        "baselines": baselines,
        "max_abs_error_pct": max((abs(c["error_pct"]) for c in checks), default=None),
        "decisions_timed_by_markers": len(checks),
        "ok": bool(baselines) and all(abs(c["error_pct"]) <= 100 * PERIOD_TOLERANCE for c in checks),
        "status_timing": gpu.get("timing"),
        "markers": gpu.get("markers"),
        "steps": steps,
        "fallbacks": sum(r["event"] == "fallback_reference" for r in decisions),
        "writes_in_log": sum(bool(r["locked"]) for r in decisions),
    }


def overhead(path: Path) -> dict[str, Any]:
    """Throughput of each block (a run of steps with the same `marked`), paired off -> on in time order."""
    rows = iterations(path)
    blocks = [list(group) for _, group in itertools.groupby(rows, key=lambda r: r[2])]
    rates = [(b[0][2], (len(b) - 1) / (b[-1][0] - b[0][0])) for b in blocks if len(b) >= 3 and b[-1][0] > b[0][0]]
    rates = rates[WARMUP_BLOCKS:-1]  # and the last, cut short by the end of the run
    pairs = [(off, on) for (m0, off), (m1, on) in itertools.pairwise(rates) if (m0, m1) == (0, 1)]
    impacts = [100.0 * (1.0 - on / off) for off, on in pairs]
    out: dict[str, Any] = {"pairs": len(pairs), "impacts_pct": impacts}
    if len(impacts) >= 2:
        mean = statistics.fmean(impacts)
        half = 2.0 * statistics.stdev(impacts) / math.sqrt(len(impacts))
        out.update(
            median_impact_pct=statistics.median(impacts),
            mean_impact_pct=mean,
            ci95_pct=[mean - half, mean + half],
            ok=statistics.median(impacts) <= OVERHEAD_TARGET_PCT,
        )
    return out


def main() -> None:
    out = Path(sys.argv[1])
    report: dict[str, Any] = {"jobs": [], "targets": {"period_pct": 100 * PERIOD_TOLERANCE, "overhead_pct": 0.2}}
    for d in sorted((out / "jobs").glob("*")) if (out / "jobs").is_dir() else []:
        report["jobs"].append(job_summary(d))
    if (out / "overhead" / "iterations.csv").exists():
        report["overhead"] = overhead(out / "overhead" / "iterations.csv")
        report["overhead"]["daemon_markers"] = job_summary(out / "overhead").get("markers")
    cost = out / "client_cost" / "cost.jsonl"
    if cost.exists():
        report["client_cost"] = [json.loads(x) for x in cost.read_text().splitlines() if x.strip()]
    (out / "summary.json").write_text(json.dumps(report, indent=2))
    for job in report["jobs"]:
        print(
            f"{job['job']}: true {job['true_mean_ms']:.3f} ms mean ({job['true_median_ms']:.3f} median), status timing "
            f"{job['status_timing']}, markers {job['markers']}, max |error| {job['max_abs_error_pct']} % over "
            f"{job['decisions_timed_by_markers']} decisions, ok {job['ok']}, locked decisions {job['writes_in_log']}"
        )
        for b in job["baselines"]:
            print(
                f"  {b['event']} at {b['t_s']:.1f}: {b['period_ms']:.3f} ms vs true {b['true_ms']:.3f} ms "
                f"({b['error_pct']:+.3f}%)"
            )
    if "overhead" in report:
        o = report["overhead"]
        if "median_impact_pct" in o:
            print(
                f"overhead: {o['pairs']} interleaved pairs, median {o['median_impact_pct']:.3f}%, mean "
                f"{o['mean_impact_pct']:.3f}% (95% CI {o['ci95_pct'][0]:.3f} .. {o['ci95_pct'][1]:.3f}), "
                f"target <= {OVERHEAD_TARGET_PCT}%: {'met' if o['ok'] else 'MISSED'}"
            )
        else:
            print(f"overhead: too few pairs ({o['pairs']})")
    for c in report.get("client_cost", []):
        print(f"client cost ({c['case']}): {c['ns_per_call']:.0f} ns per mark_step()")


if __name__ == "__main__":
    main()
