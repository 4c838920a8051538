"""The `nv-dvfs` source parser: real-data counts, units, reference rows, features; malformed-input errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gpoeo_pipeline.schema import SWEEP_COLUMNS, IngestError, conform, validate_sweeps
from gpoeo_pipeline.sources import SWEEP_SOURCES, ParsedSource, nvdvfs
from gpoeo_rt.features import FEATURE_NAMES

REPO = Path(__file__).resolve().parents[2]
RAW = REPO / "data/raw/nv-dvfs"
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def data_lines(path: Path) -> int:
    """Data rows of a CSV counted independently of the parser: non-blank lines after the header."""
    return sum(1 for line in path.read_text().splitlines()[1:] if line.strip())


@pytest.fixture(scope="module")
def parsed() -> ParsedSource:
    return nvdvfs.parse(RAW)


def test_registered() -> None:
    assert SWEEP_SOURCES["nv-dvfs"] is nvdvfs.parse


@pytest.mark.parametrize("name", sorted(nvdvfs.FILES))
def test_each_file_row_count(name: str) -> None:
    frame, read = nvdvfs.read_file(RAW / name, name, nvdvfs.FILES[name])
    expected = data_lines(RAW / name)
    assert read == len(frame) == expected
    assert expected == (200 if "-real-" in name else 1380)


def test_counts_and_report(parsed: ParsedSource) -> None:
    report = parsed.report
    assert report.rows_read == sum(data_lines(RAW / name) for name in nvdvfs.FILES)
    assert report.rows_read == report.rows_kept + len(report.rejections)
    assert report.rows_kept == len(parsed.frame) == 3160
    assert report.rejections == []  # the upstream files have no duplicates and every workload has its reference
    assert sorted(report.files) == sorted(f"nv-dvfs/{name}" for name in nvdvfs.FILES)
    per_sku = parsed.frame.groupby("sku").size().to_dict()
    for sku in ("tesla-v100", "quadro-rtx-8000"):
        assert per_sku[sku] == sum(data_lines(RAW / n) for n, s in nvdvfs.FILES.items() if s == sku)
    # 20 real apps + 138 microbenchmark configs, each at 10 SM clocks
    clocks = parsed.frame.groupby(["sku", "workload"]).size()
    assert (clocks == 10).all()
    assert parsed.frame.groupby("sku")["workload"].nunique().to_dict() == {
        "tesla-v100": 158,
        "quadro-rtx-8000": 158,
    }


def test_schema_and_validation(parsed: ParsedSource) -> None:
    frame = conform(parsed.frame, SWEEP_COLUMNS, "nv-dvfs")
    assert list(frame.columns) == list(SWEEP_COLUMNS)  # no x_* extras from this source
    for column, dtype in SWEEP_COLUMNS.items():
        assert str(frame[column].dtype) == dtype
    validate_sweeps(frame)
    assert set(frame["source"]) == {"nv-dvfs"}


def test_units(parsed: ParsedSource) -> None:
    frame = parsed.frame
    black = frame[
        (frame["sku"] == "tesla-v100")
        & (frame["workload"] == "BlackScholes/BlackScholesGPU/input000")
        & (frame["sm_clock_mhz"] == 1087)
    ]
    assert len(black) == 1
    assert black["time_s"].iloc[0] == pytest.approx(0.91044e-3)  # raw 0.91044 ms
    assert frame["time_s"].between(1e-5, 1.0).all()
    assert frame["power_w"].between(20, 300).all()
    np.testing.assert_allclose(frame["energy_j"], frame["time_s"] * frame["power_w"], rtol=1e-12)


def test_reference_rows(parsed: ParsedSource) -> None:
    frame = parsed.frame
    assert (frame.groupby(["sku", "workload"])["ref"].sum() == 1).all()
    refs = frame[frame["ref"]].groupby("sku")[["sm_clock_mhz", "mem_clock_mhz"]].agg(["min", "max"])
    assert refs.loc["tesla-v100"].tolist() == [1380, 1380, 877, 877]
    assert refs.loc["quadro-rtx-8000"].tolist() == [1710, 1710, 6500, 6500]


def test_features(parsed: ParsedSource) -> None:
    frame = parsed.frame
    values = frame[list(FEATURE_NAMES)]
    assert ((values >= 0) & (values <= 1) | values.isna()).all().all()
    # one V100 microbenchmark row has empty DCGM fields upstream: kept with NaN features, and said so
    missing = frame[values.isna().all(axis=1)]
    assert missing[["workload", "sm_clock_mhz"]].values.tolist() == [["shmembench/benchmark_float/input005", 600.0]]
    assert any("no DCGM counters" in note for note in parsed.report.notes)
    assert values.notna().all(axis=1).sum() == len(frame) - 1
    # workload ids: program first (the features stage groups by the text before the first '/')
    assert frame["workload"].str.count("/").eq(2).all()


def test_rejections_are_recorded() -> None:
    path = FIXTURES / "nvdvfs_rejects.csv"
    result = nvdvfs.parse_files([(path, "tesla-v100")], FIXTURES.parent)
    report = result.report
    assert report.rows_read == 5
    assert report.rows_read == report.rows_kept + len(report.rejections)
    reasons = {(r.line, r.reason.split(" (")[0].split(" of ")[0]) for r in report.rejections}
    assert reasons == {(4, "exact duplicate"), (5, "no reference config")}
    assert all(r.path == "fixtures/nvdvfs_rejects.csv" for r in report.rejections)
    assert "fixtures/nvdvfs_rejects.csv:3" in report.rejections[0].reason
    frame = result.frame
    assert sorted(frame["workload"]) == [
        "appA/kernelA/input000",
        "appA/kernelA/input000",
        "appA/kernelA/input001",
    ]
    assert frame["ref"].sum() == 2
    no_counters = frame[frame["workload"] == "appA/kernelA/input001"]
    assert no_counters[list(FEATURE_NAMES)].isna().all().all()
    validate_sweeps(frame)


@pytest.mark.parametrize(
    ("name", "line", "problem"),
    [
        ("nvdvfs_bad_fields.csv", 3, "expected 14 fields, found 13"),
        ("nvdvfs_bad_time.csv", 3, "non-numeric time='fast'"),
        ("nvdvfs_neg_power.csv", 4, "implausible power -12.5 W"),
        ("nvdvfs_dup_key.csv", 4, "duplicate key"),
        ("nvdvfs_missing_col.csv", 1, "missing required column(s) ['time']"),
        ("nvdvfs_missing_value.csv", 3, "missing value in required column 'average_power'"),
        ("nvdvfs_bad_fraction.csv", 2, "SMACT=97.5 outside [0, 1]"),
    ],
)
def test_malformed_input_names_file_and_line(name: str, line: int, problem: str) -> None:
    with pytest.raises(IngestError) as caught:
        nvdvfs.parse_files([(FIXTURES / name, "tesla-v100")], FIXTURES.parent)
    error = caught.value
    assert f"fixtures/{name}:{line}:" in str(error)
    assert error.line == line
    assert problem in error.problem


def test_unlisted_csv_is_an_error(tmp_path: Path) -> None:
    raw = tmp_path / "nv-dvfs"
    raw.mkdir()
    for name in nvdvfs.FILES:
        (raw / name).write_bytes((RAW / name).read_bytes())
    (raw / "v100-dvfs-real.csv").write_text("a,b\n1,2\n")
    with pytest.raises(IngestError, match=r"v100-dvfs-real\.csv.*not listed"):
        nvdvfs.parse(raw)


def test_missing_file_is_an_error(tmp_path: Path) -> None:
    raw = tmp_path / "nv-dvfs"
    raw.mkdir()
    with pytest.raises(IngestError, match="expected raw file is missing"):
        nvdvfs.parse(raw)


def test_deterministic(parsed: ParsedSource) -> None:
    again = nvdvfs.parse(RAW).frame
    pd.testing.assert_frame_equal(parsed.frame, again)
