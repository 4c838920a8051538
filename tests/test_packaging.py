"""Packaging invariants: the explicit package list is complete, and the runtime stays slim."""

import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _packages_on_disk(root: Path, name: str) -> set[str]:
    return {".".join([name, *init.parent.relative_to(root).parts]) for init in root.rglob("__init__.py")}


def test_every_package_folder_is_listed_in_pyproject() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    on_disk = _packages_on_disk(REPO / "runtime/gpoeo_rt", "gpoeo_rt") | _packages_on_disk(
        REPO / "pipeline", "gpoeo_pipeline"
    )
    assert listed == on_disk


def test_every_shipped_bundle_is_installed_with_the_wheel() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    shipped = {Path(key).name for key in config["data-files"]}
    bundles = {p.parent.name for p in (REPO / "models").glob("*/manifest.json")}
    assert shipped == bundles


def test_the_runtime_never_imports_the_pipeline_stack() -> None:
    code = (
        "import sys, gpoeo_rt.cli, gpoeo_rt.controller, gpoeo_rt.device, gpoeo_rt.detection;"
        "import gpoeo_rt.prediction.predictor, gpoeo_rt.search.measured, gpoeo_rt.bench.command;"
        "bad = sorted(m for m in ('pandas', 'xgboost', 'dvc', 'sklearn', 'matplotlib', 'pyarrow') if m in sys.modules);"
        "print(','.join(bad))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert result.stdout.strip() == ""
