"""One parser per raw data source; each turns the files under `data/raw/<source>/` into schema rows.

A parser is a function `parse(raw_dir: Path) -> ParsedSource`. It never drops a row silently: a row it does
not keep is recorded as a `Rejection` with a reason, and a row it cannot understand raises `IngestError`
naming the file and line. The registries below are the only place that lists the sources.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from gpoeo_pipeline.schema import SourceReport


@dataclass
class ParsedSource:
    """A source's rows (in the sweeps or power-limit schema) and its report."""

    frame: pd.DataFrame
    report: SourceReport


Parser = Callable[[Path], ParsedSource]

# name (= folder under data/raw/) -> parser. Filled in by the source modules' imports below.
SWEEP_SOURCES: dict[str, Parser] = {}
POWERLIMIT_SOURCES: dict[str, Parser] = {}


def load_all() -> None:
    """Import every source module so that each registers its parser (kept lazy: importing is cheap then)."""
    from gpoeo_pipeline.sources import (  # noqa: F401
        dlbench,
        gpu_ddvfs,
        nvdvfs,
        nvdvfs_history,
        powercap,
        zeus,
    )
