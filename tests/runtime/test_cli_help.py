"""`-h` works like `--help` on every command (what a new user types first)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from gpoeo_rt.cli import app


@pytest.mark.parametrize(
    "args",
    [[], ["bench"], ["bench-suite"], ["start"], ["status"], ["reset"], ["trace"], ["trace", "detect"], ["bundles"]],
)
def test_dash_h_is_help(args: list[str]) -> None:
    result = CliRunner().invoke(app, [*args, "-h"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output and "--help" in result.output


@pytest.mark.parametrize("args", [["bench"], ["bench-suite"], ["start"], ["trace", "record"], ["bundles", "list"]])
def test_help_at_80_columns_cuts_nothing(args: list[str]) -> None:
    result = CliRunner().invoke(app, [*args, "--help"], terminal_width=80, env={"COLUMNS": "80"})
    assert result.exit_code == 0
    assert "…" not in result.output and max(map(len, result.output.splitlines())) <= 80
    if args == ["bench"]:
        assert "--bandit-round-iterations" in result.output and "--bandit-switching-penalty" in result.output
