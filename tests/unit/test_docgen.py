"""The reference pages are generated from the code (``tools/docgen.py``): whatever the code
lacks for them (a field without a docstring, a code without advice) fails here, not only in
``make docs``."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from avatar_sdk import ErrorCode, EventName, RetryPolicy, SessionConfig
from avatar_sdk.events.names import PAYLOADS
from avatar_sdk.troubleshooting import ADVICE, advice
from tools import docgen

ROOT = Path(__file__).resolve().parents[2]


def test_every_error_code_has_advice() -> None:
    assert set(ADVICE) == set(ErrorCode)
    for code in ErrorCode:
        entry = advice(code)
        assert entry.meaning.strip() and entry.action.strip(), code


@pytest.mark.parametrize("cls", [SessionConfig, RetryPolicy])
def test_every_config_field_has_a_docstring(cls: type) -> None:
    documented = {name: doc for name, _, _, doc in docgen._class_fields(cls)}
    fields = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    assert list(documented) == fields
    assert [name for name, doc in documented.items() if not doc] == []


def test_every_event_payload_has_a_docstring() -> None:
    assert set(PAYLOADS) == set(EventName)
    assert [e for e, payload in PAYLOADS.items() if not (payload.__doc__ or "").strip()] == []


def test_config_reference_lists_every_field_with_its_default() -> None:
    page = docgen.config_reference()
    assert "| `overall_connect_timeout` | `float` | `30` |" in page
    assert "| `cold_reconnect` | `RetryPolicy` | `RetryPolicy()` |" in page
    assert "| `hard_tool_spiral_limit` | `int | None` | `None` |" in page  # code span: no escape
    for f in dataclasses.fields(SessionConfig):
        assert f"| `{f.name}` |" in page


def test_events_reference_has_every_event_under_a_group() -> None:
    page = docgen.events_reference()
    headings = re.findall(r"^### `([a-z_]+)`$", page, re.MULTILINE)
    assert sorted(headings) == sorted(str(e) for e in EventName)
    groups = re.findall(r"^## (.+)$", page, re.MULTILINE)
    assert groups == ["Connectivity", "Conversation", "Guards", "Scripted video"]
    assert "| `spoken` | `bool` |" in page


def test_error_pages_link_every_code_to_its_advice() -> None:
    table, sections = docgen.errors_reference(), docgen.troubleshooting_reference()
    for code in ErrorCode:
        assert f"[`{code}`](troubleshooting.md#{code})" in table
        assert f"### `{code}` {{#{code}}}" in sections


def test_markers_expand_and_an_unknown_marker_fails() -> None:
    expanded = docgen.expand("before\n<!-- generated: state-diagram -->\nafter\n")
    assert expanded.startswith("before\n```mermaid\nstateDiagram-v2\n")
    assert expanded.endswith("```\nafter\n")
    with pytest.raises(docgen.DocgenError, match="unknown generated block"):
        docgen.expand("<!-- generated: nothing -->\n")


def test_a_missing_docstring_is_an_error() -> None:
    @dataclasses.dataclass
    class Bare:
        documented: int = 1
        """Yes."""
        undocumented: int = 2

    with pytest.raises(docgen.DocgenError, match=r"Bare\.undocumented has no docstring"):
        docgen._config_table(Bare)


def test_every_page_is_in_the_nav_and_every_nav_entry_exists() -> None:
    config = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=yaml.BaseLoader)

    def pages(node: object) -> list[str]:
        if isinstance(node, str):
            return [node]
        if isinstance(node, dict):
            return [p for value in node.values() for p in pages(value)]
        if isinstance(node, list):
            return [p for item in node for p in pages(item)]
        return []

    in_nav = set(pages(config["nav"]))
    on_disk = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    assert in_nav == on_disk


def test_sphinx_roles_left_by_griffe_become_plain_code() -> None:
    html = ":class:<code>~avatar_sdk.AvatarSession</code> and :func:<code>a.file_source</code>"
    assert docgen._drop_roles(html) == "<code>AvatarSession</code> and <code>a.file_source</code>"
