"""Runtime tests never take the host-wide GPU locks: each test gets its own folder in their place (the locks of
the fake NVML's GPUs would otherwise collide across test runs on one host)."""

from pathlib import Path

import pytest

from gpoeo_rt.daemon import safety


@pytest.fixture(autouse=True)
def private_system_lock_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path_factory.mktemp("system-locks")
    monkeypatch.setattr(safety, "SYSTEM_LOCK_DIR", path)
    return path
