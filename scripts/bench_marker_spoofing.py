#!/usr/bin/env python3
"""Spoofed step markers against the daemon's marker defences, on simulated jobs (simulated time, seconds to run).

For each job (a preset with its iteration time at the default clocks set to JOB_MS) and each spoofer (a sender
marking a fixed SPOOF_MS whatever the clocks, from a pid of its own), the shipped Controller with the generic-like
test bundle runs 200 simulated seconds three ways:
- blind: markers as the old daemon took them (anyone heard; the busiest sender times the window);
- admission: the spoofer is not on the GPU (MarkerAdmission refuses it; the job's own markers still count);
- cross-check: the spoofer is admitted (it shares the GPU) and only CheckedSampler's power-signal check stands.
The figure is the true slowdown (simulator truth: iteration time at the clocks held at the end vs at the default
clocks) against the bound (5%; the target is <= bound + 0.5 point), and the windows whose markers were dropped.
Simulated jobs, not hardware.

Usage: python scripts/bench_marker_spoofing.py [--bound 0.05] [--seconds 200] [--workloads resnet50,gpt]
           [--jobs-ms 257,104,50] [--spoof-ms 100,40,12,x0.9]
       (the default grid is the one the defences were developed on; docs/security.md also gives a held-out one)
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpoeo_rt.bench.spoofing import SpoofedMarkerFeed
from gpoeo_rt.controller import Controller, ControllerConfig, State
from gpoeo_rt.daemon.marker_check import CheckedSampler
from gpoeo_rt.daemon.markers import MarkerAdmission, MarkerBoard
from gpoeo_rt.device import AnalyticWorkload, SimConfig, SimulatedGPU, SimulatedStepMarkers, preset_workload
from gpoeo_rt.prediction.bundle import verify_bundle
from gpoeo_rt.prediction.predictor import Predictor
from gpoeo_rt.sampling.sampler import Sampler
from tests.bundles import write_bundle

JOB_PID, SPOOF_PID, SPOOF_UID = 1000, 2000, 65534


def run(workload: str, job_s: float, spoof_s: float, mode: str, predictor: Predictor, bound: float, seconds: float):
    preset = preset_workload(workload)
    assert isinstance(preset, AnalyticWorkload)
    gpu = SimulatedGPU(
        dataclasses.replace(preset, iteration_s=job_s), seed=3, allow_clock_writes=True, config=SimConfig()
    )
    on_gpu = frozenset({JOB_PID} if mode == "admission" else {JOB_PID, SPOOF_PID})
    admission = None if mode == "blind" else MarkerAdmission(lambda index: on_gpu, clock=gpu.clock.now_s)
    board = MarkerBoard([(0, gpu.uuid)], gpu.clock.now_s, admission=admission, max_skew_s=60.0)
    feed = SpoofedMarkerFeed(
        board, SimulatedStepMarkers(gpu, seed=3), spoof_s=spoof_s, job_pid=JOB_PID, spoofer=(SPOOF_PID, SPOOF_UID)
    )
    sampler = Sampler(gpu, markers=feed) if mode == "blind" else CheckedSampler(gpu, feed)
    ctrl = Controller(gpu, predictor=predictor, config=ControllerConfig(max_slowdown=bound), sampler=sampler)
    reference = gpu.truth.operating_point(gpu.now_s()).iteration_s
    while gpu.now_s() < seconds and ctrl.state is not State.STOPPED:
        ctrl.step()
    held = gpu.truth.operating_point(gpu.now_s()).iteration_s
    ctrl.stop("end")
    drops = sampler.dropped if isinstance(sampler, CheckedSampler) else 0
    return held / reference - 1.0, board.rejected.get("not_on_gpu", 0), drops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bound", type=float, default=0.05)
    parser.add_argument("--seconds", type=float, default=200.0)
    parser.add_argument("--workloads", default="resnet50,gpt", help="presets, comma-separated")
    parser.add_argument("--jobs-ms", default="257,104,50", help="iteration times at the default clocks")
    parser.add_argument("--spoof-ms", default="100,40,12,x0.9", help="spoofer periods; xF: F times the job's")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        predictor = Predictor(verify_bundle(write_bundle(Path(tmp) / "generic", name="generic")))
        print(f"{'job':>16} {'spoofer':>8} | {'blind':>7} | {'admission':>9} refused | {'cross-check':>11} dropped")
        worst = {"blind": -np.inf, "admission": -np.inf, "cross-check": -np.inf}
        for workload in args.workloads.split(","):
            for job_ms in (float(x) for x in args.jobs_ms.split(",")):
                spoofs = args.spoof_ms.split(",")
                for spoof_ms in (round(float(x[1:]) * job_ms, 1) if x.startswith("x") else float(x) for x in spoofs):
                    cells = {}
                    for mode in worst:
                        slowdown, refused, drops = run(
                            workload, job_ms / 1e3, spoof_ms / 1e3, mode, predictor, args.bound, args.seconds
                        )
                        worst[mode] = max(worst[mode], slowdown)
                        cells[mode] = (slowdown, refused, drops)
                    print(
                        f"{workload + f' {job_ms:g} ms':>16} {spoof_ms:>5g} ms | {cells['blind'][0]:>7.1%} | "
                        f"{cells['admission'][0]:>9.1%} {cells['admission'][1]:>7d} | "
                        f"{cells['cross-check'][0]:>11.1%} {cells['cross-check'][2]:>7d}"
                    )
        target = args.bound + 0.005
        print(
            "worst true slowdown: "
            + ", ".join(f"{mode} {value:.1%}" for mode, value in worst.items())
            + f" (target <= {target:.1%})"
        )


if __name__ == "__main__":
    main()
