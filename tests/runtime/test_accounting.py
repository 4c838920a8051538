"""The savings meter behind `status`, `report` and the Prometheus figures (daemon/accounting.py), and `report` over
logs with restarts."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from gpoeo_rt.controller.controller import Controller, ControllerConfig
from gpoeo_rt.controller.state import Policy
from gpoeo_rt.daemon.accounting import SavingsMeter
from gpoeo_rt.daemon.report import summarise
from gpoeo_rt.device import SimulatedGPU
from gpoeo_rt.device.workload import preset_workload

REF = (1980, 4800)
LOW = (1400, 4800)


def rec(t: float, event: str, *, locked: bool = False, state: str = "holding", **fields: Any) -> dict[str, Any]:
    sm, mem = LOW if locked else REF
    return {
        "t_s": t,
        "state": state,
        "next_state": state,
        "event": event,
        "sm_clock_mhz": sm,
        "mem_clock_mhz": mem,
        "locked": locked,
        **fields,
    }


def _job(*extra: dict[str, Any]) -> list[dict[str, Any]]:
    """Profiling at reference (10 s, 300 W, 100 ms), a probe, then holding a locked config at 0.8 energy, 1.04 time."""
    return [
        rec(0.0, "start", state="profiling"),
        rec(5.0, "period_candidate", state="profiling", period_s=0.1, power_w=300.0, window_s=5.0),
        rec(10.0, "baseline", state="profiling", period_s=0.1, power_w=300.0, window_s=10.0),
        rec(
            15.0,
            "probe",
            locked=True,
            state="searching",
            measured_time_ratio=1.04,
            measured_energy_ratio=0.8,
            period_s=0.104,
            power_w=230.77,
            window_s=5.0,
        ),
        rec(15.0, "converged", locked=True, state="searching"),
        *extra,
    ]


def _feed(records: list[dict[str, Any]]) -> SavingsMeter:
    meter = SavingsMeter()
    for r in records:
        meter.feed(r)
    return meter


def hold(t: float, **fields: Any) -> dict[str, Any]:
    base = {"measured_time_ratio": 1.04, "measured_energy_ratio": 0.8, "period_s": 0.104, "power_w": 230.77}
    return rec(t, "hold", locked=True, window_s=2.0, **{**base, **fields})


def test_reference_time_counts_as_exactly_one_and_locked_time_by_its_own_window() -> None:
    meter = _feed(_job(hold(45.0), rec(45.0, "stop")))
    # 10 s at reference (ratio 1), 35 s at 0.8 energy / 1.04 time; per iteration: reference work 10 + 35/1.04.
    work = 10.0 + 35.0 / 1.04
    assert meter.saving_pct == pytest.approx(100.0 * (1.0 - (10.0 + 0.8 * 35.0 / 1.04) / work))
    assert meter.slowdown_pct == pytest.approx(100.0 * (45.0 / work - 1.0))
    cov = meter.total.coverage()
    assert cov["counted"] == 1.0 and cov["at_reference"] == pytest.approx(10.0 / 45.0, abs=1e-3)
    assert meter.energy()["saved_j"] == pytest.approx(300.0 * 0.2 * 35.0 / 1.04, rel=1e-3)


def test_suspect_and_unmeasured_windows_rate_nothing() -> None:
    suspect = rec(60.0, "change_suspected", locked=True, measured_time_ratio=1.0, measured_energy_ratio=0.3,
                  period_s=0.1, power_w=90.0, window_s=2.0)  # fmt: skip
    no_period = rec(70.0, "hold_retry", locked=True, window_s=2.0, power_w=230.0)
    meter = _feed(_job(hold(45.0), suspect, no_period, hold(80.0), rec(80.0, "stop")))
    # The suspect window's 0.3 and the period-less window rate nothing: 45-70 s is left out.
    work = 10.0 + 45.0 / 1.04
    assert meter.saving_pct == pytest.approx(100.0 * (1.0 - (10.0 + 0.8 * 45.0 / 1.04) / work))
    cov = meter.total.coverage()
    assert cov["excluded"] == pytest.approx(25.0 / 80.0, abs=1e-3)
    assert cov["counted"] == pytest.approx(55.0 / 80.0, abs=1e-3)


def test_a_known_phase_reuses_no_stored_ratio_for_the_time_at_reference() -> None:
    # The decision that re-profiles has reset the clocks; its window ran at the held config.
    stop = rec(100.0, "phase_change", measured_time_ratio=1.3, measured_energy_ratio=0.5, window_s=2.0)
    again = [
        rec(105.0, "period_candidate", state="profiling", period_s=0.1, power_w=300.0, window_s=5.0),
        # Re-profiled at reference, then the stored config again: its stored ratios must not rate the profiling.
        rec(
            110.0,
            "known_phase",
            locked=True,
            state="profiling",
            period_s=0.1,
            power_w=300.0,
            window_s=10.0,
            measured_time_ratio=1.04,
            measured_energy_ratio=0.8,
        ),
        hold(110.0),
        rec(110.0, "stop"),
    ]
    meter = _feed(_job(hold(45.0), hold(98.0), stop, *again))
    # At reference: 0-10 s and 100-110 s (20 s); locked and rated: 10-98 s; left out: the phase change's 2 s.
    cov = meter.total.coverage()
    assert cov["at_reference"] == pytest.approx(20.0 / 110.0, abs=1e-3)
    assert cov["excluded"] == pytest.approx(2.0 / 110.0, abs=1e-3)
    work = 20.0 + 88.0 / 1.04
    assert meter.saving_pct == pytest.approx(100.0 * (1.0 - (20.0 + 0.8 * 88.0 / 1.04) / work))


def test_a_job_left_at_reference_saves_exactly_nothing() -> None:
    # The search kept the reference: hold windows at reference measure a warmer GPU (1.03) but cost nothing.
    warm = {"measured_time_ratio": 1.0, "measured_energy_ratio": 1.03, "period_s": 0.1, "power_w": 309.0}
    records = _job()[:3] + [rec(40.0 + 30 * k, "hold", window_s=2.0, **warm) for k in range(10)]
    meter = _feed(records)
    assert meter.saving_pct == 0.0 and meter.slowdown_pct == 0.0


def test_the_saving_splits_into_the_held_decisions_and_what_exploring_cost() -> None:
    # Exploring: 0-10 s profiling at reference, 10-15 s a probe that used more (1.1 energy); held: 15-45 s.
    records = _job(hold(45.0), rec(45.0, "stop"))
    records[3] = {**records[3], "measured_energy_ratio": 1.1}
    meter = _feed(records)
    split = meter.split()
    assert split["held_saving_pct"] == pytest.approx(20.0)
    reference_j = 300.0 * (10.0 + 35.0 / 1.04)
    cost = 100.0 * 300.0 * 0.1 * 5.0 / 1.04 / reference_j
    assert split["exploration_cost_pct"] == pytest.approx(cost)
    assert split["held_share"] == pytest.approx(30.0 / 45.0, abs=1e-3)
    # The two parts add up to the headline: held saving x its share of the reference joules, minus the cost.
    held_j = meter.parts["held"].reference_j
    assert meter.saving_pct == pytest.approx(split["held_saving_pct"] * held_j / reference_j - cost)


def test_a_job_left_at_reference_after_probing_holds_a_saving_of_exactly_zero_and_reports_the_probes_cost() -> None:
    probe = {"measured_time_ratio": 1.1, "measured_energy_ratio": 1.05, "period_s": 0.11, "power_w": 286.0}
    records = [
        *_job()[:3],
        rec(15.0, "probe", locked=True, state="searching", window_s=5.0, **probe),
        rec(15.0, "converged", state="searching"),
        *(rec(40.0 + 30 * k, "hold", window_s=2.0, period_s=0.1, power_w=309.0) for k in range(10)),
    ]
    meter = _feed(records)
    split = meter.split()
    assert split["held_saving_pct"] == 0.0
    assert split["exploration_cost_pct"] is not None and split["exploration_cost_pct"] > 0
    assert meter.saving_pct == pytest.approx(-split["exploration_cost_pct"])


def test_drift_checks_refresh_the_baseline_power_and_report_their_cost() -> None:
    check = rec(47.0, "drift_check", locked=True, window_s=2.0, power_w=309.0)
    meter = _feed(_job(hold(45.0), check, hold(77.0), rec(77.0, "stop")))
    assert meter.baseline is not None and meter.baseline["power_w"] == 309.0 and meter.baseline["period_s"] == 0.1
    cov = meter.total.coverage()
    assert cov["drift_checks"] == 1 and cov["drift_check"] == pytest.approx(2.0 / 77.0, abs=1e-3)
    assert cov["at_reference"] == pytest.approx(12.0 / 77.0, abs=1e-3)
    assert meter.now() is not None and meter.now()["power_w"] == 230.77  # status shows the job's window, not the check


def test_restarts_are_run_boundaries_and_downtime_never_counts() -> None:
    first = _job(hold(45.0), rec(45.0, "stop"))
    # The daemon was killed (no stop), then restarted an hour later: a new run begins at its "start".
    killed = [{**r, "t_s": r["t_s"] + 100.0} for r in _job(hold(100.0))]
    second = [{**r, "t_s": r["t_s"] + 3800.0} for r in _job(hold(345.0), rec(345.0, "stop"))]
    combined = _feed(first + killed + second)
    parts = [_feed(first), _feed(killed), _feed(second)]
    assert len(combined.runs) == 3
    assert combined.total.duration_s == pytest.approx(sum(p.total.duration_s for p in parts))
    used = sum(p.total.used_j for p in parts)
    reference = sum(p.total.reference_j for p in parts)
    assert combined.saving_pct == pytest.approx(100.0 * (1.0 - used / reference))
    assert combined.energy()["saved_j"] == pytest.approx(reference - used, abs=0.2)


def test_an_old_log_without_start_records_still_ends_runs_at_stops_and_backward_clocks() -> None:
    first = [r for r in _job(hold(45.0), rec(45.0, "stop")) if r["event"] != "start"]
    after_reboot = [{**r, "t_s": r["t_s"] + 2.0} for r in _job(hold(45.0)) if r["event"] != "start"]
    meter = _feed(first + [{**r, "t_s": r["t_s"] + 3600.0} for r in first] + after_reboot)
    assert len(meter.runs) == 3
    assert meter.total.duration_s == pytest.approx(3 * 40.0)


def test_the_energy_counter_witnesses_the_joules_and_flags_a_disagreement() -> None:
    def counted(scale: float) -> list[dict[str, Any]]:
        """The job with counter readings that match the ratio-based joules interval by interval, times `scale`."""
        meter, joules, out = SavingsMeter(), 1e6, []
        for r in _job(hold(45.0), hold(75.0), rec(75.0, "stop")):
            before = meter.total.used_j
            meter.feed(r)
            joules += scale * (meter.total.used_j - before)
            out.append({**r, "energy_counter_j": joules})
        return out

    agree = summarise(counted(1.0))["witness"]
    assert agree is not None and abs(agree["gap_pct"]) < 0.01 and not agree["disagrees"]
    off = summarise(counted(1.1))["witness"]
    assert off is not None and off["gap_pct"] == pytest.approx(100 * (1 / 1.1 - 1), abs=0.01) and off["disagrees"]
    assert summarise(_job(hold(45.0)))["witness"] is None  # no counter (pre-Volta): no witness


def test_report_over_a_log_with_restarts_equals_the_runs_combined_by_time() -> None:
    """Two real controller runs on simulated GPUs, an hour apart in one log: `report` gives the runs' own figures
    combined by time (the issue's target)."""
    logs = []
    for seed in (1, 2):
        gpu = SimulatedGPU(preset_workload("resnet50"), seed=seed, allow_clock_writes=True)
        log: list[dict[str, Any]] = []
        controller = Controller(gpu, config=ControllerConfig(policy=Policy.SEARCH), log=log.append)
        controller.run(240.0)
        controller.stop()
        logs.append(log)
    shift = logs[0][-1]["t_s"] + 3600.0
    one_log = logs[0] + [{**r, "t_s": r["t_s"] + shift} for r in logs[1]]
    whole, parts = summarise(one_log), [summarise(log) for log in logs]
    assert len(whole["runs"]) == 2 and all(len(p["runs"]) == 1 for p in parts)
    used = sum(p["energy"]["used_j"] for p in parts)
    reference = sum(p["energy"]["reference_j"] for p in parts)
    assert whole["saving_pct"] == pytest.approx(100.0 * (1.0 - used / reference), abs=0.01)
    assert whole["coverage"]["duration_s"] == pytest.approx(sum(p["coverage"]["duration_s"] for p in parts), abs=0.01)
    for run, part in zip(whole["runs"], parts, strict=True):
        assert run["saving_pct"] == pytest.approx(part["saving_pct"])
        assert run["slowdown_pct"] == pytest.approx(part["slowdown_pct"])
    assert all(math.isfinite(p["saving_pct"]) and p["saving_pct"] > 0 for p in parts)
    assert whole["witness"] is not None and not whole["witness"]["disagrees"]


def test_a_power_signal_window_that_says_lower_clocks_run_faster_rates_nothing() -> None:
    """Lower clocks cannot run iterations faster beyond noise: such a power-signal period is a false one (an
    alias), and its window is left out; the same window timed by step markers counts."""
    fast = {"measured_time_ratio": 0.8, "measured_energy_ratio": 0.7, "period_s": 0.08, "power_w": 262.0}
    probes = [
        rec(15.0, "probe_extend", locked=True, state="searching", window_s=5.0, timing="signal", **fast),
        rec(20.0, "probe_extend", locked=True, state="searching", window_s=10.0, timing="signal", **fast),
        rec(25.0, "fallback_reference", state="searching", window_s=15.0, timing="signal", **fast),
        rec(85.0, "retry_profile", state="holding"),
    ]
    meter = _feed([*_job()[:3], *probes])
    cov = meter.total.coverage()
    assert cov["excluded"] == pytest.approx(15.0 / 85.0, abs=1e-3) and meter.saving_pct == 0.0
    marked = _feed([*_job()[:3], *({**r, "timing": "markers"} for r in probes)])
    assert marked.total.coverage()["excluded"] == 0.0 and marked.saving_pct is not None and marked.saving_pct > 0
    slow = _feed([*_job()[:3], *({**r, "measured_time_ratio": 0.99} for r in probes)])  # within the noise
    assert slow.total.coverage()["excluded"] == 0.0


def test_report_prints_coverage_drift_checks_witness_and_runs_within_80_columns(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from gpoeo_rt.cli import app

    def counted(records: list[dict[str, Any]], scale: float) -> list[dict[str, Any]]:
        meter, joules, out = SavingsMeter(), 1e6, []
        for r in records:
            before = meter.total.used_j
            meter.feed(r)
            joules += scale * (meter.total.used_j - before)
            out.append({**r, "energy_counter_j": joules})
        return out

    check = rec(47.0, "drift_check", locked=True, window_s=2.0, power_w=309.0)
    run = _job(hold(45.0), check, hold(77.0), rec(77.0, "stop"))
    log = tmp_path / "decisions.jsonl"
    records = counted(run, 1.2) + [{**r, "t_s": r["t_s"] + 3600.0} for r in counted(run, 1.2)]
    log.write_text("".join(json.dumps(r) + "\n" for r in records))
    result = CliRunner().invoke(app, ["report", str(log)])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "counts 100% of the time" in out and "drift checks: 2," in out
    assert "DISAGREE beyond 3%" in out  # the counter read 20% more than the ratios say
    assert "2 runs, 154 s in all" in out
    mine = [line for line in out.splitlines() if not line.startswith((str(tmp_path), "  events:"))]
    assert all(len(line) <= 80 for line in mine), mine
    data = json.loads(CliRunner().invoke(app, ["report", str(log), "--json"]).output)
    assert len(data["runs"]) == 2 and data["witness"]["disagrees"] and data["energy"]["saved_j"] > 0
    assert "held decisions: saving 19." in out and "exploring (probes, profiling): cost -" in out
    # Held: 60 s at 0.8 energy and 2 s of drift checks at reference; the probe saved energy too (a negative cost).
    assert 19.0 < data["split"]["held_saving_pct"] < 20.0 and data["split"]["exploration_cost_pct"] < 0


def test_the_report_calls_a_slowdown_within_the_bound_only_beyond_the_claims_noise() -> None:
    from gpoeo_rt.daemon.accounting import bound_verdict

    assert bound_verdict(4.4, 5.0) == "within" and bound_verdict(4.6, 5.0) == "at the bound"
    assert bound_verdict(5.4, 5.0) == "at the bound" and bound_verdict(5.6, 5.0) == "over"
    assert bound_verdict(None, 5.0) is None and bound_verdict(3.0, None) is None
    start = _job()[0] | {"slowdown_bound_pct": 5.0}
    meter = _feed([start, *_job(hold(45.0))[1:]])
    assert meter.bound_pct == 5.0 and meter.slowdown_pct is not None and meter.slowdown_pct < 4.5
    assert meter.verdict() == "within"
    # A controller's start decision carries its bound (energy objective).
    gpu = SimulatedGPU(preset_workload("membound"), seed=0, allow_clock_writes=True)
    log: list[dict[str, Any]] = []
    controller = Controller(gpu, config=ControllerConfig(policy=Policy.SEARCH, max_slowdown=0.03), log=log.append)
    controller.step()
    assert log[0]["event"] == "start" and log[0]["slowdown_bound_pct"] == 3.0
