"""The `zeus` power-limit parser: real-data counts, units, reference rows; malformed input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gpoeo_pipeline.schema import POWERLIMIT_COLUMNS, IngestError, conform, validate_sweeps
from gpoeo_pipeline.sources import POWERLIMIT_SOURCES, ParsedSource, zeus

REPO = Path(__file__).resolve().parents[2]
RAW = REPO / "data/raw/zeus"
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def data_lines(path: Path) -> int:
    """Data rows of a CSV counted independently of the parser: non-blank lines after the header."""
    return sum(1 for line in path.read_text().splitlines()[1:] if line.strip())


@pytest.fixture(scope="module")
def parsed() -> ParsedSource:
    return zeus.parse(RAW)


def test_registered() -> None:
    assert POWERLIMIT_SOURCES["zeus"] is zeus.parse


@pytest.mark.parametrize("name", sorted(zeus.FILES))
def test_each_file_row_count(name: str) -> None:
    frame, read = zeus.read_file(RAW / name, name, zeus.FILES[name])
    assert read == len(frame) == data_lines(RAW / name)


def test_counts_and_report(parsed: ParsedSource) -> None:
    report = parsed.report
    assert report.rows_read == sum(data_lines(RAW / name) for name in zeus.FILES) == 1609
    assert report.rows_read == report.rows_kept + len(report.rejections)
    assert report.rows_kept == len(parsed.frame) and report.rejections == []
    per_sku = parsed.frame.groupby("sku").size().to_dict()
    assert per_sku == {sku: data_lines(RAW / name) for name, sku in zeus.FILES.items()}
    assert per_sku == {"a40": 453, "tesla-p100": 270, "quadro-rtx-6000": 410, "tesla-v100": 476}


def test_schema_and_validation(parsed: ParsedSource) -> None:
    frame = conform(parsed.frame, POWERLIMIT_COLUMNS, "zeus")
    assert list(frame.columns) == list(POWERLIMIT_COLUMNS)
    for column, dtype in POWERLIMIT_COLUMNS.items():
        assert str(frame[column].dtype) == dtype
    validate_sweeps(frame, key_columns=zeus.KEY)
    assert set(frame["source"]) == {"zeus"}


def test_units_and_workload_ids(parsed: ParsedSource) -> None:
    frame = parsed.frame.set_index(["sku", "workload", "power_limit_w"])
    row = frame.loc[("a40", "shufflenetv2/cifar100-b1024-adadelta", 100.0)]
    assert row["time_s"] == pytest.approx(27.130000000000003)  # seconds per epoch, as stored
    assert row["power_w"] == pytest.approx(106.88881213499654)
    assert row["energy_j"] == pytest.approx(27.130000000000003 * 106.88881213499654)
    np.testing.assert_allclose(parsed.frame["energy_j"], parsed.frame["time_s"] * parsed.frame["power_w"])
    assert parsed.frame["power_w"].between(30, 300).all()
    assert parsed.frame["workload"].str.fullmatch(r"[a-z0-9_]+/[a-z0-9-]+-b\d+-[a-z]+").all()
    networks = set(parsed.frame["workload"].str.split("/").str[0])
    assert networks == {"shufflenetv2", "resnet50", "deepspeech2", "ncf", "bert_base_uncased"}


def test_reference_rows(parsed: ParsedSource) -> None:
    frame = parsed.frame
    assert (frame.groupby(["sku", "workload"])["ref"].sum() == 1).all()
    refs = frame.loc[frame["ref"]].groupby("sku")["power_limit_w"].agg(["min", "max"])
    assert refs.to_dict("index") == {
        "a40": {"min": 300.0, "max": 300.0},
        "quadro-rtx-6000": {"min": 260.0, "max": 260.0},
        "tesla-p100": {"min": 250.0, "max": 250.0},
        "tesla-v100": {"min": 250.0, "max": 250.0},
    }
    assert not any("lack their GPU's max power limit" in note for note in parsed.report.notes)
    assert any("22 row(s) average more than 5% above their power limit" in n for n in parsed.report.notes)


def test_workload_without_the_max_limit_is_noted() -> None:
    result = zeus.parse_files([(FIXTURES / "zeus_partial_max.csv", "a40")], FIXTURES.parent)
    refs = result.frame.loc[result.frame["ref"]].set_index("workload")["power_limit_w"].to_dict()
    assert refs == {"shufflenetv2/cifar100-b128-adadelta": 200.0, "ncf/movielens-1m-b1024-adam": 150.0}
    assert any("1 workload(s) lack their GPU's max power limit" in note for note in result.report.notes)
    validate_sweeps(result.frame, key_columns=zeus.KEY)


@pytest.mark.parametrize(
    ("name", "line", "problem"),
    [
        ("zeus_bad_fields.csv", 3, "expected 7 fields, found 8"),
        ("zeus_bad_number.csv", 2, "non-numeric time_per_epoch='slow'"),
        ("zeus_neg_power.csv", 4, "implausible average_power -150.0 W"),
        ("zeus_dup_key.csv", 4, "duplicate key"),
        ("zeus_missing_col.csv", 1, "missing required column(s) ['average_power']"),
        ("zeus_mw_power.csv", 2, "implausible average_power 95000.0 W"),
        ("zeus_bad_batch.csv", 3, "batch_size=12.5 is not a positive integer"),
    ],
)
def test_malformed_input_names_file_and_line(name: str, line: int, problem: str) -> None:
    with pytest.raises(IngestError) as caught:
        zeus.parse_files([(FIXTURES / name, "a40")], FIXTURES.parent)
    error = caught.value
    assert f"fixtures/{name}:{line}:" in str(error)
    assert error.line == line
    assert problem in error.problem


def test_unlisted_csv_is_an_error(tmp_path: Path) -> None:
    raw = tmp_path / "zeus"
    for name in zeus.FILES:
        (raw / name).parent.mkdir(parents=True, exist_ok=True)
        (raw / name).write_bytes((RAW / name).read_bytes())
    (raw / "trace/summary_train.csv").write_text("a,b\n1,2\n")
    with pytest.raises(IngestError, match=r"summary_train\.csv.*not listed"):
        zeus.parse(raw)


def test_missing_file_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "zeus").mkdir()
    with pytest.raises(IngestError, match="expected raw file is missing"):
        zeus.parse(tmp_path / "zeus")


def test_deterministic(parsed: ParsedSource) -> None:
    pd.testing.assert_frame_equal(parsed.frame, zeus.parse(RAW).frame)
