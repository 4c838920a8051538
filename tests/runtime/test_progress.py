"""Progress bars: on stderr while a terminal watches, nothing at all in a pipe or a log."""

from __future__ import annotations

import os
import pty
import subprocess
import sys

from gpoeo_rt.progress import Bars

SCRIPT = """
from gpoeo_rt.progress import Bars
with Bars() as bars:
    advance = bars.task("bench: simulated jobs")
    for done in range(1, 4):
        advance(done, 3)
print("result")
"""


def _run(stderr_tty: bool) -> tuple[str, str]:
    if not stderr_tty:
        done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True)
        return done.stdout, done.stderr
    leader, follower = pty.openpty()
    try:
        done = subprocess.run(
            [sys.executable, "-c", SCRIPT],
            stdout=subprocess.PIPE,
            stderr=follower,
            text=True,
            check=True,
            env={**os.environ, "TERM": "xterm", "COLUMNS": "80"},
        )
        os.close(follower)
        follower = -1
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        return done.stdout, b"".join(chunks).decode("utf-8", "replace")
    finally:
        os.close(leader)
        if follower >= 0:
            os.close(follower)


def test_quiet_when_nobody_watches() -> None:
    stdout, stderr = _run(stderr_tty=False)
    assert stdout == "result\n" and stderr == ""


def test_a_bar_on_a_terminal() -> None:
    stdout, stderr = _run(stderr_tty=True)
    assert stdout == "result\n"  # results stay on stdout, untouched
    assert "bench: simulated jobs" in stderr and "3/3" in stderr


def test_disabled_bars_cost_nothing() -> None:
    with Bars(enabled=False) as bars:
        advance = bars.task("x")
        advance(1, 2)  # a no-op
    assert Bars().enabled is False  # pytest's stderr is no terminal
