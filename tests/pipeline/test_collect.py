"""gpoeo-collect end to end on the simulated GPU (simulated time) and on the fake NVML: measured values, crash
recovery (interrupts, SIGTERM, a torn last line, a stale clock lock), clock restoration and the ingest round trip."""

from __future__ import annotations

import csv
import json
import math
import os
import signal
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from gpoeo_pipeline import ingest
from gpoeo_pipeline.collect import collector
from gpoeo_pipeline.collect.collector import CollectionInterrupted, MeasureParams, SimBackend, collect
from gpoeo_pipeline.collect.plan import clock_grid
from gpoeo_pipeline.collect.rawformat import LOCK_FILE, RECOVERY_FILE, RESULT_COLUMNS, RESULTS_FILE, ConfigKey
from gpoeo_pipeline.collect.store import ClockLockState, CollectError
from gpoeo_pipeline.schema import SWEEP_COLUMNS, IngestError, validate_sweeps
from gpoeo_pipeline.sources import gpoeo_collect
from gpoeo_rt.device import GPU, NVMLGPU, h200_spec, preset_workload
from gpoeo_rt.features import FEATURE_NAMES
from tests.runtime.fake_nvml import FakeNVML

PARAMS = MeasureParams(settle_s=0.5, warmup_s=1.0, window_s=3.0, repeats=2, timing="markers")
WORKLOADS = ["resnet50", "membound"]
STRIDE = 25  # 5 SM clocks per memory clock: 10 configs per workload (the reference is the top one)
DEFAULT = (1980, 3201)


def _run(out: Path, backend: SimBackend | None = None, **kwargs: object) -> collector.CollectSummary:
    backend = backend or SimBackend(allow_clock_writes=True)
    options: dict[str, object] = {"sku": "sim-h200", "params": PARAMS, "sm_stride": STRIDE, **kwargs}
    return collect(backend, WORKLOADS, out, **options)  # type: ignore[arg-type]


def _keys(out: Path) -> list[ConfigKey]:
    with (out / RESULTS_FILE).open() as handle:
        rows = list(csv.DictReader(handle))
    return [(r["workload"], int(r["config_sm_mhz"]), int(r["config_mem_mhz"])) for r in rows]


def _assert_restored(backend: SimBackend, out: Path) -> None:
    backend.clock.advance(1.0)  # a clock change takes effect after the simulated settle delay
    for gpu in backend.gpus:
        assert gpu.current_clocks() == DEFAULT
        if gpu.clock_writes:  # the last write of every GPU that was locked is the reset to the defaults
            assert gpu.clock_writes[-1][1:] == DEFAULT
    assert not (out / LOCK_FILE).exists()


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, SimBackend, list[collector.ResultRow]]:
    out = tmp_path_factory.mktemp("collect") / "sim-h200"
    measured: list[collector.ResultRow] = []
    original = collector.measure

    def recording(*args: object, **kwargs: object) -> collector.ResultRow:
        row = original(*args, **kwargs)  # type: ignore[arg-type]
        measured.append(row)
        return row

    backend = SimBackend(allow_clock_writes=True)
    mp = pytest.MonkeyPatch()
    mp.setattr(collector, "measure", recording)
    try:
        summary = _run(out, backend)
    finally:
        mp.undo()
    assert summary.failed == [] and len(summary.measured) == 20
    return out, backend, measured


def test_grid_has_the_reference_first_and_the_top_clocks() -> None:
    grid = clock_grid(h200_spec().clock_table, STRIDE)
    assert grid[0] == DEFAULT and len(grid) == len(set(grid)) == 10
    assert (1980, 2201) in grid and all(sm >= 345 for sm, _ in grid)
    with pytest.raises(ValueError, match="1234"):
        clock_grid(h200_spec().clock_table, 4, [1234])


def test_simulated_sweep_measures_the_workloads_truth(uninterrupted: tuple) -> None:
    out, backend, measured = uninterrupted
    _assert_restored(backend, out)
    spec = h200_spec()
    for row in measured:
        assert row.config_sm_mhz is not None and row.config_mem_mhz is not None
        truth = preset_workload(row.workload, spec).operating_point(row.config_sm_mhz, row.config_mem_mhz)
        assert row.time_s == pytest.approx(truth.iteration_s, rel=0.01)
        assert row.power_w == pytest.approx(truth.power_w, rel=0.04)  # noise, waveform, slow thermal drift
        assert 0 <= row.time_rel_std < 0.01 and row.iterations >= 2 * 5
        assert row.ref == ((row.config_sm_mhz, row.config_mem_mhz) == DEFAULT)
        assert row.sm_clock_mhz == row.config_sm_mhz  # the simulated GPU runs at what was locked
        assert row.features["feat_sm_active"] > 0.5
    slow = [r for r in measured if r.workload == "resnet50" and r.config_sm_mhz < 800]
    assert slow and all(r.time_s > 1.5 * measured[0].time_s for r in slow)  # compute-bound: slower at low SM clocks


def test_raw_output_round_trips_through_ingest(uninterrupted: tuple) -> None:
    out, _, measured = uninterrupted
    parsed = gpoeo_collect.parse(out)
    frame = parsed.frame
    assert list(frame.columns[: len(SWEEP_COLUMNS)]) == list(SWEEP_COLUMNS)
    assert parsed.report.rows_kept == len(measured) == len(frame) and not parsed.report.rejections
    validate_sweeps(frame)
    by_key = frame.set_index(["workload", "sm_clock_mhz", "mem_clock_mhz"])
    for row in measured:
        got = by_key.loc[(row.workload, float(row.config_sm_mhz), float(row.config_mem_mhz))]  # type: ignore[arg-type]
        assert got["sku"] == "sim-h200" and got["source"] == out.name
        # Exactly the values the collector measured: floats are written with repr().
        assert (got["time_s"], got["power_w"], got["energy_j"], bool(got["ref"])) == (
            row.time_s,
            row.power_w,
            row.energy_j,
            row.ref,
        )
        assert got["x_time_rel_std"] == row.time_rel_std and got["x_power_rel_std"] == row.power_rel_std
        assert got["x_iterations"] == row.iterations and got["x_repeats"] == row.repeats
        for name in FEATURE_NAMES:
            assert got[name] == row.features[name] or (math.isnan(got[name]) and math.isnan(row.features[name]))


def test_killed_and_restarted_collection_equals_an_uninterrupted_one(uninterrupted: tuple, tmp_path: Path) -> None:
    reference_keys = _keys(uninterrupted[0])
    out = tmp_path / "sim-h200"
    seen: list[ConfigKey] = []

    def kill_at_13th(key: ConfigKey) -> None:
        seen.append(key)
        if len(seen) == 13:  # in the middle of the second workload
            raise CollectionInterrupted(signal.SIGTERM)

    first = SimBackend(allow_clock_writes=True)
    with pytest.raises(CollectionInterrupted):
        _run(out, first, on_config=kill_at_13th)
    _assert_restored(first, out)
    assert len(_keys(out)) == 12
    # Then a kill while the 12th row was being written: the file ends in the middle of a line.
    data = (out / RESULTS_FILE).read_bytes()
    last_start = data.rstrip(b"\n").rfind(b"\n") + 1
    torn = data[: last_start + (len(data) - last_start) // 2]
    (out / RESULTS_FILE).write_bytes(torn)
    with pytest.raises(IngestError, match=r"results.csv:13: torn last line"):
        gpoeo_collect.parse(out)

    second = SimBackend(allow_clock_writes=True)
    summary = _run(out, second)
    _assert_restored(second, out)
    assert summary.torn is not None and summary.torn.line == 13
    assert summary.already_done == 11 and len(summary.measured) == 9 and not summary.failed
    assert summary.measured[0] == reference_keys[11]  # the torn row's config was measured again
    keys = _keys(out)
    assert len(keys) == len(set(keys)) and sorted(keys) == sorted(reference_keys)
    log = (out / RECOVERY_FILE).read_text()
    assert "results.csv:13: torn last line" in log and torn[last_start:].decode() in log
    assert len(gpoeo_collect.parse(out).frame) == 20
    # A third run has nothing left to do and touches no clock.
    third = SimBackend(allow_clock_writes=True)
    again = _run(out, third)
    assert again.measured == [] and again.already_done == 20
    assert all(gpu.clock_writes == [] for gpu in third.gpus)


def test_sigterm_mid_run_restores_clocks_and_keeps_every_measured_row(tmp_path: Path) -> None:
    out = tmp_path / "c"
    calls: list[ConfigKey] = []

    def terminate_at_third(key: ConfigKey) -> None:
        calls.append(key)
        if len(calls) == 3:
            os.kill(os.getpid(), signal.SIGTERM)

    previous = signal.getsignal(signal.SIGTERM)
    backend = SimBackend(allow_clock_writes=True)
    with pytest.raises(CollectionInterrupted, match="SIGTERM"):
        _run(out, backend, on_config=terminate_at_third)
    assert signal.getsignal(signal.SIGTERM) == previous  # handlers are put back
    _assert_restored(backend, out)
    assert backend.gpus[-1].clock_writes[-2][1:] != DEFAULT  # it was locked elsewhere when the signal came
    assert len(_keys(out)) == 2


def test_a_stale_clock_lock_is_restored_before_anything_else(tmp_path: Path) -> None:
    out = tmp_path / "c"
    out.mkdir()
    backend = SimBackend(allow_clock_writes=True)
    # What a SIGKILLed collector leaves behind: the record that clocks were locked on this GPU.
    ClockLockState(out / LOCK_FILE).mark(backend.device().uuid, 0, 1005, 2201)
    summary = _run(out, backend)
    assert summary.restored_stale_lock
    first_gpu = backend.gpus[0]
    assert [w[1:] for w in first_gpu.clock_writes] == [DEFAULT]  # the reset, before any workload started
    _assert_restored(backend, out)


class _FakeRun:
    """A workload on the fake NVML's clock: an iteration ends every 0.125 s."""

    name = "fake"

    def __init__(self, fake: FakeNVML) -> None:
        self._fake = fake
        self._t0 = fake.now_s()

    def ensure_running(self) -> None:
        return None

    def iteration_ends(self, start_s: float, end_s: float) -> np.ndarray:
        ends = self._t0 + 0.125 * np.arange(1, 100_000)
        return ends[(ends > start_s) & (ends <= end_s)]

    def stop(self) -> None:
        return None


class _FakeBackend:
    def __init__(self, gpu: GPU, fake: FakeNVML) -> None:
        self._gpu, self._fake = gpu, fake

    def device(self) -> GPU:
        return self._gpu

    def start(self, workload: str) -> tuple[GPU, _FakeRun]:
        return self._gpu, _FakeRun(self._fake)

    def close(self) -> None:
        self._gpu.close()


def test_reference_only_never_calls_a_clock_setting_method(tmp_path: Path) -> None:
    fake = FakeNVML(root=True)  # root: a write attempted here would succeed, so none may be attempted
    gpu = NVMLGPU(0, allow_clock_writes=False, nvml=fake, clock=fake, monotonic_s=fake.now_s)
    backend = _FakeBackend(gpu, fake)
    out = tmp_path / "h200-reference"
    summary = collect(backend, ["cnn/batch=8", "mlp/batch=64"], out, sku="h200", params=PARAMS, reference_only=True)
    backend.close()
    assert fake.writes() == []
    assert not any(name.startswith(("nvmlDeviceSet", "nvmlDeviceReset")) for name in fake.names_called())
    assert summary.measured == [("cnn/batch=8", None, None), ("mlp/batch=64", None, None)]
    frame = gpoeo_collect.parse(out).frame
    validate_sweeps(frame)
    assert frame["ref"].all() and (frame["sm_clock_mhz"] == 1980).all() and (frame["mem_clock_mhz"] == 3201).all()
    assert frame["time_s"].tolist() == pytest.approx([0.125, 0.125])
    assert frame["power_w"].tolist() == pytest.approx([450.0, 450.0])
    assert frame["feat_sm_active"].tolist() == pytest.approx([0.88, 0.88])
    assert frame["feat_fp64_active"].isna().all()  # GPM's FP64 metric is unsupported on the fake
    meta = json.loads((out / "collect.json").read_text())
    assert meta["mode"] == "reference" and meta["gpu_name"] == "NVIDIA H200"
    assert "reference only" in (out / "README.md").read_text()


def test_reference_only_refuses_while_a_sweep_may_have_left_clocks_locked(tmp_path: Path) -> None:
    fake = FakeNVML(root=True)
    gpu = NVMLGPU(0, allow_clock_writes=False, nvml=fake, clock=fake, monotonic_s=fake.now_s)
    ClockLockState(tmp_path / LOCK_FILE).mark(gpu.uuid, 0, 1500, 3201)
    with pytest.raises(CollectError, match="--restore-clocks"):
        collect(_FakeBackend(gpu, fake), ["w"], tmp_path, sku="h200", params=PARAMS, reference_only=True)
    gpu.close()
    assert fake.writes() == []


def test_period_timing_without_markers(tmp_path: Path) -> None:
    backend = SimBackend(allow_clock_writes=True, markers=False)
    params = MeasureParams(settle_s=0.5, warmup_s=1.0, window_s=4.0, repeats=2, timing="auto")
    collect(backend, ["resnet50"], tmp_path, sku="s", params=params, sm_stride=1000)
    frame = gpoeo_collect.parse(tmp_path).frame
    truth = preset_workload("resnet50")
    assert len(frame) == 2
    for row in frame.itertuples():
        assert row.time_s == pytest.approx(
            truth.operating_point(row.sm_clock_mhz, row.mem_clock_mhz).iteration_s, rel=0.02
        )
    with (tmp_path / RESULTS_FILE).open() as handle:
        assert {r["timing"] for r in csv.DictReader(handle)} == {"period"}


def test_markers_timing_fails_a_config_cleanly_without_markers(tmp_path: Path) -> None:
    backend = SimBackend(allow_clock_writes=True, markers=False)
    summary = collect(backend, ["resnet50"], tmp_path, sku="s", params=PARAMS, sm_stride=1000)
    assert len(summary.failed) == 2 and "0 step marker(s)" in summary.failed[0][1]
    _assert_restored(backend, tmp_path)


def test_resuming_with_other_measurement_settings_is_refused(uninterrupted: tuple, tmp_path: Path) -> None:
    out = tmp_path / "c"
    collect(SimBackend(allow_clock_writes=True), ["membound"], out, sku="s", params=PARAMS, sm_stride=1000)
    other = MeasureParams(settle_s=0.5, warmup_s=1.0, window_s=5.0, repeats=2, timing="markers")
    with pytest.raises(CollectError, match="params"):
        collect(SimBackend(allow_clock_writes=True), ["membound"], out, sku="s", params=other, sm_stride=1000)


def test_parser_names_file_and_line_of_bad_rows(uninterrupted: tuple, tmp_path: Path) -> None:
    src = uninterrupted[0]
    out = tmp_path / "x"
    out.mkdir()
    (out / "collect.json").write_text((src / "collect.json").read_text())
    lines = (src / RESULTS_FILE).read_text().splitlines(keepends=True)
    (out / RESULTS_FILE).write_text("".join([*lines[:3], lines[2]]))
    with pytest.raises(IngestError, match=r"x/results.csv:4: duplicate key"):
        gpoeo_collect.parse(out)
    (out / RESULTS_FILE).write_text("".join([lines[0], lines[1].replace(",sweep,", ",swept,")]))
    with pytest.raises(IngestError, match=r"x/results.csv:2: mode='swept'"):
        gpoeo_collect.parse(out)
    (out / "extra.csv").write_text("a\n1\n")
    with pytest.raises(IngestError, match=r"extra\.csv"):
        gpoeo_collect.parse(out)


def test_ingest_reads_a_collected_folder_when_listed(uninterrupted: tuple, tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    (raw / "h200-test").mkdir(parents=True)
    for name in ("collect.json", RESULTS_FILE, "README.md"):
        (raw / "h200-test" / name).write_bytes((uninterrupted[0] / name).read_bytes())
    params = {
        "ingest": {
            "raw_dir": str(raw),
            "out_dir": str(tmp_path / "processed"),
            "metrics": str(tmp_path / "metrics.json"),
            "sweep_sources": ["h200-test"],
            "powerlimit_sources": [],
        }
    }
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    mp = pytest.MonkeyPatch()
    mp.chdir(tmp_path)
    mp.setattr(sys, "argv", ["ingest"])
    try:
        ingest.main()
    finally:
        mp.undo()
    sweeps = pd.read_parquet(tmp_path / "processed/sweeps.parquet")
    assert len(sweeps) == 20 and set(sweeps["sku"]) == {"sim-h200"} and set(sweeps["source"]) == {"h200-test"}
    assert sweeps.groupby("workload")["ref"].sum().tolist() == [1, 1]
    with pytest.raises(KeyError, match="gpoeo-collect"):
        ingest.parse_sources(raw, ["nope"], {}, recognise=True)


def test_result_columns_carry_every_feature() -> None:
    assert set(FEATURE_NAMES) <= set(RESULT_COLUMNS)
