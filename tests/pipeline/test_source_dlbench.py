"""The `dlbench-dvfs` source parser: real-data counts, units, clock offsets, references; malformed input."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gpoeo_pipeline.schema import SWEEP_COLUMNS, IngestError, conform, validate_sweeps
from gpoeo_pipeline.sources import SWEEP_SOURCES, ParsedSource, dlbench
from gpoeo_rt.features import FEATURE_NAMES

REPO = Path(__file__).resolve().parents[2]
RAW = REPO / "data/raw/dlbench-dvfs"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
CAFFE = dlbench.FileSpec("gtx-titan-x", "caffe", "net")
OFFSETS = dlbench.FileSpec("gtx-titan-x", "caffe", "net", dlbench.TITAN_X_BASE_MHZ)


def data_lines(path: Path) -> int:
    """Data rows of a CSV counted independently of the parser: non-blank lines after the header."""
    return sum(1 for line in path.read_text().splitlines()[1:] if line.strip())


def raw_records(name: str) -> list[dict[str, str]]:
    with (RAW / name).open(newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.fixture(scope="module")
def parsed() -> ParsedSource:
    return dlbench.parse(RAW)


def test_registered() -> None:
    assert SWEEP_SOURCES["dlbench-dvfs"] is dlbench.parse


@pytest.mark.parametrize("name", sorted(dlbench.FILES))
def test_each_file_row_count(name: str) -> None:
    frame, read = dlbench.read_file(RAW / name, name, dlbench.FILES[name])
    assert read == len(frame) == data_lines(RAW / name)


def test_counts_and_report(parsed: ParsedSource) -> None:
    report = parsed.report
    assert report.rows_read == sum(data_lines(RAW / name) for name in dlbench.FILES) == 208
    assert report.rows_read == report.rows_kept + len(report.rejections)
    assert report.rows_kept == len(parsed.frame) == 208
    assert report.rejections == []  # every workload has its own top point
    assert sorted(report.files) == sorted(f"dlbench-dvfs/{name}" for name in dlbench.FILES)
    per_sku = parsed.frame.groupby("sku").size().to_dict()
    for sku in ("gtx-titan-x", "gtx-1080ti", "gtx-980"):
        assert per_sku[sku] == sum(data_lines(RAW / n) for n, s in dlbench.FILES.items() if s.sku == sku)
    assert per_sku == {"gtx-titan-x": 108, "gtx-1080ti": 16, "gtx-980": 84}


def test_schema_and_validation(parsed: ParsedSource) -> None:
    frame = conform(parsed.frame, SWEEP_COLUMNS, "dlbench-dvfs")
    assert list(frame.columns) == list(SWEEP_COLUMNS)
    for column, dtype in SWEEP_COLUMNS.items():
        assert str(frame[column].dtype) == dtype
    validate_sweeps(frame)
    assert set(frame["source"]) == {"dlbench-dvfs"}
    assert frame[list(FEATURE_NAMES)].isna().all().all()  # no counters in this source


def test_units(parsed: ParsedSource) -> None:
    frame = parsed.frame
    conv = frame[frame["workload"] == "conv-fft/input00"].set_index(["sm_clock_mhz", "mem_clock_mhz"])
    assert conv.loc[(1000.0, 2100.0), "time_s"] == pytest.approx(81650.0e-6)  # raw 81650 us
    # GFLOPS was computed upstream as a fixed 28.99 GFLOP / (time/us x 1e3): the column really is in us.
    for rec in raw_records("history/f3d8d32/conv/dvfs-conv.csv"):
        assert float(rec["GFLOPS"]) * float(rec["time/us"]) * 1e3 == pytest.approx(28991029248.0, rel=1e-9)
    googlenet = frame[frame["workload"] == "googlenet/gtx1080Ti-googlenet"]
    assert googlenet.set_index("sm_clock_mhz").loc[1607.0].iloc[0]["time_s"] == pytest.approx(0.358671575)
    assert frame["time_s"].between(1e-3, 1.0).all()  # per iteration / per conv pass
    assert frame["power_w"].between(30, 300).all()
    np.testing.assert_allclose(frame["energy_j"], frame["time_s"] * frame["power_w"], rtol=1e-12)


def test_stored_energy_agrees(parsed: ParsedSource) -> None:
    frame = parsed.frame.set_index(["workload", "sm_clock_mhz", "mem_clock_mhz"])
    checked = 0
    for name in ("gtx1080Ti-googlenet.csv", "titanX-caffe-googlenet.csv", "titanX-caffe-resnet.csv"):
        spec = dlbench.FILES[f"caffe/excels/{name}"]
        for rec in raw_records(f"caffe/excels/{name}"):
            energy = float(rec.get("Energy/J") or rec["energy/J"])
            key = (f"{spec.model}/{Path(name).stem}", float(rec["coreF"]), float(rec["memF"]))
            assert frame.loc[key, "energy_j"] == pytest.approx(energy, rel=1e-6)
            checked += 1
    assert checked == 48


def test_offsets_become_absolute_clocks(parsed: ParsedSource) -> None:
    frame = parsed.frame
    vgg_off = frame[frame["workload"] == "vgg/titanX-caffe-vgg"]
    vgg_abs = frame[frame["workload"] == "vgg/titanX-vgg-logs-v2"]
    # raw offset (-100, -1000) is (1700, 3500) MHz
    row = vgg_off.set_index(["sm_clock_mhz", "mem_clock_mhz"]).loc[(1700.0, 3500.0)]
    assert row["time_s"] == pytest.approx(0.24378502994011972)
    # the converted offset grid is the absolute grid, and the two runs agree point by point
    joined = vgg_off.merge(vgg_abs, on=["sm_clock_mhz", "mem_clock_mhz"], suffixes=("_off", "_abs"))
    assert len(joined) == len(vgg_off) == len(vgg_abs) == 20
    assert (joined["time_s_off"] / joined["time_s_abs"]).between(0.98, 1.02).all()
    assert (joined["power_w_off"] / joined["power_w_abs"]).between(0.97, 1.03).all()
    fc = frame[frame["workload"] == "fc/titanX-caffe-fc"]
    assert sorted(fc["sm_clock_mhz"].unique()) == [1600.0, 1700.0, 1800.0, 1900.0]
    assert sorted(fc["mem_clock_mhz"].unique()) == [3500.0, 4000.0, 4500.0, 5000.0]
    # no offset survives anywhere: every clock is an absolute MHz value
    assert (frame["sm_clock_mhz"] >= 600).all() and (frame["mem_clock_mhz"] >= 600).all()
    assert sum("offsets converted" in note for note in parsed.report.notes) == 2


def test_workloads_and_reference_rows(parsed: ParsedSource) -> None:
    frame = parsed.frame
    assert (frame.groupby(["sku", "workload"])["ref"].sum() == 1).all()
    refs = frame[frame["ref"]].set_index("workload")[["sm_clock_mhz", "mem_clock_mhz"]]
    assert refs.to_dict("index") == {
        "googlenet/gtx1080Ti-googlenet": {"sm_clock_mhz": 1898.0, "mem_clock_mhz": 5000.0},
        "conv-fft/input00": {"sm_clock_mhz": 1300.0, "mem_clock_mhz": 3800.0},
        "conv-sgemm/input00": {"sm_clock_mhz": 1300.0, "mem_clock_mhz": 3800.0},
        "conv-winograd/input00": {"sm_clock_mhz": 1300.0, "mem_clock_mhz": 3800.0},
        "resnet/gtx980-resnet": {"sm_clock_mhz": 1000.0, "mem_clock_mhz": 1000.0},
        "fc/titanX-caffe-fc": {"sm_clock_mhz": 1900.0, "mem_clock_mhz": 5000.0},
        "googlenet/titanX-caffe-googlenet": {"sm_clock_mhz": 1898.0, "mem_clock_mhz": 5000.0},
        "googlenet/titanX-googlenet-logs-v2": {"sm_clock_mhz": 2000.0, "mem_clock_mhz": 5000.0},
        "resnet/titanX-caffe-resnet": {"sm_clock_mhz": 1898.0, "mem_clock_mhz": 5000.0},
        "vgg/titanX-caffe-vgg": {"sm_clock_mhz": 2000.0, "mem_clock_mhz": 5000.0},
        "vgg/titanX-vgg-logs-v2": {"sm_clock_mhz": 2000.0, "mem_clock_mhz": 5000.0},
    }
    skus = frame.groupby("workload")["sku"].first()
    assert skus[skus.index.str.startswith("conv-")].eq("gtx-980").all()
    assert skus[skus.index.str.contains("titanX")].eq("gtx-titan-x").all()


def test_rejections_are_recorded() -> None:
    result = dlbench.parse_files([(FIXTURES / "dlbench_no_ref.csv", CAFFE)], FIXTURES.parent)
    report = result.report
    assert report.rows_read == data_lines(FIXTURES / "dlbench_no_ref.csv") == 3
    assert report.rows_kept == len(result.frame) == 0
    assert [(r.path, r.line) for r in report.rejections] == [("fixtures/dlbench_no_ref.csv", n) for n in (2, 3, 4)]
    assert all(r.reason.startswith("no reference config") for r in report.rejections)


def test_offset_fixture_is_converted() -> None:
    frame = dlbench.parse_files([(FIXTURES / "dlbench_offsets.csv", OFFSETS)], FIXTURES.parent).frame
    assert sorted(zip(frame["sm_clock_mhz"], frame["mem_clock_mhz"], strict=True)) == [
        (1600.0, 3500.0),
        (1800.0, 4500.0),
        (2000.0, 5000.0),
    ]
    assert frame.loc[frame["ref"], "sm_clock_mhz"].tolist() == [2000.0]


@pytest.mark.parametrize(
    ("name", "spec", "line", "problem"),
    [
        ("dlbench_bad_fields.csv", CAFFE, 3, "expected 6 fields, found 7"),
        ("dlbench_bad_time.csv", CAFFE, 3, "non-numeric time/s='fast'"),
        ("dlbench_neg_power.csv", CAFFE, 4, "implausible power -5.0 W"),
        ("dlbench_dup_key.csv", CAFFE, 4, "duplicate key"),
        ("dlbench_missing_col.csv", CAFFE, 1, "missing required column(s) ['power/W']"),
        ("dlbench_unknown_col.csv", CAFFE, 1, "unknown column(s) ['GPUtemp']"),
        ("dlbench_bad_energy.csv", CAFFE, 3, "Energy/J=70 != time x power = 66"),
        ("dlbench_two_configs.csv", CAFFE, 3, "second configuration 'train y'"),
        ("dlbench_offsets_absolute.csv", OFFSETS, 4, "look absolute, but this file stores offsets"),
    ],
)
def test_malformed_input_names_file_and_line(name: str, spec: dlbench.FileSpec, line: int, problem: str) -> None:
    with pytest.raises(IngestError) as caught:
        dlbench.parse_files([(FIXTURES / name, spec)], FIXTURES.parent)
    error = caught.value
    assert f"fixtures/{name}:{line}:" in str(error)
    assert error.line == line
    assert problem in error.problem


def test_duplicate_key_names_first_line() -> None:
    with pytest.raises(IngestError, match=r"first at fixtures/dlbench_dup_key\.csv:2"):
        dlbench.parse_files([(FIXTURES / "dlbench_dup_key.csv", CAFFE)], FIXTURES.parent)


def test_unlisted_csv_is_an_error(tmp_path: Path) -> None:
    raw = tmp_path / "dlbench-dvfs"
    for name in dlbench.FILES:
        (raw / name).parent.mkdir(parents=True, exist_ok=True)
        (raw / name).write_bytes((RAW / name).read_bytes())
    (raw / "caffe/excels/titanX-vgg-logs-v2-segment.csv").write_text("a,b\n1,2\n")
    with pytest.raises(IngestError, match=r"titanX-vgg-logs-v2-segment\.csv.*not listed"):
        dlbench.parse(raw)


def test_missing_file_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "dlbench-dvfs").mkdir()
    with pytest.raises(IngestError, match="expected raw file is missing"):
        dlbench.parse(tmp_path / "dlbench-dvfs")


def test_deterministic(parsed: ParsedSource) -> None:
    pd.testing.assert_frame_equal(parsed.frame, dlbench.parse(RAW).frame)
