"""Text tables of the read commands (`status`, `bench`, `bench-suite`, `bench.simulate`), and the one vocabulary
their columns share (the same figure has the same name everywhere; --json has the keys).

On a terminal a table fits its width: columns are dropped, least important first, and a last line names them.
Anywhere else (a pipe, a file, the journal) every column is printed, nothing is cut, and no line is added.
"""

from __future__ import annotations

import shutil
import sys
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# key (in the JSON and the summaries) -> column label. One name per figure.
LABELS: dict[str, str] = {
    "sku": "sku",
    "set": "set@bound",
    "policy": "policy",
    "workloads": "jobs",
    "jobs": "jobs",
    "saving_pct": "saving%",  # energy saving vs the default clocks, net of exploration
    "saving_so_far_pct": "saving%",
    "oracle_saving_pct": "oracle%",  # the oracle's saving
    "pct_of_oracle": "of_orc%",  # saving as a share of the oracle's
    "saving_vs_oracle_pct": "of_orc%",
    "regret_pct": "regret",  # points of saving below the oracle's
    "mean_slowdown_pct": "slow%",  # mean slowdown vs the default clocks
    "slowdown_pct": "slow%",
    "slowdown_so_far_pct": "slow%",
    "max_slowdown_pct": "worst%",  # the worst job's slowdown
    "worst_pct": "worst%",
    "violations": "over",  # jobs over the bound
    "violations_pct": "over%",
    "over_bound_pct": "over%",
    "exploration_pct": "expl%",  # energy of exploring, % of the default run's
    "mean_converge_s": "conv_s",  # time to the final config
    "converge_s": "conv_s",
    "p95_converge_s": "p95_s",
    "mean_probes": "probes",
    "mape_time_pct": "time_mape%",  # cross-validated error of the predicted time ratio
    "mape_energy_pct": "energy_mape%",
}


@dataclass(frozen=True)
class Column:
    """One column: `key` of the row, how a value prints, and `drop`: 0 is always shown, higher goes first. Columns
    are one space apart: every label is at least as wide as its numbers."""

    key: str
    fmt: str | Callable[[Any], str] = ""
    drop: int = 0
    label: str | None = None
    left: bool = False

    @property
    def title(self) -> str:
        return self.label or LABELS.get(self.key, self.key)

    def cell(self, row: Mapping[str, Any]) -> str:
        value = row.get(self.key)
        if callable(self.fmt):
            return self.fmt(value)
        if value is None:
            return "-"
        return f"{value:{self.fmt}}"


def terminal() -> tuple[bool, int]:
    """Whether stdout is a terminal, and its width."""
    return sys.stdout.isatty(), shutil.get_terminal_size((80, 24)).columns


def fit(line: str, *, indent: str = "", tty: bool | None = None, width: int | None = None) -> str:
    """A line of prose wrapped to the terminal's width (continuation lines indented); unchanged off a terminal."""
    is_tty, term_width = terminal()
    if not (is_tty if tty is None else tty):
        return line
    return "\n".join(textwrap.wrap(line, width or term_width, subsequent_indent=indent or "  "))


def render(
    columns: Sequence[Column],
    rows: Sequence[Mapping[str, Any]],
    *,
    tty: bool | None = None,
    width: int | None = None,
) -> str:
    """The table as text (see the module docstring); `tty` and `width` default to stdout's."""
    if tty is None or width is None:
        is_tty, term_width = terminal()
        tty = is_tty if tty is None else tty
        width = term_width if width is None else width
    cells = [[c.cell(r) for c in columns] for r in rows]
    widths = [max([len(c.title), *(len(row[i]) for row in cells)]) for i, c in enumerate(columns)]
    shown = list(range(len(columns)))
    if tty:
        for i in sorted((i for i, c in enumerate(columns) if c.drop > 0), key=lambda i: (-columns[i].drop, -i)):
            if sum(widths[j] for j in shown) + len(shown) - 1 <= width:
                break
            shown.remove(i)

    def line(values: Sequence[str]) -> str:
        parts = [values[i].ljust(widths[i]) if columns[i].left else values[i].rjust(widths[i]) for i in shown]
        return " ".join(parts).rstrip()

    lines = [line([c.title for c in columns]), *(line(row) for row in cells)]
    hidden = [columns[i].title for i in range(len(columns)) if i not in shown]
    if hidden:
        note = f"(not shown at {width} columns: {', '.join(hidden)}; a wider terminal or --json shows them)"
        lines.extend(textwrap.wrap(note, max(width, 40)))
    return "\n".join(lines)
