"""``make docs``: the site builds with ``--strict`` (a broken link, a page missing from the
nav, a reference block the code cannot fill or a docstring griffe cannot read fails it),
and the generated pages carry what the code declares."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from avatar_sdk import ErrorCode

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.docs


def test_the_site_builds_strict(tmp_path: Path) -> None:
    site = tmp_path / "site"
    result = subprocess.run(
        # the same command as `make docs`; `-m` so the checkout's avatar_sdk is documented
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert "WARNING" not in result.stderr, result.stderr[-4000:]

    events = (site / "events" / "index.html").read_text(encoding="utf-8")
    assert 'id="agent_text"' in events and "AgentTextPayload" in events
    trouble = (site / "troubleshooting" / "index.html").read_text(encoding="utf-8")
    assert all(f'id="{code}"' in trouble for code in ErrorCode)
    assert 'class="mermaid"' in (site / "state-machine" / "index.html").read_text(encoding="utf-8")
    api = (site / "api" / "index.html").read_text(encoding="utf-8")
    assert 'id="avatar_sdk.AvatarSession.speak"' in api
    assert (site / "assets" / "recovery-tiers.png").stat().st_size > 1000
