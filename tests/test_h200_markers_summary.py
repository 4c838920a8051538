"""scripts/h200/markers_summary.py on a synthetic run folder: it must find a true 1% period error and a true
overhead in interleaved blocks (the live run itself needs a GPU host: scripts/h200/validate_markers.sh)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _write_iterations(path: Path, t: np.ndarray, marked: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = enumerate(zip(t, marked, strict=True))
    lines = ["t_s,phase,iteration,marked"] + [f"{x:.6f},0,{i + 1},{m}" for i, (x, m) in rows]
    path.write_text("\n".join(lines) + "\n")


def test_summary_checks_period_error_and_interleaved_overhead(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    t = 1000.0 + np.cumsum(0.01 * (1 + 0.01 * rng.standard_normal(3000)))
    job = tmp_path / "jobs" / "mlp_65536"
    _write_iterations(job / "iterations.csv", t, np.ones(len(t), int))
    window = (1010.0, 1015.0)
    inside = t[(t >= window[0]) & (t <= window[1])]
    truth = (inside[-1] - inside[0]) / (len(inside) - 1)
    decisions = [
        {
            "event": "baseline",
            "t_s": window[1],
            "window_s": 5.0,
            "period_s": truth * 1.004,
            "timing": "markers",
            "locked": False,
        },
        {"event": "hold", "t_s": 1025.0, "window_s": 2.0, "period_s": 0.0, "timing": None, "locked": False},
    ]
    (job / "state").mkdir()
    (job / "state" / "decisions-gpu0.jsonl").write_text("\n".join(json.dumps(d) for d in decisions) + "\n")
    (job / "status.json").write_text(json.dumps({"gpus": [{"timing": "markers", "markers": {"received": 3000}}]}))
    # Overhead: 2 s blocks in turn without / with markers; the marked blocks are 0.1% slower.
    steps: list[float] = []
    marked: list[int] = []
    now = 2000.0
    while now < 2120.0:
        on = int(now // 2.0) % 2
        now += 0.01 * (1.001 if on else 1.0)
        steps.append(now)
        marked.append(on)
    _write_iterations(tmp_path / "overhead" / "iterations.csv", np.array(steps), np.array(marked))
    (tmp_path / "overhead" / "state").mkdir()
    (tmp_path / "overhead" / "state" / "decisions-gpu0.jsonl").write_text("")
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts/h200/markers_summary.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    report = json.loads((tmp_path / "summary.json").read_text())
    first = report["jobs"][0]
    assert first["baselines"][0]["error_pct"] == pytest.approx(0.4, abs=1e-3) and first["ok"]
    assert report["overhead"]["median_impact_pct"] == pytest.approx(100 * (1 - 1 / 1.001), abs=1e-3)
    assert report["overhead"]["ok"] and report["overhead"]["pairs"] >= 25
    assert "interleaved pairs" in result.stdout
    # A 1.5% error fails the 1% target.
    decisions[0]["period_s"] = truth * 1.015
    (job / "state" / "decisions-gpu0.jsonl").write_text("\n".join(json.dumps(d) for d in decisions) + "\n")
    subprocess.run(
        [sys.executable, str(ROOT / "scripts/h200/markers_summary.py"), str(tmp_path)], check=True, capture_output=True
    )
    assert not json.loads((tmp_path / "summary.json").read_text())["jobs"][0]["ok"]


def test_validate_script_is_valid_bash() -> None:
    subprocess.run(["bash", "-n", str(ROOT / "scripts/h200/validate_markers.sh")], check=True)
