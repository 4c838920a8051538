"""The shipped systemd unit and example settings stay usable."""

from pathlib import Path

from gpoeo_rt.daemon.config import load_config

ROOT = Path(__file__).resolve().parents[2]


def test_example_settings_load() -> None:
    cfg = load_config(ROOT / "packaging" / "gpoeo-rt.example.toml", environ={})
    assert cfg.max_slowdown == 0.05 and cfg.run_dir == "/run/gpoeo-rt"


def test_systemd_unit_restores_clocks_after_any_stop() -> None:
    unit = (ROOT / "packaging" / "systemd" / "gpoeo-rt.service").read_text()
    assert "ExecStopPost=/usr/local/bin/gpoeo-rt reset" in unit
    assert "RuntimeDirectory=gpoeo-rt" in unit and "StateDirectory=gpoeo-rt" in unit
