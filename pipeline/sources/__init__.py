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
# Sweep folders recognised by their content rather than their name: (is_it, parser). `gpoeo-collect` writes
# data/raw/<sku>/ under any name, so listing such a folder in ingest.sweep_sources is enough.
SWEEP_FORMATS: list[tuple[Callable[[Path], bool], Parser]] = []


def sweep_parser(raw_root: Path, name: str) -> Parser | None:
    """The parser of sweep source `name`: registered by name, else recognised from `raw_root/name`'s files."""
    if name in SWEEP_SOURCES:
        return SWEEP_SOURCES[name]
    for recognises, parser in SWEEP_FORMATS:
        if recognises(raw_root / name):
            return parser
    return None


def load_all() -> None:
    """Import every source module so that each registers its parser (kept lazy: importing is cheap then)."""
    from gpoeo_pipeline.sources import (  # noqa: F401
        dlbench,
        gpoeo_collect,
        gpu_ddvfs,
        nvdvfs,
        nvdvfs_history,
        powercap,
        zeus,
    )
