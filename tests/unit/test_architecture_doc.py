"""docs/architecture.md is the code map: it names every folder of the package, and every
module path it mentions exists, so the page cannot drift from the tree."""

from __future__ import annotations

import re
from pathlib import Path

import avatar_sdk

PACKAGE = Path(avatar_sdk.__file__).parent
DOC = PACKAGE.parent / "docs" / "architecture.md"


def folders() -> set[str]:
    return {p.parent.name for p in PACKAGE.glob("*/__init__.py")} | {
        p.name for p in PACKAGE.iterdir() if p.is_dir() and any(p.glob("*.py"))
    }


def table_folders(text: str) -> set[str]:
    rows = set(re.findall(r"^\| \d+ \| `([a-z_]+)/`", text, flags=re.MULTILINE))
    return rows - {"avatar_sdk"}  # the root's own row


def mentioned_modules(text: str) -> set[str]:
    """Package module paths the page names (``session/link.py``); test files are not."""
    paths = re.findall(r"(?<![\w/])((?:[a-z_]+/)+[a-z_]+\.py)\b", text)
    return {p for p in paths if not p.startswith("tests/")}


def missing_paths(text: str) -> list[str]:
    out = []
    for path in sorted(mentioned_modules(text)):
        if not (PACKAGE / path).exists():
            out.append(path)
    return out


def test_every_folder_has_its_line() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert table_folders(text) == folders()


def test_every_module_the_map_names_exists() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert len(mentioned_modules(text)) > 15  # the ownership picture names the parts
    assert missing_paths(text) == []


def test_the_checks_fail_on_a_drifted_page() -> None:
    text = DOC.read_text(encoding="utf-8")
    drifted = text.replace("| 2 | `transport/` |", "| 2 | `transports/` |")
    assert table_folders(drifted) != folders()
    assert missing_paths(text + "\n(session/tiers.py)\n") == ["session/tiers.py"]
