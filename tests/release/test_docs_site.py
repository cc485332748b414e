"""``make docs``: the site builds with ``--strict`` (a broken link, a page missing from the
nav, a reference block the code cannot fill or a docstring griffe cannot read fails it),
and the generated pages carry what the code declares. The build is ``tests/release/conftest.py``'s
(one per test process); ``test_docs_offline.py`` opens the same site in a browser."""

from __future__ import annotations

from pathlib import Path

import pytest

from avatar_sdk import ErrorCode

pytestmark = pytest.mark.docs


def test_the_site_builds_strict(site: Path) -> None:
    # use_directory_urls: false (the site opens from disk): a page is NAME.html
    events = (site / "events.html").read_text(encoding="utf-8")
    assert 'id="agent_text"' in events and "AgentTextPayload" in events
    trouble = (site / "troubleshooting.html").read_text(encoding="utf-8")
    assert all(f'id="{code}"' in trouble for code in ErrorCode)
    diagram = (site / "state-machine.html").read_text(encoding="utf-8")
    assert 'class="mermaid"' in diagram
    # the bundled Mermaid is loaded where a diagram is, and only there (3.5 MB)
    assert '<script src="assets/javascripts/mermaid.min.js">' in diagram
    assert "mermaid.min.js" not in (site / "index.html").read_text(encoding="utf-8")
    assert (site / "assets" / "javascripts" / "mermaid.min.js").stat().st_size > 1_000_000
    api = (site / "api.html").read_text(encoding="utf-8")
    assert 'id="avatar_sdk.AvatarSession.speak"' in api
    assert (site / "assets" / "recovery-tiers.png").stat().st_size > 1000
