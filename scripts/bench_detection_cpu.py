#!/usr/bin/env python3
"""CPU per detection window where counting and the matched template run: every 6 s and 12 s window (every 2.3 s) of
the real jittery H200 recordings (data/traces/h200-jitter) and of the 9.8 ms MLP phases (whose aliases reach the
template), through `detect_period`.

With --against COMMIT, the same windows also go through that commit's detection/period.py (loaded from git), every
answer must be identical (the repr of each estimate), and both CPU figures are printed. CPU is time.process_time of
this process (other processes on the machine only ever add to wall time, not to it).

Usage: python scripts/bench_detection_cpu.py [--against COMMIT]
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from gpoeo_rt.detection import detect_period
from gpoeo_rt.tracefile import read_trace

HERE = Path(__file__).resolve().parents[1]
TRACES = (
    *sorted(d for d in (HERE / "data/traces/h200-jitter").iterdir() if d.is_dir()),
    HERE / "data/traces/h200-live/mlp_65536",
    HERE / "data/traces/h200/gpt_16-mlp_65536",
)
LENGTHS_S = (6.0, 12.0)
STEP_S = 2.3


def _load_period_at(commit: str, tmp: Path) -> Callable[..., Any]:
    source = subprocess.run(
        ["git", "-C", str(HERE), "show", f"{commit}:runtime/gpoeo_rt/detection/period.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    path = tmp / "period_at_commit.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("gpoeo_rt.detection._period_at_commit", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.detect_period  # type: ignore[no-any-return]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--against", help="a commit whose detection/period.py must answer identically")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        other = _load_period_at(args.against, Path(tmp)) if args.against else None
        cpu: dict[str, list[float]] = {}
        cpu_other: dict[str, list[float]] = {}
        for folder in TRACES:
            trace = read_trace(folder)
            t, p = trace.power.t_s, trace.power.power_w
            for length in LENGTHS_S:
                for start in np.arange(t[0], t[-1] - length, STEP_S):
                    m = (t >= start) & (t < start + length)
                    c = time.process_time()
                    est = detect_period(t[m], p[m])
                    used = time.process_time() - c
                    path = est.method if est.ok else "none"
                    cpu.setdefault(path, []).append(used)
                    if other is not None:
                        c = time.process_time()
                        ref = other(t[m], p[m])
                        cpu_other.setdefault(path, []).append(time.process_time() - c)
                        if repr(ref) != repr(est):
                            raise SystemExit(f"{folder.name} +{start - t[0]:.1f} s ({length:g} s): answers differ")
    head = f"{'answered by':12s} {'windows':>7s} {'CPU ms mean':>11s} {'max':>7s}"
    print(head + (" | at commit: mean, max" if other is not None else ""))
    for path in sorted(cpu):
        a = np.array(cpu[path]) * 1e3
        row = f"{path:12s} {len(a):7d} {a.mean():11.1f} {a.max():7.0f}"
        if other is not None:
            b = np.array(cpu_other[path]) * 1e3
            row += f" | {b.mean():9.1f} {b.max():7.0f}"
        print(row)
    every = np.concatenate([np.array(v) for v in cpu.values()]) * 1e3
    print(f"{'all':12s} {len(every):7d} {every.mean():11.1f} {every.max():7.0f}", end="")
    if other is not None:
        every_other = np.concatenate([np.array(v) for v in cpu_other.values()]) * 1e3
        print(f" | {every_other.mean():9.1f} {every_other.max():7.0f}; every answer identical")
    else:
        print()


if __name__ == "__main__":
    main()
