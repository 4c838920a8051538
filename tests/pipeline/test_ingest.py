"""The `ingest` stage over the real raw data: one validated table, and a report that accounts for every row."""

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from gpoeo_pipeline import ingest
from gpoeo_pipeline.schema import SWEEP_COLUMNS, IngestError, conform, validate_sweeps
from gpoeo_rt.features import FEATURE_NAMES

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ingested(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Run the stage once, as `dvc repro ingest` would, into a temporary directory."""
    out = tmp_path_factory.mktemp("ingest")
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["ingest"]["raw_dir"] = str(REPO / "data/raw")
    params["ingest"]["out_dir"] = str(out / "processed")
    (out / "params.yaml").write_text(yaml.safe_dump(params))
    mp = pytest.MonkeyPatch()
    mp.chdir(out)
    mp.setattr(sys, "argv", ["ingest"])
    try:
        ingest.main()
    finally:
        mp.undo()
    return out / "processed"


def test_every_configured_source_is_ingested_and_accounted_for(ingested: Path) -> None:
    report = json.loads((ingested / "ingest_report.json").read_text())
    params = yaml.safe_load((REPO / "params.yaml").read_text())["ingest"]
    sweeps = pd.read_parquet(ingested / "sweeps.parquet")
    sources = {entry["source"]: entry for entry in report["sweeps"]["sources"]}
    assert set(sources) == set(params["sweep_sources"])
    for name, entry in sources.items():
        kept = int((sweeps["source"] == name).sum())
        assert entry["rows_kept"] == kept, name
        assert kept > 0, name
        # Every rejected row carries its file, line and reason.
        assert entry["rows_rejected"] == len(entry["rejected_rows"]) == sum(entry["rejected_by_reason"].values())
        for rejected in entry["rejected_rows"]:
            assert rejected["file"] and rejected["line"] >= 1 and rejected["reason"]
    assert report["sweeps"]["rows"] == len(sweeps)
    pl_sources = {entry["source"] for entry in report["powerlimit"]["sources"]}
    assert pl_sources == set(params["powerlimit_sources"])


def test_the_table_is_in_schema_with_one_reference_per_workload(ingested: Path) -> None:
    sweeps = pd.read_parquet(ingested / "sweeps.parquet")
    assert list(sweeps.columns[: len(SWEEP_COLUMNS)]) == list(SWEEP_COLUMNS)
    assert all(c.startswith("x_") for c in sweeps.columns[len(SWEEP_COLUMNS) :])
    validate_sweeps(sweeps)  # keys unique, positive values, one ref per (sku, workload), features in [0, 1]
    assert np.allclose(sweeps["energy_j"], sweeps["time_s"] * sweeps["power_w"], rtol=1e-9)
    assert sweeps["power_w"].between(5, 1000).all()
    assert sweeps["time_s"].between(1e-7, 1e4).all()
    for sku in ("tesla-v100", "quadro-rtx-8000"):
        rows = sweeps.loc[sweeps["sku"] == sku]
        assert len(rows) == 1580
        assert rows[list(FEATURE_NAMES)].notna().all(axis=None) or rows[list(FEATURE_NAMES)].notna().mean().min() > 0.99


def test_csv_export_matches_parquet(ingested: Path) -> None:
    parquet = pd.read_parquet(ingested / "sweeps.parquet")
    csv = pd.read_csv(ingested / "sweeps.csv")
    assert len(csv) == len(parquet)
    assert list(csv.columns) == list(parquet.columns)
    assert np.allclose(csv["time_s"], parquet["time_s"], rtol=1e-12)


def test_unknown_source_name_is_an_error_listing_the_known_ones() -> None:
    with pytest.raises(KeyError, match=r"unknown sources.*nope"):
        ingest.parse_sources(REPO / "data/raw", ["nope"], {"nv-dvfs": print})


def test_combining_tables_with_a_duplicate_key_names_the_key() -> None:
    frame = pd.DataFrame(
        {
            "sku": ["a", "a"],
            "source": ["s", "s"],
            "workload": ["w", "w"],
            "sm_clock_mhz": [1.0, 1.0],
            "mem_clock_mhz": [1.0, 1.0],
            "time_s": [1.0, 2.0],
            "power_w": [1.0, 1.0],
            "energy_j": [1.0, 2.0],
            "ref": [True, False],
            **{name: [np.nan, np.nan] for name in FEATURE_NAMES},
        }
    )
    with pytest.raises(IngestError, match="duplicate key"):
        validate_sweeps(conform(frame, SWEEP_COLUMNS, "test"))
