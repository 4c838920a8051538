"""Every command of the README's code blocks either runs here (no GPU, no root, no DVC outputs, in a temporary
folder) or is listed below with the reason it cannot; a README command in neither list fails the test, so a new
snippet must be classified. Placeholders (OUT_DIR, my_sweeps.csv, /tmp/..., /var/lib/gpoeo-rt) become paths in
the temporary folder; commands run in README order (a trace is recorded before it is detected)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.runtime.sweep_rows import sweep_rows, write_sweep_csv

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

# Commands that cannot run here, and why.
SKIPPED = {
    "./scripts/demo": "takes a minute and a half (its figures: README, Quickstart)",
    "./scripts/test": "this test suite itself",
    "source .venv/bin/activate": "the environment these tests already run in",
    "dvc repro": "the whole pipeline, about 8 minutes, and rewrites tracked files",
    "dvc repro ingest": "rewrites tracked files",
    "pip install -e '.[collect]'": "changes the environment (torch, from a registry)",
    "sudo gpoeo-collect --allow-clock-writes --sku h200 --workloads "
    "'cnn:batch=64,transformer:batch=8;layers=4,mlp,gnn'": "sets GPU clocks (root, a GPU)",
    "sudo gpoeo-collect --allow-clock-writes --sku h200 --name mytrain -- python train.py --epochs 100": (
        "sets GPU clocks (root, a GPU)"
    ),
    "gpoeo-collect --reference-only --sku h200 --out data/raw/h200-reference": "needs a GPU",
    "gpoeo-rt trace record OUT_DIR --seconds 30": "needs a GPU",
    "python -m gpoeo_rt.bench.simulate --jobs 2 --out results.json": "needs the DVC outputs (fold bundles); minutes",
    "python -m gpoeo_rt.bench.simulate --sku tesla-v100 --limit 20 --policy hybrid --table grid": (
        "needs the DVC outputs (fold bundles)"
    ),
    "gpoeo-rt start": "needs a GPU",
    "gpoeo-rt start --gpus 0,2 --max-slowdown 0.03": "needs GPUs",
    "gpoeo-rt start --group 0,1,2,3": "needs GPUs",
    "gpoeo-rt start --advise": "needs a GPU",
    "gpoeo-rt status [--json]": "needs a running daemon (tests/runtime/test_daemon.py runs one)",
    "gpoeo-rt set --max-slowdown 0.02": "needs a running daemon (tests/runtime/test_daemon.py runs one)",
    "gpoeo-rt stop": "needs a running daemon (tests/runtime/test_daemon.py runs one)",
    "gpoeo-rt reset [--gpus 0,2] [--force]": "resets real GPUs",
    "gpoeo-rt bench --sweeps data/processed/sweeps.csv --sku tesla-v100,quadro-rtx-8000 --policy default,oracle,"
    "gpoeo-rt,gpoeo-rt-markers,sweep,gpoeo-paper,bandit --max-slowdown 0.05 --job-seconds 1800 --json results.json "
    "--plot bench.png": "needs the DVC outputs; minutes",
    "gpoeo-rt bench --sweeps data/processed/sweeps.csv --sku tesla-v100,quadro-rtx-8000 --clock-grid fine --json "
    "fine.json": "needs the DVC outputs; minutes",
    "python scripts/bench_frontier.py": "needs the DVC outputs",
    "gpoeo-rt bench-suite --sweeps data/processed/sweeps.csv --summary ood.json --plot frontier.png": (
        "needs the DVC outputs; minutes"
    ),
}
SLOW = {"gpoeo-rt bench-suite --sweeps data/processed/sweeps.csv --set synthetic --bounds 0.05"}
IN_REPO = {"dvc metrics show"}  # reads the tracked metrics

# The Python block's names that belong to the reader's training loop.
PYTHON_STAND_INS = "loader = range(3)\ndef train_step(batch):\n    pass\n"


def readme_snippets() -> list[tuple[str, str]]:
    """(language, command) for every bash command (continuation lines joined, comments dropped) and every Python
    block of README.md, in order."""
    snippets = []
    for lang, body in re.findall(r"^```(\w+)\n(.*?)^```", (REPO / "README.md").read_text(), re.S | re.M):
        if lang == "python":
            snippets.append((lang, body))
            continue
        for line in body.replace("\\\n", " ").splitlines():
            command = re.sub(r"\s+#\s.*$", "", line).strip()
            if command:
                snippets.append((lang, re.sub(r"\s+", " ", command)))
    return snippets


SNIPPETS = readme_snippets()


def _params() -> list[object]:
    params = []
    for lang, command in SNIPPETS:
        marks = [pytest.mark.slow] if command in SLOW else []
        params.append(pytest.param(lang, command, marks=marks, id=command[:60]))
    return params


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("readme")
    write_sweep_csv(root / "my_sweeps.csv", sweep_rows())
    return root


def _localise(command: str, root: Path) -> str:
    command = command.replace("OUT_DIR", str(root / "trace")).replace("/tmp/", f"{root}/")
    command = command.replace("/var/lib/gpoeo-rt/", f"{root}/g/state/")
    return command.replace("--sweeps my_sweeps.csv", f"--sweeps {root / 'my_sweeps.csv'}")


def test_every_command_is_run_or_skipped_with_a_reason() -> None:
    assert SNIPPETS, "no code blocks found in README.md"
    listed = {c for _, c in SNIPPETS}
    stale = set(SKIPPED) - listed
    assert not stale, f"SKIPPED names commands the README no longer has: {sorted(stale)}"


@pytest.mark.parametrize(("lang", "command"), _params())
def test_readme_snippet_runs(lang: str, command: str, sandbox: Path) -> None:
    if command in SKIPPED:
        pytest.skip(SKIPPED[command])
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("GPOEO_BUNDLES", None)
    if lang == "python":
        script = PYTHON_STAND_INS + command
        done = subprocess.run([sys.executable, "-c", script], cwd=sandbox, env=env, capture_output=True, text=True)
    else:
        cwd = REPO if command in IN_REPO else sandbox
        run = _localise(command, sandbox)
        done = subprocess.run(["bash", "-c", run], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
    assert "Traceback" not in done.stderr
