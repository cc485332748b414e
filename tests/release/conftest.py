"""The documentation site, built once per test process with the same command as `make docs`
(``mkdocs build --strict``) into a temporary directory, for the docs tests of this folder."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class BuiltSite:
    """A finished ``mkdocs build --strict``: where it went and what it printed."""

    path: Path
    returncode: int
    stderr: str


@pytest.fixture(scope="session")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> BuiltSite:
    site = tmp_path_factory.mktemp("docs") / "site"
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
    return BuiltSite(site, result.returncode, result.stderr)


@pytest.fixture
def site(built_site: BuiltSite) -> Path:
    """The built site's directory; fails the test when the strict build failed or warned."""
    assert built_site.returncode == 0, built_site.stderr[-4000:]
    assert "WARNING" not in built_site.stderr, built_site.stderr[-4000:]
    return built_site.path
