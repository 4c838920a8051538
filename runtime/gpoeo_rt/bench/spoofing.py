"""A lying marker sender, for the evaluation of the daemon's marker defences (`scripts/bench_marker_spoofing.py`,
`tests/runtime/test_daemon_abuse.py`): the daemon's marker board as a controller reads it, fed in simulated time by
two senders, the real job (its true steps, as gpoeo_rt.client sends them) and a spoofer marking a fixed period
whatever the clocks."""

from __future__ import annotations

import math

from gpoeo_rt.daemon.markers import GPUMarkerSource, MarkerBoard
from gpoeo_rt.device import SimulatedStepMarkers
from gpoeo_rt.sampling.markers import FloatArray, IntArray

JOB_UID = 4321


class SpoofedMarkerFeed(GPUMarkerSource):
    """GPU 0's markers: the job's from `job_pid`, and the spoofer's, one every `spoof_s`, from `spoofer`
    (pid, uid). At equal timestamps the job's datagram arrives first."""

    def __init__(
        self,
        board: MarkerBoard,
        job: SimulatedStepMarkers,
        *,
        spoof_s: float,
        job_pid: int,
        spoofer: tuple[int, int],
    ) -> None:
        super().__init__(board, [0])
        self.board, self.job, self.spoof_s = board, job, spoof_s
        self.job_pid, (self.spoof_pid, self.spoof_uid) = job_pid, spoofer
        self.fed_s = 0.0
        self.spoof_step = 0

    def _feed(self, start_s: float, end_s: float) -> None:
        self.fed_s = max(self.fed_s, start_s - 1.0)  # between windows nobody listens (the daemon's board would)
        t, seq = self.job.markers_between(self.fed_s, end_s)
        k0, k1 = math.floor(self.fed_s / self.spoof_s) + 1, math.floor(end_s / self.spoof_s) + 1
        events = [(float(x), 0, int(k)) for x, k in zip(t, seq, strict=True)]
        events += [(k * self.spoof_s, 1, 0) for k in range(k0, k1)]
        for when, is_spoof, step in sorted(events):
            if is_spoof:
                self.spoof_step += 1
                payload = f"gpoeo-mark1 {self.spoof_step} {when:.6f} 0".encode()
                self.board.offer(payload, self.spoof_pid, self.spoof_uid, self.spoof_uid)
            else:
                self.board.offer(f"gpoeo-mark1 {step} {when:.6f} 0".encode(), self.job_pid, JOB_UID, JOB_UID)
        self.fed_s = end_s

    def candidates(self, start_s: float, end_s: float) -> list[tuple[int, FloatArray, IntArray]]:
        self._feed(start_s, end_s)
        return super().candidates(start_s, end_s)

    def markers_between(self, start_s: float, end_s: float) -> tuple[FloatArray, IntArray]:
        self._feed(start_s, end_s)
        return super().markers_between(start_s, end_s)
