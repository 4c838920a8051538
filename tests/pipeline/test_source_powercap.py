"""The `powercap-ada` power-limit parser: real-data counts, units, file 7, energy check; malformed input."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gpoeo_pipeline.schema import POWERLIMIT_COLUMNS, IngestError, conform, validate_sweeps
from gpoeo_pipeline.sources import POWERLIMIT_SOURCES, ParsedSource, powercap

REPO = Path(__file__).resolve().parents[2]
RAW = REPO / "data/raw/powercap-ada"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
SIX = powercap.FileSpec("workload-x", 6)
FILE_7 = "Dataset/results_powertest_single_7.csv"


def data_lines(path: Path) -> int:
    """Data rows of a headerless CSV counted independently of the parser: non-blank lines."""
    return sum(1 for line in path.read_text().splitlines() if line.strip())


@pytest.fixture(scope="module")
def parsed() -> ParsedSource:
    return powercap.parse(RAW)


def test_registered() -> None:
    assert POWERLIMIT_SOURCES["powercap-ada"] is powercap.parse


@pytest.mark.parametrize("name", sorted(powercap.FILES))
def test_each_file_row_count(name: str) -> None:
    frame, read = powercap.read_file(RAW / name, name, powercap.FILES[name])
    assert read == len(frame) == data_lines(RAW / name) == (19 if name == FILE_7 else 21)


def test_counts_and_report(parsed: ParsedSource) -> None:
    report = parsed.report
    assert report.rows_read == sum(data_lines(RAW / name) for name in powercap.FILES) == 166
    assert report.rows_read == report.rows_kept + len(report.rejections)
    assert report.rows_kept == len(parsed.frame) == 7 * 21
    # file 7 is parsed with its own layout, then rejected as a whole: it has no 130 W reference row
    assert [(r.path, r.line) for r in report.rejections] == [(f"powercap-ada/{FILE_7}", line) for line in range(1, 20)]
    assert {r.reason for r in report.rejections} == {
        "no reference row (no usable 130 W default-cap row for the workload)"
    }
    assert any("5-column layout" in note for note in report.notes)
    assert any("two partial runs concatenated" in note for note in report.notes)


def test_schema_and_validation(parsed: ParsedSource) -> None:
    frame = conform(parsed.frame, POWERLIMIT_COLUMNS, "powercap-ada")
    assert list(frame.columns) == [*POWERLIMIT_COLUMNS, "x_avg_temp_c"]
    for column, dtype in POWERLIMIT_COLUMNS.items():
        assert str(frame[column].dtype) == dtype
    validate_sweeps(frame, key_columns=powercap.KEY)
    assert set(frame["source"]) == {"powercap-ada"} and set(frame["sku"]) == {"rtx-4000-ada"}


def test_units_and_caps(parsed: ParsedSource) -> None:
    frame = parsed.frame
    expected_caps = [30.0 + 5 * i for i in range(21)]
    for workload, rows in frame.groupby("workload"):
        assert rows["power_limit_w"].tolist() == expected_caps, workload
    with (RAW / "Dataset/results_powertest_single_0.csv").open(newline="") as handle:
        raw = [[float(v) for v in rec] for rec in csv.reader(handle) if rec]
    mine = frame[frame["workload"] == "workload-0"]
    np.testing.assert_allclose(mine["power_limit_w"], [r[0] / 1000 for r in raw])  # mW -> W
    np.testing.assert_allclose(mine["time_s"], [r[2] for r in raw])
    np.testing.assert_allclose(mine["energy_j"], [r[3] * 1000 for r in raw])  # kJ -> J, measured
    np.testing.assert_allclose(mine["power_w"], [r[4] for r in raw])
    np.testing.assert_allclose(mine["x_avg_temp_c"], [r[5] for r in raw])
    # measured energy agrees with power x time (upstream within 2%)
    gap = frame["energy_j"] / (frame["time_s"] * frame["power_w"]) - 1
    assert gap.abs().max() < 0.02


def test_reference_rows(parsed: ParsedSource) -> None:
    frame = parsed.frame
    assert (frame.groupby(["sku", "workload"])["ref"].sum() == 1).all()
    assert set(frame.loc[frame["ref"], "power_limit_w"]) == {130.0}
    assert sorted(frame["workload"].unique()) == [f"workload-{k}" for k in range(7)]


def test_inconsistent_energy_is_rejected() -> None:
    result = powercap.parse_files([(FIXTURES / "powercap_energy_off.csv", SIX)], FIXTURES.parent)
    report = result.report
    assert report.rows_read == data_lines(FIXTURES / "powercap_energy_off.csv") == 3
    assert report.rows_kept == len(result.frame) == 2
    assert [(r.path, r.line) for r in report.rejections] == [("fixtures/powercap_energy_off.csv", 2)]
    assert report.rejections[0].reason.startswith("energy inconsistent: measured energy is +21.5% off")
    validate_sweeps(result.frame, key_columns=powercap.KEY)


def test_workload_without_reference_is_rejected() -> None:
    result = powercap.parse_files([(FIXTURES / "powercap_no_ref.csv", SIX)], FIXTURES.parent)
    assert result.report.rows_read == 2 and result.report.rows_kept == 0
    assert [r.line for r in result.report.rejections] == [1, 2]


@pytest.mark.parametrize(
    ("name", "line", "problem"),
    [
        ("powercap_bad_fields.csv", 2, "expected 6 fields, found 7"),
        ("powercap_missing_col.csv", 1, "expected 6 fields, found 5"),
        ("powercap_bad_number.csv", 2, "non-numeric wall_s='fifty'"),
        ("powercap_neg_power.csv", 3, "implausible power -110.0 W"),
        ("powercap_dup_key.csv", 3, "duplicate key"),
        ("powercap_cap_mismatch.csv", 2, "the two cap columns differ: 130000 vs 120000"),
        ("powercap_watts_cap.csv", 1, "implausible cap 30 mW"),
    ],
)
def test_malformed_input_names_file_and_line(name: str, line: int, problem: str) -> None:
    with pytest.raises(IngestError) as caught:
        powercap.parse_files([(FIXTURES / name, SIX)], FIXTURES.parent)
    error = caught.value
    assert f"fixtures/{name}:{line}:" in str(error)
    assert error.line == line
    assert problem in error.problem


def test_unlisted_csv_is_an_error(tmp_path: Path) -> None:
    raw = tmp_path / "powercap-ada"
    for name in powercap.FILES:
        (raw / name).parent.mkdir(parents=True, exist_ok=True)
        (raw / name).write_bytes((RAW / name).read_bytes())
    (raw / "Dataset/feature_data_single_0.csv").write_text("a,b\n1,2\n")
    with pytest.raises(IngestError, match=r"feature_data_single_0\.csv.*not listed"):
        powercap.parse(raw)


def test_missing_file_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "powercap-ada").mkdir()
    with pytest.raises(IngestError, match="expected raw file is missing"):
        powercap.parse(tmp_path / "powercap-ada")


def test_deterministic(parsed: ParsedSource) -> None:
    pd.testing.assert_frame_equal(parsed.frame, powercap.parse(RAW).frame)
