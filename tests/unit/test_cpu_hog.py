"""``make test-loaded``'s load: the command's exit status passes through, and every hog is
gone when it returns (a hog left spinning would load the next job)."""

from __future__ import annotations

import os
import subprocess
import sys

from tools.cpu_hog import run_loaded

#: A line of the hog's own program, as a pattern: what tells a hog from the worker's other
#: children. ``[.]`` keeps the probe, whose command line holds the pattern, from matching it.
HOG_MARK = "parent = os[.]getppid"


def _hogs() -> set[int]:
    found = subprocess.run(
        ["pgrep", "-P", str(os.getpid()), "-f", HOG_MARK],
        capture_output=True,
        text=True,
        check=False,
    )
    return {int(pid) for pid in found.stdout.split()}


def test_the_command_runs_beside_busy_hogs_and_its_status_passes_through() -> None:
    before = _hogs()
    # The command sees its siblings: the hogs are children of this process while it runs.
    probe = (
        "import subprocess, sys; "
        f"kids = subprocess.run(['pgrep', '-P', '{os.getpid()}', '-f', '{HOG_MARK}'],"
        " capture_output=True, text=True);"
        " sys.exit(10 + len(kids.stdout.split()))"
    )
    status = run_loaded([sys.executable, "-c", probe], hogs=2)
    assert status == 12  # two hogs beside it, and its own status passed through
    assert _hogs() == before
