"""The shipped systemd unit and example settings stay usable."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpoeo_rt.daemon.config import load_config

ROOT = Path(__file__).resolve().parents[2]


def test_example_settings_load() -> None:
    cfg = load_config(ROOT / "packaging" / "gpoeo-rt.example.toml", environ={})
    assert cfg.max_slowdown == 0.05 and cfg.run_dir == "/run/gpoeo-rt"


def test_systemd_unit_restores_clocks_after_any_stop() -> None:
    unit = (ROOT / "packaging" / "systemd" / "gpoeo-rt.service").read_text()
    assert "ExecStopPost=/usr/local/bin/gpoeo-rt reset" in unit
    assert "RuntimeDirectory=gpoeo-rt" in unit and "StateDirectory=gpoeo-rt" in unit


SYSTEMD_ANALYZE = shutil.which("systemd-analyze")


def _units(tmp_path: Path) -> list[Path]:
    """The shipped unit, and it with the Prometheus drop-in applied, with ExecStart pointing at an executable that
    exists here (verify refuses a unit whose command is missing)."""
    exe = shutil.which("gpoeo-rt") or str(Path(sys.executable).with_name("gpoeo-rt"))
    if not Path(exe).exists():
        pytest.skip("no gpoeo-rt executable to point the unit at")
    unit = (ROOT / "packaging" / "systemd" / "gpoeo-rt.service").read_text().replace("/usr/local/bin/gpoeo-rt", exe)
    dropin = (ROOT / "packaging" / "systemd" / "prometheus.conf").read_text().split("[Service]", 1)[1]
    plain, with_metrics = tmp_path / "gpoeo-rt.service", tmp_path / "gpoeo-rt-metrics.service"
    plain.write_text(unit)
    with_metrics.write_text(unit.replace("\n[Install]", dropin + "\n[Install]"))
    return [plain, with_metrics]


@pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="systemd-analyze is not installed")
def test_systemd_unit_verifies_and_its_exposure_is_at_most_4(tmp_path: Path) -> None:
    assert SYSTEMD_ANALYZE is not None
    for unit in _units(tmp_path):
        verify = subprocess.run([SYSTEMD_ANALYZE, "verify", str(unit)], capture_output=True, text=True, check=False)
        assert verify.returncode == 0, verify.stderr
        assert unit.name not in verify.stderr, verify.stderr  # no warning about the unit itself
        rated = subprocess.run(
            [SYSTEMD_ANALYZE, "security", "--offline=true", "--no-pager", str(unit)],
            capture_output=True,
            text=True,
            check=False,
        )
        found = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", rated.stdout)
        if found is None and "offline" in rated.stderr:
            pytest.skip(f"this systemd-analyze cannot rate a unit file offline: {rated.stderr.strip()}")
        assert found is not None, rated.stdout + rated.stderr
        assert float(found.group(1)) <= 4.0, rated.stdout
