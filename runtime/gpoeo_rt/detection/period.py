"""Iteration-period detection from a window of power samples (pure numpy: arrays in, frozen dataclasses out).

Pipeline; each step is there for something seen on the real H200 traces:
1. Clean: drop non-finite samples, sort a few out-of-order timestamps (refuse many), merge duplicates.
2. Resample onto a uniform grid at the *effective* sampling interval. Polled NVML power is read every 10 ms but
   refreshes every ~100 ms (a stair-step): its resolution is the refresh, so stairs are collapsed to their change
   instants first. Gaps longer than a few intervals split the signal.
3. Detrend (quartic) so that warm-up drift cannot pose as a long period.
4. Candidates: peaks of the Hann spectrum, each taken as the fundamental or as its 2nd..6th harmonic (p / k):
   some workloads (the transformer) put as much power in harmonics as in the fundamental.
5. Score a period by band-limited epoch folding: the variance explained by a mean waveform made of the period's
   harmonics *below Nyquist*, read off one zero-padded periodogram (a harmonic sum, bias-corrected so noise
   scores ~0). Harmonics above Nyquist are left out: with them, coincidences of aliasing let wrong periods fold
   as well as the right one. Refine the best candidate to sub-sample precision.
6. Pick the iteration among the best period's relatives: divide it by k when its waveform sits on every k-th
   harmonic (it was k iterations), or replace it by a shorter period whose aliased harmonics produce it (a
   period near Nyquist with a weak fundamental). A pattern that repeats under the floor: too short.
7. Validate on 2-5 sub-windows: each must fold significantly, their periods must agree, and the common period
   must keep most of each sub-window's best fold. The last test is what keeps aliases out: a period under two
   samples is indistinguishable from its alias in a perfectly stable signal, but real iteration rates wander
   slightly, and an alias's frequency wanders by the same number of hertz at a much lower frequency, so its
   relative wander is amplified by true_freq / alias_freq and the common period stops fitting the sub-windows.
   A real period that wanders too (a host stall: 50-56 ms from step to step) fails that test in long windows;
   it is still reported, as the mean of the sub-window periods, when the sub-windows are long (40 cycles), each
   folds strongly at its own period and all lie within a 5% band: an alias's amplified wander also decoheres
   long sub-windows (see DetectorConfig.wander_*). A window too short for that asks for a longer one.
8. With the cumulative energy counter (optional), check that the waveform also shows in its interval averages
   with the amplitude a real waveform would keep after averaging: aliases of faster iterations do not. Stair-step
   (polled) power without that check yields at most ALIAS_RISK, never a period.
9. No period folds (iterations jitter: host stalls, data loading): count cycles instead (`_count_cycles`): the mean
   iteration time over the window, from the unwrapped phase of the power band-passed around the fundamental, with
   checks that keep miscounts and aliases of faster iterations out. Reported with method "count" and the spread of
   single cycle lengths.
10. No count holds either (long host stalls of varying length: the band-passed phase slips across them): segment
   the window with a matched template (`_segment_cycles`): each iteration is a compute burst of one learnt waveform
   followed by a stall at a low level; dynamic programming finds the iteration starts. Reported with method
   "template".
Periods below `nyquist_guard * 2 * dt` (44 ms at 50 Hz, 220 ms for 10 Hz polled power) are never reported.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass, field, replace
from enum import StrEnum

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


class Verdict(StrEnum):
    OK = "ok"  # a period was found and validated
    TOO_SHORT = "too_short"  # variation at sample scale, no period >= the resolvable limit: iterations too fast
    APERIODIC = "aperiodic"  # the signal varies, but not periodically (or not consistently across sub-windows)
    FLAT = "flat"  # the signal hardly varies: nothing to detect
    INSUFFICIENT_DATA = "insufficient_data"  # too few samples, or a longer candidate needs a longer window
    BAD_INPUT = "bad_input"  # arrays that cannot be interpreted (shape, mostly non-monotonic time...)
    # A candidate was found in stair-step (polled) power, but nothing rules out that it is the alias of faster
    # iterations (polled NVML power is an instantaneous sample): pass the energy counter to decide.
    ALIAS_RISK = "alias_risk"


@dataclass(frozen=True)
class DetectorConfig:
    """Thresholds of the period detector. Defaults were set on the shared H200 traces and synthetic jobs."""

    min_period_s: float = 0.0  # the caller's floor; the sampling floor (nyquist_guard * 2 * dt) always applies
    max_period_s: float = 30.0  # GPOEO treats longer periods as aperiodic
    # Within ~10% of Nyquist a period and its mirror alias (e.g. 44 ms <-> 36.7 ms at 50 Hz) are too close in
    # frequency for any wander test to separate: treat that band as unresolvable.
    nyquist_guard: float = 1.1
    # Cycles the window must hold for a period to be reported: the target is 10; 9 leaves room for a window cut
    # at exactly 10 nominal periods while the iterations run slightly slow.
    min_cycles: float = 9.0
    cycles_per_subwindow: float = 3.0  # sub-windows hold at least this many cycles...
    max_subwindows: int = 5  # ...and there are 2..max_subwindows of them
    gap_factor: float = 4.0  # an interval longer than gap_factor * dt is a gap (missing samples), not a slow sample
    max_backward_fraction: float = 0.01  # more out-of-order timestamps than this: refuse rather than sort
    n_peaks: int = 5  # spectral peaks turned into candidates
    max_harmonic: int = 6  # each peak may be the 1st..max_harmonic-th harmonic of the fundamental
    n_refined: int = 3  # best-folding candidates refined to sub-sample precision
    # A candidate is a multiple k * T of the period when its waveform's multiples-of-k harmonics carry at least
    # this share of its power. Measured waveforms keep well under it at their true period (gpt_64, the most
    # harmonic-rich: 0.40 on even harmonics); at 2T, T's harmonics carry ~all of it.
    subharmonic_share: float = 0.7
    # Alias-family resolution (see _resolve_alias_family): a shorter period replaces the chosen one when its
    # aliasing-aware fold explains at least this fraction of the chosen one's, and its band-limited fold
    # (its real, in-band waveform) at least min_inband_share of the chosen one's band-limited fold.
    alias_family_ratio: float = 0.95
    alias_family_max_inband: int = 2
    min_inband_share: float = 0.5
    # Explained-variance floor for the whole window (0.10 let one 10 s window of the live mlp_65536 trace, a 9.8 ms
    # iteration, pass as 205 ms at fold r2 0.13; real periods on both H200 trace sets fold at 0.25 or more)...
    min_fold_r2: float = 0.15
    # ... plus this / (cycles in the window): with few cycles, slow aperiodic wandering folds well by chance at
    # some period among the many searched (the look-elsewhere effect), so the bar rises.
    few_cycles_r2: float = 1.0
    min_sub_fold_r2: float = 0.06  # ... and for every sub-window
    max_sub_spread: float = 0.08  # (max - min) / period of the sub-window periods...
    sub_spread_cycles: float = 0.2  # ... or this / (cycles per sub-window) when that is larger
    min_period_held: float = 0.6  # each sub-window keeps this share of its best fold at the common period
    rect_subwindow_cycles: float = 6.0  # sub-windows holding this many cycles are analysed untapered
    matched_harmonic_share: float = 0.05  # sub-windows are scored on harmonics with this share of the waveform
    # Mean sub-window fold r2 / whole-window fold r2: the long window's finer frequency resolution can fit
    # unrelated lines as harmonics of a wrong period, a fit the sub-windows then fail to reproduce.
    min_coherence: float = 0.5
    # Energy-counter check: observed / predicted periodic variance of the interval averages (see _alias_ratio).
    # Real waveforms give 0.9-1.3 (synthetic stair-step jobs); aliases from ~0 (a 104 ms iteration in 10 Hz
    # polled power) up to 0.5 (polled10ms-gpt_16's 72 ms iteration: the counter's averages there keep half the
    # alias's amplitude, so it is not a perfect box-car).
    min_alias_ratio: float = 0.7
    min_checkable_fraction: float = 0.25  # the check needs averaging to keep this much of a real waveform
    flat_rel_std: float = 0.005  # detrended std / mean level under this (when no period is found): flat
    rough_lag1: float = 0.3  # lag-1 autocorrelation under this (when no period is found): too_short
    # A period that wanders (a host stall makes iterations 50-56 ms from step to step, and their mean drifts a few
    # % over seconds) fails the common-period test above in long windows, yet is no alias: the test exists because
    # an alias's wander is the iteration rate's amplified by true / alias frequency, and that amplified wander
    # also decoheres each sub-window's own fold once sub-windows are long. So a window whose sub-windows each hold
    # wander_min_sub_cycles cycles, each still fold strongly at their own period (mean / min fold r2 below), and
    # whose periods stay within wander_band of each other, reports their mean period. On the H200 traces, such
    # sub-windows (40+ cycles) fold at 0.59-0.91 (mean) for the 50 ms host-stall job and at <= 0.28 for the
    # 9.8 ms MLP's aliases; with 24 cycles the margin is thin (0.72 vs 0.56), with 12 they overlap (0.76, 0.76).
    wander_min_sub_cycles: float = 40.0
    wander_band: float = 0.05
    wander_mean_sub_r2: float = 0.6
    wander_min_sub_r2: float = 0.35
    # A period P can be the mirror alias of a faster iteration at 1 / (1/dt - 1/P), whose wander it shows
    # amplified by only P/dt - 1: 1.2x at 44 ms, 1.5x at 50 ms (50 Hz). Below this amplification a wander within
    # the band says nothing about which of the two it is, so such periods must hold still to be reported.
    wander_min_amplification: float = 1.4
    # Jittery iterations (host stalls, data loading: iteration times spread by tens of %) have no period that
    # folds: the phase diffuses within a few cycles. When the fold finds none, the mean iteration time is counted
    # instead (see _count_cycles): the power is band-passed around the fundamental (a flat-topped band of this
    # relative half-width: wide enough for a jitter-broadened line, narrow enough to leave out double the
    # frequency) and its analytic phase counts cycles over the window.
    count_band: float = 0.3
    count_center: float = 0.85  # the band's centre, as a share of the cycle length (see _count_near)
    count_agreement: float = 0.02  # counts at two band centres (0.78 and 0.92) must agree this closely
    # Cycles of fewer samples than this are not counted: with iterations spread +-30%, a 50 ms job's shortest are
    # under two samples, and cycles go missing (on the tuning jobs the counts of 50-60 ms jobs ran 3-10% long).
    count_min_samples: float = 3.0
    count_min_cycles: float = 12.0  # cycles a counted window must hold
    count_min_band_share: float = 0.2  # variance share of the band-passed fundamental
    count_max_slips: float = 0.003  # share of samples where the phase runs backwards (a lost or doubtful cycle)
    count_max_spread: float = 0.3  # relative std of the counted cycle lengths (uniform +-50%: 0.29)
    # Share of the variance explained by the waveform folded on the counted phase: a real jittery job keeps its
    # waveform from cycle to cycle, so this stays high; noise and slow wandering do not.
    count_min_phase_r2: float = 0.5
    # ... of which harmonics 2-4 (on the counted phase) must explain this share: an alias of faster iterations is
    # one aliased line whose other harmonics alias elsewhere, incoherent with it, while a real waveform keeps them.
    count_min_harmonic_r2: float = 0.03
    # An alias of faster iterations is one aliased line whose frequency the iteration rate's wander modulates
    # smoothly: the counted phase follows it, so the samples fold on it cleanly although its cycles vary in
    # length, whereas jitter from iteration to iteration blurs the fold as much as it spreads the cycles. On the
    # 9.8 ms MLP phases at 50 Hz the aliases fold at r2 0.73-0.90 with cycles spread 8-34%; the tuning jobs fold at
    # 0.42-0.80, those above 0.75 spread under 8% (+-10% jobs). A count folding at >= clean_r2 with cycles spread
    # >= clean_spread, or a near-pure line (band share above max), or cycle lengths that wander (8-cycle means
    # keeping more than max_wander of the single cycles' spread: independent stalls keep ~0.35) is not trusted.
    # Set on the shared traces' MLP phases and the tuning jobs: the margin is thin (see docs/jitter.md).
    count_clean_r2: float = 0.75
    count_clean_spread: float = 0.08
    count_max_band_share: float = 0.8
    count_max_wander: float = 0.6
    # When no band-passed count passes, a matched template segments the window (see _segment_count): iterations
    # are a compute burst of one waveform followed by a stall of any length, the best segmentation (dynamic
    # programming on a template_grid_s grid, each boundary costing template_penalty x the residual variance per
    # sample, so that splitting an iteration must pay for itself) counts them. Run from the candidate period
    # scaled by template_starts; the best fit must explain template_min_r2 of the variance, and another start
    # must reach a fit within 0.1 of it and a period within template_agreement (a count that depends on where it
    # started is no count). Set on the tuning jobs (docs/jitter.md).
    template_grid_s: float = 0.004
    template_penalty: float = 8.0
    template_starts: tuple[float, ...] = (0.85, 1.0, 1.15)
    template_min_r2: float = 0.7
    template_agreement: float = 0.01
    template_rounds: int = 3
    # Iterations a segmented window must hold (fewer: a window that would is suggested): on the tuning jobs'
    # +-30-50% windows, 15-30 iterations came out up to 5% off (rms 1.6-1.8%), 30-60 within 1.2% (rms 0.4%).
    template_min_cycles: int = 30
    # A count and a template segmentation started at it (>= 8 iterations) that differ by more than this: the
    # template's mean stands where it segments template_min_cycles iterations, else the window has no count.
    # (Baselines from two template windows came within 3.5% of the truth on every tuned and held-out start.)
    count_template_agreement: float = 0.03
    # What tells a job with host stalls from the alias of faster iterations that wander (22-40 ms at 50 Hz
    # segment as well, with r2 0.7-0.97): a stall is a drop well below the compute power (mean of the template
    # - the stall level, in stds of the samples: the tuning jobs 1.5-2.4, aliases mostly under 1.4), stalls
    # vary from one iteration to the next independently (the wander of segment lengths, as for counts: tuning
    # jobs <= 0.49, aliases mostly 0.5-0.9), and by more than near-periodic jobs do (which fold or count).
    template_min_depth: float = 1.4
    # ... or a drop well below the compute power in units of the template's misfit over the bursts: long stalls
    # inflate the samples' std (+-50% heavy-tailed jobs: depth 0.9-1.5, this 4-14), where an alias's template
    # fits its made-up bursts loosely (the 100 wandering 22-40 ms jobs: at most 5.4; docs/jitter.md session 17).
    template_min_contrast: float = 6.0
    template_max_wander: float = 0.55
    # (The spread floor is waived where a count that passed every check agrees and the energy counter confirms the
    # variation: _count_cycles.)
    template_min_spread: float = 0.12
    # Segments alternating long / short are a longer iteration split in two (a 500 ms pulse job segments at
    # 252 ms): consecutive lengths then anti-correlate (tuning jobs >= -0.32).
    template_min_lag1: float = -0.5
    # Segment lengths that alternate (by position modulo 2 or 3: an F statistic this large has p < 0.001 for 30-100
    # independent iterations; iterations split in two give 34-52) are iterations split in parts: the whole
    # iteration is segmented instead, or nothing is (a job of two bursts per iteration, docs/jitter.md).
    template_max_alternation: float = 10.0
    # A segment whose stall holds a compute burst (two samples above the midpoint between the stall level and the
    # template's mean, after one below it) is two iterations taken as one: a transformer whose sequence length
    # varies per step has short iterations that a template learned on longer ones merges, and such windows came
    # out 4-52% long (docs/jitter.md, session 14). More such segments than this share (and at least two): the
    # window has no count; each one makes the mean that much too long.
    template_max_hidden: float = 0.02
    # Host stalls idle the SMs, and an H200's power falls toward idle (~25% of its busy level) within 60 ms: a job
    # whose iterations are parted by stalls varies its power by far more than this share of its level (std over
    # mean: the real H200 stall jobs 0.28-0.46), where the alias of 9.8 ms iterations varies by 0.08-0.12.
    template_min_swing: float = 0.15
    # A segmented window whose iterations are long enough to be resolved one by one (this many samples each) and
    # that no longer segmentation explains as well (the iterations are not a whole number of its segments: see
    # _stands_alone) is a baseline on its own: a second window of 30 such iterations would take 2 x 30 x 300 ms.
    template_alone_min_samples: float = 8.0
    # ... nor one whose segments spread by more than this (long stalls, where segments can run into one another:
    # held-out-4's only one-window baseline more than 5% off segmented at 42%, looked at after scoring it).
    template_alone_max_spread: float = 0.4
    # Whether to judge that at all: only profiling uses it, and the multiples cost up to six more segmentations
    # of the window (Controller._estimate asks for it on profiling windows only).
    judge_stands_alone: bool = False


@dataclass(frozen=True)
class UniformSignal:
    """A contiguous stretch of samples on a uniform grid: values[i] is the power at t0_s + i * dt_s."""

    t0_s: float
    dt_s: float
    values: FloatArray = field(compare=False, repr=False)
    held: bool = False  # the source was a stair-step (polled) signal; dt_s is its refresh interval

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def duration_s(self) -> float:
        return self.n * self.dt_s

    @property
    def t_s(self) -> FloatArray:
        return np.asarray(self.t0_s + np.arange(self.n) * self.dt_s, dtype=np.float64)

    def slice_time(self, start_s: float, end_s: float) -> UniformSignal:
        """The samples in [start_s, end_s)."""
        i0 = max(0, math.ceil((start_s - self.t0_s) / self.dt_s - 1e-9))
        i1 = min(self.n, math.ceil((end_s - self.t0_s) / self.dt_s - 1e-9))
        i1 = max(i0, i1)
        return UniformSignal(self.t0_s + i0 * self.dt_s, self.dt_s, self.values[i0:i1], self.held)


@dataclass(frozen=True)
class PreparedSignal:
    """The result of cleaning raw samples: contiguous uniform segments, or an error saying why there are none."""

    segments: tuple[UniformSignal, ...]
    notes: tuple[str, ...]  # what was repaired (NaN dropped, order fixed, gaps), for the message
    n_input: int
    n_valid: int
    error: str | None = None  # set when the input cannot be used at all (bad_input)
    error_verdict: Verdict = Verdict.BAD_INPUT

    @property
    def longest(self) -> UniformSignal | None:
        return max(self.segments, key=lambda s: s.n) if self.segments else None


@dataclass(frozen=True)
class PeriodEstimate:
    """Result of `detect_period`. period_s is None unless verdict is OK."""

    period_s: float | None
    confidence: float  # in [0, 1]; 0 when period_s is None
    verdict: Verdict
    message: str
    samples_used: int = 0  # uniform-grid samples analysed
    window_s: float = 0.0  # duration analysed
    start_s: float = math.nan  # first analysed time
    sample_interval_s: float = math.nan  # effective sampling interval (the refresh interval for polled power)
    min_resolvable_s: float = math.nan  # shortest period this sampling can report
    level_w: float = math.nan  # mean power over the window
    fold_r2: float = 0.0  # variance fraction explained by the mean waveform at period_s (bias-corrected)
    sub_periods_s: tuple[float, ...] = ()  # per sub-window periods (validation)
    sub_fold_r2: tuple[float, ...] = ()
    # INSUFFICIENT_DATA, or APERIODIC for a period that wanders (see DetectorConfig.wander_*): a window that would do
    suggested_window_s: float | None = None
    timing: str = "signal"  # where the period came from: "signal" (power samples) or "markers" (step markers)
    # Relative std of single iteration times in the window (counted cycles, segments, markers; a fold's from its
    # sub-windows' periods): what two windows' mean periods may differ by, by chance, is this over the square root
    # of their cycles.
    spread: float = 0.0
    # How the signal's period was found: "fold" (one period explains every sub-window), "count" (cycles of
    # jittery iterations counted, see _count_cycles) or "template" (iterations segmented, see _segment_cycles);
    # markers: "markers".
    method: str = "fold"
    # The window's own evidence is enough for a baseline (a segmentation checked against its multiples, see
    # DetectorConfig.template_alone_*): profiling need not wait for a second window that agrees.
    stands_alone: bool = False

    @property
    def n_periods(self) -> float:
        """Whole window in periods (0 when there is no period)."""
        return self.window_s / self.period_s if self.period_s else 0.0

    @property
    def ok(self) -> bool:
        return self.verdict is Verdict.OK


# --------------------------------------------------------------------------------------------------------------
# Cleaning and resampling


def prepare_signal(
    t_s: npt.ArrayLike,
    power_w: npt.ArrayLike,
    *,
    gap_factor: float = 4.0,
    max_backward_fraction: float = 0.01,
) -> PreparedSignal:
    """Validate raw samples and turn them into uniform, gap-free segments. Never raises on bad data."""
    try:
        t = np.asarray(t_s, dtype=np.float64).ravel()
        v = np.asarray(power_w, dtype=np.float64).ravel()
    except (TypeError, ValueError) as exc:
        return PreparedSignal((), (), 0, 0, f"samples are not numeric arrays: {exc}")
    n_input = len(t)
    if len(v) != n_input:
        return PreparedSignal((), (), n_input, 0, f"{n_input} timestamps but {len(v)} power values")
    notes: list[str] = []
    finite = np.isfinite(t) & np.isfinite(v)
    if not finite.all():
        notes.append(f"dropped {int((~finite).sum())} of {n_input} samples with NaN/inf time or power")
        t, v = t[finite], v[finite]
    if len(t) < 2:
        return PreparedSignal(
            (), tuple(notes), n_input, len(t), "fewer than 2 valid samples", Verdict.INSUFFICIENT_DATA
        )
    steps = np.diff(t)
    backward = int((steps < 0).sum())
    if backward:
        if backward > max_backward_fraction * len(steps):
            return PreparedSignal(
                (),
                tuple(notes),
                n_input,
                len(t),
                f"timestamps go backwards at {backward} of {len(steps)} steps: the clock is unreliable, "
                "refusing to guess the order",
            )
        order = np.argsort(t, kind="stable")
        t, v = t[order], v[order]
        notes.append(f"sorted {backward} out-of-order timestamps")
    if (np.diff(t) == 0).any():
        # Several values at one instant (overlapping reads): keep their mean.
        uniq, inverse = np.unique(t, return_inverse=True)
        v = np.bincount(inverse, weights=v) / np.bincount(inverse)
        notes.append(f"merged {len(t) - len(uniq)} duplicate timestamps")
        t = uniq
    if len(t) < 2:
        return PreparedSignal(
            (), tuple(notes), n_input, len(t), "fewer than 2 distinct timestamps", Verdict.INSUFFICIENT_DATA
        )
    t, v, dt, held = _collapse_stairs(t, v)
    if held:
        notes.append(f"stair-step signal: it refreshes every {dt * 1e3:.0f} ms, analysed at that rate")
    segments: list[UniformSignal] = []
    cuts = np.flatnonzero(np.diff(t) > gap_factor * dt)
    bounds = np.concatenate(([0], cuts + 1, [len(t)]))
    if len(cuts):
        total_gap = float(np.diff(t)[cuts].sum())
        notes.append(f"{len(cuts)} gap(s) in the samples ({total_gap:.2f} s missing) split the signal")
    for a, b in itertools.pairwise(bounds):
        if b - a < 2:
            continue
        grid = t[a] + np.arange(math.floor((t[b - 1] - t[a]) / dt + 1e-9) + 1) * dt
        segments.append(UniformSignal(float(t[a]), dt, np.interp(grid, t[a:b], v[a:b]), held))
    return PreparedSignal(tuple(segments), tuple(notes), n_input, len(t))


def _collapse_stairs(t: FloatArray, v: FloatArray) -> tuple[FloatArray, FloatArray, float, bool]:
    """Return (t, v, dt_eff, held). A held signal keeps each value for several reads; its information lives at the
    change instants, and its real sampling interval is the typical time between changes."""
    change = np.concatenate(([True], np.diff(v) != 0))
    starts = np.flatnonzero(change)
    raw_dt = float(np.median(np.diff(t)))
    # Held means most values are read several times (a typical run of 2+ reads), not merely that some stretches
    # are constant: a noise-free plateau repeats one value but the samples around it all differ.
    run_len = np.diff(np.concatenate((starts, [len(t)])))
    if len(starts) < 3 or float(np.median(run_len)) < 2:
        return t, v, raw_dt, False
    ends = np.concatenate((starts[1:] - 1, [len(t) - 1]))
    run_dt = np.diff(t[starts])
    dt = float(np.median(run_dt))
    # Keep each run's start; a run much longer than usual (a flat stretch) also keeps its end so that
    # interpolation stays flat there instead of ramping across it.
    long_run = (t[ends] - t[starts]) > 1.5 * dt
    idx = np.sort(np.concatenate((starts, ends[long_run & (ends > starts)])))
    return t[idx], v[idx], dt, True


# --------------------------------------------------------------------------------------------------------------
# Numerical core


@functools.lru_cache(maxsize=64)
def _linspace(start: float, stop: float, num: int) -> FloatArray:
    """np.linspace, cached and read-only (the same few grids are asked for hundreds of times a window)."""
    out = np.linspace(start, stop, num)
    out.flags.writeable = False
    return out


@functools.lru_cache(maxsize=64)
def _hanning(n: int) -> FloatArray:
    """np.hanning, cached and read-only."""
    out = np.hanning(n)
    out.flags.writeable = False
    return out


def _detrend(x: FloatArray, degree: int) -> FloatArray:
    """Remove a least-squares polynomial trend (normal equations on a [-1, 1] time axis: well conditioned for
    the low degrees used here, and much cheaper than an SVD)."""
    n = len(x)
    if n <= degree + 1:
        return np.asarray(x - x.mean(), dtype=np.float64)
    if degree == 1:
        u = np.arange(n) - 0.5 * (n - 1)
        return np.asarray(x - x.mean() - u * (float(u @ x) / float(u @ u)), dtype=np.float64)
    vander = np.vander(_linspace(-1.0, 1.0, n), degree + 1)
    coef = np.linalg.solve(vander.T @ vander, vander.T @ x)
    return np.asarray(x - vander @ coef, dtype=np.float64)


# Quartic detrending removes warm-up drift (up to ~2 slow wiggles per window) but cannot absorb the >= 9
# cycles a reported period needs.
_DETREND_DEGREE = 4
_MAX_HARMONICS = 8  # harmonics of a candidate period that its score may use
_PAD = 4  # zero-padding of the scoring spectrum (peaks are read between bins by a log-parabola)
# Constants of the harmonic sums (read-only): harmonic numbers, and "harmonic i comes before harmonic j".
_J = np.arange(1.0, _MAX_HARMONICS + 1.0)
_J.flags.writeable = False
_EARLIER = np.tril(np.ones((_MAX_HARMONICS, _MAX_HARMONICS), dtype=bool), -1)
_EARLIER.flags.writeable = False


def _wait_samples(x: npt.ArrayLike) -> FloatArray:
    """The samples host waits are told on (`_stall_aware_phase`, `stall_share`): the power less a straight-line
    trend only, for a quartic one lifts a long stall near a window's end above the wait level."""
    return _detrend(np.asarray(x, dtype=np.float64), 1)


def _variance_cap(n_samples: int) -> int:
    """Harmonics a variance fraction over n_samples may use: one per 16 samples (each costs two degrees of
    freedom), at most _MAX_HARMONICS."""
    return min(_MAX_HARMONICS, n_samples // 16)


def _n_harmonics(period_s: float, dt: float, n_samples: int, aliased: bool = False) -> int:
    """Harmonics of `period_s` a score may use: only those below Nyquist (1 / 2dt), i.e. real frequencies of the
    sampled signal, unless `aliased`. Allowing aliased harmonics lets a wrong period explain the data through
    coincidences of aliasing (with T = 19 samples, T/4's 5th harmonic lands on T's fundamental). Few samples,
    few harmonics, so that noise cannot be fitted."""
    below_nyquist = _MAX_HARMONICS if aliased else math.floor(period_s / (2.0 * dt) + 1e-9)
    return int(max(0, min(below_nyquist, _variance_cap(n_samples))))


class _Spectrum:
    """Hann-windowed periodogram of a (detrended) window, scaled so that power(f) estimates the variance of a
    sinusoid at f. A harmonic sum over it is band-limited epoch folding: the variance explained by a mean
    waveform at period P is the sum of the power at P's harmonics (distinct, resolved frequencies). The window
    keeps a strong line (or leftover drift) from leaking into the harmonics of other periods, which matters
    when a sub-window holds only a few cycles. Computed once per window, it then scores any number of periods
    by table lookups."""

    def __init__(self, y: FloatArray, dt: float, pad: int = _PAD, hann: bool = True) -> None:
        n = len(y)
        # Without the taper (a sub-window holding many cycles), the main lobe is half as wide: better resolution
        # against a stray line next to a harmonic, at the price of leakage that only matters with few cycles.
        taper = _hanning(n + 2)[1:-1] if hann else np.ones(n)  # no zero end points: every sample counts
        yc = y - y.mean()
        nfft = 1 << math.ceil(math.log2(pad * max(n, 2)))
        # A sinusoid of amplitude A gives |X| = A * sum(taper) / 2 at its frequency: its variance A^2 / 2 is
        # 2 |X|^2 / sum(taper)^2. White noise of variance s2 gives 2 s2 sum(taper^2) / sum(taper)^2 per harmonic.
        norm = 2.0 / float(taper.sum()) ** 2
        self.power = norm * np.abs(np.fft.rfft(yc * taper, nfft)) ** 2
        self._log = np.log(self.power + 1e-30 * max(float(self.power.max()), 1e-300))
        self.noise_per_harmonic = norm * float(taper @ taper)  # as a fraction of the variance
        self.df = 1.0 / (nfft * dt)
        self.var = float(yc @ yc) / n
        self.n = n
        self.dt = dt
        self.window = n * dt

    def _at(self, freqs: FloatArray) -> FloatArray:
        """Power at arbitrary frequencies: a parabola through the log power of the three nearest bins. A Hann
        main lobe is close to a Gaussian, whose log is a parabola, so peaks are read between bins without the
        flat tops (and period estimates quantized to bins) that linear interpolation gives."""
        pos = freqs / self.df  # freqs are >= 0 and <= Nyquist once folded or limited to band
        # (np.minimum/np.maximum: np.clip costs ~10 us a call, and this runs hundreds of times per window)
        k = np.minimum(np.maximum(np.rint(pos).astype(np.intp), 1), len(self.power) - 2)
        u = np.minimum(np.maximum(pos - k, -1.0), 1.0)  # beyond +-0.5 only at table ends / unused harmonics
        lm, l0, lp = self._log[k - 1], self._log[k], self._log[k + 1]
        return np.asarray(np.exp(l0 + 0.5 * u * (lp - lm) + 0.5 * u * u * (lp - 2.0 * l0 + lm)), dtype=np.float64)

    def harmonics(
        self, periods: npt.ArrayLike, aliased: bool = False, max_harmonics: int | None = None
    ) -> tuple[FloatArray, FloatArray]:
        """(power of each harmonic j = 1.._MAX_HARMONICS of each period (0 where unused), harmonics used).

        Aliased harmonics are folded into [0, Nyquist]; two harmonics landing on the same frequency count once
        (a period commensurate with the sampling), and frequencies under 2 cycles per window (what detrending
        removed) are not used.
        """
        periods = np.atleast_1d(np.asarray(periods, dtype=np.float64))
        fs = 1.0 / self.dt
        cap = min(_MAX_HARMONICS, _variance_cap(self.n) if max_harmonics is None else max_harmonics)
        h = np.full(len(periods), cap) if aliased else np.minimum(np.floor(periods / (2.0 * self.dt) + 1e-9), cap)
        freqs = _J[None, :] / periods[:, None]
        if aliased:
            freqs = np.abs((freqs + 0.5 * fs) % fs - 0.5 * fs)
        use = (_J[None, :] <= h[:, None]) & (freqs >= 2.0 / self.window)
        if aliased:
            # Drop a harmonic that lands within a resolution cell of a lower one.
            close = np.abs(freqs[:, :, None] - freqs[:, None, :]) < 0.5 / self.window
            use &= ~(close & _EARLIER[None, :, :] & use[:, None, :]).any(axis=2)
        power = np.where(use, self._at(freqs), 0.0)
        return power, use.sum(axis=1).astype(np.float64)

    def r2(
        self,
        periods: npt.ArrayLike,
        aliased: bool = False,
        weights: FloatArray | None = None,
        max_harmonics: int | None = None,
    ) -> FloatArray:
        """Explained-variance fraction of each period's harmonic waveform, bias-corrected (noise scores ~0)."""
        if self.var <= 0.0 or self.n < 16:
            return np.zeros(np.atleast_1d(np.asarray(periods)).shape)
        if weights is not None:
            # A matched score (for locating a known waveform's period), not a variance fraction: every harmonic
            # the waveform has pins the period, the higher ones most, so none is capped away.
            power, used = self.harmonics(periods, aliased, _MAX_HARMONICS)
            return np.asarray(power @ weights / self.var, dtype=np.float64)
        power, used = self.harmonics(periods, aliased, max_harmonics)
        bias = used * self.noise_per_harmonic  # what white noise alone puts at that many harmonics
        r2 = (power.sum(axis=1) / self.var - bias) / np.maximum(1.0 - bias, 1e-12)
        # Overlapping main lobes (few cycles) can over-count a little: a variance fraction stays <= 1.
        return np.asarray(np.minimum(r2, 1.0), dtype=np.float64)


def fold_r2(y: FloatArray, dt: float, periods: npt.ArrayLike, *, aliased: bool = False) -> FloatArray:
    """Band-limited epoch folding score of each period: the fraction of the variance of y explained by a mean
    waveform at that period made of its harmonics below Nyquist (or, if `aliased`, of its first harmonics,
    aliased or not). Bias-corrected: white noise scores ~0, a noise-free periodic signal ~1."""
    return _Spectrum(np.asarray(y, dtype=np.float64), dt).r2(periods, aliased)


def _refine(
    spec: _Spectrum,
    period: float,
    rel_range: float,
    n_grid: int = 15,
    weights: FloatArray | None = None,
) -> tuple[float, float]:
    """Best-scoring period near `period`: a grid, a finer grid around its best point, then the vertex of the
    parabola through the best three points of that one (its score is not re-evaluated: the best grid score is
    returned). With `weights` the score is the weighted harmonic sum (see _Spectrum.r2)."""
    offsets = _linspace(-rel_range, rel_range, n_grid)
    grid = period * (1.0 + offsets)
    r2 = spec.r2(grid, weights=weights)
    best_p = float(grid[int(np.argmax(r2))])
    # Second, finer grid one coarse step either side.
    step = 2.0 * rel_range / (n_grid - 1)
    grid = best_p * (1.0 + _linspace(-step, step, 9))
    r2 = spec.r2(grid, weights=weights)
    i = int(np.argmax(r2))
    best_p, best_r = float(grid[i]), float(r2[i])
    if 0 < i < 8:
        a, b, c = r2[i - 1], r2[i], r2[i + 1]
        den = a - 2.0 * b + c
        if den < 0:
            best_p = float(grid[i] + 0.5 * (a - c) / den * (grid[1] - grid[0]))
    return best_p, best_r


def _spectral_candidates(
    y: FloatArray, dt: float, f_lo: float, f_hi: float, n_peaks: int, max_harmonic: int
) -> FloatArray:
    """Candidate periods: the strongest spectral peaks in band, each also divided by 2..max_harmonic."""
    n = len(y)
    nfft = 1 << math.ceil(math.log2(2 * n))  # peaks are refined later: 2x padding and a parabola suffice here
    power = np.abs(np.fft.rfft(y * _hanning(n), nfft)) ** 2
    freqs = np.fft.rfftfreq(nfft, dt)
    # Harmonics of a fundamental in band may lie up to Nyquist, so peaks are looked for up to there.
    lo = max(1, math.floor(f_lo / freqs[1]))
    hi = len(power) - 1
    if hi - lo < 3:
        return np.zeros(0)
    seg = power[lo - 1 : hi + 1]
    is_peak = (seg[1:-1] > seg[:-2]) & (seg[1:-1] >= seg[2:])
    peak_idx = np.flatnonzero(is_peak) + lo
    if len(peak_idx) == 0:
        return np.zeros(0)
    peak_idx = peak_idx[np.argsort(power[peak_idx])[::-1][:n_peaks]]
    # Parabolic interpolation on log power: sub-bin peak frequency.
    la = np.log(power[peak_idx - 1] + 1e-300)
    lb = np.log(power[peak_idx] + 1e-300)
    lc = np.log(power[np.minimum(peak_idx + 1, len(power) - 1)] + 1e-300)
    den = la - 2 * lb + lc
    shift = np.where(den < 0, 0.5 * (la - lc) / np.where(den < 0, den, -1.0), 0.0)
    peak_f = (peak_idx + np.clip(shift, -0.5, 0.5)) * freqs[1]
    cands = (peak_f[:, None] / np.arange(1, max_harmonic + 1)[None, :]).ravel()
    cands = cands[(cands >= f_lo) & (cands <= f_hi)]
    if len(cands) == 0:
        return np.zeros(0)
    periods = np.sort(1.0 / cands)
    # Merge candidates closer than 0.5%: they fold alike and refinement would converge to the same point.
    keep = np.concatenate(([True], np.diff(periods) / periods[1:] > 0.005))
    return np.asarray(periods[keep], dtype=np.float64)


def min_resolvable_period(dt_s: float, *, nyquist_guard: float = 1.1, min_period_s: float = 0.0) -> float:
    """Shortest period a signal sampled every dt_s can report: twice the sampling interval, plus the guard band."""
    return max(min_period_s, nyquist_guard * 2.0 * dt_s)


def window_for_periods(
    period_s: float,
    n_periods: int,
    *,
    min_window_s: float = 0.0,
    max_window_s: float = math.inf,
) -> float:
    """Duration of a measurement window holding a whole number of periods, at least `n_periods` of them.

    If min_window_s demands more, the count is rounded up (still whole periods); if max_window_s allows fewer
    than n_periods, the largest whole number that fits (at least 1) is used. Averaging power over whole periods
    removes the intra-iteration waveform from the mean.
    """
    if not (period_s > 0 and math.isfinite(period_s)):
        raise ValueError(f"period_s must be positive and finite, got {period_s}")
    if n_periods < 1:
        raise ValueError(f"n_periods must be >= 1, got {n_periods}")
    k = max(n_periods, math.ceil(min_window_s / period_s - 1e-9))
    if k * period_s > max_window_s:
        k = max(1, math.floor(max_window_s / period_s + 1e-9))
    return k * period_s


# --------------------------------------------------------------------------------------------------------------
# Anti-aliasing reference: interval-average power from the cumulative energy counter


def average_power_from_energy(
    t_s: npt.ArrayLike, energy_j: npt.ArrayLike, *, gap_factor: float = 4.0
) -> UniformSignal | None:
    """Average power over each refresh interval of a cumulative energy counter, on a uniform grid (None if unusable).

    An instantaneous power sample aliases whatever varies faster than its sampling; the energy counter integrates
    power, so its differences are box-car averages that largely do not. On an H200 they match the integral of the
    50 Hz buffered power over the same intervals (correlation 0.999). Counter resets (negative steps) are dropped.
    """
    try:
        t = np.asarray(t_s, dtype=np.float64).ravel()
        e = np.asarray(energy_j, dtype=np.float64).ravel()
    except (TypeError, ValueError):
        return None
    if len(t) != len(e):
        return None
    ok = np.isfinite(t) & np.isfinite(e)
    t, e = t[ok], e[ok]
    if len(t) < 4:
        return None
    order = np.argsort(t, kind="stable")
    t, e = t[order], e[order]
    change = np.concatenate(([True], np.diff(e) != 0))
    t, e = t[change], e[change]
    if len(t) < 4:
        return None
    dt_i = np.diff(t)
    de = np.diff(e)
    mid = 0.5 * (t[1:] + t[:-1])
    good = (dt_i > 0) & (de >= 0)
    if good.sum() < 4:
        return None
    interval = float(np.median(dt_i[good]))
    mid, avg = mid[good], de[good] / dt_i[good]
    # Only the longest gap-free stretch: an average over a long gap is not an average over `interval`.
    cuts = np.flatnonzero((np.diff(mid) > gap_factor * interval) | (dt_i[good][1:] > gap_factor * interval))
    bounds = np.concatenate(([0], cuts + 1, [len(mid)]))
    k = int(np.argmax(np.diff(bounds)))
    a, b = int(bounds[k]), int(bounds[k + 1])
    if b - a < 4:
        return None
    grid = mid[a] + np.arange(math.floor((mid[b - 1] - mid[a]) / interval + 1e-9) + 1) * interval
    return UniformSignal(float(mid[a]), interval, np.interp(grid, mid[a:b], avg[a:b]), held=False)


def _alias_ratio(
    spec: _Spectrum, t0: float, period: float, reference: UniformSignal, cfg: DetectorConfig
) -> float | None:
    """Observed / predicted periodic variance of the interval averages at `period`, or None if not checkable.

    If the waveform at `period` seen in the instantaneous samples is real, averaging it over the reference's
    interval R scales harmonic j by sinc(j R / period): that predicts how much the averages should vary at this
    period. An alias is made of content faster than the sampling, which the averaging removes: the averages
    then vary far less than predicted.
    """
    ref = reference.slice_time(t0, t0 + spec.window)
    if ref.n < 16 or ref.duration_s < 3 * period:
        return None
    power, _ = spec.harmonics([period])
    j = np.arange(1, _MAX_HARMONICS + 1)
    periodic = float(power.sum())
    predicted = float((power[0] * np.sinc(j * reference.dt_s / period) ** 2).sum())
    if periodic <= 0 or predicted < cfg.min_checkable_fraction * periodic:
        return None  # averaging would erase even a real waveform of this period: nothing to compare
    ref_spec = _Spectrum(_detrend(ref.values, 1), ref.dt_s)
    observed = max(float(ref_spec.r2([period])[0]), 0.0) * ref_spec.var
    return observed / predicted


# --------------------------------------------------------------------------------------------------------------
# Detection


# Verdicts of a window without a folded period whose iterations may still be counted (INSUFFICIENT_DATA too: a
# jittery job's stalls put power at long periods, which then ask for a longer window).
COUNTABLE_VERDICTS = frozenset((Verdict.APERIODIC, Verdict.TOO_SHORT, Verdict.INSUFFICIENT_DATA))


def detect_period(
    t_s: npt.ArrayLike,
    power_w: npt.ArrayLike,
    *,
    energy_j: npt.ArrayLike | None = None,
    energy_t_s: npt.ArrayLike | None = None,
    min_period_s: float | None = None,
    max_period_s: float | None = None,
    config: DetectorConfig | None = None,
    variation_confirmed: bool = False,
) -> PeriodEstimate:
    """Iteration period of a window of power samples, or an explicit verdict that none is resolvable.

    t_s: sample times (s); power_w: power (W). energy_j (optional): the cumulative energy counter (J), read at
    energy_t_s (default t_s); when given, a candidate period must also show in the counter's interval averages,
    which rules out aliases of faster iterations. Stair-step (polled) power without it yields at most
    ALIAS_RISK, never a period. variation_confirmed: the energy counter showed the samples' slow variation to be
    real (`detection.counter.counter_check`), so a count need not look unlike an alias's (`_ALIAS_SIGNS`).
    Bad samples are repaired where that is safe (NaN dropped, a few out-of-order timestamps sorted) and the
    message says so; with gaps, the longest contiguous stretch is analysed. Never raises on bad data.
    """
    cfg = _with_bounds(config, min_period_s, max_period_s)
    prep = prepare_signal(t_s, power_w, gap_factor=cfg.gap_factor, max_backward_fraction=cfg.max_backward_fraction)
    if prep.error is not None:
        return PeriodEstimate(None, 0.0, prep.error_verdict, _join(prep.error, *prep.notes))
    seg = prep.longest
    assert seg is not None  # no error implies at least one segment
    notes = list(prep.notes)
    reference = None
    if energy_j is not None:
        reference = average_power_from_energy(t_s if energy_t_s is None else energy_t_s, energy_j)
        if reference is None:
            notes.append("the energy counter was unusable (too few valid, increasing readings): ignored")
    if len(prep.segments) > 1:
        notes.append(f"analysed the longest contiguous stretch ({seg.duration_s:.1f} s)")
    est = detect_period_uniform(seg, cfg, reference=reference, variation_confirmed=variation_confirmed)
    return replace(est, message=_join(est.message, *notes)) if notes else est


def detect_period_uniform(
    sig: UniformSignal,
    config: DetectorConfig | None = None,
    *,
    reference: UniformSignal | None = None,
    variation_confirmed: bool = False,
) -> PeriodEstimate:
    """`detect_period` on an already-cleaned uniform signal.

    reference: interval-average power (see `average_power_from_energy`) covering the same time, or None.
    A window without a period that folds (aperiodic, varying from sample to sample, or hinting at a longer one) is
    then counted: the mean iteration time of jittery iterations (see `_count_cycles`).
    """
    cfg = config or DetectorConfig()
    est = _detect_folded(sig, cfg, reference)
    if est.ok or est.verdict not in COUNTABLE_VERDICTS or sig.held or _ENERGY_ALIAS in est.message:
        return est
    return _count_cycles(np.asarray(sig.values, dtype=np.float64), sig.dt_s, est, cfg, variation_confirmed)


_ENERGY_ALIAS = "the alias of iterations faster"


def _detect_folded(sig: UniformSignal, cfg: DetectorConfig, reference: UniformSignal | None) -> PeriodEstimate:
    """The fold path: one period that explains every sub-window (the module docstring's steps 3-8)."""
    x = np.asarray(sig.values, dtype=np.float64)
    dt = sig.dt_s
    n = len(x)
    window = n * dt
    t_lo = min_resolvable_period(dt, nyquist_guard=cfg.nyquist_guard, min_period_s=cfg.min_period_s)
    level = float(x.mean()) if n else math.nan
    base = _Fields(n, window, sig.t0_s, dt, t_lo, level)
    if t_lo >= cfg.max_period_s:
        return base.make(
            Verdict.TOO_SHORT,
            f"sampling every {dt * 1e3:.0f} ms cannot resolve any period below {t_lo:.3g} s, the maximum "
            f"considered is {cfg.max_period_s:.3g} s",
        )
    if n < 16 or window < cfg.min_cycles * t_lo:
        need = max(16 * dt, cfg.min_cycles * t_lo)
        return base.make(
            Verdict.INSUFFICIENT_DATA,
            f"{n} samples over {window:.2f} s: need {need:.2f} s ({cfg.min_cycles:g} periods of the shortest "
            f"resolvable period, {t_lo * 1e3:.0f} ms)",
            suggested_window_s=need,
        )
    y = _detrend(x, _DETREND_DEGREE)
    if float(y.std()) <= 1e-9 * max(abs(level), 1.0) or len(np.unique(x)) < 3:
        return base.make(Verdict.FLAT, "the power is constant over the window")

    spec = _Spectrum(y, dt)
    # Periods the window can validate (min_cycles of them), and longer ones it can only hint at.
    t_hi_ok = min(cfg.max_period_s, window / cfg.min_cycles)
    t_hi_any = min(cfg.max_period_s, window / 2.0)
    cands = _spectral_candidates(y, dt, 1.0 / t_hi_any, 1.0 / t_lo, cfg.n_peaks, cfg.max_harmonic)
    ok_cands = cands[cands <= t_hi_ok]
    best: tuple[float, float] | None = None
    if len(ok_cands):
        r2 = spec.r2(ok_cands)
        order = np.argsort(r2)[::-1][: cfg.n_refined]
        refined = [_refine(spec, float(ok_cands[i]), _refine_range(float(ok_cands[i]), window)) for i in order]
        best = max(refined, key=lambda pr: pr[1])
    if best is not None and best[1] >= cfg.min_fold_r2 + cfg.few_cycles_r2 * best[0] / window:
        choice = _choose_fundamental(spec, best, t_lo, cfg)
        if choice.issue == "sub_floor":
            return base.make(
                Verdict.TOO_SHORT,
                f"the pattern repeats faster than the {t_lo * 1e3:.0f} ms this sampling resolves ({choice.detail})",
                fold_r2=choice.r2,
            )
        return _validate(x, y, spec, sig, (choice.period, choice.r2), base, cfg, reference)
    # No period the window can validate. A strong longer one means: measure longer.
    long_cands = cands[cands > t_hi_ok]
    if len(long_cands):
        r2_long = spec.r2(long_cands)
        i = int(np.argmax(r2_long))
        if r2_long[i] >= 2 * cfg.min_fold_r2 and r2_long[i] > (best[1] if best else 0.0):
            need = window_for_periods(float(long_cands[i]), math.ceil(cfg.min_cycles))
            return base.make(
                Verdict.INSUFFICIENT_DATA,
                f"a period near {long_cands[i]:.3g} s may be present but the {window:.1f} s window holds only "
                f"{window / long_cands[i]:.1f} of them; measure at least {need:.1f} s",
                suggested_window_s=need,
            )
    return _no_period(y, base, cfg, "no periodic pattern")


@dataclass(frozen=True)
class _Fields:
    """What every estimate reports about the window, whatever the verdict."""

    samples_used: int
    window_s: float
    start_s: float
    sample_interval_s: float
    min_resolvable_s: float
    level_w: float

    def make(self, verdict: Verdict, message: str, **extra: object) -> PeriodEstimate:
        return PeriodEstimate(
            None,
            0.0,
            verdict,
            message,
            samples_used=self.samples_used,
            window_s=self.window_s,
            start_s=self.start_s,
            sample_interval_s=self.sample_interval_s,
            min_resolvable_s=self.min_resolvable_s,
            level_w=self.level_w,
            **extra,  # type: ignore[arg-type]
        )


def _refine_range(period: float, window: float) -> float:
    # A spectral peak is good to a fraction of a bin (1/window in frequency): half a bin in relative terms.
    return max(0.5 * period / window, 0.002)


@dataclass(frozen=True)
class _Choice:
    period: float
    r2: float
    issue: str = ""  # "" (fine) or "sub_floor": no period can be reported
    detail: str = ""


def _choose_fundamental(spec: _Spectrum, best: tuple[float, float], t_lo: float, cfg: DetectorConfig) -> _Choice:
    """From the best-folding period, the iteration period.

    Any multiple k*T of the period folds as well as T, and can even fold better when T is near Nyquist and
    commensurate with the sampling (T = 8.5 samples: the sampled sequence repeats every 17, and the fold at 2T
    collects T's aliased upper harmonics as its own in-band odd harmonics). What gives a multiple away is its
    waveform: most of its power sits on the harmonics that are multiples of k (those of T). So the period is
    divided by the largest k whose multiples carry `subharmonic_share` of the fold's (noise-corrected) power.
    A result under the resolvable floor means the pattern repeats faster than the sampling resolves.
    """
    period, r2 = best
    h = _n_harmonics(period, spec.dt, spec.n)
    harm, _ = spec.harmonics([period])
    noise_floor = spec.noise_per_harmonic * spec.var  # what white noise alone puts at one harmonic
    power = np.maximum(harm[0, :h] - noise_floor, 0.0)
    total = float(power.sum())
    k_best = 1
    if total > 0:
        for k in range(h, 1, -1):
            if float(power[k - 1 :: k].sum()) >= cfg.subharmonic_share * total:
                k_best = k
                break
    p, r = period, r2
    if k_best > 1:
        p = period / k_best
        if p < t_lo:
            return _Choice(period, r2, "sub_floor", f"{period * 1e3:.1f} ms repeats every {p * 1e3:.1f} ms")
        p, r = _refine(spec, p, _refine_range(p, spec.window))
    return _resolve_alias_family(spec, (p, r), t_lo, cfg)


def _resolve_alias_family(spec: _Spectrum, chosen: tuple[float, float], t_lo: float, cfg: DetectorConfig) -> _Choice:
    """Replace the chosen period by a shorter one whose aliased harmonics produce it, when that one explains the
    samples at least as well and has a real in-band fundamental.

    With T near Nyquist, T's k-th harmonic aliases to |k/T - m*fs|, and the harmonics of that alias are T's
    harmonics too: a whole family of T's content folds at the alias period P. If T's own in-band fundamental
    is weaker than that family, the band-limited fold prefers P. The aliasing-aware fold at T explains
    everything P explains plus T's fundamental; requiring that fundamental to be real (a share of P's in-band
    power) excludes the converse coincidence, where some T' explains P only through high aliased harmonics.
    """
    p, r = chosen
    fs = 1.0 / spec.dt
    f = 1.0 / p
    cands: list[float] = []
    for k in range(1, cfg.max_harmonic + 1):
        for m in range(0, k + 1):
            for sign in (1.0, -1.0):
                fk = (m * fs + sign * f) / k  # the fundamental whose k-th harmonic aliases onto f
                # Only periods with at most `alias_family_max_inband` harmonics below Nyquist: a period with
                # more would have shown through them in the band-limited search; and a longer one can "explain"
                # a commensurate pattern through its high aliased harmonics by coincidence.
                if (
                    fk > 0
                    and t_lo <= 1.0 / fk < p * (1.0 - 1e-3)
                    and fk * 2.0 * spec.dt * (cfg.alias_family_max_inband + 1) > 1.0
                ):
                    cands.append(1.0 / fk)
    if not cands:
        return _Choice(p, r)
    alt = np.unique(np.round(np.asarray(cands), 12))
    fine = spec.r2(np.concatenate(([p], alt)), aliased=True)
    band = spec.r2(alt)
    ok = (fine[1:] >= cfg.alias_family_ratio * fine[0]) & (band >= cfg.min_inband_share * r)
    if not ok.any():
        return _Choice(p, r)
    i = int(np.flatnonzero(ok)[np.argmax(fine[1:][ok])])
    p2, r2 = _refine(spec, float(alt[i]), _refine_range(float(alt[i]), spec.window))
    return _Choice(p2, r2)


def _validate(
    x: FloatArray,
    y: FloatArray,
    spec: _Spectrum,
    sig: UniformSignal,
    best: tuple[float, float],
    base: _Fields,
    cfg: DetectorConfig,
    reference: UniformSignal | None,
) -> PeriodEstimate:
    """Sub-window check (the same period, folding significantly, in every sub-window), then the alias check."""
    period, r2 = best
    dt = sig.dt_s
    n = len(x)
    window = n * dt
    n_cyc = window / period
    n_sub = int(min(cfg.max_subwindows, max(2, n_cyc // cfg.cycles_per_subwindow)))
    edges = np.linspace(0, n, n_sub + 1).astype(int)
    # Sub-windows hold few cycles, so their period estimates are noisy; scoring them only on the harmonics the
    # whole window's waveform has (a matched filter) keeps noise, or a stray line, at a harmonic the waveform
    # hardly has from moving the peak. Those it has count equally: higher harmonics pin the period better.
    harm, _ = spec.harmonics([period])
    weights = (harm[0] >= cfg.matched_harmonic_share * max(float(harm[0].sum()), 1e-300)).astype(np.float64)
    sub_p: list[float] = []
    sub_r: list[float] = []
    held: list[float] = []  # per sub-window: share of its best fold kept at the whole window's period
    for a, b in itertools.pairwise(edges):
        # Sub-window periods only need to agree to ~1%: a coarser spectrum (4x padding, <= 5% loss) will do.
        sub = _Spectrum(_detrend(x[a:b], 1), dt, pad=4, hann=(b - a) * dt < cfg.rect_subwindow_cycles * period)
        p, _ = _refine(sub, period, 1.5 * cfg.max_sub_spread, weights=weights)
        r, r_common = (float(v) for v in sub.r2([p, period]))
        sub_p.append(p)
        sub_r.append(r)
        # The drop from the sub-window's best fold to its fold at the common period, against what is allowed:
        # a share of the fold, or what noise alone lends a maximised fold (about one harmonic's noise per
        # harmonic used), whichever is larger; so a weak, few-cycle waveform is not failed for noise.
        drop = r - r_common
        slack = _n_harmonics(period, dt, b - a) * sub.noise_per_harmonic * max(1.0 - r, 0.0)
        held.append(1.0 - max(drop - slack, 0.0) / r if r > 0 else 0.0)
    spread = (max(sub_p) - min(sub_p)) / period
    # A sub-window of m cycles pins its period to roughly 1/(m * harmonics * SNR): with few cycles the
    # tolerance grows accordingly, or noise alone would reject long periods.
    tolerance = max(cfg.max_sub_spread, cfg.sub_spread_cycles / (n_cyc / n_sub))
    min_sub = min(sub_r)
    # Like for like: a short sub-window scores fewer harmonics (see _Spectrum.harmonics), so the whole window is
    # compared on those same harmonics, or a harmonic-rich long period would look incoherent for its cap alone.
    sub_cap = _variance_cap(int(np.min(np.diff(edges))))
    r2_like = float(spec.r2([period], max_harmonics=sub_cap)[0]) if sub_cap < _MAX_HARMONICS else r2
    coherence = float(np.mean(sub_r)) / r2_like if r2_like > 0 else 0.0
    extra: dict[str, object] = {"fold_r2": r2, "sub_periods_s": tuple(sub_p), "sub_fold_r2": tuple(sub_r)}
    if n_cyc < cfg.min_cycles:
        need = window_for_periods(period, math.ceil(cfg.min_cycles))
        return base.make(
            Verdict.INSUFFICIENT_DATA,
            f"candidate period {period:.4g} s: the window holds only {n_cyc:.1f} periods; measure {need:.1f} s",
            suggested_window_s=need,
            **extra,
        )
    # The whole window's period must also explain every sub-window nearly as well as that sub-window's own best
    # period does. This scales with precision by itself: with many cycles and a strong waveform the fold peak is
    # sharp, and a small wander (an alias's, amplified) already loses most of the fold; with few cycles or a
    # weak waveform the peak is broad, and one misfiring sub-window estimate costs little.
    worst_held = min(held)
    consistent = not (
        spread > tolerance
        or min_sub < cfg.min_sub_fold_r2
        or coherence < cfg.min_coherence
        or worst_held < cfg.min_period_held
    )
    # Not consistent, but every sub-window folds strongly at a period within a narrow band: a wandering period
    # (see DetectorConfig.wander_*), if the sub-windows are long enough to tell it from an alias.
    in_band = (
        not consistent
        and period / dt - 1.0 >= cfg.wander_min_amplification
        and spread <= cfg.wander_band
        and min_sub >= cfg.wander_min_sub_r2
        and float(np.mean(sub_r)) >= cfg.wander_mean_sub_r2
    )
    wandering = in_band and n_cyc / n_sub >= cfg.wander_min_sub_cycles
    if wandering:
        # Cycles over time: the mean period across the window (the sub-windows are of equal length).
        period = float(n_sub / np.sum(1.0 / np.asarray(sub_p)))
        n_cyc = window / period
    elif not consistent:
        why = (
            f"candidate {period * 1e3:.1f} ms is not consistent across {n_sub} sub-windows (periods "
            f"{', '.join(f'{p * 1e3:.1f}' for p in sub_p)} ms; fold r2 {r2:.2f} overall, "
            f"{', '.join(f'{r:.2f}' for r in sub_r)} per sub-window, {worst_held * 100:.0f}% of it kept at the common "
            "period in the worst)"
        )
        # Every sub-window folds well, only not on one common period: a real period that drifts or stutters
        # (iteration times varying from step to step), not iterations too fast to see.
        unstable = min_sub >= 2 * cfg.min_sub_fold_r2 and spread <= 2 * tolerance
        if in_band:
            # Long enough sub-windows could tell a wandering period from an alias: say how long to measure.
            # (10% more: the candidate period is itself a little off, and a window of 199 cycles would not do)
            need = window_for_periods(period, math.ceil(1.1 * cfg.max_subwindows * cfg.wander_min_sub_cycles))
            why += f"; its period wanders within {spread * 100:.1f}%: measure {need:.1f} s to confirm it"
            extra["suggested_window_s"] = need
        return _no_period(y, base, cfg, why, unstable=unstable, **extra)
    ratio = None if reference is None else _alias_ratio(spec, sig.t0_s, period, reference, cfg)
    if ratio is not None and reference is not None and ratio < cfg.min_alias_ratio:
        return base.make(
            Verdict.TOO_SHORT,
            f"a {period * 1e3:.1f} ms pattern is present, but the energy counter's {reference.dt_s * 1e3:.0f} ms "
            f"averages vary only {ratio * 100:.0f}% as much at that period as a real waveform would: it is "
            f"{_ENERGY_ALIAS} than the {_t_lo_ms(base)} ms the {dt * 1e3:.0f} ms sampling resolves",
            **extra,
        )
    if ratio is None and sig.held:
        return base.make(
            Verdict.ALIAS_RISK,
            f"a {period * 1e3:.1f} ms pattern is present in stair-step (polled) power, which samples the "
            f"instantaneous power every {dt * 1e3:.0f} ms: iterations faster than {_t_lo_ms(base)} ms alias to "
            "such patterns, and without the energy counter (or buffered samples) this cannot be ruled out",
            **extra,
        )
    # Confidence: how much of the variance the waveform explains (saturating at 0.5), times how well the
    # sub-windows agree, times how strongly the weakest sub-window folds.
    conf = min(1.0, r2 / 0.5) ** 0.5
    conf *= 1.0 - 0.5 * spread / tolerance
    conf *= min(1.0, min_sub / (2 * cfg.min_sub_fold_r2)) ** 0.5
    checked = f", energy averages agree ({ratio:.2f})" if ratio is not None else ""
    wanders = ""
    if wandering:
        conf *= 0.5  # a mean over a wandering period: less certain than one period that fits the whole window
        wanders = f", wandering: the mean of sub-window periods {min(sub_p) * 1e3:.1f}-{max(sub_p) * 1e3:.1f} ms"
    est = base.make(
        Verdict.OK,
        f"period {period * 1e3:.2f} ms ({n_cyc:.0f} periods, fold r2 {r2:.2f}, sub-window spread "
        f"{spread * 100:.1f}%{wanders}{checked})",
        **extra,
    )
    # The sub-windows' periods vary by the iterations' own spread over the square root of their cycles (and by
    # estimation noise, which this counts as spread: two windows are then allowed to differ a little more).
    single = float(np.std(sub_p)) / period * math.sqrt(n_cyc / n_sub)
    return replace(est, period_s=period, confidence=float(np.clip(conf, 0.0, 1.0)), spread=single)


def _t_lo_ms(base: _Fields) -> str:
    return f"{base.min_resolvable_s * 1e3:.0f}"


def _no_period(
    y: FloatArray, base: _Fields, cfg: DetectorConfig, why: str, unstable: bool = False, **extra: object
) -> PeriodEstimate:
    """Classify a window without a valid period: flat, too fast for the sampling, or aperiodic."""
    sd = float(y.std())
    level = base.level_w
    if sd < cfg.flat_rel_std * max(abs(level), 1e-9):
        return base.make(Verdict.FLAT, f"{why}; the power is flat (std {sd:.2f} W around {level:.0f} W)", **extra)
    if unstable:
        return base.make(Verdict.APERIODIC, f"{why}; the period is not stable over the window", **extra)
    yc = y - y.mean()
    lag1 = float(yc[:-1] @ yc[1:] / max(float(yc @ yc), 1e-300))
    if lag1 < cfg.rough_lag1:
        return base.make(
            Verdict.TOO_SHORT,
            f"{why}; the power changes from one sample to the next (lag-1 correlation {lag1:.2f}), as with "
            f"iterations shorter than the {_t_lo_ms(base)} ms that {base.sample_interval_s * 1e3:.0f} ms "
            "sampling resolves",
            **extra,
        )
    return base.make(Verdict.APERIODIC, f"{why}; the power varies aperiodically", **extra)


def _with_bounds(
    config: DetectorConfig | None, min_period_s: float | None, max_period_s: float | None
) -> DetectorConfig:
    cfg = config or DetectorConfig()
    if min_period_s is not None:
        cfg = replace(cfg, min_period_s=float(min_period_s))
    if max_period_s is not None:
        cfg = replace(cfg, max_period_s=float(max_period_s))
    return cfg


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


# --------------------------------------------------------------------------------------------------------------
# Jittery iterations: counting cycles


@dataclass(frozen=True)
class _Count:
    period: float  # mean cycle length over the counted span
    cycles: float
    band_share: float  # variance share of the band-passed fundamental
    slips: float  # share of samples where the phase ran backwards
    spread: float  # relative std of single cycle lengths
    phase_r2: float  # variance explained by the waveform folded on the counted phase
    harmonic_r2: float  # ... by its harmonics 2-4 alone
    sub_periods: tuple[float, ...]
    wander: float = 0.0  # std of 8-cycle means / std of single cycles (independent cycles: ~0.35)
    agreement: float = 0.0  # relative difference of counts at two band centres (see _count_near)
    waived: tuple[str, ...] = ()  # signs of an alias that the energy counter answered (see _count_cycles)


def _count_at(y: FloatArray, dt: float, period: float, band: float, power: FloatArray) -> _Count | None:
    """Count the cycles of y near `period`: band-pass around 1/period (flat within +-band, steep outside, so a
    jittered fundamental passes and its second harmonic does not), take the analytic signal's unwrapped phase,
    and fold the samples on that phase (does each counted cycle carry the same waveform?). `power`: y's samples
    less a straight-line trend only (`_wait_samples`), on which waits are told (`_stall_aware_phase`)."""
    n = len(y)
    trim = math.ceil(period / dt)
    if n - 2 * trim < 16:
        return None
    nfft = 1 << math.ceil(math.log2(2 * n))
    spectrum = np.fft.fft(y - y.mean(), nfft)
    f = np.fft.fftfreq(nfft, dt)
    f0 = 1.0 / period
    gain = np.where(f > 0, 2.0 * np.exp(-0.5 * ((f - f0) / (band * f0)) ** 4), 0.0)
    z = np.fft.ifft(spectrum * gain)[:n]
    phase = _stall_aware_phase(z, power, period / dt)
    var = float(y.var())
    if var <= 0:
        return None
    lo, hi = trim, n - 1 - trim
    cycles = (phase[hi] - phase[lo]) / (2.0 * math.pi)
    if cycles <= 3:
        return None
    mean_period = (hi - lo) * dt / cycles
    core = slice(lo, hi + 1)
    band_share = float(np.mean(np.abs(z[core]) ** 2) / 2.0 / var)
    slips = float(np.mean(np.diff(phase[core]) <= 0.0))
    # Cycle lengths: where the phase crosses whole turns.
    mono = np.maximum.accumulate(phase[core])
    turns = np.arange(math.ceil(mono[0] / (2 * math.pi)), math.floor(mono[-1] / (2 * math.pi)) + 1) * 2 * math.pi
    crossings = np.interp(turns, mono, np.arange(lo, hi + 1) * dt)
    lengths = np.diff(crossings)
    spread = float(lengths.std() / lengths.mean()) if len(lengths) >= 3 and lengths.mean() > 0 else math.inf
    # How much cycle lengths wander (each against the mean of the 8 around it) versus how much they vary.
    wander = _wander(lengths)
    # Fold on the counted phase: least squares on its first 4 harmonics.
    ph = phase[core]
    yc = y[core] - y[core].mean()
    total = float(yc @ yc)
    if total <= 0:
        return None
    basis = np.column_stack([fn(k * ph) for k in range(1, 5) for fn in (np.cos, np.sin)])
    try:  # normal equations: 8 well-separated columns, far cheaper than an SVD
        coef = np.linalg.solve(basis.T @ basis, basis.T @ yc)
    except np.linalg.LinAlgError:
        return None
    fit = basis * coef
    phase_r2 = float((fit.sum(axis=1) ** 2).sum() / total)
    harmonic_r2 = float((fit[:, 2:].sum(axis=1) ** 2).sum() / total)
    quarters = np.linspace(lo, hi, 5).astype(int)
    subs = tuple(
        float((b - a) * dt * 2.0 * math.pi / (phase[b] - phase[a])) if phase[b] > phase[a] else math.inf
        for a, b in itertools.pairwise(quarters)
    )
    return _Count(mean_period, cycles, band_share, slips, spread, phase_r2, harmonic_r2, subs, wander)


# A count rejected for one of these looks like the alias of faster iterations: no template segmentation from it.
_ALIAS_SIGNS = ("a clean fold", "a near-sinusoidal", "cycle lengths wander")


def _wander(lengths: FloatArray) -> float:
    """How much cycle lengths wander (each against the mean of the 8 around it) versus how much they vary."""
    if len(lengths) < 16:
        return 0.0
    dev = lengths - lengths.mean()
    return float(np.convolve(dev, np.ones(8) / 8, mode="valid").std() / max(float(dev.std()), 1e-12))


def _count_cycles(
    x: FloatArray, dt: float, failed: PeriodEstimate, cfg: DetectorConfig, variation_confirmed: bool = False
) -> PeriodEstimate:
    """The mean iteration time of a window whose iterations jitter too much for any period to fold; else `failed`
    with the reason counting did not help appended.

    The fundamental is near one of the bands with the most power (a jittered line is broad, its harmonics broader
    still), or a half or a third below one (a waveform strongest at its 2nd or 3rd harmonic): each is counted
    (once more centred on what it counted) and checked (DetectorConfig.count_*); of those that pass, the one
    whose counted phase explains the samples best wins, the shortest within 10% of it (a multiple of the period
    folds as well). Where the energy counter confirmed the samples' slow variation, a count's signs of an alias
    (`_ALIAS_SIGNS`) are no problem: an alias's variation is not in the counter.
    """
    y = _detrend(x, _DETREND_DEGREE)
    waits = _wait_samples(x)
    n = len(y)
    window = n * dt
    t_lo = max(failed.min_resolvable_s, cfg.count_min_samples * dt)
    t_hi = min(cfg.max_period_s, window / cfg.count_min_cycles)
    if not (math.isfinite(t_lo) and t_hi > t_lo):
        return failed
    nfft = 1 << math.ceil(math.log2(4 * n))
    power = np.abs(np.fft.rfft(y * _hanning(n), nfft)) ** 2
    freqs = np.fft.rfftfreq(nfft, dt)
    centers = np.geomspace(1.0 / t_hi, 1.0 / t_lo, 160)
    in_reach = freqs <= (1.0 + 2.0 * cfg.count_band) / t_lo  # the bands' weights vanish beyond
    freqs, power = freqs[in_reach], power[in_reach]
    weights = np.exp(-0.5 * ((freqs[None, :] - centers[:, None]) / (cfg.count_band * centers[:, None])) ** 4)
    captured = weights @ power / weights.sum(axis=1)  # mean power in each band: a broad line stands out
    is_peak = np.concatenate(([True], captured[1:] > captured[:-1])) & np.concatenate(
        (captured[:-1] >= captured[1:], [True])
    )
    peaks = centers[is_peak][np.argsort(captured[is_peak])[::-1][:3]]
    starts = {round(k / float(f), 6) for f in peaks for k in (1, 2, 3)}
    # Also where the fold's sub-windows put the period, and the autocorrelation's first peak.
    if failed.sub_periods_s:
        starts.add(round(float(np.median(failed.sub_periods_s)), 6))
    lag = _acf_peak(y)
    if lag:
        starts.add(round(lag * dt, 6))
    passed: list[_Count] = []
    rescued: list[_Count] = []  # counts whose only problems are signs of an alias, which the counter answered
    rejected: list[str] = []
    counted: list[_Count] = []
    for period in sorted(starts):
        if not t_lo <= period <= t_hi:
            continue
        c = _count_near(y, dt, period, cfg, waits)
        if c is None:
            continue
        problems = _count_problems(c, t_lo, t_hi, cfg)
        if not any(p.startswith(_ALIAS_SIGNS) for p in problems):
            counted.append(c)
        if problems:
            rejected.append(f"{c.period * 1e3:.1f} ms ({', '.join(problems)})")
            if variation_confirmed and all(p.startswith(_ALIAS_SIGNS) for p in problems):
                rescued.append(replace(c, waived=tuple(problems)))
        else:
            passed.append(c)
    if not passed:
        why = "; counting cycles found none: " + ("; ".join(rejected[:3]) if rejected else "no candidate")
        failed = replace(failed, message=failed.message + why)
        level = float(np.mean(x))
        swing = float(y.std()) / level if level > 0.0 else math.inf
        if swing < cfg.template_min_swing:
            return replace(failed, message=failed.message + f"; power varies by {swing:.0%} of its level: no stalls")
        segmented = _segment_cycles(y, dt, counted, failed, t_lo, t_hi, cfg)
        if segmented.ok or not rescued or segmented.suggested_window_s is not None:
            return segmented
        # Only where the samples give nothing else, not even a longer window to measure, does the counter's answer
        # count: it says the variation is real, not that a count of it beats a segmentation (which may stand alone).
        passed, failed = rescued, segmented
    best = max(c.phase_r2 for c in passed)
    c = min((c for c in passed if c.phase_r2 >= 0.9 * best), key=lambda c: c.period)
    # The band-passed count is biased, not noisy, where iterations merge or a long stall rings (docs/jitter.md,
    # session 9): a matched-template segmentation started at it is an independent estimate of the same mean.
    runs_by_start: dict[float, _Segmentation | None] = {}
    seg = _segment_count(y, dt, c.period, cfg, runs_by_start=runs_by_start)
    if _template_disagrees(seg, c.period, cfg):
        assert seg is not None
        disagree = f"counted {c.period * 1e3:.1f} ms, but a matched template segments {seg.period * 1e3:.1f} ms"
        if seg.cycles >= cfg.template_min_cycles and t_lo <= seg.period <= t_hi:
            return _segmented_period(failed, seg, f"{disagree}; {failed.message}", _stands_alone(y, dt, seg, cfg))
        return replace(failed, message=f"{failed.message}; {disagree} ({seg.cycles} iterations): no count")
    # Count and template agree: where the template's iterations stand alone, so does its estimate (a count alone
    # waits for a second window; docs/jitter.md, session 24). Iterations that vary less than template_min_spread
    # may be segmented too where the count passed every check and the energy counter shows the variation (which a
    # fast job's alias, with the same samples, does not): a +-10% 409 ms job, 34 iterations in 14 s, spread 6%
    # (docs/jitter.md, session 30).
    if seg is None and cfg.judge_stands_alone and variation_confirmed and not c.waived:
        seg = _segment_count(y, dt, c.period, cfg, min_spread=0.0, runs_by_start=runs_by_start)
        if _template_disagrees(seg, c.period, cfg):
            seg = None
    if (
        seg is not None
        and seg.cycles >= cfg.template_min_cycles
        and t_lo <= seg.period <= t_hi
        and _stands_alone(y, dt, seg, cfg)
    ):
        agree = f"counted {c.period * 1e3:.1f} ms, and a matched template agrees"
        return _segmented_period(failed, seg, f"{agree}; {failed.message}", True)
    conf = min(1.0, c.phase_r2 / 0.7) ** 0.5 * max(0.0, 1.0 - c.spread) * 0.8
    answered = f"; the energy counter shows the variation, so not an alias: {', '.join(c.waived)}" if c.waived else ""
    message = (
        f"mean period {c.period * 1e3:.2f} ms, counted ({c.cycles:.0f} cycles, jittery: single cycles spread "
        f"{c.spread * 100:.0f}%, fold on the counted phase r2 {c.phase_r2:.2f}{answered}; no period folds: "
        f"{failed.message})"
    )
    return _mean_period(failed, c.period, conf, c.phase_r2, c.sub_periods, c.spread, "count", message)


def _mean_period(
    failed: PeriodEstimate,
    period: float,
    confidence: float,
    fit_r2: float,
    sub_periods: tuple[float, ...],
    spread: float,
    method: str,
    message: str,
) -> PeriodEstimate:
    """A jittery window's mean iteration time (counted or segmented), replacing the failed fold's estimate."""
    return replace(
        failed,
        period_s=period,
        confidence=float(np.clip(confidence, 0.0, 1.0)),
        verdict=Verdict.OK,
        message=message,
        fold_r2=fit_r2,
        sub_periods_s=sub_periods,
        sub_fold_r2=(),
        suggested_window_s=None,
        spread=spread,
        method=method,
    )


def _wait_level(y: FloatArray) -> float:
    """Under this the power is at a stall's level (the waits' samples sit near idle, far under a burst's)."""
    return float(y.mean()) - 0.8 * float(y.std())


def _stalls(y: FloatArray, samples_per_cycle: float) -> npt.NDArray[np.bool_]:
    """Samples inside a long stall: the power's mean over 0.6 cycle stays under the wait level."""
    k = max(2, round(0.6 * samples_per_cycle))
    if len(y) < 2 * k:
        return np.zeros(len(y), dtype=bool)
    mean = np.convolve(y, np.ones(k) / k, mode="same")
    return np.asarray(mean < _wait_level(y), dtype=bool)


def _stall_aware_phase(z: npt.NDArray[np.complex128], power: FloatArray, samples_per_cycle: float) -> FloatArray:
    """Unwrapped phase of the band-passed analytic signal z, except across waits, told on `power` (the samples
    less a straight-line trend only: a quartic one can lift a long stall above the wait level): a long host
    stall is the wait of one iteration, but the band-passed signal keeps ringing through it at the band's
    frequency and would count phantom cycles. Across a stall (_stalls), or a quiet stretch (amplitude under 0.3 x
    its median) whose power is at the wait level, the phase advances only by what brings it to where it is
    afterwards, less whole turns (at most one cycle). A quiet stretch at the bursts' level is no wait: there the
    50 Hz samples missed the short dips between iterations (docs/jitter.md, session 24), and the phase runs on
    through it."""
    phase = np.unwrap(np.angle(z))
    amp = np.abs(z)
    stalled = _stalls(power, samples_per_cycle)
    low = (amp < 0.3 * float(np.median(amp))) | stalled
    if not low.any():
        return np.asarray(phase, dtype=np.float64)
    step = np.diff(phase)
    edges = np.flatnonzero(np.diff(np.concatenate(([0], low.astype(np.int8), [0]))))
    wait_level = _wait_level(power)
    for a, b in zip(edges[::2], edges[1::2], strict=True):
        if not stalled[a:b].any() and float(power[a:b].mean()) >= wait_level:
            continue
        # Samples a..b-1 are a wait: the steps from a-1 to b (clipped to the signal) become one step.
        i, j = max(a - 1, 0), min(b, len(phase) - 1)
        if j <= i:
            continue
        total = float(phase[j] - phase[i])
        kept = total % (2.0 * math.pi)
        step[i:j] = kept / (j - i)
    return np.asarray(np.concatenate(([phase[0]], phase[0] + np.cumsum(step))), dtype=np.float64)


def _count_near(y: FloatArray, dt: float, period: float, cfg: DetectorConfig, power: FloatArray) -> _Count | None:
    """Count cycles near `period` with the band centred a little faster than the cycles (count_center): there the
    count holds (on the tuning jobs, within 0.5% for centres at 0.8-0.95 of the mean cycle), while a band centred
    slower loses the shortest cycles and counts too few, an error that grows as the centre follows it. Centred
    again on what it counted; then counted at two centres of that reliable range, which must agree. `power`: y's
    samples less a straight-line trend only (`_count_at`)."""
    c = _count_at(y, dt, cfg.count_center * period, cfg.count_band, power)
    if c is None:
        return None
    c = _count_at(y, dt, cfg.count_center * c.period, cfg.count_band, power) or c
    lo = _count_at(y, dt, (cfg.count_center - 0.07) * c.period, cfg.count_band, power)
    hi = _count_at(y, dt, (cfg.count_center + 0.07) * c.period, cfg.count_band, power)
    if lo is None or hi is None:
        return None
    return replace(c, agreement=abs(hi.period / lo.period - 1.0))


def _acf_peak(y: FloatArray) -> int | None:
    """Lag (samples) of the autocorrelation's highest peak after its first zero crossing, within three times that
    crossing: for jittery iterations a broad peak at the mean cycle."""
    n = len(y)
    nfft = 1 << math.ceil(math.log2(2 * n))
    f = np.fft.rfft(y - y.mean(), nfft)
    acf = np.fft.irfft(np.abs(f) ** 2, nfft)[: n // 2]
    if acf[0] <= 0:
        return None
    below = np.flatnonzero(acf < 0)
    if len(below) == 0:
        return None
    z = int(below[0])
    seg = acf[z : min(3 * z, len(acf))]
    if len(seg) < 2 or seg.max() <= 0.05 * acf[0]:
        return None
    return z + int(np.argmax(seg))


def _count_problems(c: _Count, t_lo: float, t_hi: float, cfg: DetectorConfig) -> list[str]:
    """Why a count cannot be trusted (empty: it can)."""
    checks = [
        (c.cycles < cfg.count_min_cycles, f"{c.cycles:.1f} cycles"),
        (c.band_share < cfg.count_min_band_share, f"band share {c.band_share:.2f}"),
        (c.slips > cfg.count_max_slips, f"phase slips at {c.slips * 100:.1f}% of samples"),
        (c.spread > cfg.count_max_spread, f"cycle spread {c.spread * 100:.0f}%"),
        (c.phase_r2 < cfg.count_min_phase_r2, f"phase fold r2 {c.phase_r2:.2f}"),
        (c.band_share > cfg.count_max_band_share, f"a near-sinusoidal line (band share {c.band_share:.2f})"),
        (c.wander > cfg.count_max_wander, f"cycle lengths wander ({c.wander:.2f})"),
        (
            c.phase_r2 >= cfg.count_clean_r2 and c.spread >= cfg.count_clean_spread,
            f"a clean fold (r2 {c.phase_r2:.2f}) on cycles spread {c.spread * 100:.0f}%, as an alias's are",
        ),
        (c.harmonic_r2 < cfg.count_min_harmonic_r2, f"harmonic r2 {c.harmonic_r2:.3f}"),
        (not t_lo <= c.period <= t_hi, "out of range"),
        (c.agreement > cfg.count_agreement, f"counts at two band centres differ by {c.agreement * 100:.1f}%"),
    ]
    return [why for bad, why in checks if bad]


# --------------------------------------------------------------------------------------------------------------
# Matched-template segmentation: iterations with long, varying host stalls


@dataclass(frozen=True)
class _Segmentation:
    period: float  # mean iteration time between the first and last iteration starts found
    cycles: int
    r2: float  # variance explained by the template-and-stall model (boundary penalties left out)
    spread: float  # relative std of the segment lengths
    sub_periods: tuple[float, ...]
    wander: float = 0.0  # std of 8-segment means / std of single segments (independent stalls: ~0.35)
    lag1: float = 0.0  # correlation of consecutive segment lengths (independent stalls: ~0)
    depth: float = 0.0  # (mean of the template - stall level) / std of the samples
    contrast: float = 0.0  # (mean of the template - stall level) / rms misfit of the template over the bursts
    stall_share: float = 0.0  # share of the samples in stalls (after the template)
    stall_noise: float = 0.0  # mean squared deviation of stall samples from the stall level / variance
    alternation: float = 0.0  # segment lengths by position modulo _SPLIT_PARTS: the larger F statistic of means
    hidden: int = 0  # segments whose stall holds a compute burst (see DetectorConfig.template_max_hidden)
    edge: float = 0.0  # the longer of the window's stretches before the first start and after the last
    longest: float = 0.0  # the longest segment


# An iteration split in parts is split in 2 or 3 of them: the alternation statistic's moduli, the multiples a split
# segmentation gives way to (_segment_count) and those a window that stands alone is checked against.
_SPLIT_PARTS = (2, 3)


def _initial_boundaries(y: FloatArray, dt: float, period: float) -> FloatArray:
    """Iteration starts to learn a first template from: where the phase of y band-passed near `period` crosses
    the phase of the steepest rise of the waveform folded on it (a compute burst starting after a stall)."""
    n = len(y)
    nfft = 1 << math.ceil(math.log2(2 * n))
    f = np.fft.fftfreq(nfft, dt)
    f0 = 1.0 / (0.85 * period)
    gain = np.where(f > 0, 2.0 * np.exp(-0.5 * ((f - f0) / (0.3 * f0)) ** 4), 0.0)
    z = np.fft.ifft(np.fft.fft(y - y.mean(), nfft) * gain)[:n]
    phase = _stall_aware_phase(z, y, period / dt)
    bins = 24
    which = ((phase % (2.0 * math.pi)) / (2.0 * math.pi) * bins).astype(int) % bins
    counts = np.bincount(which, minlength=bins)
    profile = np.bincount(which, weights=y, minlength=bins) / np.maximum(counts, 1)
    profile = np.where(counts > 0, profile, float(y.mean()))
    anchor = (int(np.argmax(np.roll(profile, -1) - profile)) + 0.5) / bins * 2.0 * math.pi
    mono = np.maximum.accumulate(phase)
    k = np.arange(math.ceil((mono[0] - anchor) / (2 * math.pi)), math.floor((mono[-1] - anchor) / (2 * math.pi)) + 1)
    return np.asarray(np.interp(anchor + 2.0 * math.pi * k, mono, np.arange(n) * dt), dtype=np.float64)


def _template_cell(tau: FloatArray, grid_s: float, cells: int) -> npt.NDArray[np.intp]:
    """The cell of a template of `cells` grid_s cells that each offset `tau` into a burst falls in (the last
    cell takes any offset past the template's end)."""
    return np.minimum((tau / grid_s).astype(np.intp), cells - 1)


def _template(
    y: FloatArray, dt: float, starts: FloatArray, compute_s: float, grid_s: float
) -> tuple[FloatArray, float] | None:
    """The mean waveform of the first compute_s after each iteration start (on a grid_s grid, lightly smoothed)
    and the mean level after it (the stall)."""
    t = np.arange(len(y)) * dt
    j = np.searchsorted(starts, t, side="right") - 1
    inside = (j >= 0) & (j < len(starts) - 1)
    tau, v = t[inside] - starts[j[inside]], y[inside]
    burst = tau < compute_s
    if burst.sum() < 8 or (~burst).sum() < 1:
        return None
    cells = math.ceil(compute_s / grid_s)
    k = _template_cell(tau[burst], grid_s, cells)
    counts = np.bincount(k, minlength=cells)
    sums = np.bincount(k, weights=v[burst], minlength=cells)
    x = np.arange(cells)
    filled = counts > 0
    g = np.interp(x, x[filled], sums[filled] / counts[filled])
    g = np.convolve(np.pad(g, 1, mode="edge"), np.ones(3) / 3.0, mode="valid")
    return np.asarray(g, dtype=np.float64), float(v[~burst].mean())


def _best_segmentation(
    y: FloatArray,
    dt: float,
    model: tuple[FloatArray, float],
    compute_s: float,
    bounds: tuple[float, float],
    cfg: DetectorConfig,
    penalty: float,
) -> tuple[FloatArray, float]:
    """Iteration starts (on a template_grid_s grid) minimising the squared residual of y against "template for
    compute_s, then the stall level until the next start", plus `penalty` per start; and that residual. The first
    start may fall anywhere in the first longest segment, the last anywhere in the last (dynamic programming)."""
    g, level = model
    h = cfg.template_grid_s
    n = len(y)
    grid = np.arange(0.0, n * dt, h)
    first = np.minimum(np.ceil(grid / dt - 1e-9).astype(int), n)
    dmin, dmax = bounds
    reach = math.ceil(dmax / dt) + 2
    m = len(grid)
    k = first[:, None] + np.arange(reach)[None, :]
    tau = k * dt
    tau -= grid[:, None]
    # The template's cells, then the stall level as one more cell; no residual past the window's end.
    cell = _template_cell(tau, h, len(g))
    cell[tau >= compute_s] = len(g)
    resid = np.concatenate([y, np.zeros(reach)])[k]
    resid -= np.append(g, level)[cell]
    np.square(resid, out=resid)
    past = np.flatnonzero(first + reach > n)  # the rows that reach past it
    resid[past] = np.where(k[past] < n, resid[past], 0.0)
    width = reach + 1
    cum = np.empty((m, width))
    cum[:, 0] = 0.0
    np.cumsum(resid, axis=1, out=cum[:, 1:])
    cum_flat = cum.ravel()
    steps = np.arange(max(1, round(dmin / h)), round(dmax / h) + 1)
    lead = np.concatenate([[0.0], np.cumsum((y - y.mean()) ** 2)])
    best = np.where(grid <= dmax, lead[first], np.inf)
    # Pulled, not pushed: each start takes the cheapest earlier start (the earliest of equals) that beats its
    # own lead-in cost. A start's sources lie at least dmin earlier, so a block of that many is settled at once.
    # best is padded with dmax / h infinities in front (a source before the first start is one): the sources'
    # costs of start t are then the sliding window padded[t : t + len(steps)], earliest first. Segment costs
    # are gathered for a chunk of starts at a time (bounded memory).
    block = int(steps[0])
    back_steps = steps[::-1]
    pad = int(steps[-1])
    padded = np.concatenate([np.full(pad, np.inf), best])
    sources = np.lib.stride_tricks.sliding_window_view(padded, len(steps))
    chunk = max(block, (1 << 16) // len(steps) // block * block)
    # (The inner loop runs once per block, hundreds of times a window for short iterations: it keeps to a few
    # method calls on preallocated buffers, the lead-in cost as column 0 so that one argmin both picks the source
    # and keeps the lead-in on ties; the arithmetic, and so every result, is that of the plain form.)
    choice = np.zeros(m, dtype=np.intp)  # 0: the lead-in; i > 0: the source back_steps[i - 1] earlier
    cost_buf = np.empty((block, len(steps) + 1))
    rows = np.arange(block)
    # Each start's sources as sliding windows too (a source before the first start is the first start).
    src_first = np.lib.stride_tricks.sliding_window_view(np.concatenate([np.full(pad, first[0]), first]), len(steps))
    src_row = np.lib.stride_tricks.sliding_window_view(
        np.concatenate([np.zeros(pad, dtype=np.intp), np.arange(m) * width]), len(steps)
    )
    index_buf = np.empty((chunk, len(steps)), dtype=np.intp)
    seg_buf = np.empty((chunk, len(steps)))
    for c0 in range(block, m, chunk):
        c1 = min(c0 + chunk, m)
        index = index_buf[: c1 - c0]
        np.subtract(first[c0:c1, None], src_first[c0:c1], out=index)
        np.minimum(index, reach, out=index)
        index += src_row[c0:c1]
        seg = seg_buf[: c1 - c0]
        np.take(cum_flat, index, out=seg)
        for a in range(0, c1 - c0, block):
            t0, b = c0 + a, min(block, c1 - c0 - a)
            cost = cost_buf[:b]
            np.add(sources[t0 : t0 + b], seg[a : a + b], out=cost[:, 1:])
            cost[:, 1:] += penalty
            current = padded[pad + t0 : pad + t0 + b]  # a view: updated in place
            cost[:, 0] = current
            pick = cost.argmin(axis=1)
            current[:] = cost[rows[:b], pick]
            choice[t0 : t0 + b] = pick
    t_all = np.arange(m)
    back = np.where(choice > 0, t_all - np.concatenate(([0], back_steps))[choice], -1)
    best = padded[pad:]
    tail = cum[t_all, np.minimum(n - first, reach)]
    ends = np.flatnonzero(grid >= n * dt - dmax)
    total = best[ends] + tail[ends]
    j = int(ends[np.argmin(total)])
    chain = []
    while j >= 0:
        chain.append(grid[j])
        j = int(back[j])
    starts = np.asarray(chain[::-1], dtype=np.float64)
    return starts, float(np.min(total)) - penalty * max(len(starts) - 1, 0)


def _segment_from(y: FloatArray, dt: float, period: float, cfg: DetectorConfig) -> _Segmentation | None:
    """Learn the template from band-passed starts near `period`, then alternate: segment with it, learn it again
    from the segments (template_rounds times)."""
    starts = _initial_boundaries(y, dt, period)
    residual = math.nan
    penalty = 0.0
    model: tuple[FloatArray, float] | None = None
    compute_s = math.nan
    for _ in range(cfg.template_rounds):
        if len(starts) < 5:
            return None
        lengths = np.diff(starts)
        compute_s = float(np.percentile(lengths, 5))
        model = _template(y, dt, starts, compute_s, cfg.template_grid_s)
        if model is None or compute_s <= 0:
            return None
        dmax = max(2.5 * float(lengths.mean()), 1.5 * float(lengths.max()))
        starts, residual = _best_segmentation(y, dt, model, compute_s, (0.8 * compute_s, dmax), cfg, penalty)
        penalty = cfg.template_penalty * residual / len(y)
    if len(starts) < 4:
        return None
    lengths = np.diff(starts)
    quarters = np.array_split(lengths, 4)
    return _Segmentation(
        period=float((starts[-1] - starts[0]) / (len(starts) - 1)),
        cycles=len(starts) - 1,
        r2=1.0 - residual / float(len(y) * y.var()),
        spread=float(lengths.std() / lengths.mean()),
        sub_periods=tuple(float(q.mean()) for q in quarters if len(q)),
        wander=_wander(lengths),
        lag1=float(np.corrcoef(lengths[:-1], lengths[1:])[0, 1]) if len(lengths) >= 8 and lengths.std() > 0 else 0.0,
        depth=(float(model[0].mean()) - model[1]) / float(y.std()) if model is not None else 0.0,
        contrast=_contrast(y, dt, starts, compute_s, model, cfg.template_grid_s) if model is not None else 0.0,
        stall_share=float(np.clip(1.0 - compute_s / lengths.mean(), 0.0, 1.0)),
        stall_noise=_stall_noise(y, dt, starts, compute_s, model[1]) if model is not None else math.inf,
        alternation=max(_alternation(lengths, k) for k in _SPLIT_PARTS),
        hidden=_hidden_bursts(y, dt, starts, compute_s, model) if model is not None else 0,
        edge=max(float(starts[0]), len(y) * dt - float(starts[-1])),
        longest=float(lengths.max()),
    )


def _alternation(lengths: FloatArray, k: int) -> float:
    """F statistic of the segment lengths' means by position modulo k: ~1 for independent iterations, large where
    each iteration was split into k segments of different lengths (only one of them holds the stall)."""
    n = len(lengths)
    if n < 4 * k:
        return 0.0
    classes = [lengths[i::k] for i in range(k)]
    between = sum(len(c) * (c.mean() - lengths.mean()) ** 2 for c in classes) / (k - 1)
    within = sum(float(((c - c.mean()) ** 2).sum()) for c in classes) / (n - k)
    return float(between / within) if within > 0 else math.inf


def _stall_samples(
    n: int, dt: float, starts: FloatArray, compute_s: float
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.bool_]]:
    """Each sample's segment (-1 outside the first to last start) and whether it lies in that segment's stall
    (compute_s or more after its start)."""
    t = np.arange(n) * dt
    j = np.searchsorted(starts, t, side="right") - 1
    j[j >= len(starts) - 1] = -1
    inside = j >= 0
    stalled = np.zeros(n, dtype=bool)
    stalled[inside] = t[inside] - starts[j[inside]] >= compute_s - 1e-9  # a tie (both on the 4 ms grid) is a stall
    return j, stalled


def _contrast(
    y: FloatArray, dt: float, starts: FloatArray, compute_s: float, model: tuple[FloatArray, float], grid_s: float
) -> float:
    """How far the stall level lies below the template's mean, in rms misfits of the template over the bursts."""
    segment, stalled = _stall_samples(len(y), dt, starts, compute_s)
    burst = (segment >= 0) & ~stalled
    if burst.sum() < 8:
        return 0.0
    g, level = model
    tau = np.arange(len(y))[burst] * dt - starts[segment[burst]]
    misfit = float(np.sqrt(np.mean((y[burst] - g[_template_cell(tau, grid_s, len(g))]) ** 2)))
    return (float(g.mean()) - level) / misfit if misfit > 0 else math.inf


def _stall_noise(y: FloatArray, dt: float, starts: FloatArray, compute_s: float, level: float) -> float:
    _, stalled = _stall_samples(len(y), dt, starts, compute_s)
    if stalled.sum() < 4 or y.var() <= 0:
        return math.inf
    return float(np.mean((y[stalled] - level) ** 2) / y.var())


def _hidden_bursts(
    y: FloatArray, dt: float, starts: FloatArray, compute_s: float, model: tuple[FloatArray, float]
) -> int:
    """Segments whose stall holds a compute burst: two consecutive stall samples above the midpoint between the
    stall level and the template's mean, after a stall sample below it (an iteration that runs on past the
    template drops once and is no burst)."""
    segment, stalled = _stall_samples(len(y), dt, starts, compute_s)
    high = y > 0.5 * (model[1] + float(model[0].mean()))
    last_low = np.maximum.accumulate(np.where(stalled & ~high, np.arange(len(y)), -1))  # at or before each sample
    after_low = (last_low >= 0) & (segment[np.maximum(last_low, 0)] == segment)
    rise = stalled & high & after_low
    twice = rise[1:] & rise[:-1] & (segment[1:] == segment[:-1])
    return len(np.unique(segment[1:][twice]))


# A run supports the best when it fits within this much of it (and agrees on the period).
_SUPPORT_R2 = 0.1


def _segment_count(
    y: FloatArray,
    dt: float,
    period: float,
    cfg: DetectorConfig,
    *,
    whole: bool = True,
    min_spread: float | None = None,
    runs_by_start: dict[float, _Segmentation | None] | None = None,
) -> _Segmentation | None:
    """The best segmentation from the starts of cfg.template_starts around `period`, if another start agrees.

    Trust needs two runs that fit within _SUPPORT_R2 of the best, itself >= template_min_r2: once the runs left
    cannot make two that fit within that of template_min_r2, the rest are not run (the answer is None anyway).
    `min_spread`: the segments' least spread, cfg.template_min_spread unless given. `runs_by_start`: the
    segmentations of these samples so far, by start (a second call with another min_spread runs none again)."""
    runs: list[_Segmentation] = []
    floor = cfg.template_min_r2 - _SUPPORT_R2
    memo: dict[float, _Segmentation | None] = {} if runs_by_start is None else runs_by_start
    for i, k in enumerate(cfg.template_starts):
        if sum(r.r2 >= floor for r in runs) + len(cfg.template_starts) - i < 2:
            return None
        if (start := k * period) not in memo:
            memo[start] = _segment_from(y, dt, start, cfg)
        if (r := memo[start]) is not None:
            runs.append(r)
    if not runs:
        return None
    best = max(runs, key=lambda r: r.r2)
    support = [
        r for r in runs if r.r2 >= best.r2 - _SUPPORT_R2 and abs(r.period / best.period - 1.0) <= cfg.template_agreement
    ]
    if best.alternation >= cfg.template_max_alternation or best.lag1 < cfg.template_min_lag1:
        # Segments that alternate are iterations split in k (only one part holds the stall): the whole iteration
        # is the segment, if a segmentation started there holds (and is not split in turn).
        for k in _SPLIT_PARTS if whole else ():
            longer = _segment_count(y, dt, k * best.period, cfg, whole=False, min_spread=min_spread, runs_by_start=memo)
            if longer is not None:
                return longer
        return None
    trusted = (
        best.r2 >= cfg.template_min_r2
        and len(support) >= 2
        and (best.depth >= cfg.template_min_depth or best.contrast >= cfg.template_min_contrast)
        and best.wander <= cfg.template_max_wander
        and best.spread >= (cfg.template_min_spread if min_spread is None else min_spread)
        and (best.hidden < 2 or best.hidden <= cfg.template_max_hidden * best.cycles)
    )
    return best if trusted else None


_MIN_SEGMENTED = 8  # iterations a template segmentation must find to say anything about the period


def _template_disagrees(seg: _Segmentation | None, counted_s: float, cfg: DetectorConfig) -> bool:
    """Whether a matched template started at a band-passed count segments enough iterations to say something and
    finds a mean more than count_template_agreement from the count's (the count is then biased, not noisy)."""
    return (
        seg is not None
        and seg.cycles >= _MIN_SEGMENTED
        and abs(seg.period / counted_s - 1.0) > cfg.count_template_agreement
    )


def _segment_cycles(
    y: FloatArray,
    dt: float,
    counted: list[_Count],
    failed: PeriodEstimate,
    t_lo: float,
    t_hi: float,
    cfg: DetectorConfig,
) -> PeriodEstimate:
    """Template segmentation at the periods the band-passed counts found (rejected ones too: a count a few %
    off still says where the iterations are, unless it looks like an alias), the two that fold best on their
    counted phase."""
    candidates: list[float] = []
    for c in sorted(counted, key=lambda c: -c.phase_r2):
        if all(abs(c.period / p - 1.0) > 0.05 for p in candidates):
            candidates.append(c.period)
    found = [
        s
        for p in candidates[:2]
        if (s := _segment_count(y, dt, p, cfg)) is not None and t_lo <= s.period <= t_hi and s.cycles >= _MIN_SEGMENTED
    ]
    if not found:
        return replace(failed, message=failed.message + "; no template segmentation holds")
    top = max(s.r2 for s in found)
    s = min((s for s in found if s.r2 >= 0.95 * top), key=lambda s: s.period)
    # Only counts that look like no alias's give the starts, so the count of the iteration itself can be missing,
    # and the template then segments a multiple of it (two iterations of a real transformer with heavy-tailed
    # stalls at once, 2x: docs/jitter.md, session 16). A part that segments as well, not alternating, is the
    # iteration.
    for k in _SPLIT_PARTS:
        part = _segment_count(y, dt, s.period / k, cfg, whole=False)
        if part is not None and part.r2 >= s.r2 and t_lo <= part.period and part.cycles >= _MIN_SEGMENTED:
            s = part
            break
    if s.cycles < cfg.template_min_cycles:
        need_s = 1.2 * cfg.template_min_cycles * s.period
        return replace(
            failed,
            message=(
                f"{failed.message}; a matched template segments {s.cycles} iterations of {s.period * 1e3:.1f} ms, "
                f"fewer than the {cfg.template_min_cycles} it needs: measure at least {need_s:.1f} s"
            ),
            # (not a fold's guess at a long period: the template has found the iterations)
            suggested_window_s=need_s,
        )
    return _segmented_period(failed, s, failed.message, _stands_alone(y, dt, s, cfg))


def _stands_alone(y: FloatArray, dt: float, s: _Segmentation, cfg: DetectorConfig) -> bool:
    """Whether a segmentation of template_min_cycles iterations needs no second window: its iterations span
    template_alone_min_samples samples or more, its segments spread by at most template_alone_max_spread, and no
    segmentation started at a multiple of its period fits as well with segments of at least 1.5 of its own (a
    job with two bursts per iteration can segment at half its period; the whole iteration as the template then
    fits better: on the held-out-2/3 windows both such windows, and 6 of 858 right ones, all under 100 ms).
    Nor one whose window holds more before its first start or after its last than its longest segment: the
    iteration the window cuts there is longer than every one inside, and whether it counts moves the mean (a
    0.6 s stall at the head of 30 iterations of 287 ms: 5.2%; docs/jitter.md, session 27). Segments that
    alternate never get here (_segment_count)."""
    if not cfg.judge_stands_alone:
        return False
    if s.cycles < cfg.template_min_cycles or s.period < cfg.template_alone_min_samples * dt:
        return False
    if s.spread > cfg.template_alone_max_spread:
        return False
    if s.edge > s.longest:
        return False
    for k in _SPLIT_PARTS:
        for start in cfg.template_starts:
            longer = _segment_from(y, dt, k * start * s.period, cfg)
            if longer is not None and longer.period >= 1.5 * s.period and longer.r2 >= s.r2:
                return False
    return True


def _segmented_period(failed: PeriodEstimate, s: _Segmentation, note: str, alone: bool) -> PeriodEstimate:
    """A template segmentation's mean iteration time as the window's estimate."""
    conf = min(1.0, s.r2) * max(0.0, 1.0 - s.spread) * 0.8
    message = (
        f"mean period {s.period * 1e3:.2f} ms, segmented by a matched template ({s.cycles} iterations, "
        f"spread {s.spread * 100:.0f}%, fit r2 {s.r2:.2f}{', no multiple fits as well' if alone else ''}; {note})"
    )
    est = _mean_period(failed, s.period, conf, s.r2, s.sub_periods, s.spread, "template", message)
    return replace(est, stands_alone=alone)


def stall_share(
    t_s: npt.ArrayLike, power_w: npt.ArrayLike, period_s: float, *, config: DetectorConfig | None = None
) -> float | None:
    """The share of a window's samples inside long stalls (`_stalls`: 0.6 cycle of `period_s` under the wait level),
    on its power less a straight-line trend, as a count tells waits; None where the signal is unusable. A fold
    lines up the typical iteration, so the mean iteration time can be longer than a fold by up to about this
    share."""
    seg = _longest_stretch(t_s, power_w, config or DetectorConfig())
    if seg is None or not period_s > 0:
        return None
    return float(_stalls(_wait_samples(seg.values), period_s / seg.dt_s).mean())


def _longest_stretch(t_s: npt.ArrayLike, power_w: npt.ArrayLike, cfg: DetectorConfig) -> UniformSignal | None:
    """A window's longest gap-free stretch; None under 32 samples."""
    prep = prepare_signal(t_s, power_w, gap_factor=cfg.gap_factor, max_backward_fraction=cfg.max_backward_fraction)
    seg = prep.longest
    return None if seg is None or seg.n < 32 else seg


def _detrended_longest(
    t_s: npt.ArrayLike, power_w: npt.ArrayLike, cfg: DetectorConfig
) -> tuple[UniformSignal, FloatArray] | None:
    """A window's longest gap-free stretch and its samples detrended as a count's are; None under 32 samples."""
    seg = _longest_stretch(t_s, power_w, cfg)
    if seg is None:
        return None
    return seg, _detrend(np.asarray(seg.values, dtype=np.float64), _DETREND_DEGREE)


def counted_period_near(
    t_s: npt.ArrayLike,
    power_w: npt.ArrayLike,
    period_s: float,
    *,
    config: DetectorConfig | None = None,
    min_samples: float = 5.0,
) -> tuple[float, float] | None:
    """The mean iteration time of a window whose iterations run near `period_s`, by counting cycles (the span over
    the count), and the spread of single cycles; None where the count is not trustworthy: cycles under min_samples
    samples (a 60 ms +-10% job counted 1.9% long at 3 samples a cycle), under count_min_cycles of them, phase
    slips, or counts at two band centres that disagree. A fold lines up the typical iteration, so where long host
    stalls sit in the window, the count's mean is longer than the fold (docs/jitter.md, session 6)."""
    cfg = config or DetectorConfig()
    detrended = _detrended_longest(t_s, power_w, cfg)
    if detrended is None or detrended[0].held or not period_s >= min_samples * detrended[0].dt_s:
        return None
    seg, y = detrended
    c = _count_near(y, seg.dt_s, period_s, cfg, _wait_samples(seg.values))
    if c is None or c.cycles < cfg.count_min_cycles or c.slips > cfg.count_max_slips:
        return None
    if c.agreement > cfg.count_agreement:
        return None
    # As in a window's own count (detect_period): a matched template started at the count that segments another
    # mean tells a biased count (a +-50% job's shortest iterations merged: held-out-29, 6.4% long where the
    # template segmented 0.8% long); its mean stands where it segments template_min_cycles iterations.
    template = _segment_count(y, seg.dt_s, c.period, cfg)
    if _template_disagrees(template, c.period, cfg):
        assert template is not None
        return (template.period, template.spread) if template.cycles >= cfg.template_min_cycles else None
    return c.period, c.spread


def count_confirms(
    t_s: npt.ArrayLike, power_w: npt.ArrayLike, periods: tuple[float, float], *, agreement: float
) -> tuple[float, float] | None:
    """Two windows' periods of one job found by different methods (a fold and a count): the count over both
    windows' samples near their mean (`counted_period_near`), where it agrees with each within `agreement`; else
    None. The profiling rule that pairs them (Controller) and its alias bench (scripts/bench_alias_pairs.py)."""
    counted = counted_period_near(t_s, power_w, 0.5 * sum(periods))
    if counted is None or any(abs(counted[0] / p - 1.0) > agreement for p in periods):
        return None
    return counted


# --------------------------------------------------------------------------------------------------------------
# Holding: does a known period still show?


def period_persists(
    t_s: npt.ArrayLike,
    power_w: npt.ArrayLike,
    period_s: float,
    *,
    tolerance: float,
    config: DetectorConfig | None = None,
) -> tuple[float | None, str]:
    """The period near `period_s` (within `tolerance`) that a window without a period of its own still shows (None:
    it does not), and how.

    A window's own search must find a period among all candidates and prove it across sub-windows; a phase that
    goes on only has to keep the one it had. It still shows when the best fold within the tolerance explains as
    much as a reported period must (min_fold_r2 plus the few-cycles term, as in detection; there is no
    look-elsewhere effect here, the period is known) and is no multiple of a shorter one; or, for jittery
    iterations, when counting near it finds the cycles: enough of them, without slips, in a real share of the
    variance (the checks that tell a count from an alias, and a precise one from a rough one, were passed when the
    phase was profiled). Host-stall jobs whose iteration time wanders lose their period's sub-window test
    now and then while nothing changed (looped H200 recordings: 14 false phase changes in 16 half-hours); a new
    workload at the same power level does not fold or count at the old period."""
    cfg = config or DetectorConfig()
    seg = _longest_stretch(t_s, power_w, cfg)
    if seg is None or seg.held or not period_s > 0:
        return None, "no usable samples"
    if seg.duration_s < cfg.min_cycles * period_s:
        return None, f"the window holds under {cfg.min_cycles:g} periods"
    y = _detrend(np.asarray(seg.values, dtype=np.float64), _DETREND_DEGREE)
    t_lo = min_resolvable_period(seg.dt_s, nyquist_guard=cfg.nyquist_guard)
    spec = _Spectrum(y, seg.dt_s)
    p, r2 = _refine(spec, period_s, tolerance)
    why = f"folds at r2 {r2:.2f} at most near {period_s * 1e3:.1f} ms"
    if r2 >= cfg.min_fold_r2 + cfg.few_cycles_r2 * p / seg.duration_s:
        # A multiple of any shorter period folds as well: the waveform must not sit on a submultiple's harmonics
        # (a new job whose iterations are a third as long, say).
        choice = _choose_fundamental(spec, (p, r2), t_lo, cfg)
        if not choice.issue and abs(choice.period / p - 1.0) <= tolerance:
            return p, f"still folds at {p * 1e3:.1f} ms (r2 {r2:.2f})"
        why = f"{p * 1e3:.1f} ms folds, but as a multiple of {choice.period * 1e3:.1f} ms"
    c = _count_near(y, seg.dt_s, period_s, cfg, _wait_samples(seg.values))
    if c is None:
        return None, why
    t_lo = max(t_lo, cfg.count_min_samples * seg.dt_s)
    problems = [
        problem
        for problem in _count_problems(c, t_lo, seg.duration_s / cfg.count_min_cycles, cfg)
        if not problem.startswith(
            ("a clean fold", "cycle lengths wander", "a near-sinusoidal", "counts at two", "phase fold", "harmonic")
        )
    ]
    if abs(c.period / period_s - 1.0) > tolerance:
        problems.append(f"counts {c.period * 1e3:.1f} ms")
    if not problems:
        return c.period, f"still counts {c.period * 1e3:.1f} ms"
    return None, f"{why}; counting: {', '.join(problems)}"
