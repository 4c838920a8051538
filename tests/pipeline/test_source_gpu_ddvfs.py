"""The `gpu-ddvfs` source parser: kernel-row aggregation, carried-over copies, features; malformed input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gpoeo_pipeline.schema import SWEEP_COLUMNS, IngestError, conform, validate_sweeps
from gpoeo_pipeline.sources import SWEEP_SOURCES, ParsedSource, gpu_ddvfs
from gpoeo_rt.features import FEATURE_NAMES

REPO = Path(__file__).resolve().parents[2]
RAW = REPO / "data/raw/gpu-ddvfs"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
APP_LEVEL = ["time", "pwr", "sm"]


def data_lines(path: Path) -> int:
    """Data rows of a CSV counted independently of the parser: non-blank lines after the header."""
    return sum(1 for line in path.read_text().splitlines()[1:] if line.strip())


@pytest.fixture(scope="module")
def parsed() -> ParsedSource:
    return gpu_ddvfs.parse(RAW)


@pytest.fixture(scope="module")
def raw() -> pd.DataFrame:
    """The raw kernel rows read with pandas (not the parser), with their 1-based file line."""
    frame = pd.read_csv(RAW / gpu_ddvfs.FILE).copy()  # de-fragment the 185-column frame
    return frame.assign(line=np.arange(len(frame)) + 2)


def test_registered() -> None:
    assert SWEEP_SOURCES["gpu-ddvfs"] is gpu_ddvfs.parse


def test_counts_and_aggregation_invariant(parsed: ParsedSource) -> None:
    report = parsed.report
    assert report.rows_read == data_lines(RAW / gpu_ddvfs.FILE) == 3441
    assert report.rows_kept == len(parsed.frame) == 12 * 31
    aggregated = int(parsed.frame["x_kernel_rows"].sum())
    # the documented invariant for this source: every raw row is either aggregated or rejected
    assert report.rows_read == aggregated + len(report.rejections)
    assert (aggregated, len(report.rejections)) == (713, 2728)
    assert "713 raw kernel rows aggregated into 372 (app, clock) rows" in report.notes[0]
    assert report.files == [f"gpu-ddvfs/{gpu_ddvfs.FILE}"]


def test_schema_and_validation(parsed: ParsedSource) -> None:
    frame = conform(parsed.frame, SWEEP_COLUMNS, "gpu-ddvfs")
    assert list(frame.columns) == [*SWEEP_COLUMNS, "x_dmon_sm_util", "x_kernel_rows"]
    for column, dtype in SWEEP_COLUMNS.items():
        assert str(frame[column].dtype) == dtype
    validate_sweeps(frame)
    assert set(frame["sku"]) == {"tesla-p100"} and set(frame["source"]) == {"gpu-ddvfs"}
    assert frame.groupby("workload").size().eq(31).all()
    assert set(frame["mem_clock_mhz"]) == {715.0}
    assert frame["sm_clock_mhz"].min() == 556.0 and frame["sm_clock_mhz"].max() == 1316.0


def test_time_and_power_are_the_app_level_values(parsed: ParsedSource, raw: pd.DataFrame) -> None:
    groups = raw.groupby(["Application_name", "sm_clock"])
    # constant within (app, clock) in the raw file, which is what makes "take the app value" well defined
    assert (groups[APP_LEVEL].nunique() == 1).all().all()
    expected = groups[APP_LEVEL].first().reset_index()
    expected["workload"] = expected["Application_name"].map(gpu_ddvfs.APPS)
    merged = parsed.frame.merge(
        expected, left_on=["workload", "sm_clock_mhz"], right_on=["workload", "sm_clock"], validate="1:1"
    )
    assert len(merged) == len(parsed.frame)
    np.testing.assert_array_equal(merged["time_s"], merged["time"])  # seconds already
    np.testing.assert_array_equal(merged["power_w"], merged["pwr"])
    np.testing.assert_allclose(merged["x_dmon_sm_util"], merged["sm"] / 100)
    np.testing.assert_allclose(parsed.frame["energy_j"], parsed.frame["time_s"] * parsed.frame["power_w"])


def test_reference_is_default_clock(parsed: ParsedSource) -> None:
    frame = parsed.frame
    assert (frame.groupby(["sku", "workload"])["ref"].sum() == 1).all()
    assert set(frame.loc[frame["ref"], "sm_clock_mhz"]) == {1189.0}
    assert "reference = default application clock 1189 MHz" in parsed.report.notes


def test_carried_over_copies(parsed: ParsedSource, raw: pd.DataFrame) -> None:
    # own kernels per app, as the programs have them
    own = parsed.frame.groupby("workload")["x_kernel_rows"].agg(["min", "max"])
    assert own["min"].eq(own["max"]).all()
    assert own["min"].astype(int).to_dict() == {
        "2MM": 2,
        "ATAX": 2,
        "CORR": 4,
        "COVAR": 3,
        "GEMM": 1,
        "SYR": 1,
        "SYR2": 1,
        "backprop": 2,
        "lavaMD": 1,
        "myocyte": 1,
        "particlefilter/float": 4,
        "particlefilter/naive": 1,
    }
    # every rejected row repeats all kernel metrics of a kept row of another app at the same clock
    metrics = [c for c in raw.columns if c not in ("Unnamed: 0.1", "Unnamed: 0", "Application_name", "line")]
    metrics = [c for c in metrics if c not in gpu_ddvfs.APP_LEVEL_COLUMNS]
    rejected_lines = {r.line for r in parsed.report.rejections}
    kept = raw[~raw["line"].isin(rejected_lines)]
    copies = raw[raw["line"].isin(rejected_lines)]
    matched = copies.merge(kept, on=metrics, suffixes=("", "_orig"))
    assert len(matched) == len(copies)
    assert (matched["Application_name"] != matched["Application_name_orig"]).all()
    for rejection in parsed.report.rejections:
        assert rejection.path == f"gpu-ddvfs/{gpu_ddvfs.FILE}"
        assert rejection.reason.startswith("carried-over copy of ")


def test_features(parsed: ParsedSource, raw: pd.DataFrame) -> None:
    frame = parsed.frame
    values = frame[list(FEATURE_NAMES)]
    assert ((values >= 0) & (values <= 1) | values.isna()).all().all()
    assert frame["feat_tensor_active"].isna().all()
    assert (frame["feat_fp16_active"] == 0).all()  # measured, and zero on every kernel
    assert values.drop(columns="feat_tensor_active").notna().all().all()
    # single-kernel apps that nothing is carried into: the features are that kernel's metrics
    for app in ("lavaMD", "myocyte"):
        rows = raw[raw["Application_name"] == app].set_index("sm_clock")
        mine = frame[frame["workload"] == app].set_index("sm_clock_mhz")
        sm = rows["sm_efficiency"] / 100
        np.testing.assert_allclose(mine["feat_sm_active"], sm.loc[mine.index])
        np.testing.assert_allclose(mine["feat_sm_occupancy"], (rows["achieved_occupancy"] * sm).loc[mine.index])
        np.testing.assert_allclose(mine["feat_dram_active"], (rows["dram_utilization"] / 10).loc[mine.index])
        fp32 = rows["single_precision_fu_utilization"] / 10 * sm
        np.testing.assert_allclose(mine["feat_fp32_active"], fp32.loc[mine.index])


def test_kernel_time_weights_are_plausible(raw: pd.DataFrame) -> None:
    # The weights estimate kernel elapsed time; with the P100's 56 SMs the sum must fit in the app's time.
    own_only = raw[raw["Application_name"].isin(["2MM", "backprop", "lavaMD", "myocyte"])]
    seconds = own_only["inst_executed"] / (
        56 * own_only["ipc"] * own_only["sm_efficiency"] / 100 * own_only["sm_clock"] * 1e6
    )
    per_app = seconds.groupby([own_only["Application_name"], own_only["sm_clock"]]).sum()
    app_time = own_only.groupby(["Application_name", "sm_clock"])["time"].first()
    assert ((per_app / app_time) < 1).all()


def test_fixture_aggregation() -> None:
    result = gpu_ddvfs.parse_file(FIXTURES / "gpu_ddvfs_good.csv", FIXTURES.parent)
    report, frame = result.report, result.frame.set_index(["workload", "sm_clock_mhz"])
    assert report.rows_read == data_lines(FIXTURES / "gpu_ddvfs_good.csv") == 8
    assert report.rows_kept == len(frame) == 4
    assert [(r.line, r.reason) for r in report.rejections] == [
        (4, "carried-over copy of 2MM's kernel row (identical nvprof metrics at the same clock)"),
        (7, "carried-over copy of 2MM's kernel row (identical nvprof metrics at the same clock)"),
    ]
    assert report.rows_read == frame["x_kernel_rows"].sum() + len(report.rejections)
    one = frame.loc[("2MM", 1189.0)]
    assert (one["time_s"], one["power_w"], one["x_dmon_sm_util"]) == (1.5, 40.0, 0.1)
    assert one[["feat_sm_active", "feat_sm_occupancy", "feat_dram_active", "feat_fp32_active"]].tolist() == (
        pytest.approx([0.5, 0.4, 0.2, 0.2])
    )
    # ATAX: kernel 0 (weight 3000 / (1.0 x 1.0)) and kernel 1 (weight 1000 / (0.5 x 0.5) = 4000)
    for clock, (time_s, power_w) in {1189.0: (2.0, 30.0), 1316.0: (1.9, 31.0)}.items():
        atax = frame.loc[("ATAX", clock)]
        assert (atax["time_s"], atax["power_w"], atax["x_kernel_rows"]) == (time_s, power_w, 2.0)
        assert atax["feat_sm_active"] == pytest.approx((3000 * 1.0 + 4000 * 0.5) / 7000)
        assert atax["feat_sm_occupancy"] == pytest.approx((3000 * 0.5 + 4000 * 0.2) / 7000)
        assert atax["feat_dram_active"] == pytest.approx(3000 * 0.6 / 7000)
        assert atax["feat_fp32_active"] == pytest.approx((3000 * 0.8 + 4000 * 0.1) / 7000)
        assert atax["feat_fp64_active"] == pytest.approx(3000 * 0.2 / 7000)
    assert frame.loc[frame["ref"]].index.get_level_values("sm_clock_mhz").tolist() == [1189.0, 1189.0]
    validate_sweeps(result.frame)


@pytest.mark.parametrize(
    ("name", "line", "problem"),
    [
        ("gpu_ddvfs_bad_fields.csv", 3, "expected 17 fields, found 16"),
        ("gpu_ddvfs_bad_number.csv", 2, "non-numeric ipc='n/a'"),
        ("gpu_ddvfs_neg_power.csv", 3, "implausible power -3.0 W"),
        ("gpu_ddvfs_dup_key.csv", 3, "duplicate kernel row of 2MM (same as line 2)"),
        ("gpu_ddvfs_missing_col.csv", 1, "missing required column(s) ['pwr']"),
        ("gpu_ddvfs_app_mismatch.csv", 3, "differ from line 2 for the same (app, clock)"),
        ("gpu_ddvfs_dram_scale.csv", 3, "dram_utilization=25.0 outside [0, 10]"),
        ("gpu_ddvfs_unknown_app.csv", 3, "unknown application 'STREAM'"),
    ],
)
def test_malformed_input_names_file_and_line(name: str, line: int, problem: str) -> None:
    with pytest.raises(IngestError) as caught:
        gpu_ddvfs.parse_file(FIXTURES / name, FIXTURES.parent)
    error = caught.value
    assert f"fixtures/{name}:{line}:" in str(error)
    assert error.line == line
    assert problem in error.problem


def test_unlisted_csv_is_an_error(tmp_path: Path) -> None:
    target = tmp_path / "gpu-ddvfs" / gpu_ddvfs.FILE
    target.parent.mkdir(parents=True)
    target.write_bytes((RAW / gpu_ddvfs.FILE).read_bytes())
    (target.parent / "feature_set_categorical_converted_with_appname.csv").write_text("a,b\n1,2\n")
    with pytest.raises(IngestError, match=r"feature_set_categorical_converted_with_appname\.csv.*not parsed"):
        gpu_ddvfs.parse(tmp_path / "gpu-ddvfs")


def test_missing_file_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "gpu-ddvfs").mkdir()
    with pytest.raises(IngestError, match="expected raw file is missing"):
        gpu_ddvfs.parse(tmp_path / "gpu-ddvfs")


def test_deterministic(parsed: ParsedSource) -> None:
    pd.testing.assert_frame_equal(parsed.frame, gpu_ddvfs.parse(RAW).frame)
