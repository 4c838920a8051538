#!/usr/bin/env python3
"""Summarise scripts/h200/validate_advise.sh output: detected period vs the job's true iteration time per phase,
the advice logged, the daemon's CPU, RSS and status latency, and the throughput impact of the interleaved pairs.

Usage: advise_summary.py OUT_DIR   (prints a report and writes OUT_DIR/summary.json)
"""

from __future__ import annotations

import csv
import itertools
import json
import statistics
import sys
from pathlib import Path
from typing import Any

SKIP_S = 3.0  # the first seconds of a phase (warm-up) do not count toward its true period
RESOLVABLE_S = 0.040


def iterations(path: Path) -> list[tuple[float, int]]:
    with path.open() as fh:
        return [(float(r["t_s"]), int(r["phase"])) for r in csv.DictReader(fh)]


def steady_ends(rows: list[tuple[float, int]], phase: int) -> list[float]:
    """A phase's iteration end times after its warm-up (all of them if the phase is shorter than SKIP_S)."""
    t = [ts for ts, p in rows if p == phase]
    return [x for x in t if x >= t[0] + SKIP_S] or t


def mean_interval(ends: list[float]) -> float | None:
    """Mean iteration time over a run of consecutive iteration end times (None with fewer than 2)."""
    return (ends[-1] - ends[0]) / (len(ends) - 1) if len(ends) > 1 else None


def true_periods(rows: list[tuple[float, int]]) -> dict[int, float]:
    out = {}
    for phase in sorted({p for _, p in rows}):
        diffs = [b - a for a, b in itertools.pairwise(steady_ends(rows, phase))]
        if diffs:
            out[phase] = statistics.median(diffs)
    return out


def phase_mean(rows: list[tuple[float, int]], phase: int) -> float:
    """Mean iteration time of a phase after its warm-up (what its throughput says)."""
    mean = mean_interval(steady_ends(rows, phase))
    return mean if mean is not None else float("nan")


def window_mean(rows: list[tuple[float, int]], start_s: float, end_s: float) -> float | None:
    """Mean true iteration time over [start_s, end_s] (None with fewer than 3 iteration ends in it)."""
    t = [ts for ts, _ in rows if start_s <= ts <= end_s]
    return mean_interval(t) if len(t) >= 3 else None


def phase_at(rows: list[tuple[float, int]], t_s: float) -> int | None:
    before = [p for ts, p in rows if ts <= t_s]
    return before[-1] if before else None


def steady_cpu_pct(path: Path) -> float | None:
    """The daemon's CPU over the second half of the run (% of one core), from the 5 s tick samples: the whole-run
    average is dominated by start-up (imports, bundle checks, onnxruntime sessions) and the first profiling."""
    if not path.exists():
        return None
    lines = path.read_text().split("\n")
    clk_tck = float(lines[0].split()[1])
    samples = [tuple(map(float, x.split())) for x in lines[1:] if len(x.split()) == 2]
    if len(samples) < 4:
        return None
    t_mid = samples[0][0] + (samples[-1][0] - samples[0][0]) / 2
    (t0, c0), (t1, c1) = next(s for s in samples if s[0] >= t_mid), samples[-1]
    return 100.0 * (c1 - c0) / clk_tck / (t1 - t0) if t1 > t0 else None


def job_summary(d: Path) -> dict[str, Any]:
    rows = iterations(d / "iterations.csv")
    truth = true_periods(rows)
    decisions = [json.loads(x) for x in (d / "state" / "decisions-gpu0.jsonl").read_text().splitlines() if x.strip()]
    # (detected period, true mean iteration time over the decision's own window) per phase
    detected: dict[int, list[tuple[float, float | None]]] = {}
    for r in decisions:
        if r["event"] in ("baseline", "known_phase") and r["period_s"]:
            phase = phase_at(rows, r["t_s"])
            if phase is not None:
                window_truth = window_mean(rows, r["t_s"] - (r["window_s"] or 0.0), r["t_s"])
                detected.setdefault(phase, []).append((r["period_s"], window_truth))
    phases = []
    for phase, true_s in truth.items():
        got = detected.get(phase, [])
        err_median = [g / true_s - 1.0 for g, _ in got]
        # The judged error: against what the job did during the measured window (a job whose iteration time
        # drifts has no single period; every later ratio is taken against the baseline of that moment).
        err = [g / w - 1.0 if w else g / true_s - 1.0 for g, w in got]
        phases.append(
            {
                "phase": phase,
                "true_period_ms": true_s * 1e3,
                "true_mean_ms": phase_mean(rows, phase) * 1e3,
                "detected_period_ms": [g * 1e3 for g, _ in got],
                "window_mean_ms": [w * 1e3 if w else None for _, w in got],
                "max_abs_error_pct": max((abs(e) * 100 for e in err), default=None),
                "max_abs_error_vs_phase_median_pct": max((abs(e) * 100 for e in err_median), default=None),
                "resolvable": true_s >= RESOLVABLE_S,
                "ok": (bool(err) and max(abs(e) for e in err) <= 0.02) if true_s >= RESOLVABLE_S else not got,
            }
        )
    advice = [r for r in decisions if r.get("advised_sm_clock_mhz") is not None]
    fallbacks = [r for r in decisions if r["event"] == "fallback_reference"]
    status = json.loads((d / "status.json").read_text()) if (d / "status.json").exists() else {}
    cpu = json.loads((d / "daemon_cpu.json").read_text()) if (d / "daemon_cpu.json").exists() else {}
    times = [float(x) for x in (d / "status_time.txt").read_text().split()] if (d / "status_time.txt").exists() else []
    return {
        "job": d.name,
        "phases": phases,
        "advice": [
            {
                "t_s": r["t_s"],
                "sm_mhz": r["advised_sm_clock_mhz"],
                "mem_mhz": r["advised_mem_clock_mhz"],
                "predicted_time_ratio": r["predicted_time_ratio"],
                "predicted_energy_ratio": r["predicted_energy_ratio"],
            }
            for r in advice
        ],
        "fallbacks": len(fallbacks),
        "writes_in_log": sum(bool(r["locked"]) for r in decisions),
        "daemon_cpu_pct": 100.0 * cpu["cpu_s"] / cpu["wall_s"] if cpu else None,
        "daemon_steady_cpu_pct": steady_cpu_pct(d / "cpu_trace.txt"),
        "daemon_rss_mb": status.get("rss_mb"),
        "status_s": times,
    }


def throughput(path: Path) -> float:
    rows = iterations(path)
    t = [ts for ts, _ in rows]
    t = [x for x in t if x >= t[0] + 5.0]  # after warm-up (cudnn autotuning, allocator growth)
    return (len(t) - 1) / (t[-1] - t[0])


def main() -> None:
    out = Path(sys.argv[1])
    report: dict[str, Any] = {"jobs": [], "pairs": []}
    for d in sorted((out / "jobs").glob("*")) if (out / "jobs").is_dir() else []:
        report["jobs"].append(job_summary(d))
    pair_dirs = out / "pairs"
    if pair_dirs.is_dir():
        for i in sorted({p.name.split("-")[0] for p in pair_dirs.iterdir()}, key=int):
            off, on = (
                throughput(pair_dirs / f"{i}-off" / "iterations.csv"),
                throughput(pair_dirs / f"{i}-on" / "iterations.csv"),
            )
            extra = job_summary(pair_dirs / f"{i}-on")
            report["pairs"].append(
                {
                    "pair": int(i),
                    "off_it_s": off,
                    "on_it_s": on,
                    "impact_pct": 100.0 * (1.0 - on / off),
                    "daemon_cpu_pct": extra["daemon_cpu_pct"],
                    "daemon_rss_mb": extra["daemon_rss_mb"],
                }
            )
        if report["pairs"]:
            report["median_impact_pct"] = statistics.median(p["impact_pct"] for p in report["pairs"])
    (out / "summary.json").write_text(json.dumps(report, indent=2))
    for job in report["jobs"]:
        print(
            f"{job['job']}: cpu {job['daemon_cpu_pct']:.2f}% (second half {job['daemon_steady_cpu_pct']}%) "
            f"rss {job['daemon_rss_mb']} MB, status {job['status_s']}"
        )
        for ph in job["phases"]:
            print(
                f"  phase {ph['phase']}: true median {ph['true_period_ms']:.2f} ms, mean {ph['true_mean_ms']:.2f} ms, "
                f"detected {ph['detected_period_ms']} vs window mean {ph['window_mean_ms']}, "
                f"(max err vs phase median {ph['max_abs_error_vs_phase_median_pct']}) "
                f"max err {ph['max_abs_error_pct']}, resolvable {ph['resolvable']}, ok {ph['ok']}"
            )
        for a in job["advice"]:
            print(
                f"  advice at {a['t_s']:.1f}: SM {a['sm_mhz']} / mem {a['mem_mhz']} MHz, predicted time x"
                f"{a['predicted_time_ratio']}, energy x{a['predicted_energy_ratio']}"
            )
        print(f"  fallbacks {job['fallbacks']}, locked decisions {job['writes_in_log']}")
    for p in report["pairs"]:
        print(
            f"pair {p['pair']}: off {p['off_it_s']:.3f} it/s, on {p['on_it_s']:.3f} it/s, impact {p['impact_pct']:.2f}%"
        )
    if "median_impact_pct" in report:
        print(f"median throughput impact: {report['median_impact_pct']:.2f}%")


if __name__ == "__main__":
    main()
