"""Run a command beside processes that keep CPUs busy: the suite on a loaded laptop.

``make test-loaded`` runs ``make test`` this way, so a test that only holds on an idle
machine (a wall-clock bound, an ordering that a busy core reverses) fails here first. Each
hog is a child Python process spinning at normal priority; they are killed, and awaited,
when the command ends however it ends (Ctrl-C included), and each also exits by itself if
this runner dies without killing it (it polls its parent). The exit status is the command's.

    python -m tools.cpu_hog [--hogs N] -- COMMAND [ARGS...]

``--hogs`` defaults to all CPUs but one (at least one): on 2 cores, one core busy.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

_HOG = """
import os, time
parent = os.getppid()
deadline = time.monotonic()
while True:
    if time.monotonic() >= deadline:
        if os.getppid() != parent:
            raise SystemExit(0)
        deadline = time.monotonic() + 1.0
"""


def default_hogs() -> int:
    """All CPUs this process may use but one, at least one."""
    return max(1, len(os.sched_getaffinity(0)) - 1)


def run_loaded(command: list[str], hogs: int) -> int:
    """Run ``command`` with ``hogs`` spinning processes beside it; its exit status."""
    spinners = [subprocess.Popen([sys.executable, "-c", _HOG]) for _ in range(hogs)]
    print(f"cpu_hog: {hogs} busy process(es) beside: {' '.join(command)}", flush=True)
    started = time.monotonic()
    try:
        return subprocess.call(command)
    finally:
        for spinner in spinners:
            spinner.kill()
        for spinner in spinners:
            spinner.wait()
        print(f"cpu_hog: done in {time.monotonic() - started:.0f}s, hogs stopped", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.cpu_hog", description=__doc__)
    parser.add_argument("--hogs", type=int, default=default_hogs())
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")
    return run_loaded(command, max(1, args.hogs))


if __name__ == "__main__":
    raise SystemExit(main())
