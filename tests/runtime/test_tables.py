"""The read commands' tables: within 80 columns on a terminal (columns dropped, least important first, and named),
every column and nothing cut anywhere else, and one name per figure across bench, bench-suite, simulate, status."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from gpoeo_rt import cli, tables
from gpoeo_rt.bench.command import HEADLINE_COLUMNS, format_headline
from gpoeo_rt.bench.report import BENCH_COLUMNS, format_table
from gpoeo_rt.bench.simulate import SIMULATE_COLUMNS
from gpoeo_rt.bench.simulate import format_table as simulate_table
from gpoeo_rt.tables import LABELS, Column, render

POLICIES = ("default", "oracle", "gpoeo-rt", "gpoeo-rt-markers", "sweep", "gpoeo-paper", "bandit")


def _bench_rows() -> list[dict[str, Any]]:
    rows = []
    for sku in ("quadro-rtx-8000", "tesla-v100", "all"):
        for i, policy in enumerate(POLICIES):
            rows.append(
                {
                    "sku": sku,
                    "policy": policy,
                    "workloads": 158,
                    "saving_pct": 8.5 + i,
                    "oracle_saving_pct": 8.95,
                    "pct_of_oracle": 95.4 if i else None,
                    "regret_pct": 0.41,
                    "mean_slowdown_pct": 1.65,
                    "max_slowdown_pct": 13.49,
                    "violations": 3,
                    "violations_pct": 95.25,
                    "exploration_pct": -0.03,
                    "mean_converge_s": 933.6,
                    "p95_converge_s": 1021.0,
                    "mean_probes": 12.9,
                }
            )
    return rows


def test_bench_table_fits_80_columns_on_a_terminal_and_names_what_it_dropped() -> None:
    text = format_table(_bench_rows(), tty=True, width=80)
    lines = text.splitlines()
    assert max(map(len, lines)) <= 80
    head = lines[0].split()
    for kept in ("sku", "policy", "saving%", "of_orc%", "slow%", "worst%"):
        assert kept in head
    assert "not shown at 80 columns" in text and "probes" in text  # the last line(s) name the dropped ones
    assert "gpoeo-rt-markers" in text  # names are never cut


def test_bench_table_off_a_terminal_has_every_column_and_no_note() -> None:
    text = format_table(_bench_rows(), tty=False, width=80)
    lines = text.splitlines()
    assert lines[0].split() == [c.title for c in BENCH_COLUMNS]
    assert len(lines) == 1 + len(_bench_rows()) and "not shown" not in text
    assert all(len(line.split()) == len(BENCH_COLUMNS) for line in lines)  # one token per figure: greppable


def test_a_wide_terminal_shows_everything() -> None:
    assert "not shown" not in format_table(_bench_rows(), tty=True, width=200)


def test_suite_headline_fits_80_columns() -> None:
    row = {"pct_of_oracle": 96.4, "saving_pct": 11.04, "slowdown_pct": 4.38, "over_bound_pct": 3.48}
    row |= {"worst_pct": 16.25, "converge_s": 933.6}
    head = {
        "leave-one-source-out@10%": {
            "jobs": 40,
            **dict.fromkeys(POLICIES[1:], row),
            "dominated_by": {"gpoeo-rt": ["sweep"], "gpoeo-rt-markers": []},
        }
    }
    text = format_headline(head, tty=True, width=80)
    assert max(map(len, text.splitlines())) <= 80
    assert "leave-one-source-out@10%: dominated: gpoeo-rt by sweep" in text


def test_simulate_table_fits_80_columns() -> None:
    rows = [
        {**r, "iteration_s": 0.1, "markers": True, "saving_vs_oracle_pct": 96.0, "over_6pct": 1, "fallbacks": 0}
        | {"steady_cpu_pct": 0.123}
        for r in _bench_rows()
    ]
    assert max(map(len, simulate_table(rows, tty=True, width=80).splitlines())) <= 80


def test_one_name_per_figure_everywhere() -> None:
    """A column showing a figure of the shared vocabulary carries its one label, in every table."""
    for columns in (BENCH_COLUMNS, HEADLINE_COLUMNS, SIMULATE_COLUMNS):
        for column in columns:
            if column.key in LABELS and column.label is None:
                assert column.title == LABELS[column.key]
    assert LABELS["mean_slowdown_pct"] == LABELS["slowdown_pct"] == LABELS["slowdown_so_far_pct"]
    assert LABELS["saving_pct"] == LABELS["saving_so_far_pct"]
    assert LABELS["pct_of_oracle"] == LABELS["saving_vs_oracle_pct"]
    assert LABELS["max_slowdown_pct"] == LABELS["worst_pct"]
    assert LABELS["violations_pct"] == LABELS["over_bound_pct"]


def test_none_prints_as_a_dash_and_left_columns_pad_right() -> None:
    text = render([Column("a", left=True), Column("b", ".1f")], [{"a": "x", "b": None}], tty=False, width=80)
    assert text.splitlines() == ["a b", "x -"]


# --- status ---------------------------------------------------------------------------------------------------


def _status() -> dict[str, Any]:
    gpu = {
        "gpus": [0, 1, 2, 3],
        "state": "holding",
        "timing": "markers",
        "clocks": [1845, 2619],
        "advised_clocks": [1500, 2619],
        "baseline": {"energy_per_iteration_j": 42.211, "period_s": 0.08},
        "now": {"energy_per_iteration_j": 34.759, "period_s": 0.0837},
        "saving_so_far_pct": 9.93,
        "slowdown_so_far_pct": 4.51,
    }
    return {"pid": 4242, "advise": True, "gpus": [gpu, {**gpu, "gpus": [4], "state": "guarding"}]}


def test_status_off_a_terminal_prints_whole_lines(capsys: pytest.CaptureFixture[str]) -> None:
    cli._print_summary(_status())  # pytest's stdout is not a terminal
    out = capsys.readouterr().out
    assert "1845/2619" in out and "1500/2619" in out and "holding" in out and "42.211" in out
    assert "…" not in out and "not shown" not in out


def test_status_on_an_80_column_terminal_fits(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tables, "terminal", lambda: (True, 80))
    cli._print_summary(_status())
    out = capsys.readouterr().out
    assert max(map(len, out.splitlines())) <= 80
    assert "holding" in out and "0,1,2,3" in out and "9.9" in out and "4.5" in out


def test_report_on_a_narrow_terminal_wraps_the_events(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    log = tmp_path / "decisions-gpu0.jsonl"
    events = ["baseline", "probe", "probe_extend", "converged", "hold", "change_suspected", "phase_change"] * 3
    lines = [
        {"t_s": float(i), "state": "holding", "event": e, "sm_clock_mhz": 1500, "mem_clock_mhz": 2619}
        for i, e in enumerate(events)
    ]
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    monkeypatch.setattr(tables, "terminal", lambda: (True, 60))
    result = CliRunner().invoke(cli.app, ["report", str(log)])
    assert result.exit_code == 0, result.output
    assert all(len(line) <= 60 for line in result.output.splitlines()[1:])
    assert "saving%" in result.output and "slow%" in result.output


def test_every_read_command_has_json() -> None:
    """status, report, bundles list/verify, trace detect: each takes --json (bench and bench-suite write it)."""
    runner = CliRunner()
    for command in (["status"], ["report"], ["bundles", "list"], ["bundles", "verify"], ["trace", "detect"]):
        result = runner.invoke(cli.app, [*command, "--help"], terminal_width=200)
        assert result.exit_code == 0 and "--json" in result.output, command


def test_bundles_verify_json(tmp_path: Any) -> None:
    import json

    from tests.bundles import write_bundle

    write_bundle(tmp_path / "generic", name="generic")
    (tmp_path / "broken").mkdir()
    result = CliRunner().invoke(cli.app, ["bundles", "verify", "--bundles", str(tmp_path), "--json"])
    assert result.exit_code == 1
    checked = {b["path"].rsplit("/", 1)[-1]: b for b in json.loads(result.output)["bundles"]}
    assert checked["generic"]["ok"] and not checked["broken"]["ok"] and checked["broken"]["error"]
