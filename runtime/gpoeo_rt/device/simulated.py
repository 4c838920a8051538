"""A simulated GPU that behaves like one, in simulated time.

The GPU runs a schedule of workloads (phase changes: an eval loop, a new batch size) at clocks the caller locks;
a lock takes effect after a settle delay. Power within each iteration follows a waveform (a busy part with the
workload's own smooth profile, a host stall where the job has one) through a short power lag, with noise on each
sample and a slow thermal drift; docs/bench.md compares it with recorded H200 traces. NVML's artefacts are
reproduced: buffered power samples every 20 ms, each the mean of a short window; a finite sample buffer; polled
power, energy and counters that refresh only every 100 ms; counter snapshots need >= 100 ms between them.

Time is a `SimClock` that only the caller advances (directly or by sleeping on it): nothing here sleeps. The
timeline is generated lazily, up to `now`, in vectorized blocks. Random numbers come in blocks keyed by
(seed, stream, block index), so a run is reproducible and does not depend on how often it is queried.
Ground truth (true iteration ends, true energy) is on `SimulatedGPU.truth`, not on the reader interface.
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from gpoeo_rt.device.base import GPU, ClockTable, CounterSnapshot, PolledReading, PowerSamples
from gpoeo_rt.device.clock import SimClock
from gpoeo_rt.device.errors import ClockWriteNotAllowedError, GPUInvalidArgumentError
from gpoeo_rt.device.workload import GPUSpec, OperatingPoint, Workload, busy_profile, h200_spec
from gpoeo_rt.features import FEATURE_NAMES

FloatArray = npt.NDArray[np.float64]

_EPS = 1e-9
_BLOCK = 4096  # random numbers per block
_NOISE_CANCEL_S = 1.0  # the window over which sample noise partly averages out (SimConfig.noise_cancel)
_STREAM_JITTER, _STREAM_NOISE, _STREAM_COUNTERS, _STREAM_SUBSAMPLE = 1, 2, 3, 4
_UNIFORM_STREAMS = frozenset({_STREAM_SUBSAMPLE})  # streams of uniforms in [0, 1) instead of standard normals


@dataclass(frozen=True)
class SimConfig:
    """NVML artefacts and noise of the simulated GPU (defaults: what an H200 showed, data/traces/h200)."""

    sample_period_s: float = 0.02  # buffered power samples (50 Hz)
    subsamples: int = 4  # instantaneous points averaged into each buffered sample
    # Points at fixed offsets alias iterations near a multiple of their spacing (a 10 ms iteration shows the same
    # two instants forever, in the samples and in the true energy alike); a random offset within each point's
    # share of the sample makes both unbiased. Off by default: every published simulated figure used fixed points.
    subsample_jitter: bool = False
    buffer_capacity: int = 120  # samples the driver keeps (~2.4 s at 50 Hz); older ones are lost
    refresh_period_s: float = 0.1  # polled power, energy and GPM counters refresh at 10 Hz
    settle_s: float = 0.05  # a clock lock takes effect this long after it is set
    # Std of Gaussian noise on each buffered sample, relative to its power: what the recorded samples scatter
    # around their mean iteration profile (kernel-level structure the 20 ms windows cut at random places).
    noise_frac: float = 0.045
    # That structure moves energy between samples rather than adding any: this share of the noise's running mean
    # over the last second is taken out again (recorded 1 s means scatter at 0.5-0.9x what independent noise gives).
    noise_cancel: float = 0.6
    iteration_jitter: float = 0.004  # relative std of iteration times
    # The power the sensor reports follows the GPU's work with this time constant: a 20 ms host stall never
    # reaches idle power, and the power ramps up again over the next busy part (as recorded).
    power_lag_s: float = 0.009
    # Power rises by drift_frac as the GPU warms up (leakage grows with heat), with time constant drift_tau_s. The
    # default 3% is a stress case (the benches and issue 20's targets use it); a real H200 measured far less:
    # H200_MEASURED_DRIFT_FRAC.
    drift_frac: float = 0.03
    drift_tau_s: float = 240.0
    counter_noise: float = 0.005  # std of noise on counter fractions
    gpm_min_interval_s: float = 0.1
    # Which counters the GPU presents: "realistic" = NVML GPM only where a real GPU of this name has it (Hopper
    # and later; `has_gpm`), "sweep" = the workload's counters on any GPU (what a DCGM or profiler source would
    # add; for experiments), "none" = never.
    counters: str = "realistic"
    history_s: float = 600.0  # samples and iteration ends older than this are dropped (bounded memory)
    poll_call_s: float = 0.0042  # modelled duration of one poll (the energy read costs ~4 ms on an H200)
    lookahead_s: float = 10.0  # the timeline is generated this far ahead of now; a clock write rolls it back


# The warm-up of a real H200 (data/traces/h200-jitter/README.md: ResNet-50 from a 40 C idle to 57.6 C): energy per
# iteration +0.4% over 3.5 minutes (power +0.2%, iteration time +0.2%). SimConfig(drift_frac=...) to simulate it.
H200_MEASURED_DRIFT_FRAC = 0.004
COUNTER_MODES: tuple[str, ...] = ("realistic", "sweep", "none")
# NVML GPM (the counters the runtime reads) exists on Hopper and later GPUs only (nvmlGpmQueryDeviceSupport).
_GPM_NAMES = re.compile(r"\b(g?h100|g?h200|h800|h20|g?b100|g?b200|g?b300)\b")


def has_gpm(name: str) -> bool:
    """Whether a real GPU of this name (NVML name or sweep SKU, e.g. "NVIDIA H200", "tesla-v100") has NVML GPM."""
    return _GPM_NAMES.search(name.lower().replace("-", " ")) is not None


_LAG_GRID = 512  # phase points per iteration of a lagged waveform


def work_waveform(u: FloatArray, op: OperatingPoint) -> FloatArray:
    """The GPU's power relative to the iteration mean at iteration phase u in [0, 1) (mean 1): the busy part's
    profile, then the host stall (if the job has one) at low power."""
    low = op.low_power_w / op.power_w if op.power_w > 0 else 1.0
    if op.busy_fraction <= 0.0:
        return np.full_like(u, low)
    g = 1.0 - op.stall_share * (1.0 - op.busy_fraction)  # the rest of the low time hides in the busy part
    high = (1.0 - (1.0 - g) * low) / g  # so the iteration mean is 1
    busy_shape = 1.0 + op.modulation * busy_profile(np.minimum(u / g, 1.0), op.harmonic_decay)
    return np.asarray(np.where(u < g, high * busy_shape, low), dtype=np.float64)


def lagged_waveform(op: OperatingPoint, lag: float) -> FloatArray:
    """work_waveform on _LAG_GRID phase points through a first-order lag of `lag` iterations, in its periodic
    steady state (a circular convolution with the exponential kernel; the mean, i.e. the energy, is kept)."""
    n = _LAG_GRID
    x = work_waveform((np.arange(n) + 0.5) / n, op)
    kernel = np.exp(-np.arange(n) / (n * lag))
    kernel /= kernel.sum()
    return np.asarray(np.fft.irfft(np.fft.rfft(x) * np.fft.rfft(kernel), n), dtype=np.float64)


class _Checkpoint(NamedTuple):
    """Generator state at the start of the last generated block (what a clock write rolls back to)."""

    n_slots: int
    iter_k: int
    iter_frac: float
    n_ends: int
    n_regimes: int


class _Regime(NamedTuple):
    phase: int
    sm_clock_mhz: int
    mem_clock_mhz: int


class _Series:
    """A growable float array that can drop its oldest values; indices are global (they survive drops)."""

    def __init__(self, dtype: type = np.float64) -> None:
        self._data: np.ndarray = np.empty(1024, dtype=dtype)
        self._n = 0  # values held
        self.base = 0  # global index of the first value held

    @property
    def end(self) -> int:
        return self.base + self._n

    def extend(self, values: npt.ArrayLike) -> None:
        values = np.asarray(values)
        need = self._n + len(values)
        if need > len(self._data):
            grown = np.empty(max(need, 2 * len(self._data)), dtype=self._data.dtype)
            grown[: self._n] = self._data[: self._n]
            self._data = grown
        self._data[self._n : need] = values
        self._n = need

    def slice(self, start: int, stop: int) -> np.ndarray:
        """Values with global indices in [start, stop), clipped to what is held."""
        lo, hi = max(start, self.base) - self.base, min(stop, self.end) - self.base
        return self._data[lo:hi] if hi > lo else self._data[:0]

    def truncate(self, end: int) -> None:
        """Forget values with global index >= end."""
        self._n = min(self._n, max(0, end - self.base))

    def drop_before(self, index: int) -> None:
        k = min(max(0, index - self.base), self._n)
        if k:
            self._data[: self._n - k] = self._data[k : self._n]
            self._n -= k
            self.base += k


@dataclass(frozen=True)
class IterationRecord:
    """Ground-truth iterations: end time, phase (index in the workload schedule) and 1-based iteration number."""

    t_s: FloatArray = field(repr=False)
    phase: npt.NDArray[np.int64] = field(repr=False)
    iteration: npt.NDArray[np.int64] = field(repr=False)

    def __len__(self) -> int:
        return len(self.t_s)


class SimulationTruth:
    """What only a simulator knows: for tests and benchmarks, never used by the runtime's decisions."""

    def __init__(self, gpu: SimulatedGPU) -> None:
        self._gpu = gpu

    @property
    def iterations_completed(self) -> int:
        gpu = self._gpu
        gpu._generate_to_now()
        held = gpu._ends.slice(gpu._ends.base, gpu._ends.end)
        return gpu._ends.base + int(np.searchsorted(held, gpu.now_s(), side="right"))

    def iterations(self, since_s: float = -math.inf) -> IterationRecord:
        """Completed iterations ending after since_s (within the kept history)."""
        gpu = self._gpu
        gpu._generate_to_now()
        ends = gpu._ends.slice(gpu._ends.base, gpu._ends.end)
        # Ends are sorted: slice instead of masking the whole history (benchmarks ask often, with long histories).
        lo = int(np.searchsorted(ends, since_s, side="right"))
        hi = int(np.searchsorted(ends, gpu.now_s(), side="right"))  # the timeline runs ahead of now: hide the future
        phases = gpu._end_phases.slice(gpu._end_phases.base + lo, gpu._end_phases.base + hi)
        numbers = np.arange(gpu._ends.base + lo, gpu._ends.base + hi, dtype=np.int64) + 1
        return IterationRecord(ends[lo:hi].copy(), phases.astype(np.int64), numbers)

    def energy_j(self, at_s: float | None = None) -> float:
        """True energy since the simulation started, at at_s (default now; not later than now), to the 20 ms
        sample (no 10 Hz steps)."""
        gpu = self._gpu
        visible = gpu._generate_to_now()
        if at_s is None:
            return gpu._energy_at_slot(visible)
        slot = round((at_s - gpu._t0) / gpu.config.sample_period_s)
        return gpu._energy_at_slot(min(max(slot, 0), visible))

    def phase_at(self, t_s: float) -> int:
        return self._gpu._phase_at(t_s)

    def effective_clocks(self, t_s: float) -> tuple[int, int]:
        r = self._gpu._regime_at(t_s)
        return r.sm_clock_mhz, r.mem_clock_mhz

    def operating_point(self, t_s: float) -> OperatingPoint:
        """The workload's model at t_s: iteration time (without jitter), mean power, counters."""
        return self._gpu._op(self._gpu._regime_at(t_s))


@dataclass
class SimStats:
    """Call counts, so tests can check that the layers above read the expensive things rarely."""

    energy_reads: int = 0
    sample_reads: int = 0
    snapshot_reads: int = 0
    polls: int = 0


class SimulatedGPU(GPU):
    """A GPU running a workload schedule in simulated time. Implements the reader and the controller.

    `workload` is one Workload or a schedule [(start_s, Workload), ...] with start times relative to the clock's
    time at construction (the first at 0). The clock table is the first workload's (a measured sweep) or the
    spec's. Clock writes need `allow_clock_writes=True`, like the NVML backend, so controller code is tested
    with the same opt-in it needs on real hardware.
    """

    def __init__(
        self,
        workload: Workload | Sequence[tuple[float, Workload]],
        *,
        spec: GPUSpec | None = None,
        clock: SimClock | None = None,
        clock_table: ClockTable | None = None,
        config: SimConfig | None = None,
        seed: int | np.random.Generator = 0,
        allow_clock_writes: bool = False,
        index: int = 0,
        name: str | None = None,
        lock_state_path: str | Path | None = None,
    ) -> None:
        schedule = list(workload) if isinstance(workload, Sequence) else [(0.0, workload)]
        if not schedule or schedule[0][0] != 0.0:
            raise ValueError("a simulation schedule needs a first workload starting at 0 s")
        if any(b[0] <= a[0] for a, b in itertools.pairwise(schedule)):
            raise ValueError("simulation schedule start times must increase")
        self._clock = clock if clock is not None else SimClock()
        self._config = config or SimConfig()
        if self._config.counters not in COUNTER_MODES:
            raise ValueError(f"simulated counters {self._config.counters!r}: choose from {', '.join(COUNTER_MODES)}")
        self._spec = spec or h200_spec()
        self._seed = int(seed.integers(2**63)) if isinstance(seed, np.random.Generator) else int(seed)
        self._allow_clock_writes = allow_clock_writes
        self._index = index
        self._workloads = [w for _, w in schedule]
        self._t0 = self._clock.now_s()
        self._phase_starts = [self._t0 + s for s, _ in schedule]
        self._table = clock_table or self._workloads[0].clock_table() or self._spec.clock_table
        measured = self._workloads[0].clock_table() is not None  # a sweep: name the GPU after its sku
        self._name = name or (
            f"simulated {getattr(self._workloads[0], 'sku', '')}".strip() if measured else self._spec.name
        )
        default = (self._table.default_sm_mhz, self._table.default_mem_mhz)
        mode = self._config.counters
        self._counters = mode == "sweep" or (mode == "realistic" and has_gpm(self._name))
        # Real clock locks outlive the process that set them (the reason gpoeo keeps a state file). With a
        # lock_state_path the simulated GPU does the same: its lock is stored there and found by the next process.
        self._lock_state_path = Path(lock_state_path) if lock_state_path is not None else None
        self._locked = self._read_lock_state()
        start_clocks = self._locked or default
        # Clock events: (effective time, sm, mem), in order; effective = set time + settle delay.
        self._clock_event_t: list[float] = [-math.inf]
        self._clock_event_val: list[tuple[int, int]] = [start_clocks]
        self.clock_writes: list[tuple[float, int, int]] = []  # (set time, sm, mem) for tests
        self.stats = SimStats()
        self._ops: dict[_Regime, OperatingPoint] = {}
        self._blocks: dict[tuple[int, int], FloatArray] = {}
        self._lagged: dict[int, tuple[OperatingPoint, FloatArray]] = {}  # the sensor's view of each op's waveform

        # Generated timeline: slot k is the buffered sample stamped t0 + (k + 1) * dt, averaging (t0 + k dt, +dt].
        self._n_slots = 0  # generated slots (may run ahead of now by up to lookahead_s)
        self._checkpoint: _Checkpoint | None = None
        self._measured_w = _Series()
        self._cum_energy_j = _Series()  # energy at the end of each slot
        self._cum_energy_j.extend([0.0])  # entry k is the energy before slot k (global index k)
        self._iter_k = 0  # index of the iteration in progress
        self._iter_frac = 0.0  # its completed fraction
        self._ends = _Series()
        self._end_phases = _Series(np.int64)
        self._regime_t: list[float] = []  # starts of the regimes the timeline went through
        self._regimes: list[_Regime] = []
        # Counter snapshots (GPM-like).
        self._snap_prev_tick: float | None = None
        self._last_snapshot: CounterSnapshot | None = None
        self._last_snapshot_now = -math.inf
        self.truth = SimulationTruth(self)

    # --- identity ---

    @property
    def index(self) -> int:
        return self._index

    @property
    def name(self) -> str:
        return self._name

    @property
    def uuid(self) -> str:
        return f"GPU-simulated-{self._seed & 0xFFFFFFFF:08x}-{self._index:04d}"

    @property
    def clock(self) -> SimClock:
        return self._clock

    @property
    def config(self) -> SimConfig:
        return self._config

    # --- clocks ---

    def supported_clocks(self) -> ClockTable:
        return self._table

    def _clocks_at(self, t_s: float) -> tuple[int, int]:
        return self._clock_event_val[bisect.bisect_right(self._clock_event_t, t_s) - 1]

    def current_clocks(self) -> tuple[int, int]:
        return self._clocks_at(self._clock.now_s())

    def _schedule_clocks(self, sm: int, mem: int) -> None:
        now = self._clock.now_s()
        t_eff = now + self._config.settle_s
        if self._t0 + self._n_slots * self._config.sample_period_s > t_eff:
            self._rollback()  # the speculative timeline assumed the old clocks: regenerate from the block start
        self._generate_to_now(ahead=False)  # the past is fixed before the future changes
        self.clock_writes.append((now, sm, mem))
        # A newer lock replaces a pending one that has not taken effect yet.
        while len(self._clock_event_t) > 1 and self._clock_event_t[-1] >= t_eff:
            self._clock_event_t.pop()
            self._clock_event_val.pop()
        self._clock_event_t.append(t_eff)
        self._clock_event_val.append((sm, mem))

    def _read_lock_state(self) -> tuple[int, int] | None:
        path = self._lock_state_path
        if path is None or not path.exists():
            return None
        try:
            locked = json.loads(path.read_text())["locked"]
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}: not a simulated GPU lock state file ({exc})") from exc
        if locked is None:
            return None
        sm, mem = int(locked[0]), int(locked[1])
        if not self._table.contains(sm, mem):
            raise ValueError(f"{path}: locked clocks {sm}/{mem} MHz are not in {self._name}'s clock table")
        return sm, mem

    def _write_lock_state(self, locked: tuple[int, int] | None) -> None:
        path = self._lock_state_path
        if path is None:
            return
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps({"locked": None if locked is None else list(locked)}))
        os.replace(tmp, path)

    @property
    def locked_clocks(self) -> tuple[int, int] | None:
        """The lock in place (None: the driver's default behaviour), as the hardware would report it."""
        return self._locked

    def lock_clocks(self, sm_clock_mhz: int, mem_clock_mhz: int) -> None:
        if not self._allow_clock_writes:
            raise ClockWriteNotAllowedError(
                f"refusing to lock clocks on simulated GPU {self._index}: opened with allow_clock_writes=False"
            )
        if not self._table.contains(sm_clock_mhz, mem_clock_mhz):
            raise GPUInvalidArgumentError(
                f"SM {sm_clock_mhz} / memory {mem_clock_mhz} MHz is not a supported clock pair of {self._name}"
            )
        self._schedule_clocks(int(sm_clock_mhz), int(mem_clock_mhz))
        self._locked = (int(sm_clock_mhz), int(mem_clock_mhz))
        self._write_lock_state(self._locked)

    def reset_clocks(self) -> None:
        if not self._allow_clock_writes:
            raise ClockWriteNotAllowedError(
                f"refusing to reset clocks on simulated GPU {self._index}: opened with allow_clock_writes=False"
            )
        self._schedule_clocks(self._table.default_sm_mhz, self._table.default_mem_mhz)
        self._locked = None
        self._write_lock_state(None)

    # --- the model ---

    def _phase_at(self, t_s: float) -> int:
        return max(0, bisect.bisect_right(self._phase_starts, t_s) - 1)

    def _regime_at(self, t_s: float) -> _Regime:
        sm, mem = self._clocks_at(t_s)
        return _Regime(self._phase_at(t_s), sm, mem)

    def _op(self, regime: _Regime) -> OperatingPoint:
        op = self._ops.get(regime)
        if op is None:
            op = self._workloads[regime.phase].operating_point(regime.sm_clock_mhz, regime.mem_clock_mhz)
            self._ops[regime] = op
        return op

    def _normals(self, stream: int, start: int, n: int) -> FloatArray:
        """Standard normals (uniforms for _UNIFORM_STREAMS) number start..start+n-1 of a stream, the same whatever
        the query pattern."""
        if n <= 0:
            return np.empty(0)
        b0, b1 = start // _BLOCK, (start + n - 1) // _BLOCK
        parts = []
        for b in range(b0, b1 + 1):
            block = self._blocks.get((stream, b))
            if block is None:
                rng = np.random.default_rng([self._seed, stream, b])
                block = rng.random(_BLOCK) if stream in _UNIFORM_STREAMS else rng.standard_normal(_BLOCK)
                self._blocks[(stream, b)] = block
                if len(self._blocks) > 32:  # queries move forward: forget the oldest blocks
                    del self._blocks[next(iter(self._blocks))]
            parts.append(block)
        values = parts[0] if len(parts) == 1 else np.concatenate(parts)
        offset = start - b0 * _BLOCK
        return values[offset : offset + n]

    def _waveform(self, u: FloatArray, op: OperatingPoint) -> FloatArray:
        """Power relative to the iteration mean at iteration phase u in [0, 1) (mean 1 over an iteration), as
        the power sensor sees it (after its lag)."""
        lag_s = self._config.power_lag_s
        if lag_s <= 0.0:
            return work_waveform(u, op)
        cached = self._lagged.get(id(op))
        if cached is None or cached[0] is not op:
            cached = (op, lagged_waveform(op, lag_s / op.iteration_s))
            self._lagged[id(op)] = cached
        grid = cached[1]
        return np.asarray(np.interp(u, (np.arange(len(grid)) + 0.5) / len(grid), grid, period=1.0), dtype=np.float64)

    def _segment_power(self, s0: float, s1: float, t: FloatArray, regime: _Regime) -> FloatArray:
        """Instantaneous power at times t in [s0, s1) where the regime is constant; advances the iteration state."""
        op = self._op(regime)
        if not math.isfinite(op.iteration_s):
            return np.full_like(t, op.power_w)
        period_s = op.iteration_s
        k, frac = self._iter_k, self._iter_frac
        n = int((s1 - s0) / period_s * 1.2) + 3
        while True:
            jitter = np.clip(self._normals(_STREAM_JITTER, k, n) * self._config.iteration_jitter, -0.5, 0.5)
            durations = period_s * (1.0 + jitter)
            ends = s0 + (1.0 - frac) * durations[0] + np.concatenate(([0.0], np.cumsum(durations[1:])))
            if ends[-1] > s1:
                break
            n *= 2  # rare: jitter made iterations shorter than estimated
        j = np.searchsorted(ends, t, side="right")
        u = 1.0 - (ends[j] - t) / durations[j]
        done = int(np.searchsorted(ends, s1, side="right"))  # iterations ending within the segment
        if done:
            self._ends.extend(ends[:done])
            self._end_phases.extend(np.full(done, regime.phase, dtype=np.int64))
        self._iter_k = k + done
        self._iter_frac = 1.0 - (ends[done] - s1) / durations[done]
        return op.power_w * self._waveform(u, op)

    def _visible_slots(self) -> int:
        """Number of buffered samples stamped at or before now."""
        return math.floor((self._clock.now_s() - self._t0) / self._config.sample_period_s + _EPS)

    def _generate_to_now(self, *, ahead: bool = True) -> int:
        """Make sure the timeline covers now; returns the number of visible slots.

        Generating in blocks that run ahead of now keeps per-call overhead low (a drain every 250 ms costs a
        slice, not a model evaluation); a clock write inside a block rolls it back (see _rollback)."""
        visible = self._visible_slots()
        if visible > self._n_slots:
            self._checkpoint = _Checkpoint(
                self._n_slots, self._iter_k, self._iter_frac, self._ends.end, len(self._regimes)
            )
            lookahead = round(self._config.lookahead_s / self._config.sample_period_s) if ahead else 0
            self._generate(visible + lookahead)
        return visible

    def _rollback(self) -> None:
        """Forget the timeline generated since the last checkpoint. Replaying it with the same events gives the
        same samples (random numbers are keyed by index), so what callers already saw does not change."""
        ck = self._checkpoint
        if ck is None:
            return
        self._n_slots, self._iter_k, self._iter_frac = ck.n_slots, ck.iter_k, ck.iter_frac
        self._measured_w.truncate(ck.n_slots)
        self._cum_energy_j.truncate(ck.n_slots + 1)
        self._ends.truncate(ck.n_ends)
        self._end_phases.truncate(ck.n_ends)
        del self._regime_t[ck.n_regimes :], self._regimes[ck.n_regimes :]
        self._checkpoint = None

    def _generate(self, target: int) -> None:
        """Extend the timeline from slot _n_slots to slot target (exclusive)."""
        cfg = self._config
        dt = cfg.sample_period_s
        first = self._n_slots
        a, b = self._t0 + first * dt, self._t0 + target * dt
        n_points = (target - first) * cfg.subsamples
        # Offsets of the instants within each sample; stratified jitter: one at random in each 1/subsamples of it.
        u = (
            self._normals(_STREAM_SUBSAMPLE, first * cfg.subsamples, n_points).reshape(-1, cfg.subsamples)
            if cfg.subsample_jitter
            else np.full((1, cfg.subsamples), 0.5)
        )
        offsets = np.asarray((np.arange(cfg.subsamples)[None, :] + u) * (dt / cfg.subsamples), dtype=np.float64)
        t = (self._t0 + np.arange(first, target)[:, None] * dt + offsets).ravel()
        power = np.empty_like(t)
        # Regime changes inside (a, b): phase starts and clock changes taking effect.
        phases = self._phase_starts[
            bisect.bisect_right(self._phase_starts, a) : bisect.bisect_left(self._phase_starts, b)
        ]
        events = self._clock_event_t[
            bisect.bisect_right(self._clock_event_t, a) : bisect.bisect_left(self._clock_event_t, b)
        ]
        bounds = [a, *sorted(set(phases) | set(events)), b] if phases or events else [a, b]
        for s0, s1 in itertools.pairwise(bounds):
            i0, i1 = np.searchsorted(t, [s0, s1])
            regime = self._regime_at(s0)
            if not self._regimes or self._regimes[-1] != regime:
                self._regime_t.append(s0)
                self._regimes.append(regime)
            power[i0:i1] = self._segment_power(s0, s1, t[i0:i1], regime)
        true_w = power.reshape(-1, cfg.subsamples).mean(axis=1)
        if cfg.drift_frac:  # slow: one factor per sample is plenty
            slot_t = self._t0 + (np.arange(first, target) + 0.5) * dt
            true_w *= 1.0 + cfg.drift_frac * (1.0 - np.exp(-(slot_t - self._t0) / cfg.drift_tau_s))
        noise = self._sample_noise(first, target) * cfg.noise_frac * true_w
        self._measured_w.extend(np.maximum(true_w + noise, 0.0))
        energy0 = float(self._cum_energy_j.slice(first, first + 1)[0])
        self._cum_energy_j.extend(energy0 + np.cumsum(true_w) * dt)
        self._n_slots = target
        self._trim()

    def _sample_noise(self, first: int, target: int) -> FloatArray:
        """Unit noise of slots first..target-1: standard normals less noise_cancel x their running mean over the
        last second (a function of the slot index only, so regenerating a stretch gives the same values)."""
        cfg = self._config
        z = self._normals(_STREAM_NOISE, first, target - first)
        if not cfg.noise_cancel:
            return z
        span = max(1, round(_NOISE_CANCEL_S / cfg.sample_period_s))
        lead = min(first, span - 1)
        zz = self._normals(_STREAM_NOISE, first - lead, target - first + lead)
        csum = np.concatenate(([0.0], np.cumsum(zz)))
        stop = np.arange(lead + 1, len(zz) + 1)  # the running mean ends at each slot (inclusive)
        start = np.maximum(stop - span, 0)
        return np.asarray(z - cfg.noise_cancel * (csum[stop] - csum[start]) / (stop - start), dtype=np.float64)

    def _trim(self) -> None:
        cfg = self._config
        lookahead = round(cfg.lookahead_s / cfg.sample_period_s)
        keep_slots = max(int(cfg.history_s / cfg.sample_period_s), cfg.buffer_capacity, 64) + lookahead
        if self._n_slots - self._measured_w.base > 2 * keep_slots:  # trim in big steps: copies stay rare
            cut = self._n_slots - keep_slots
            if self._checkpoint is not None:  # never drop what a rollback returns to
                cut = min(cut, self._checkpoint.n_slots)
            self._measured_w.drop_before(cut)
            self._cum_energy_j.drop_before(cut)
            t_cut = self._t0 + cut * cfg.sample_period_s
            ends = self._ends.slice(self._ends.base, self._ends.end)
            n_old = int(np.searchsorted(ends, t_cut))
            self._ends.drop_before(self._ends.base + n_old)
            self._end_phases.drop_before(self._end_phases.base + n_old)

    def _energy_at_slot(self, k: int) -> float:
        """Energy before slot k (= at time t0 + k dt)."""
        return float(self._cum_energy_j.slice(k, k + 1)[0])

    def _last_tick(self) -> tuple[float, int]:
        """Time of the last 10 Hz refresh and the number of slots it covers."""
        cfg = self._config
        now = self._clock.now_s()
        ticks = math.floor((now - self._t0) / cfg.refresh_period_s + _EPS)
        t_tick = self._t0 + ticks * cfg.refresh_period_s
        return t_tick, round((t_tick - self._t0) / cfg.sample_period_s)

    def _mean_measured_w(self, slot_end: int, span_s: float) -> float:
        n = max(1, round(span_s / self._config.sample_period_s))
        values = self._measured_w.slice(slot_end - n, slot_end)
        if len(values) == 0:  # before the first refresh: the model's mean power
            return self._op(self._regime_at(self._clock.now_s())).power_w
        return float(values.mean())

    # --- reader ---

    def power_samples_since(self, t_s: float) -> PowerSamples:
        self.stats.sample_reads += 1
        visible = self._generate_to_now()
        dt = self._config.sample_period_s
        lo = max(self._measured_w.base, visible - self._config.buffer_capacity)
        if t_s > self._t0:
            lo = max(lo, math.floor((t_s - self._t0) / dt + _EPS))
        values = self._measured_w.slice(lo, visible)
        stamps = self._t0 + (np.arange(lo, lo + len(values), dtype=np.float64) + 1.0) * dt
        return PowerSamples(stamps, values.copy())

    def power_w(self) -> float:
        self._generate_to_now()
        _, slot = self._last_tick()
        return self._mean_measured_w(slot, self._config.refresh_period_s)

    def energy_j(self) -> float:
        self.stats.energy_reads += 1
        self._generate_to_now()
        _, slot = self._last_tick()
        return self._energy_at_slot(slot)

    def _mean_features(self, t1: float, t2: float) -> dict[str, float]:
        """Time average of the counters over [t1, t2] across the regimes the timeline went through."""
        starts = self._regime_t
        i = max(0, bisect.bisect_right(starts, t1) - 1)
        acc = np.zeros(len(FEATURE_NAMES))
        total = 0.0
        while i < len(starts) and starts[i] < t2:
            lo = max(t1, starts[i])
            hi = min(t2, starts[i + 1]) if i + 1 < len(starts) else t2
            if hi > lo:
                feats = self._op(self._regimes[i]).features
                acc += (hi - lo) * np.array([feats[name] for name in FEATURE_NAMES])
                total += hi - lo
            i += 1
        if total <= 0:
            feats = self._op(self._regime_at(t2)).features
            return {name: feats[name] for name in FEATURE_NAMES}
        return dict(zip(FEATURE_NAMES, (acc / total).tolist(), strict=True))

    def counter_snapshot(self) -> CounterSnapshot:
        self.stats.snapshot_reads += 1
        cfg = self._config
        now = self._clock.now_s()
        if self._last_snapshot is not None and now - self._last_snapshot_now < cfg.gpm_min_interval_s - _EPS:
            return self._last_snapshot  # too soon after the last sample: same answer, as the NVML backend does
        if not self._counters:
            self._last_snapshot, self._last_snapshot_now = CounterSnapshot(now, now, source="none"), now
            return self._last_snapshot
        self._generate_to_now()
        t_tick, _ = self._last_tick()
        previous, self._snap_prev_tick = self._snap_prev_tick, t_tick
        start_s = self._last_snapshot_now
        self._last_snapshot_now = now
        if previous is None or t_tick <= previous:
            snapshot = CounterSnapshot(now, now, source="simulated")
        else:
            features = self._mean_features(previous, t_tick)
            tick_index = round((t_tick - self._t0) / cfg.refresh_period_s)
            noise = self._normals(_STREAM_COUNTERS, tick_index * len(FEATURE_NAMES), len(FEATURE_NAMES))
            noisy = {
                name: float(np.clip(v + cfg.counter_noise * z, 0.0, 1.0)) if math.isfinite(v) else math.nan
                for (name, v), z in zip(features.items(), noise, strict=True)
            }
            snapshot = CounterSnapshot(start_s, now, MappingProxyType(noisy), source="simulated")
        self._last_snapshot = snapshot
        return snapshot

    def poll(self) -> PolledReading:
        self.stats.polls += 1
        self._generate_to_now()
        now = self._clock.now_s()
        _, slot = self._last_tick()
        p_inst = self._mean_measured_w(slot, self._config.refresh_period_s)
        p_avg = self._mean_measured_w(slot, 1.0)
        sm, mem = self.current_clocks()
        op = self._op(self._regime_at(now))
        counters = self.counter_snapshot()
        return PolledReading(
            t_s=now,
            power_instant_w=p_inst,
            power_average_w=p_avg,
            power_usage_w=p_avg,  # a 1 s average on Hopper, like POWER_AVERAGE
            energy_j=self.energy_j(),
            util_gpu_pct=100.0 * op.util_gpu,
            util_mem_pct=100.0 * dram if math.isfinite(dram := op.features["feat_dram_active"]) else math.nan,
            sm_clock_mhz=sm,
            mem_clock_mhz=mem,
            call_s=self._config.poll_call_s,
            counters=counters,
        )


class SimulatedStepMarkers:
    """The simulated job's step markers: what `gpoeo_rt.client.mark_step()` after each iteration would deliver.

    The training process is part of the simulated world, so this one reads the true iteration ends; what it hands
    out is only what a real marker channel carries (a timestamp and the sender's step counter), never the truth
    itself. Each marker is stamped at the iteration's end plus a host-side delay (`delay_s` + exponential jitter of
    mean `jitter_s`; a share `hiccup_rate` of them are late by up to `hiccup_s`, a scheduling hiccup), and a share
    `loss` never arrives (a full socket queue). One thread sends them, so a late one holds back those after it. Like
    the client, it sends at most one marker per `min_interval_s` (each carries its step number).
    Deterministic for a seed, whatever the query pattern, as long as
    queries come at least every `SimConfig.history_s`. Implements the sampling layer's MarkerSource.
    """

    def __init__(
        self,
        gpu: SimulatedGPU,
        *,
        seed: int = 0,
        delay_s: float = 30e-6,
        jitter_s: float = 50e-6,
        hiccup_rate: float = 0.005,
        hiccup_s: float = 2e-3,
        loss: float = 0.001,
        min_interval_s: float = 0.05,
        keep_s: float = 600.0,
    ) -> None:
        if min(delay_s, jitter_s, hiccup_rate, hiccup_s, loss) < 0 or hiccup_rate > 1 or loss >= 1:
            raise ValueError("marker delays must be >= 0 and hiccup_rate, loss fractions in [0, 1)")
        self._gpu = gpu
        self._rng = np.random.default_rng([seed, 0x6D61726B])
        self._delay_s, self._jitter_s = delay_s, jitter_s
        self._hiccup_rate, self._hiccup_s, self._loss = hiccup_rate, hiccup_s, loss
        self._min_interval_s = min_interval_s
        self._next_send_s = -math.inf
        self._keep_s = keep_s
        self._consumed_s = -math.inf  # iteration ends up to here have been turned into markers
        self._t = np.empty(0, dtype=np.float64)
        self._seq = np.empty(0, dtype=np.int64)

    def _advance(self) -> None:
        record = self._gpu.truth.iterations(since_s=self._consumed_s)
        if len(record) == 0:
            return
        n = len(record)
        u = self._rng.random((n, 4))  # one row per marker: the same draws however the queries split the markers
        delay = self._delay_s - self._jitter_s * np.log1p(-u[:, 0])  # + exponential jitter
        delay += (u[:, 1] < self._hiccup_rate) * u[:, 2] * self._hiccup_s
        # One thread sends them in turn: a late marker holds back the ones after it (timestamps never go back).
        floor = self._t[-1] if len(self._t) else -math.inf
        t = np.maximum.accumulate(np.maximum(record.t_s + delay, floor))
        sent = np.zeros(n, dtype=bool)
        for i, t_i in enumerate(t.tolist()):  # the client's rate cap: sequential by nature
            if t_i >= self._next_send_s:
                sent[i] = True
                self._next_send_s = t_i + self._min_interval_s
        kept = sent & (u[:, 3] >= self._loss)
        self._t = np.concatenate([self._t, t[kept]])
        self._seq = np.concatenate([self._seq, record.iteration[kept]])
        self._consumed_s = float(record.t_s[-1])
        horizon = self._gpu.now_s() - self._keep_s
        if len(self._t) and self._t[0] < horizon:
            first = int(np.searchsorted(self._t, horizon))
            self._t, self._seq = self._t[first:], self._seq[first:]

    def markers_between(self, start_s: float, end_s: float) -> tuple[FloatArray, npt.NDArray[np.int64]]:
        self._advance()
        lo = int(np.searchsorted(self._t, start_s, side="left"))
        hi = int(np.searchsorted(self._t, min(end_s, self._gpu.now_s()), side="right"))
        return self._t[lo:hi].copy(), self._seq[lo:hi].copy()
