"""Figures as written to tracked files: rounded, so that a rerun gives the same bytes."""

from __future__ import annotations

from typing import Any


def rounded(value: Any, digits: int = 4) -> Any:
    """Floats rounded (to 4 decimals by default: far below what the figures mean), so that a rerun of a tracked
    file is identical to the byte."""
    if isinstance(value, float):
        return round(value, digits)
    if isinstance(value, dict):
        return {k: rounded(v, digits) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [rounded(v, digits) for v in value]
    return value
