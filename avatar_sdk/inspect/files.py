"""The file side of ``avatar-sdk inspect``: read a cassette or a journal (which one, the
first line says), and write the page. The pure parts are :mod:`.core` and :mod:`.render`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..cassette.format import HEADER_KIND, MAX_LINE, load
from ..errors import AvatarError, ErrorCode
from .core.from_cassette import timeline_from_cassette
from .core.from_journal import timelines_from_journal
from .core.timeline import Timeline
from .render import render_page


def bad_record(source: str, detail: str) -> AvatarError:
    return AvatarError(
        ErrorCode.INVALID_ARGUMENT, f"{source}: not a cassette or a journal: {detail}"
    )


def first_line(path: Path) -> dict[str, Any]:
    try:
        with path.open(encoding="utf-8") as file:
            line = file.readline(MAX_LINE)
    except (OSError, UnicodeDecodeError) as exc:
        raise bad_record(str(path), f"cannot read it ({type(exc).__name__})") from None
    try:
        value = json.loads(line)
    except ValueError:
        raise bad_record(str(path), "line 1 is not JSON") from None
    if not isinstance(value, dict):
        raise bad_record(str(path), "line 1 is not a JSON object")
    return value


def journal_entries(path: Path) -> list[dict[str, Any]]:
    """A journal's lines; a partial last line (the process died mid-write) is left out."""
    text = path.read_text(encoding="utf-8")
    entries = []
    lines = text.splitlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError:
            if number == len(lines) and not text.endswith("\n"):
                break
            raise bad_record(str(path), f"line {number} is not JSON") from None
        if not isinstance(value, dict) or "event" not in value:
            raise bad_record(str(path), f"line {number} is not a journal line")
        entries.append(value)
    return entries


def read_timelines(path: str | Path) -> list[Timeline]:
    """The sessions a cassette (one) or a journal (each label) holds, drawn as timelines.
    A file that is neither raises ``AvatarError`` (``invalid_argument``)."""
    path = Path(path)
    head = first_line(path)
    if head.get("kind") == HEADER_KIND:
        return [timeline_from_cassette(load(path), title=f"{path.name} (cassette)")]
    if "event" in head:
        try:
            entries = journal_entries(path)
        except (OSError, UnicodeDecodeError) as exc:
            raise bad_record(str(path), f"cannot read it ({type(exc).__name__})") from None
        found = timelines_from_journal(entries)
        for line in found:
            line.title = f"{path.name}: session {line.title} (journal)"
        return found
    raise bad_record(str(path), "line 1 is neither a cassette header nor a journal line")


def inspect_file(source: str | Path, output: str | Path) -> list[Timeline]:
    """Draw ``source`` (a cassette or a journal) into the HTML page ``output``."""
    timelines = read_timelines(source)
    page = render_page(timelines, f"avatar-sdk inspect: {Path(source).name}")
    Path(output).write_text(page, encoding="utf-8")
    return timelines


__all__ = ["inspect_file", "read_timelines"]
