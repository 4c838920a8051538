"""The controller's real profiling, run over recorded H200 traces (a `ReplayGPU`, read-only), scored against the
recordings' ground-truth iteration ends. These are replays of recordings, not live runs: the controller sees the
samples a real GPU produced, but the job never reacted to anything it did (it does nothing in advise mode anyway).

`profile_replay` starts the shipped `Controller` with `ControllerConfig(advise=True)` at one time of a recording
and steps it until profiling concludes: a baseline (then one more step for the advice), the aperiodic fallback,
or the end of the recording. `replay_table` does that for several start times per trace and phase,
`looped_table` over a recorded stretch played in a loop (recordings are shorter than hard profiling can take).
`hold_replay` runs it for long on a looped steady phase, to count false phase changes while holding.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from gpoeo_rt.controller.controller import Controller, ControllerConfig
from gpoeo_rt.controller.state import State
from gpoeo_rt.device.replay import ReplayEndedError, ReplayGPU
from gpoeo_rt.prediction.predictor import Predictor
from gpoeo_rt.tracefile import Iterations, PhaseTruth, read_iterations

RESOLVABLE_S = 0.040  # issue 8: iterations this long or longer must be resolved, shorter ones never
BASELINE_EVENTS = frozenset({"baseline", "known_phase"})


@dataclass(frozen=True)
class ReplayOutcome:
    """What profiling concluded on one replay. Times are seconds of the recording."""

    trace: str
    start_s: float  # where the replay started
    phase: PhaseTruth | None  # the true phase the replay started in (None: before the first iteration)
    conclusion: str  # "baseline", "fallback" or "ended" (the recording ended first)
    concluded_s: float  # device time of the conclusion
    period_s: float | None = None  # the baseline period
    baseline_phase: PhaseTruth | None = None  # the true phase the baseline's windows lie in
    window_mean_s: float | None = None  # mean true iteration time over the baseline's windows
    concluded_phase: PhaseTruth | None = None  # the true phase at the conclusion
    advised: tuple[int, int] | None = None
    events: tuple[str, ...] = ()  # the decisions' events, with the window's period in ms where there was one
    clock_writes: int = 0  # clock writes attempted (must stay 0: advise mode)
    loop: tuple[float, float] | None = None  # the looped stretch of the recording, if any

    @property
    def error(self) -> float | None:
        """Baseline period / the baseline phase's true (median) iteration time - 1."""
        if self.period_s is None or self.baseline_phase is None:
            return None
        return self.period_s / self.baseline_phase.period_s - 1.0

    @property
    def window_error(self) -> float | None:
        """Baseline period / the mean true iteration time over the baseline's own windows - 1."""
        if self.period_s is None or self.window_mean_s is None:
            return None
        return self.period_s / self.window_mean_s - 1.0


def _phase_at(phases: Sequence[PhaseTruth], t_s: float) -> PhaseTruth | None:
    """The phase whose iterations span t_s (the latest one started, if t_s falls between two)."""
    started = [p for p in phases if p.start_s <= t_s]
    return started[-1] if started else None


_TOUCH_S = 1e-6  # a window that continues another starts where it ended (as the controller's _touches)


def _window_mean(iterations: Iterations, windows: Sequence[tuple[float, float]]) -> float | None:
    """The mean true iteration time over the iterations that end inside one of `windows` ((start_s, end_s)
    each), one after another within it: windows that touch count as one, an iteration across a gap as none."""
    merged: list[list[float]] = []
    for start_s, end_s in sorted(windows):
        if merged and start_s <= merged[-1][1] + _TOUCH_S:
            merged[-1][1] = max(merged[-1][1], end_s)
        else:
            merged.append([start_s, end_s])
    span = intervals = 0.0
    for start_s, end_s in merged:
        ends = np.sort(iterations.t_s[(iterations.t_s >= start_s) & (iterations.t_s <= end_s)])
        if len(ends) >= 2:
            span, intervals = span + float(ends[-1] - ends[0]), intervals + len(ends) - 1
    return span / intervals if intervals >= 2 else None


def profile_replay(
    folder: str | Path,
    start_s: float,
    predictor: Predictor,
    *,
    config: ControllerConfig | None = None,
    max_steps: int = 200,
    loop: tuple[float, float] | None = None,
) -> ReplayOutcome:
    """Run the advise-mode controller over a recording (or a looped stretch of it: see ReplayGPU) from start_s
    until profiling concludes."""
    folder = Path(folder)
    gpu = ReplayGPU(folder, start_s=start_s, loop=loop)
    iterations = gpu.iterations
    phases = iterations.phases() if iterations is not None else []
    cfg = config or ControllerConfig(advise=True)
    if not cfg.advise:
        raise ValueError("a replay cannot take clock changes: use an advise-mode ControllerConfig")
    controller = Controller(gpu, predictor=predictor, config=cfg)
    events: list[str] = []
    conclusion = "ended"
    period: float | None = None
    windows: tuple[tuple[float, float], ...] = ()
    try:
        for _ in range(max_steps):
            d = controller.step()
            events.append(d.event if d.period_s is None else f"{d.event}:{d.period_s * 1e3:.1f}")
            if d.event in BASELINE_EVENTS:
                conclusion, period, windows = "baseline", d.period_s, controller.baseline_windows
                if d.next_state is State.SEARCHING:
                    controller.step()  # advise mode: the model's pick, no measurement
                break
            if d.event == "fallback_reference":
                conclusion = "fallback"
                break
    except ReplayEndedError:
        pass  # the recording ran out before profiling concluded
    baseline_phase = window_mean = None
    if windows and iterations is not None:
        baseline_phase = _phase_at(phases, 0.5 * (windows[0][0] + windows[-1][1]))
        window_mean = _window_mean(iterations, windows)
    return ReplayOutcome(
        trace=folder.name if gpu.loop is None else f"{folder.name} (looped)",
        start_s=start_s,
        phase=_phase_at(phases, start_s),
        conclusion=conclusion,
        concluded_s=(concluded := min(gpu.now_s(), gpu.end_s)),
        concluded_phase=_phase_at(phases, concluded),
        period_s=period,
        baseline_phase=baseline_phase,
        window_mean_s=window_mean,
        advised=controller.advised if conclusion == "baseline" else None,
        events=tuple(events),
        clock_writes=gpu.clock_write_attempts,
        loop=gpu.loop,
    )


def start_times(folder: str | Path, step_s: float = 1.0, min_left_s: float = 5.0) -> list[float]:
    """Replay start times: the recording's first sample (the daemon started before the job), then every step_s
    from the first iteration of each phase while min_left_s of that phase remain recorded (the shortest
    profiling that can conclude: a 3 s window and a 2 s one)."""
    gpu = ReplayGPU(folder)
    first = gpu.now_s()
    iterations = read_iterations(folder)
    starts = [first]
    for phase in iterations.phases() if iterations is not None else []:
        last = min(phase.end_s, gpu.end_s) - min_left_s
        starts += [float(s) for s in np.arange(phase.start_s, last, step_s) if s >= first]
    return starts


def replay_table(folders: Iterable[str | Path], predictor: Predictor, step_s: float = 1.0) -> list[ReplayOutcome]:
    """`profile_replay` from every start time of `start_times` of every trace folder with ground truth."""
    out = []
    for folder in folders:
        if read_iterations(folder) is None:
            continue
        out += [profile_replay(folder, s, predictor) for s in start_times(folder, step_s)]
    return out


def _phase_loop(folder: str | Path, phase: int, from_s: float) -> tuple[PhaseTruth, tuple[float, float]]:
    """The true phase and the stretch of it to loop: from from_s after its first iteration to its last recorded
    one."""
    iterations = read_iterations(folder)
    if iterations is None:
        raise ValueError(f"{folder}: no ground truth to loop on")
    truth = next(p for p in iterations.phases() if p.phase == phase)
    return truth, (truth.start_s + from_s, min(truth.end_s, ReplayGPU(folder).end_s))


def looped_table(
    folder: str | Path,
    phase: int,
    predictor: Predictor,
    *,
    from_s: float = 1.0,
    starts: int = 10,
    step_s: float = 1.0,
) -> list[ReplayOutcome]:
    """`profile_replay` over the recorded part of one phase, from from_s after its first iteration to its last
    recorded iteration, looped (see ReplayGPU), from `starts` start times step_s apart in the first lap."""
    _, loop = _phase_loop(folder, phase, from_s)
    a = ReplayGPU(folder, loop=loop).now_s()
    return [profile_replay(folder, a + k * step_s, predictor, loop=loop) for k in range(starts)]


@dataclass(frozen=True)
class HoldOutcome:
    """What the advise-mode controller did over a long looped replay of one steady recorded phase."""

    trace: str
    phase: PhaseTruth
    start_s: float
    duration_s: float
    events: dict[str, int]  # decisions per event name
    clock_writes: int = 0

    @property
    def phase_changes(self) -> int:
        """Re-profilings declared on a job that never changed: each would cost the saving of a held config."""
        return self.events.get("phase_change", 0)


def hold_replay(
    folder: str | Path,
    phase: int,
    predictor: Predictor,
    *,
    duration_s: float = 1800.0,
    offset_s: float = 0.0,
    from_s: float = 1.0,
) -> HoldOutcome:
    """Run the advise-mode controller for duration_s over one recorded phase looped (seams at iteration ends),
    from offset_s into the loop: profiling, then holding with its periodic checks. The job never changes, so every
    `phase_change` is a false alarm (or a loop seam: a drifting stretch jumps back at each one)."""
    folder = Path(folder)
    truth, loop = _phase_loop(folder, phase, from_s)
    first = ReplayGPU(folder, loop=loop).now_s()
    gpu = ReplayGPU(folder, start_s=first + offset_s, loop=loop, loop_s=duration_s + 120.0)
    controller = Controller(gpu, predictor=predictor, config=ControllerConfig(advise=True))
    events: dict[str, int] = {}
    t0 = gpu.now_s()
    while gpu.now_s() - t0 < duration_s:
        event = controller.step().event
        events[event] = events.get(event, 0) + 1
    return HoldOutcome(f"{folder.parent.name}/{folder.name}", truth, t0, duration_s, events, gpu.clock_write_attempts)


def verdict(outcome: ReplayOutcome, tolerance: float = 0.02) -> str:
    """Against issue 8's target, with the mean true iteration time over the baseline's own windows as the truth
    (a job whose iteration time drifts 50 -> 53 ms has no single true period; the median of the whole phase is
    reported beside it). "ok": a baseline within tolerance for a phase of >= RESOLVABLE_S, or no baseline for a
    shorter one; "wrong": a baseline off by more, or any baseline of a shorter phase; "miss": the fallback during
    a resolvable phase; "cut": the recording ended first (no conclusion); "-": no phase had begun."""
    if outcome.conclusion == "baseline":
        phase, err = outcome.baseline_phase, outcome.window_error
        if phase is None or err is None or phase.period_s < RESOLVABLE_S:
            return "wrong"
        return "ok" if abs(err) <= tolerance else "wrong"
    if outcome.conclusion == "ended":
        return "cut"
    phase = outcome.concluded_phase
    if phase is None:
        return "-"
    return "ok" if phase.period_s < RESOLVABLE_S else "miss"


def format_outcome(o: ReplayOutcome) -> str:
    """One table row."""
    ph = o.phase
    phase = "-" if ph is None else f"{ph.phase} ({ph.period_s * 1e3:.2f} ms)"
    offset = "rec start" if ph is None else f"+{o.start_s - ph.start_s:.1f} s"
    what = o.conclusion
    if o.conclusion == "baseline" and o.period_s is not None:
        errors = []
        if o.window_error is not None and o.window_mean_s is not None:
            errors.append(f"window mean {o.window_mean_s * 1e3:.2f} ms: {o.window_error * 100:+.2f}%")
        if o.error is not None:
            errors.append(f"phase median {o.error * 100:+.2f}%")
        advice = "reference" if o.advised is None else f"{o.advised[0]}/{o.advised[1]} MHz"
        what = f"baseline {o.period_s * 1e3:.2f} ms ({'; '.join(errors)}), advise {advice}"
    took = o.concluded_s - o.start_s
    return f"{o.trace:32s} {phase:18s} {offset:>10s} {verdict(o):>6s}  {what} after {took:.1f} s"


# --------------------------------------------------------------------------------------------------------------
# What the daemon concludes over a whole trace: `gpoeo-rt trace detect`

REPROFILE_EVENTS = frozenset({"phase_change", "markers_appeared", "activity", "baseline_stale"})


@dataclass(frozen=True)
class DaemonPhase:
    """One phase as the daemon's controller saw it over a replayed trace (times are the recording's).

    conclusion: "baseline" (a period, searched or advised), "known_phase" (a phase seen before), "fallback"
    (no trustworthy period: it would stay at reference clocks; `reason` says why), "idle", or "unresolved" (the
    recording ended while it was still profiling)."""

    start_s: float  # when the controller began profiling it (or went idle)
    end_s: float  # the next phase's start, or the end of the recording
    conclusion: str
    concluded_s: float | None = None
    period_s: float | None = None
    timing: str | None = None  # "signal" (power samples) or "markers"
    method: str | None = None  # "fold", "count" / "template" (jittery iterations) or "markers"
    confidence: float | None = None
    power_w: float | None = None
    reason: str = ""
    advised: tuple[int, int] | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "start_s": self.start_s,
            "end_s": self.end_s,
            "conclusion": self.conclusion,
            "concluded_s": self.concluded_s,
            "period_s": self.period_s,
            "timing": self.timing,
            "method": self.method,
            "confidence": None if self.confidence is None else round(self.confidence, 3),
            "power_w": None if self.power_w is None else round(self.power_w, 1),
            "reason": self.reason,
            "advised": None if self.advised is None else list(self.advised),
        }


def replay_phases(
    folder: str | Path,
    predictor: Predictor,
    *,
    config: ControllerConfig | None = None,
    name: str = "NVIDIA H200",
    max_steps: int = 100_000,
) -> list[DaemonPhase]:
    """Step the advise-mode controller (the daemon's code, read-only) over the whole recording from its first
    sample, and return its phases: each profiling, what it concluded, and where the controller saw it end."""
    gpu = ReplayGPU(folder, name=name)
    cfg = config or ControllerConfig(advise=True)
    if not cfg.advise:
        raise ValueError("a replay cannot take clock changes: use an advise-mode ControllerConfig")
    controller = Controller(gpu, predictor=predictor, config=cfg)
    phases: list[DaemonPhase] = []
    current = DaemonPhase(gpu.now_s(), gpu.end_s, "unresolved")

    def close(at: float) -> None:
        if at > current.start_s or current.conclusion != "unresolved":
            phases.append(replace(current, end_s=at))

    try:
        for _ in range(max_steps):
            d = controller.step()
            window_start = d.t_s - (d.window_s or 0.0)
            if d.event in BASELINE_EVENTS:
                base = controller.baseline
                current = replace(
                    current,
                    conclusion="baseline" if d.event == "baseline" else "known_phase",
                    concluded_s=d.t_s,
                    period_s=d.period_s,
                    timing=d.timing,
                    method=None if base is None else base.method,
                    confidence=None if base is None else base.confidence,
                    power_w=d.power_w,
                    reason=d.reason,
                )
                if d.next_state is State.SEARCHING:
                    d = controller.step()  # advise mode: the model's pick, no measurement
                current = replace(current, advised=controller.advised or controller.reference)
            elif d.event == "fallback_reference":
                current = replace(current, conclusion="fallback", concluded_s=d.t_s, reason=d.reason)
            elif d.event == "idle" and d.state is not State.IDLE:
                close(window_start)
                current = DaemonPhase(window_start, gpu.end_s, "idle", d.t_s, power_w=d.power_w, reason=d.reason)
            elif d.event in REPROFILE_EVENTS:
                close(window_start)
                current = DaemonPhase(window_start, gpu.end_s, "unresolved", reason=d.reason)
            elif d.state is State.PROFILING and current.conclusion == "unresolved":
                current = replace(current, reason=d.reason)  # the latest window's verdict, if the recording ends
    except ReplayEndedError:
        pass
    close(gpu.end_s)
    return phases
