"""``make test`` says plainly when Node.js or npm is missing (the interop tests need them),
instead of a bare ``npm: not found``; and its worker count follows the machine.

``make -W package.json`` rebuilds the Node stamp as if the lock had changed, without touching
a file; a ``PATH`` holding only ``make`` and the shell tools it uses hides ``node``/``npm``."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAKE = shutil.which("make")

pytestmark = pytest.mark.skipif(MAKE is None, reason="make is not installed")


def _bare_path(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("make", "sh", "nproc", "touch"):
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    return {**os.environ, "PATH": str(bin_dir)}


def test_missing_npm_is_one_clear_message(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            str(MAKE),
            "-W",
            "tests/interop/node/package.json",
            "tests/interop/node/node_modules/.installed",
        ],
        cwd=ROOT,
        env=_bare_path(tmp_path),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode != 0
    assert "make test needs Node.js (18+) and npm" in proc.stderr
    assert "apt-get install nodejs npm" in proc.stderr
    assert "npm install" not in proc.stdout  # stopped before trying


def test_missing_lab_tools_are_one_clear_message(tmp_path: Path) -> None:
    """Not root (or no apt-get): the network lab's tools are not installed but named, with
    the command that installs them."""
    proc = subprocess.run(
        [str(MAKE), "netlab-tools"],
        cwd=ROOT,
        env=_bare_path(tmp_path),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode != 0
    assert "make test needs nftables, iproute2 and coturn" in proc.stderr
    assert "apt-get install -y --no-install-recommends nftables iproute2 coturn" in proc.stderr


def test_workers_follow_the_cpus() -> None:
    proc = subprocess.run(
        [
            str(MAKE),
            "-n",
            "test",
            "-o",
            ".venv/.installed",
            "-o",
            "tests/interop/node/node_modules/.installed",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    cpus = len(os.sched_getaffinity(0))
    # The pytest lines: under an outer `make test` (CI), make adds "Entering/Leaving
    # directory" lines around them. The real-time audio loop runs first, alone; the parallel
    # suite after it, on the workers.
    alone, parallel = [line for line in proc.stdout.splitlines() if "-m pytest" in line]
    assert "realtime_audio" in alone and " -n " not in alone
    assert f"-n {min(2 * cpus, 16)}" in parallel
