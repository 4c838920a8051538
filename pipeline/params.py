"""Reading params.yaml: every stage takes its parameters from one section of it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

PARAMS_PATH = Path("params.yaml")


def load_section(section: str, path: Path = PARAMS_PATH) -> dict[str, Any]:
    """Return one top-level section of params.yaml; a missing file or section is an error that names it."""
    if not path.exists():
        raise FileNotFoundError(f"{path}: params file not found (run the stage from the repository root)")
    params = yaml.safe_load(path.read_text()) or {}
    if section not in params:
        raise KeyError(f"{path}: no section '{section}'")
    value = params[section]
    if not isinstance(value, dict):
        raise TypeError(f"{path}: section '{section}' must be a mapping, got {type(value).__name__}")
    return value
