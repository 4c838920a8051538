"""The built wheel installed as an operator would: into a fresh venv, and with `pip install --user` (a temporary
HOME and PYTHONUSERBASE); in each, `gpoeo-rt bundles list` finds the shipped models and a simulated `start` runs.

Needs a package registry (building the wheel and installing its dependencies): without one the tests skip. Slow
(about a minute: two installs of numpy and onnxruntime, from pip's cache when it has them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
BUNDLES = {"generic", "tesla-v100", "quadro-rtx-8000", "gtx-1080ti", "gtx-980", "tesla-p100"}


def _clean_env(**extra: str) -> dict[str, str]:
    """The environment of a new user shell: no gpoeo settings, no virtualenv, the real pip cache."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPOEO", "VIRTUAL_ENV", "PYTHON"))}
    env["PIP_CACHE_DIR"] = os.environ.get("PIP_CACHE_DIR") or str(Path.home() / ".cache" / "pip")
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if "/.venv/" not in p + "/")
    return {**env, **extra}


def _run(cmd: list[str | Path], env: dict[str, str], cwd: Path, timeout: float = 600) -> str:
    done = subprocess.run(
        [str(c) for c in cmd], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"{' '.join(map(str, cmd))} failed ({done.returncode}):\n{done.stdout}{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # The registry must offer what the build and the runtime need, in the versions pinned (fetched into pip's
    # cache, where the installs below find them).
    needs = ["setuptools>=77", *tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]]
    fetch = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--timeout", "20", "-d", str(out)]
    try:
        answered = subprocess.run([*fetch, *needs], env=_clean_env(), capture_output=True, timeout=300).returncode == 0
    except subprocess.TimeoutExpired:
        answered = False
    if not answered:
        pytest.skip("no package registry offers the wheel's build and runtime dependencies")
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", out, REPO], _clean_env(), out)
    (found,) = out.glob("gpoeo-*.whl")
    return found


def _check_installed(gpoeo_rt: Path, env: dict[str, str], work: Path, share: Path) -> None:
    listed = json.loads(_run([gpoeo_rt, "bundles", "list", "--json"], env, work))
    assert Path(listed["root"]) == share / "share" / "gpoeo" / "models"
    assert {b["name"] for b in listed["bundles"]} == BUNDLES
    assert not any("error" in b for b in listed["bundles"])
    state = work / "state"
    args = ["--simulate", "gpt", "--sim-seconds", "300", "--run-dir", work / "run", "--state-dir", state]
    _run([gpoeo_rt, "start", *args], env, work)
    report = json.loads(_run([gpoeo_rt, "report", state / "decisions-gpu0.jsonl", "--json"], env, work))
    assert report["decisions"] > 0 and report["baseline"] is not None


def test_wheel_in_a_fresh_venv(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    env = _clean_env()
    _run([sys.executable, "-m", "venv", venv], env, tmp_path)
    _run([venv / "bin" / "python", "-m", "pip", "install", "--quiet", wheel], env, tmp_path)
    _check_installed(venv / "bin" / "gpoeo-rt", env, tmp_path, venv)


def test_wheel_with_pip_install_user(wheel: Path, tmp_path: Path) -> None:
    """`pip install --user`: scripts and models land under PYTHONUSERBASE, not under the interpreter's prefix."""
    home, userbase = tmp_path / "home", tmp_path / "userbase"
    home.mkdir()
    env = _clean_env(HOME=str(home), PYTHONUSERBASE=str(userbase))
    python = tmp_path / "py"  # an interpreter whose user site is on (a venv that sees the system's site)
    _run([sys.executable, "-m", "venv", "--system-site-packages", python], env, tmp_path)
    _run([python / "bin" / "python", "-m", "pip", "install", "--quiet", "--user", wheel], env, tmp_path)
    assert not (python / "bin" / "gpoeo-rt").exists()
    _check_installed(userbase / "bin" / "gpoeo-rt", env, tmp_path, userbase)
