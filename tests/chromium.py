"""Debian's Chromium for the tests that drive a real browser (Playwright downloads none):
where it is, and the flags every such test starts it with."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Final

import pytest

INSTALL: Final = (
    "apt-get install -y --no-install-recommends chromium (as root; `make test` does it)"
)

#: Without the background-networking flags Chromium dials out at start (refused on this
#: closed network); a test that checks a page makes no request relies on them too.
CHROMIUM_ARGS: Final = [
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium() -> str:
    """The browser's path; a failure, never a skip, when it is missing: CI must run these."""
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.fail(f"no chromium on this machine: {INSTALL}")
    return path


def launch_options(profile: Path, args: list[str] | None = None) -> dict[str, Any]:
    """``launch_persistent_context`` keywords (sync or async Playwright): Debian's browser,
    headless, a fresh profile at ``profile``, no sandbox (the suite runs as root), and
    :data:`CHROMIUM_ARGS` (or ``args``)."""
    return {
        "user_data_dir": str(profile),
        "executable_path": chromium(),
        "headless": True,
        "chromium_sandbox": False,
        "args": CHROMIUM_ARGS if args is None else args,
    }
