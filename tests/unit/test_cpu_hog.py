"""``make test-loaded``'s load: the command's exit status passes through, and every hog is
gone when it returns (a hog left spinning would load the next job)."""

from __future__ import annotations

import os
import subprocess
import sys

from tools.cpu_hog import run_loaded


def _children() -> set[int]:
    found = subprocess.run(
        ["pgrep", "-P", str(os.getpid())], capture_output=True, text=True, check=False
    )
    return {int(pid) for pid in found.stdout.split()}


def test_the_command_runs_beside_busy_hogs_and_its_status_passes_through() -> None:
    before = _children()
    # The command sees its siblings: the hogs are children of this process while it runs.
    probe = (
        "import os, subprocess, sys; "
        f"kids = subprocess.run(['pgrep', '-P', '{os.getpid()}'], capture_output=True, text=True);"
        " sys.exit(10 + len(kids.stdout.split()))"
    )
    status = run_loaded([sys.executable, "-c", probe], hogs=2)
    # 2 hogs and the command itself.
    assert status == 13
    assert _children() == before
