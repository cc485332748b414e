"""``close()`` and ``async with`` return only when teardown is done, after a failed session
too (issue 32 item 6): a program that loses its backend under a connected session, sees
its pending ``ask()`` fail, leaves ``async with`` and exits at once, had its ``ended``
event after ``async with`` returned and printed aiohttp's ``Unclosed client session``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("mode", ["text", "media"])
def test_a_program_leaving_a_failed_session_exits_clean(mode: str) -> None:
    child = subprocess.run(
        [sys.executable, "-m", "tests.integration._killed_backend_child", mode],
        cwd=ROOT,
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout.splitlines() == ["ENDED-BEFORE-EXIT True"], child.stdout
    # The one warning allowed is the killed server closing the live socket, told when it
    # happens (logs.py: a warning nobody expected); nothing may print at exit.
    noise = [line for line in child.stderr.splitlines() if "aborting" not in line]
    assert noise == [], child.stderr
