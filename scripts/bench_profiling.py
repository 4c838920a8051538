#!/usr/bin/env python3
"""Replay recorded H200 traces through the controller's real profiling (advise mode, a read-only ReplayGPU).

For every trace folder with ground truth (iterations.csv) under each TRACES_DIR, the shipped Controller with
ControllerConfig(advise=True) and the generic bundle (no H200 sweep exists) starts at the recording's first sample
and every STEP s (default 1) after the first iteration of each phase while 5 s of the phase remain recorded, and is
stepped until profiling concludes: a baseline (its period against the mean true iteration time over the
baseline's own windows and against the phase's median, and the advice), the aperiodic fallback, or the end of
the recording. Verdicts (gpoeo_rt.bench.replay.verdict): ok / wrong / miss (fallback on a >= 40 ms phase) / cut
(the recording ended first). The `polled10ms-*` folders have no buffered samples: their replay serves polled
power, which the detector never trusts without the energy counter (the controller passes none).

Looped (unless --no-loop): the recordings hold 20-35 s of training, less than profiling can take on a hard job, so
each buffered trace's phases are also replayed as a loop of their recorded stretch from 1 s after the first
iteration (ReplayGPU(loop=...): seams at iteration ends), from 20 starts 1 s apart; resnet_128_20 of
data/traces/h200 also from 12 s, the stretch where its iteration time drifts 50 -> 53 ms.
These are replays of recordings, not live runs.

--hold SECONDS: instead, hold on each steady phase of >= 40 ms (looped, 8 starts 2 s apart) for SECONDS of
simulated time and count the false phase changes (the job never changes) and the suspicions that were confirmed
away; then the same on four jittered jobs (JITTERED_HOLDS, made by gpoeo_rt.bench.jitter from recorded phases).

Usage: python scripts/bench_profiling.py [--rows] [--step STEP] [--no-loop] [--hold SECONDS] [TRACES_DIR ...]
       (default: data/traces/h200 data/traces/h200-live)
"""

from __future__ import annotations

import argparse
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from gpoeo_rt.bench.jitter import JitterSpec, make_jittered_trace
from gpoeo_rt.bench.replay import (
    RESOLVABLE_S,
    ReplayOutcome,
    format_outcome,
    hold_replay,
    looped_table,
    replay_table,
    verdict,
)
from gpoeo_rt.prediction.predictor import Predictor
from gpoeo_rt.prediction.selection import default_bundle_dirs, select_bundle
from gpoeo_rt.tracefile import read_iterations


def _summary(rows: list[ReplayOutcome]) -> str:
    """One line per (trace, phase the replay started in)."""
    groups: dict[tuple[str, str], list[ReplayOutcome]] = defaultdict(list)
    for o in rows:
        ph = "rec start" if o.phase is None else f"{o.phase.phase} ({o.phase.period_s * 1e3:.1f} ms)"
        if o.loop is not None:
            ph += f" {o.loop[1] - o.loop[0]:.0f} s loop"
        groups[(o.trace, ph)].append(o)
    lines = []
    for (trace, ph), group in groups.items():
        tally = Counter(verdict(o) for o in group)
        based = [o for o in group if o.conclusion == "baseline" and o.window_error is not None]
        werr = [abs(o.window_error) * 100 for o in based if o.window_error is not None]
        merr = [abs(o.error) * 100 for o in based if o.error is not None]
        took = [o.concluded_s - o.start_s for o in based]
        stats = (
            f"|err| vs window mean: median {np.median(werr):.2f}%, max {max(werr):.2f}%; vs phase median max "
            f"{max(merr):.2f}%; to baseline: median {np.median(took):.1f} s, max {max(took):.1f} s"
            if based
            else ""
        )
        counts = " ".join(f"{k} {tally[k]}" for k in ("ok", "wrong", "miss", "cut", "-") if tally[k])
        lines.append(f"{trace:32s} {ph:28s} {len(group):3d} starts: {counts:24s} {stats}")
    return "\n".join(lines)


HERE = Path(__file__).resolve().parents[1]
# Jittered jobs held too (scripts/bench_jitter.py's held-out recordings): +-10% and +-30% uniform stalls, +-30%
# heavy-tailed ones.
JITTERED_HOLDS = (
    JitterSpec(HERE / "data/traces/h200-live/resnet_512", 0, 0.1, 0.1, "uniform", seed=2),
    JitterSpec(HERE / "data/traces/h200-live/resnet_512", 0, 0.15, 0.3, "uniform", seed=2),
    JitterSpec(HERE / "data/traces/h200-live/gpt_64", 0, 0.3, 0.3, "heavy", seed=2),
    JitterSpec(HERE / "data/traces/h200/gpt_64", 0, 0.3, 0.1, "uniform", seed=2),
)


def hold_report(roots: list[Path], predictor: Predictor, duration_s: float, starts: int = 8) -> None:
    """False phase changes while holding on looped steady phases (the job never changes)."""
    total: Counter[str] = Counter()
    for traces in roots:
        for folder in sorted(d for d in traces.iterdir() if d.is_dir() and (d / "nvml_buffered.csv").exists()):
            iterations = read_iterations(folder)
            for phase in iterations.phases() if iterations is not None else []:
                if phase.period_s < RESOLVABLE_S:
                    continue
                runs = [
                    hold_replay(folder, phase.phase, predictor, duration_s=duration_s, offset_s=2.0 * k)
                    for k in range(starts)
                ]
                assert all(r.clock_writes == 0 for r in runs)
                events: Counter[str] = Counter()
                for r in runs:
                    events.update(r.events)
                total.update(events)
                print(
                    f"{runs[0].trace:32s} phase {phase.phase} ({phase.period_s * 1e3:6.1f} ms): {starts} x "
                    f"{duration_s:.0f} s: phase changes {[r.phase_changes for r in runs]}, "
                    f"confirmed away {events['change_suspected'] - events['phase_change']}, holds {events['hold']}"
                )
    # Jittered jobs (gpoeo_rt.bench.jitter: recorded phases re-timed with host stalls), looped alike.
    with tempfile.TemporaryDirectory() as tmp:
        for spec in JITTERED_HOLDS:
            folder = Path(tmp) / spec.name
            make_jittered_trace(spec, folder)
            runs = [
                hold_replay(folder, 0, predictor, duration_s=duration_s, offset_s=2.0 * k, from_s=2.0)
                for k in range(starts)
            ]
            assert all(r.clock_writes == 0 for r in runs)
            events = Counter()
            for r in runs:
                events.update(r.events)
            total.update(events)
            print(
                f"{spec.name:46s}: {starts} x {duration_s:.0f} s: phase changes {[r.phase_changes for r in runs]}, "
                f"holds {events['hold']}, fallbacks {events['fallback_reference']}"
            )
    print(f"all: {total['phase_change']} false phase changes, {total['change_suspected']} suspicions")


def main() -> None:
    here = Path(__file__).resolve().parents[1]
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("roots", nargs="*", type=Path)
    ap.add_argument("--rows", action="store_true", help="print every replay, not only the summary")
    ap.add_argument("--step", type=float, default=1.0, help="seconds between start times (default 1)")
    ap.add_argument("--no-loop", action="store_true", help="skip the looped replays")
    ap.add_argument("--hold", type=float, metavar="SECONDS", help="count false phase changes while holding instead")
    args = ap.parse_args()
    roots = args.roots or [here / "data/traces/h200", here / "data/traces/h200-live"]
    bundles = next(d for d in default_bundle_dirs() if d.is_dir())
    predictor = Predictor(select_bundle(bundles, "NVIDIA H200").manifest)
    if args.hold:
        hold_report(roots, predictor, args.hold)
        return
    tally: Counter[str] = Counter()
    for traces in roots:
        rows = replay_table(sorted(d for d in traces.iterdir() if d.is_dir()), predictor, args.step)
        assert all(o.clock_writes == 0 for o in rows)  # advise mode never writes (the replay would refuse)
        print(f"== {traces}")
        if args.rows:
            print("\n".join(format_outcome(o) for o in rows))
        print(_summary(rows))
        tally.update(verdict(o) for o in rows)
        if args.no_loop:
            continue
        looped: list[ReplayOutcome] = []
        for folder in sorted(d for d in traces.iterdir() if d.is_dir() and (d / "nvml_buffered.csv").exists()):
            iterations = read_iterations(folder)
            for phase in iterations.phases() if iterations is not None else []:
                froms = (1.0, 12.0) if folder.name == "resnet_128_20" and traces.name == "h200" else (1.0,)
                for from_s in froms:
                    looped += looped_table(folder, phase.phase, predictor, from_s=from_s, starts=20)
        assert all(o.clock_writes == 0 for o in looped)
        print(f"== {traces}, looped recorded stretches (not recordings of that length)")
        if args.rows:
            print("\n".join(format_outcome(o) for o in looped))
        print(_summary(looped))
        tally.update(verdict(o) for o in looped)
    print("all verdicts: " + ", ".join(f"{k} {v}" for k, v in sorted(tally.items())))


if __name__ == "__main__":
    main()
