#!/usr/bin/env python3
"""Profiling on jittery jobs: the shipped Controller (advise mode, ReplayGPU) over synthetic jittered traces cut
from recorded steady H200 phases (gpoeo_rt.bench.jitter), scored against their known iteration ends.

Each job: a recorded phase re-timed to a mean iteration time (50-500 ms) with host stalls spreading iteration
times +-0/10/30/50% (uniform) or heavy-tailed (Pareto stalls of that mean). Starts at 5 offsets of each 60 s job;
a start is "ok" when profiling gives a baseline within 20 s whose period is within 2% of the mean true iteration
time over the baseline's own windows; "off>5%" counts baselines more than 5% off; "late" a baseline after 20 s.

Two sets: "tuned" (the jobs the thresholds were looked at on: data/traces/h200 resnet_512 and gpt_16 phases,
uniform stalls, 50-200 ms) and "held-out" (data/traces/h200-live gpt_64 and resnet_512, the shared resnet_128_20
and gpt_64, at 50-500 ms, uniform and heavy-tailed stalls). Each recorded iteration is squeezed or stretched at
most 2x (MAX_SQUEEZE), so not every period is made from every recording.
These are constructs on recorded samples, not recordings of jittery jobs.

A third set, "real", replays recordings of real jittery jobs on an H200 (data/traces/h200-jitter{,-2,-3}) and an
H100 (data/traces/h100-jitter{,-2,...,-11}), held out: no threshold was set on them. Each from the recording's
start (the daemon running before the job: the time to the baseline counts from the job's first iteration) and from
the same 5 offsets after the first iteration.

A fourth, "held-out-2", was fixed later (see HELD_OUT_2): recordings and periods no other set uses, a new seed; and
a fifth, "held-out-3", once held-out-2 had been looked at: the same recordings at other periods, another seed;
a sixth, "held-out-4", before the seventh session's rules (HELD_OUT_4), a seventh, "held-out-5", to check the
last of them, an eighth, "held-out-6", before the eighth session's rules, a ninth, "held-out-7", before the
ninth's, a tenth, "held-out-8", before the tenth's, an eleventh, "held-out-9", before its second rule, and a
twelfth, "held-out-10", before the eleventh session's first rule, a thirteenth, "held-out-11", before the
twelfth session's, a fourteenth, "held-out-12", before the thirteenth session's, a fifteenth, "held-out-13",
before the fourteenth session's, a sixteenth, "held-out-14", before the fifteenth session's, a seventeenth,
"held-out-15", before the sixteenth session's, an eighteenth, "held-out-16", before that session's second rule,
a nineteenth, "held-out-17", before the eighteenth session's, a twentieth, "held-out-18", before the
nineteenth session's, a twenty-first, "held-out-19", before the twentieth session's, a twenty-second,
"held-out-20", before the twenty-first session's, a twenty-third, "held-out-21", before the twenty-second's, a
twenty-fourth, "held-out-22", before that session's second rule, a twenty-fifth, "held-out-23", before the
twenty-third session's, a twenty-sixth, "held-out-24", before that rule's second form, a twenty-seventh,
"held-out-25", before its third, a twenty-eighth, "held-out-26", before that rule landed with the search that
does not stop on noise, a twenty-ninth, "held-out-27", before the twenty-fourth session's edge rule, a
thirtieth, "held-out-28", before the twenty-fifth session's look for a baseline that stands alone, a
thirty-first, "held-out-29", before its count that tells waits on the power less a straight line, a
thirty-second, "held-out-30", before the look's own-period margin, a thirty-third, "held-out-31", before the
twenty-sixth session's template check on a count over two windows, a thirty-fourth, "held-out-32", before its
looks every 3 s on the way to a longer window, a thirty-fifth, "held-out-33", before the energy reads of
windows that continue one another are kept on one grid, a thirty-sixth, "held-out-34", before the
twenty-seventh session's first change, a thirty-seventh, "held-out-35", before that change's form that asks the
energy counter, and a thirty-eighth, "held-out-36", before its first look that folds taken as the candidate.

Usage: python scripts/bench_jitter.py [--set tuned|held-out|held-out-2..36|real|all] [--rows] [--out DIR]
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from gpoeo_rt.bench.jitter import JitterSpec, make_jittered_trace
from gpoeo_rt.bench.replay import profile_replay
from gpoeo_rt.device.replay import ReplayGPU
from gpoeo_rt.prediction.predictor import Predictor
from gpoeo_rt.prediction.selection import default_bundle_dirs, select_bundle
from gpoeo_rt.tracefile import read_iterations

HERE = Path(__file__).resolve().parents[1]
TRACES = HERE / "data/traces"
JITTERS = (0.0, 0.1, 0.3, 0.5)
OFFSETS_S = (0.5, 7.3, 14.1, 21.7, 29.9)
DEADLINE_S = 20.0
# The restated deadline proposed for issue 17 (docs/jitter.md, session 7: a job only the template resolves needs
# 2 x 30 iterations): within max(20 s, 70 iterations). Reported beside the target's, never instead of it.
RESTATED_ITERATIONS = 70


# (trace, phase, its recorded iteration time): the compute part of a job is one recorded iteration, time-scaled
# by at most MAX_SQUEEZE faster (squeezing a 50 Hz recording puts content above what it recorded) or slower.
TUNED = ((TRACES / "h200/resnet_512", 0, 0.104), (TRACES / "h200/gpt_16-mlp_65536", 0, 0.072))
HELD_OUT = (
    (TRACES / "h200-live/gpt_64", 0, 0.261),
    (TRACES / "h200-live/resnet_512", 0, 0.1045),
    (TRACES / "h200/resnet_128_20", 0, 0.0502),
    (TRACES / "h200/gpt_64", 0, 0.2568),
)
# A second held-out set, fixed (2026-12-05, sixth session) before any rule was built on the first one's diagnosis:
# the steady recordings no synthetic set used, and the two long-iteration recordings at periods no set used, with
# their own seed. Its rows are not to be read while a rule is tuned; only its summary is.
HELD_OUT_2 = (
    (TRACES / "h200-live/resnet_128_20", 0, 0.0509),
    (TRACES / "h200-live/gpt_16-mlp_65536", 0, 0.0730),
    (TRACES / "h200-jitter/resnet_512", 0, 0.1041),
    (TRACES / "h200-live/gpt_64", 0, 0.261),
    (TRACES / "h200/gpt_64", 0, 0.2568),
)
HELD_OUT_2_PERIODS = (0.07, 0.12, 0.18, 0.25, 0.35, 0.45)
# A third, fixed once held-out-2's three starts more than 5% off had been looked at (sixth session): the same
# recordings at periods no set uses, seed 3.
HELD_OUT_3_PERIODS = (0.065, 0.09, 0.14, 0.22, 0.32, 0.42, 0.48)
# A fourth, fixed (2026-12-05, seventh session) before that session's rules: held-out-2's recordings and
# h200-live/resnet_512, at periods no set uses (more of them long: the late starts are there), seed 4.
HELD_OUT_4 = (*HELD_OUT_2, (TRACES / "h200-live/resnet_512", 0, 0.1045))
HELD_OUT_4_PERIODS = (0.075, 0.11, 0.16, 0.24, 0.28, 0.38, 0.44)
# A fifth, fixed in the same session after one held-out-4 start had been looked at (so held-out-4 is a development
# set for the spread cap of the one-window baseline): the same recordings, periods no set uses, seed 5.
HELD_OUT_5_PERIODS = (0.085, 0.13, 0.19, 0.26, 0.30, 0.36, 0.46)
# A sixth, fixed (2026-12-05, eighth session) before that session's rules, once held-out-5's rows had been read: the
# same recordings, periods no set uses, seed 6.
HELD_OUT_6_PERIODS = (0.08, 0.105, 0.17, 0.23, 0.27, 0.33, 0.40)
# A seventh, fixed (2026-12-05, ninth session) before that session's rules, once held-out-6's off>5% rows had been
# read: the same recordings, periods no set uses, seed 7.
HELD_OUT_7_PERIODS = (0.095, 0.125, 0.155, 0.21, 0.29, 0.34, 0.41)
# An eighth, fixed (2026-12-06, tenth session) before that session's rules, once held-out-7's summary had been read
# twice: the same recordings, periods no set uses, seed 8.
HELD_OUT_8_PERIODS = (0.058, 0.115, 0.135, 0.185, 0.31, 0.37, 0.47)
# A ninth, fixed in the same session before its second rule was scored, once held-out-8's summary had been read:
# the same recordings, periods no set uses, seed 9.
HELD_OUT_9_PERIODS = (0.068, 0.098, 0.145, 0.195, 0.265, 0.39, 0.43)
# A tenth, fixed (2026-12-06, eleventh session) before any rule of that session, once held-out-9's summary had been
# read: the same recordings, periods no set uses, seed 10.
HELD_OUT_10_PERIODS = (0.062, 0.092, 0.122, 0.175, 0.225, 0.325, 0.455)
# An eleventh, fixed (2026-12-06, twelfth session) before any rule of that session, once held-out-10's summary and
# one of its rows had been read: the same recordings, periods no set uses, seed 11.
HELD_OUT_11_PERIODS = (0.055, 0.088, 0.118, 0.165, 0.215, 0.345, 0.485)
# A twelfth, fixed (2026-12-06, thirteenth session) before any rule of that session, once held-out-11's summary had
# been read: the same recordings, periods no set uses, seed 12.
HELD_OUT_12_PERIODS = (0.072, 0.102, 0.142, 0.188, 0.255, 0.355, 0.465)
# A thirteenth, fixed (2026-12-06, fourteenth session) before any rule of that session, once held-out-12's summary
# and one of its rows had been read: the same recordings, periods no set uses, seed 13.
HELD_OUT_13_PERIODS = (0.078, 0.108, 0.148, 0.205, 0.245, 0.375, 0.495)
# A fourteenth, fixed (2026-12-06, fifteenth session) before any rule of that session, once held-out-13's rows had
# been read while its rules were made: the same recordings, periods no set uses, seed 14.
HELD_OUT_14_PERIODS = (0.052, 0.083, 0.112, 0.158, 0.235, 0.315, 0.425)
# A fifteenth, fixed (2026-12-06, sixteenth session) before any rule of that session, once held-out-14's summary had
# been read: the same recordings, periods no set uses, seed 15.
HELD_OUT_15_PERIODS = (0.057, 0.087, 0.128, 0.168, 0.228, 0.335, 0.475)
# A sixteenth, fixed (2026-12-06, sixteenth session) once held-out-15's rows had been read, before the session's
# second rule was settled: the same recordings, periods no set uses, seed 16.
HELD_OUT_16_PERIODS = (0.053, 0.093, 0.133, 0.178, 0.238, 0.365, 0.445)
# A seventeenth, fixed (2026-12-07, eighteenth session) before any rule of that session, once held-out-16's summary
# had been read: the same recordings, periods no set uses, seed 17.
HELD_OUT_17_PERIODS = (0.059, 0.097, 0.138, 0.172, 0.248, 0.358, 0.435)
# An eighteenth, fixed (2026-12-07, nineteenth session) before that session's rule was measured, once held-out-17's
# rows had been read: the same recordings, periods no set uses, seed 18.
HELD_OUT_18_PERIODS = (0.054, 0.089, 0.131, 0.183, 0.252, 0.372, 0.452)
# A nineteenth, fixed (2026-12-07, twentieth session) before any rule of that session, once held-out-18's summary and
# three of its rows had been read: the same recordings, periods no set uses, seed 19.
HELD_OUT_19_PERIODS = (0.056, 0.096, 0.127, 0.163, 0.243, 0.362, 0.448)
# A twentieth, fixed (2026-12-07, twenty-first session) before any rule of that session, once the off>5% rows of
# held-out-16..19 had been read: the same recordings, periods no set uses, seed 20.
HELD_OUT_20_PERIODS = (0.063, 0.091, 0.137, 0.176, 0.258, 0.348, 0.438)
# A twenty-first, fixed (2026-12-07, twenty-second session) before that session's measurement of the branch's two
# steps (docs/jitter.md, session 24), once held-out-20's rows had been read: the same recordings, periods no set
# uses, seed 21.
HELD_OUT_21_PERIODS = (0.061, 0.094, 0.143, 0.181, 0.262, 0.352, 0.442)
# A twenty-second, fixed in the same session after the landed rule's one start more than 5% off on held-out-21 had
# been read, before a rule for it was measured: the same recordings, periods no set uses, seed 22.
HELD_OUT_22_PERIODS = (0.066, 0.099, 0.147, 0.186, 0.268, 0.357, 0.458)
# A twenty-third, fixed (twenty-third session) before its rule for late steady starts was measured, once
# held-out-21's and -22's rows had been read: the same recordings, periods no set uses, seed 23.
HELD_OUT_23_PERIODS = (0.064, 0.086, 0.139, 0.191, 0.272, 0.368, 0.462)
# A twenty-fourth, fixed in the same session once held-out-23's summary and its one start more than 5% off had been
# read (the rule's first form), before its second form was measured: the same recordings, new periods, seed 24.
HELD_OUT_24_PERIODS = (0.067, 0.101, 0.151, 0.197, 0.278, 0.383, 0.473)
# A twenty-fifth, fixed in the same session once held-out-24's rows had been read (the second form's one start more
# than 5% off), before the third form was measured: the same recordings, new periods, seed 25.
HELD_OUT_25_PERIODS = (0.069, 0.104, 0.153, 0.201, 0.284, 0.394, 0.488)
# A twenty-sixth, fixed in the twenty-fourth session before the third form landed (with the descent that walks on
# through a tie within noise): the same recordings, new periods, seed 26.
HELD_OUT_26_PERIODS = (0.071, 0.106, 0.157, 0.207, 0.287, 0.397, 0.491)
# A twenty-seventh, fixed in the same session once held-out-26's rows had been read (its five starts more than 5%
# off), before the rule for a segmentation's long edge is measured: the same recordings, new periods, seed 27.
HELD_OUT_27_PERIODS = (0.073, 0.107, 0.159, 0.212, 0.293, 0.402, 0.497)
HELD_OUT_28_PERIODS = (0.077, 0.113, 0.166, 0.223, 0.306, 0.418, 0.483)
HELD_OUT_29_PERIODS = (0.059, 0.097, 0.143, 0.201, 0.274, 0.351, 0.468)
HELD_OUT_30_PERIODS = (0.081, 0.121, 0.171, 0.236, 0.318, 0.427, 0.476)
HELD_OUT_31_PERIODS = (0.063, 0.093, 0.137, 0.193, 0.262, 0.368, 0.459)
HELD_OUT_32_PERIODS = (0.067, 0.101, 0.149, 0.217, 0.297, 0.386, 0.443)
HELD_OUT_33_PERIODS = (0.071, 0.117, 0.162, 0.229, 0.311, 0.409, 0.487)
HELD_OUT_34_PERIODS = (0.056, 0.091, 0.133, 0.188, 0.257, 0.347, 0.471)
HELD_OUT_35_PERIODS = (0.064, 0.107, 0.155, 0.211, 0.283, 0.377, 0.493)
HELD_OUT_36_PERIODS = (0.052, 0.083, 0.124, 0.177, 0.244, 0.331, 0.452)
# set -> (recordings, periods, seed)
HELD_OUT_SETS = {
    "held-out": (HELD_OUT, (0.05, 0.1, 0.15, 0.3, 0.5), 1),
    "held-out-2": (HELD_OUT_2, HELD_OUT_2_PERIODS, 2),
    "held-out-3": (HELD_OUT_2, HELD_OUT_3_PERIODS, 3),
    "held-out-4": (HELD_OUT_4, HELD_OUT_4_PERIODS, 4),
    "held-out-5": (HELD_OUT_4, HELD_OUT_5_PERIODS, 5),
    "held-out-6": (HELD_OUT_4, HELD_OUT_6_PERIODS, 6),
    "held-out-7": (HELD_OUT_4, HELD_OUT_7_PERIODS, 7),
    "held-out-8": (HELD_OUT_4, HELD_OUT_8_PERIODS, 8),
    "held-out-9": (HELD_OUT_4, HELD_OUT_9_PERIODS, 9),
    "held-out-10": (HELD_OUT_4, HELD_OUT_10_PERIODS, 10),
    "held-out-11": (HELD_OUT_4, HELD_OUT_11_PERIODS, 11),
    "held-out-12": (HELD_OUT_4, HELD_OUT_12_PERIODS, 12),
    "held-out-13": (HELD_OUT_4, HELD_OUT_13_PERIODS, 13),
    "held-out-14": (HELD_OUT_4, HELD_OUT_14_PERIODS, 14),
    "held-out-15": (HELD_OUT_4, HELD_OUT_15_PERIODS, 15),
    "held-out-16": (HELD_OUT_4, HELD_OUT_16_PERIODS, 16),
    "held-out-17": (HELD_OUT_4, HELD_OUT_17_PERIODS, 17),
    "held-out-18": (HELD_OUT_4, HELD_OUT_18_PERIODS, 18),
    "held-out-19": (HELD_OUT_4, HELD_OUT_19_PERIODS, 19),
    "held-out-20": (HELD_OUT_4, HELD_OUT_20_PERIODS, 20),
    "held-out-21": (HELD_OUT_4, HELD_OUT_21_PERIODS, 21),
    "held-out-22": (HELD_OUT_4, HELD_OUT_22_PERIODS, 22),
    "held-out-23": (HELD_OUT_4, HELD_OUT_23_PERIODS, 23),
    "held-out-24": (HELD_OUT_4, HELD_OUT_24_PERIODS, 24),
    "held-out-25": (HELD_OUT_4, HELD_OUT_25_PERIODS, 25),
    "held-out-26": (HELD_OUT_4, HELD_OUT_26_PERIODS, 26),
    "held-out-27": (HELD_OUT_4, HELD_OUT_27_PERIODS, 27),
    "held-out-28": (HELD_OUT_4, HELD_OUT_28_PERIODS, 28),
    "held-out-29": (HELD_OUT_4, HELD_OUT_29_PERIODS, 29),
    "held-out-30": (HELD_OUT_4, HELD_OUT_30_PERIODS, 30),
    "held-out-31": (HELD_OUT_4, HELD_OUT_31_PERIODS, 31),
    "held-out-32": (HELD_OUT_4, HELD_OUT_32_PERIODS, 32),
    "held-out-33": (HELD_OUT_4, HELD_OUT_33_PERIODS, 33),
    "held-out-34": (HELD_OUT_4, HELD_OUT_34_PERIODS, 34),
    "held-out-35": (HELD_OUT_4, HELD_OUT_35_PERIODS, 35),
    "held-out-36": (HELD_OUT_4, HELD_OUT_36_PERIODS, 36),
}
SYNTHETIC_SETS = ("tuned", *HELD_OUT_SETS)
MAX_SQUEEZE = 2.0
# Real jittery jobs (held out): folder -> the jitter class its stalls make (iteration cv in brackets).
REAL = (
    (TRACES / "h200-jitter/resnet_512", "steady"),  # 104.1 ms (0.002)
    (TRACES / "h200-jitter/resnet_256_15-45", "uniform 15-45 ms"),  # 84.8 ms (0.10)
    (TRACES / "h200-jitter/gpt_64_p50", "pareto"),  # 306.5 ms (0.15)
    (TRACES / "h200-jitter/resnet_512_0-104", "uniform +-50%"),  # 157.0 ms (0.19)
    (TRACES / "h200-jitter/gptvar_32", "variable length"),  # 87.0 ms (0.36)
    # The second set (recorded while the detection changes of 2026-12-05's second session were being made)
    (TRACES / "h200-jitter-2/resnet_256_0-40", "uniform +-27%"),  # 75.1 ms (0.155)
    (TRACES / "h200-jitter-2/gpt_32_0-80", "uniform +-23%"),  # 173.8 ms (0.134)
    (TRACES / "h200-jitter-2/resnet_1024_p60", "pareto"),  # 265.5 ms (0.191)
    # The third set, on an H100 (recorded while the profiling run of 2026-12-05's fourth session was being built)
    (TRACES / "h100-jitter/resnet_256_0-50", "uniform 0-50 ms"),  # 89.7 ms (0.162)
    (TRACES / "h100-jitter/gpt_16_0-60", "uniform 0-60 ms"),  # 110.9 ms (0.159)
    (TRACES / "h100-jitter/resnet_512_0-100", "uniform 0-100 ms"),  # 174.4 ms (0.166)
    (TRACES / "h100-jitter/gpt_32_0-160", "uniform 0-160 ms"),  # 231.3 ms (0.197)
    (TRACES / "h100-jitter/gpt_48_0-200", "uniform 0-200 ms"),  # 318.4 ms (0.176)
    (TRACES / "h100-jitter/gpt_64_p90", "pareto"),  # 374.4 ms (0.142)
    (TRACES / "h100-jitter/resnet_128_p30", "pareto"),  # 64.6 ms (0.326)
    # The fourth, on an H100 (recorded in the sixth session of 2026-12-05 before any of its rules landed)
    (TRACES / "h100-jitter-2/gpt_24_p50", "pareto"),  # 166.3 ms (0.242)
    (TRACES / "h100-jitter-2/resnet_1024_0-200", "uniform 0-200 ms"),  # 347.6 ms (0.165)
    (TRACES / "h100-jitter-2/gptvar_16_0-40", "variable length"),  # 79.1 ms (0.260)
    (TRACES / "h100-jitter-2/resnet_384_20-80", "uniform 20-80 ms"),  # 145.5 ms (0.120)
    # The fifth, on an H100 (recorded after the sixth session's rules landed, scored only on them)
    (TRACES / "h100-jitter-3/resnet_640_p70", "pareto"),  # 226.1 ms (0.266)
    (TRACES / "h100-jitter-3/gpt_12_10-50", "uniform 10-50 ms"),  # 94.6 ms (0.124)
    # The sixth, on an H100 (recorded in the seventh session of 2026-12-05 before any of its rules: long iterations)
    (TRACES / "h100-jitter-4/gpt_56_0-160", "uniform 0-160 ms"),  # 334.6 ms (0.136)
    (TRACES / "h100-jitter-4/resnet_1280_60-140", "uniform 60-140 ms"),  # 405.2 ms (0.056)
    (TRACES / "h100-jitter-4/gpt_40_p120", "pareto"),  # 303.4 ms (0.232)
    (TRACES / "h100-jitter-4/resnet_896_0-300", "uniform 0-300 ms"),  # 373.6 ms (0.231)
    (TRACES / "h100-jitter-4/gpt_32_40-120", "uniform 40-120 ms"),  # 230.4 ms (0.101)
    # The seventh, on an H200 (recorded in the tenth session, after its rule landed; scored before and after it)
    (TRACES / "h200-jitter-3/gpt_24_p60", "pareto"),  # 164.2 ms (0.303)
    (TRACES / "h200-jitter-3/resnet_1024_20-60", "uniform 20-60 ms"),  # 244.4 ms (0.046)
    (TRACES / "h200-jitter-3/gpt_16_10-40", "uniform 10-40 ms"),  # 97.6 ms (0.090)
    (TRACES / "h200-jitter-3/resnet_384_p80", "pareto"),  # 161.4 ms (0.408)
    (TRACES / "h200-jitter-3/gptvar_24_0-100", "variable length"),  # 118.8 ms (0.299)
    # The eighth, on an H100 (recorded in the eleventh session before its rules; scored before and after them)
    (TRACES / "h100-jitter-5/gptvar_16_0-50", "variable length"),  # 78.7 ms (0.284)
    (TRACES / "h100-jitter-5/gptvar_32_p40", "variable length"),  # 137.6 ms (0.342)
    (TRACES / "h100-jitter-5/resnet_768_p100", "pareto"),  # 285.7 ms (0.215)
    (TRACES / "h100-jitter-5/gpt_32_20-80", "uniform 20-80 ms"),  # 199.0 ms (0.085)
    (TRACES / "h100-jitter-5/resnet_256_30-90", "uniform 30-90 ms"),  # 124.8 ms (0.138)
    # The ninth, on an H100 (recorded in the eleventh session after its rule; scored before and after it)
    (TRACES / "h100-jitter-6/gptvar_24_p60", "variable length"),  # 139.9 ms (0.390)
    (TRACES / "h100-jitter-6/gptvar_48_0-30", "variable length"),  # 156.9 ms (0.326)
    (TRACES / "h100-jitter-6/resnet_512_10-50", "uniform 10-50 ms"),  # 153.6 ms (0.074)
    (TRACES / "h100-jitter-6/gpt_16_0-40", "uniform 0-40 ms"),  # 101.3 ms (0.114)
    (TRACES / "h100-jitter-6/gpt_48_p150", "pareto"),  # 369.6 ms (0.239)
    # The tenth, on an H100, mostly steady and harmonic-rich (recorded in the twelfth session before its rule)
    (TRACES / "h100-jitter-7/gpt_64", "steady"),  # 282.5 ms (0.002)
    (TRACES / "h100-jitter-7/gpt_48", "steady"),  # 215.0 ms (0.001)
    (TRACES / "h100-jitter-7/gpt_56_0-10", "uniform 0-10 ms"),  # 254.3 ms (0.011)
    (TRACES / "h100-jitter-7/resnet_768", "steady"),  # 181.6 ms (0.000)
    (TRACES / "h100-jitter-7/resnet_384", "steady"),  # 93.8 ms (0.001)
    (TRACES / "h100-jitter-7/gpt_32-resnet_1024", "steady"),  # 148.4 ms (0.002), its first phase
    # The eleventh, on an H100: phase changes (recorded in the twelfth session to check its level_shift rule)
    (TRACES / "h100-jitter-8/gpt_16-resnet_768", "steady"),  # 80.6 ms (0.004), its first phase
    (TRACES / "h100-jitter-8/resnet_256-gpt_48", "steady"),  # 64.4 ms (0.002), its first phase
    (TRACES / "h100-jitter-8/gpt_48-resnet_512", "steady"),  # 214.8 ms (0.001), its first phase
    (TRACES / "h100-jitter-8/resnet_1024-gpt_32", "steady"),  # 240.4 ms (0.001), its first phase
    # The twelfth, on an H100: long iterations with short stalls (recorded after the twelfth session's rules)
    (TRACES / "h100-jitter-9/gpt_32_0-30", "uniform 0-30 ms"),  # 163.3 ms (0.053)
    (TRACES / "h100-jitter-9/gpt_48_0-40", "uniform 0-40 ms"),  # 235.6 ms (0.048)
    (TRACES / "h100-jitter-9/gpt_64_0-50", "uniform 0-50 ms"),  # 308.8 ms (0.047)
    (TRACES / "h100-jitter-9/resnet_768_0-30", "uniform 0-30 ms"),  # 197.3 ms (0.043)
    # The thirteenth, on an H100: short iterations and heavy tails (recorded before the thirteenth session's changes)
    (TRACES / "h100-jitter-10/resnet_192_0-30", "uniform 0-30 ms"),  # 64.8 ms (0.135)
    (TRACES / "h100-jitter-10/gpt_8_0-30", "uniform 0-30 ms"),  # 61.8 ms (0.142)
    (TRACES / "h100-jitter-10/resnet_320_p40", "pareto"),  # 120.0 ms (0.258)
    (TRACES / "h100-jitter-10/gpt_24_0-60", "uniform 0-60 ms"),  # 143.8 ms (0.120)
    (TRACES / "h100-jitter-10/resnet_640_0-120", "uniform 0-120 ms"),  # 214.6 ms (0.158)
    (TRACES / "h100-jitter-10/gpt_40_p80", "pareto"),  # 260.1 ms (0.177)
    (TRACES / "h100-jitter-10/gpt_56", "steady"),  # 246.7 ms (0.002)
    (TRACES / "h100-jitter-10/resnet_448_10-70", "uniform 10-70 ms"),  # 149.1 ms (0.115)
    (TRACES / "h100-jitter-10/gpt_12_p30", "pareto"),  # 94.1 ms (0.235)
    (TRACES / "h100-jitter-10/resnet_1024_p150", "pareto"),  # 397.8 ms (0.231)
    # The fourteenth, on an H100: short iterations, heavy tails (recorded to check the thirteenth session's rule)
    (TRACES / "h100-jitter-11/gpt_12_p45", "pareto"),  # 109.5 ms (0.309)
    (TRACES / "h100-jitter-11/gpt_8_p20", "pareto"),  # 67.0 ms (0.237)
    (TRACES / "h100-jitter-11/gpt_16_p30", "pareto"),  # 111.2 ms (0.205)
    (TRACES / "h100-jitter-11/resnet_256_p30", "pareto"),  # 95.5 ms (0.229)
    (TRACES / "h100-jitter-11/resnet_128_p20", "pareto"),  # 56.7 ms (0.274)
    # The fifteenth, on an H100: stalls as long as the compute, heavy-tailed (to check the fourteenth session's rule)
    (TRACES / "h100-jitter-12/resnet_256_p65", "pareto"),  # 130.9 ms (0.392)
    (TRACES / "h100-jitter-12/gpt_16_p80", "pareto"),  # 162.5 ms (0.407)
    (TRACES / "h100-jitter-12/resnet_512_p130", "pareto"),  # 252.6 ms (0.293)
    (TRACES / "h100-jitter-12/gpt_32_p160", "pareto"),  # 311.8 ms (0.312)
    (TRACES / "h100-jitter-12/resnet_384_p100", "pareto"),  # 197.4 ms (0.445)
    # The sixteenth, on an H100 (recorded in the sixteenth session before its rule; its resnet_128_0-10, 39.9 ms, is
    # under the 44 ms the power signal can time and is left out here: test_replay.py checks it gives no wrong baseline)
    (TRACES / "h100-jitter-13/gpt_64_0-120", "uniform 0-120 ms"),  # 348.1 ms (0.101)
    (TRACES / "h100-jitter-13/gpt_48", "steady"),  # 215.4 ms (0.001)
    (TRACES / "h100-jitter-13/resnet_160_5-35", "uniform 5-35 ms"),  # 62.4 ms (0.140)
    (TRACES / "h100-jitter-13/gpt_12_0-25", "uniform 0-25 ms"),  # 76.1 ms (0.096)
)


def specs(which: str) -> list[JitterSpec]:
    """The jobs of one set (see the module docstring)."""
    if which == "tuned":
        grid = itertools.product(TUNED, (0.05, 0.06, 0.1, 0.2), JITTERS, ("uniform",))
        seed = 0
    else:
        jobs, periods, seed = HELD_OUT_SETS[which]
        grid = itertools.product(jobs, periods, JITTERS, ("uniform", "heavy"))
    out = []
    for (src, ph, recorded), period, jitter, tail in grid:
        scale = period * (1.0 - jitter) / recorded
        if (jitter == 0.0 and tail == "heavy") or not 1.0 / MAX_SQUEEZE <= scale <= MAX_SQUEEZE:
            continue
        out.append(JitterSpec(src, ph, period, jitter, tail, seed=seed))
    return out


def verdict(conclusion: str, err: float | None, took: float, deadline_s: float = DEADLINE_S) -> str:
    if conclusion != "baseline" or err is None:
        return conclusion
    if abs(err) > 0.05:
        return "off>5%"
    if took > deadline_s:
        return "late"
    return "ok" if abs(err) <= 0.02 else "off>2%"


def ok_restated(conclusion: str, err: float | None, took: float, mean_iteration_s: float) -> bool:
    """Ok by the restated deadline (RESTATED_ITERATIONS) instead of DEADLINE_S."""
    deadline_s = max(DEADLINE_S, RESTATED_ITERATIONS * mean_iteration_s)
    return verdict(conclusion, err, took, deadline_s) == "ok"


def real_starts(folder: Path) -> list[tuple[str, float, float]]:
    """(label, replay start, the job's first iteration) of one recording: its first sample, then OFFSETS_S after
    the first iteration."""
    gpu = ReplayGPU(folder)
    iterations = read_iterations(folder)
    assert iterations is not None, folder
    first = iterations.phases()[0].start_s
    return [("rec start", gpu.now_s(), first)] + [(f"+{o:4.1f} s", first + o, first + o) for o in OFFSETS_S]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--set", dest="which", default="all", choices=(*SYNTHETIC_SETS, "real", "all"))
    ap.add_argument("--rows", action="store_true")
    ap.add_argument("--out", type=Path, help="where to write the synthetic traces (default: a temporary folder)")
    args = ap.parse_args()
    bundles = next(d for d in default_bundle_dirs() if d.is_dir())
    predictor = Predictor(select_bundle(bundles, "NVIDIA H200").manifest)
    groups: dict[tuple[str, float, str], Counter[str]] = defaultdict(Counter)
    errors: dict[tuple[str, float, str], list[float]] = defaultdict(list)
    restated: Counter[tuple[str, float, str]] = Counter()
    with tempfile.TemporaryDirectory() as tmp:
        root = args.out or Path(tmp)
        sets = (*SYNTHETIC_SETS, "real") if args.which == "all" else (args.which,)
        for folder, kind in REAL if "real" in sets else ():
            truth = read_iterations(folder)
            assert truth is not None, folder
            phase = truth.phases()[0]
            mean_iteration_s = (phase.end_s - phase.start_s) / max(phase.n_iterations - 1, 1)
            for label, start, zero in real_starts(folder):
                o = profile_replay(folder, start, predictor, max_steps=60)
                took = o.concluded_s - zero
                v = verdict(o.conclusion, o.window_error, took)
                key = ("real", float(np.nan), f"{folder.name}")
                groups[key][v] += 1
                restated[key] += ok_restated(o.conclusion, o.window_error, took, mean_iteration_s)
                if o.window_error is not None:
                    errors[key].append(abs(o.window_error) * 100)
                if args.rows:
                    err = "" if o.window_error is None else f"{o.window_error * 100:+.2f}%"
                    print(f"{folder.name:25s} {kind:17s} {label:9s} {v:8s} {err:>8s} after {took:5.1f} s", flush=True)
        for which in (w for w in sets if w != "real"):
            for spec in specs(which):
                folder = root / spec.name
                make_jittered_trace(spec, folder)
                for offset in OFFSETS_S:
                    start = 1000.0 + spec.lead_s + offset
                    o = profile_replay(folder, start, predictor, max_steps=60)
                    took = o.concluded_s - start
                    v = verdict(o.conclusion, o.window_error, took)
                    key = (which, spec.jitter, spec.tail)
                    groups[key][v] += 1
                    restated[key] += ok_restated(o.conclusion, o.window_error, took, spec.period_s)
                    if o.window_error is not None:
                        errors[key].append(abs(o.window_error) * 100)
                    if args.rows:
                        err = "" if o.window_error is None else f"{o.window_error * 100:+.2f}%"
                        print(f"{spec.name:55s} +{offset:4.1f} s {v:8s} {err:>8s} after {took:5.1f} s", flush=True)
    print(
        f"{'set':9s} {'jitter':>6s} {'tail':16s} {'starts':>6s} {'ok':>9s} {'off>5%':>6s}  other; |err| median / max;"
        f" ok within max(20 s, {RESTATED_ITERATIONS} iterations)"
    )
    for (which, jitter, tail), tally in sorted(groups.items(), key=lambda kv: (kv[0][0] == "real", str(kv[0]))):
        n = sum(tally.values())
        other = ", ".join(f"{k} {v}" for k, v in sorted(tally.items()) if k not in ("ok", "off>5%"))
        e = errors[(which, jitter, tail)]
        shown = "-" if np.isnan(jitter) else f"{jitter * 100:.0f}%"
        stats = f"{np.median(e):.2f}% / {max(e):.2f}%" if e else "-"
        print(
            f"{which:9s} {shown:>6s} {tail:16s} {n:6d} {tally['ok']:3d} ({tally['ok'] / n * 100:3.0f}%) "
            f"{tally['off>5%']:6d}  {other or '-'}; {stats}; {restated[(which, jitter, tail)]}"
        )


if __name__ == "__main__":
    main()
