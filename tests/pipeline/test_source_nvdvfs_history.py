"""The `nv-dvfs-history` source parser: core x memory grids, counter proxies, merged GTX 980 grid, errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpoeo_pipeline.schema import SWEEP_COLUMNS, IngestError, conform, validate_sweeps
from gpoeo_pipeline.sources import SWEEP_SOURCES, ParsedSource
from gpoeo_pipeline.sources import nvdvfs_history as hist
from gpoeo_rt.features import FEATURE_NAMES

REPO = Path(__file__).resolve().parents[2]
RAW = REPO / "data/raw/nv-dvfs-history"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
COUNTER_FEATURES = [
    "feat_sm_active",
    "feat_sm_occupancy",
    "feat_dram_active",
    "feat_fp32_active",
    "feat_fp64_active",
]


def data_lines(path: Path) -> int:
    """Data rows of a CSV counted independently of the parser: non-blank lines after the header."""
    return sum(1 for line in path.read_text().splitlines()[1:] if line.strip())


@pytest.fixture(scope="module")
def parsed() -> ParsedSource:
    return hist.parse(RAW)


def test_registered() -> None:
    assert SWEEP_SOURCES["nv-dvfs-history"] is hist.parse


@pytest.mark.parametrize(
    ("name", "rows"),
    [
        ("c04f856/csvs/raw/gtx1080ti-dvfs-real-Performance-Power.csv", 600),
        ("c04f856/csvs/raw/gtx980-low-dvfs-real-small-workload-Performance-Power.csv", 1080),
        ("ea41783/csvs/raw/gtx980-high-dvfs-real-small-workload-Performance-Power.csv", 750),
        ("c04f856/csvs/raw/p100-dvfs-real-Performance-Power.csv", 150),
        ("8f42473/csvs/raw/gtx2070s-dvfs-real-Performance-Power.csv", 400),
    ],
)
def test_each_file_row_count(name: str, rows: int) -> None:
    frame, read = hist.read_file(RAW / name, name, hist.FILES[name])
    assert read == len(frame) == data_lines(RAW / name) == rows


def test_counts_and_report(parsed: ParsedSource) -> None:
    report = parsed.report
    assert report.rows_read == sum(data_lines(RAW / name) for name in hist.FILES)
    assert report.rows_read == report.rows_kept + len(report.rejections)
    assert report.rejections == []
    assert report.rows_kept == len(parsed.frame) == 2980
    per_sku = parsed.frame.groupby("sku").size().to_dict()
    expected: dict[str, int] = {}
    for name, spec in hist.FILES.items():
        expected[spec.sku] = expected.get(spec.sku, 0) + data_lines(RAW / name)
    assert per_sku == expected
    assert set(per_sku) == {"gtx-1080ti", "gtx-980", "tesla-p100", "rtx-2070-super"}
    assert any("titanx" in note for note in report.notes)


def test_schema_and_validation(parsed: ParsedSource) -> None:
    frame = conform(parsed.frame, SWEEP_COLUMNS, "nv-dvfs-history")
    assert list(frame.columns)[: len(SWEEP_COLUMNS)] == list(SWEEP_COLUMNS)
    assert [c for c in frame.columns if c not in SWEEP_COLUMNS] == [
        "x_achieved_occupancy",
        "x_dram_gbps",
        "x_ipc",
    ]
    for column, dtype in SWEEP_COLUMNS.items():
        assert str(frame[column].dtype) == dtype
    validate_sweeps(frame)
    assert set(frame["source"]) == {"nv-dvfs-history"}


def test_grids_and_reference(parsed: ParsedSource) -> None:
    frame = parsed.frame
    assert (frame.groupby(["sku", "workload"])["ref"].sum() == 1).all()
    refs = frame[frame["ref"]].groupby("sku")[["sm_clock_mhz", "mem_clock_mhz"]].agg(["min", "max"])
    assert refs.loc["gtx-1080ti"].tolist() == [2000, 2000, 5500, 5500]
    assert refs.loc["gtx-980"].tolist() == [1500, 1500, 3900, 3900]
    assert refs.loc["tesla-p100"].tolist() == [1328, 1328, 715, 715]
    assert refs.loc["rtx-2070-super"].tolist() == [2080, 2080, 7300, 7300]
    points = frame.groupby(["sku", "workload"]).size()
    assert (points.loc["gtx-1080ti"] == 20).all()
    assert (points.loc["gtx-980"] == 36 + 25).all()  # low 6x6 and high 5x5 grids, merged
    assert (points.loc["tesla-p100"] == 5).all()
    assert (points.loc["rtx-2070-super"] == 20).all()


def test_gtx980_grids_do_not_overlap() -> None:
    """The low and high grids merge into one SKU: same workloads, no shared (core, mem) point."""
    grids = [hist.read_file(RAW / name, name, spec)[0] for name, spec in hist.FILES.items() if spec.sku == "gtx-980"]
    assert len(grids) == 2
    low, high = ({tuple(p) for p in g[["sm_clock_mhz", "mem_clock_mhz"]].values} for g in grids)
    assert not low & high
    assert set(grids[0]["workload"]) == set(grids[1]["workload"])


def test_units(parsed: ParsedSource) -> None:
    frame = parsed.frame
    row = frame[
        (frame["sku"] == "gtx-1080ti")
        & (frame["workload"] == "BlackScholes/BlackScholesGPU/input00")
        & (frame["sm_clock_mhz"] == 1600)
        & (frame["mem_clock_mhz"] == 4000)
    ]
    assert row["time_s"].iloc[0] == pytest.approx(1.9886e-3)  # raw time/ms 1.9886
    assert row["power_w"].iloc[0] == pytest.approx(73.82810240963856)
    assert frame["time_s"].between(1e-5, 1.0).all()
    assert frame["power_w"].between(20, 300).all()
    np.testing.assert_allclose(frame["energy_j"], frame["time_s"] * frame["power_w"], rtol=1e-12)


def test_features(parsed: ParsedSource) -> None:
    frame = parsed.frame
    values = frame[list(FEATURE_NAMES)]
    assert ((values >= 0) & (values <= 1) | values.isna()).all().all()
    assert frame[["feat_fp16_active", "feat_tensor_active"]].isna().all().all()
    with_counters = frame["sku"] != "rtx-2070-super"
    assert frame.loc[with_counters, COUNTER_FEATURES].notna().all().all()
    assert frame.loc[~with_counters, COUNTER_FEATURES].isna().all().all()
    # DRAM proxies stay below the peak and memory-bound kernels reach a realistic 0.7-0.9 of it
    dram = frame[frame["workload"].str.startswith("vectorAdd/")].groupby("sku")["feat_dram_active"].max()
    assert dram.drop("rtx-2070-super").between(0.7, 0.9).all()


def test_counter_proxies_on_fixture() -> None:
    result = hist.parse_files(
        [(FIXTURES / "nvdvfs_history_good.csv", hist.FileSpec("gtx-980", has_counters=True))], FIXTURES.parent
    )
    report = result.report
    assert report.rows_read == 5 == report.rows_kept + len(report.rejections)
    assert [(r.line, r.reason.split(" (")[0]) for r in report.rejections] == [(6, "no reference config")]
    frame = result.frame.set_index(["sm_clock_mhz", "mem_clock_mhz"])
    top = frame.loc[(1000.0, 1000.0)]
    assert bool(top["ref"])
    # GTX 980: 16 SMs x 128 FP32 / 4 FP64 lanes, 64 bytes per memory clock
    assert top["feat_sm_active"] == pytest.approx(0.5)
    assert top["feat_sm_occupancy"] == pytest.approx(0.8 * 0.5)
    assert top["feat_dram_active"] == pytest.approx(32.0 / 64.0)  # 32 GB/s of 64 GB/s at memF 1000
    assert top["feat_fp32_active"] == pytest.approx(1.024e9 / (2.0e-3 * 1000e6 * 16 * 128))
    assert top["feat_fp64_active"] == pytest.approx(3.2e7 / (2.0e-3 * 1000e6 * 16 * 4))
    assert top["x_dram_gbps"] == pytest.approx(32.0)
    assert frame.loc[(500.0, 500.0), "feat_dram_active"] == pytest.approx(16.0 / 32.0)
    assert frame["time_s"].max() == pytest.approx(4.5e-3)


def test_exact_repeats_across_files_are_rejected() -> None:
    spec = hist.FileSpec("gtx-980", has_counters=True)
    path = FIXTURES / "nvdvfs_history_good.csv"
    result = hist.parse_files([(path, spec), (path, spec)], FIXTURES.parent)
    report = result.report
    assert report.rows_read == 10 == report.rows_kept + len(report.rejections)
    duplicates = [r for r in report.rejections if r.reason.startswith("exact duplicate")]
    assert len(duplicates) == 5
    validate_sweeps(result.frame)


@pytest.mark.parametrize(
    ("name", "line", "problem"),
    [
        ("nvdvfs_history_bad_fields.csv", 3, "expected 10 fields, found 11"),
        ("nvdvfs_history_bad_time.csv", 2, "non-numeric time/ms='1.2ms'"),
        ("nvdvfs_history_neg_power.csv", 3, "implausible power -80.0 W"),
        ("nvdvfs_history_mw_power.csv", 3, "implausible power 183273.02 W"),
        ("nvdvfs_history_dup_key.csv", 4, "duplicate key"),
        ("nvdvfs_history_missing_col.csv", 1, "missing required column(s) ['power/W']"),
        ("nvdvfs_history_unknown_col.csv", 1, "unknown column(s) ['temperature']"),
    ],
)
def test_malformed_input_names_file_and_line(name: str, line: int, problem: str) -> None:
    spec = hist.FileSpec("rtx-2070-super", has_counters=False)
    with pytest.raises(IngestError) as caught:
        hist.parse_files([(FIXTURES / name, spec)], FIXTURES.parent)
    error = caught.value
    assert f"fixtures/{name}:{line}:" in str(error)
    assert error.line == line
    assert problem in error.problem


def test_percent_counter_is_an_error() -> None:
    spec = hist.FileSpec("gtx-980", has_counters=True)
    with pytest.raises(IngestError, match=r"fixtures/nvdvfs_history_sm_percent\.csv:3: sm_efficiency=97\.06"):
        hist.parse_files([(FIXTURES / "nvdvfs_history_sm_percent.csv", spec)], FIXTURES.parent)


def test_counter_file_needs_counter_columns() -> None:
    spec = hist.FileSpec("gtx-980", has_counters=True)
    with pytest.raises(IngestError, match=r"nvdvfs_history_dup_key\.csv:1: missing required column"):
        hist.parse_files([(FIXTURES / "nvdvfs_history_dup_key.csv", spec)], FIXTURES.parent)
