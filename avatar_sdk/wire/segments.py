"""Brain segments carried in ``agent_raw_text.delta`` and tool-call parsing (PROTOCOL §3.4-3.6).

The delta is a JSON *string* written by an LLM pipeline, so everything here assumes it
may be malformed, oversized or adversarial: parsing degrades to plain text instead of
failing, and tool parsing never raises and does bounded work.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from .clamp import clamp_text

__all__ = [
    "GENUI_RUNTIMES",
    "SPOKEN_TYPES",
    "BrainSegment",
    "ToolCall",
    "canonical_json",
    "parse_delta",
    "parse_tool_call",
    "parse_tool_response_name",
]

SPOKEN_TYPES: Final[frozenset[str]] = frozenset({"text", "avatar", "avatar-filler"})

GENUI_RUNTIMES: Final[frozenset[str]] = frozenset(
    {
        "flashcards",
        "followups",
        "sources",
        "summary",
        "video-gallery",
        "show-link",
        "external-video",
        "content-gallery",
        "user-properties-form",
    }
)

#: Tool content beyond this many characters is not scanned (delta content is already
#: clamped to 8000; this guards segments built elsewhere).
MAX_TOOL_SCAN: Final = 65536
#: At most this many back-to-back argument objects are split out of one tool segment.
MAX_TOOL_OBJECTS: Final = 64

_RESPONDED_RE: Final = re.compile(r"^(\S+)\s+responded\b")
_WS: Final = frozenset(" \t\n\r")


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _opt_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return None


def _opt_map(value: Any) -> Mapping[str, Any] | None:
    return value if isinstance(value, dict) else None


@dataclass(frozen=True, slots=True)
class BrainSegment:
    """One parsed brain delta. ``raw`` is the wire dict (camelCase) after clamping/defaults."""

    type: str
    content: str
    speech_id: str | None
    thread_id: str | None
    message_id: str | None
    is_final: bool
    segment_number: int | None
    metadata: Mapping[str, Any] | None
    tool_metadata: Mapping[str, Any] | None
    raw: Mapping[str, Any]

    @property
    def runtime(self) -> str:
        """GenUI runtime: ``metadata.runtimeName`` or the type, minus a trailing ``-tool``.

        The CM rewrites ``type`` from the runtime name on avatar sessions, with or without
        the suffix depending on version, so both spellings must classify the same.
        """
        name = None
        if self.metadata is not None:
            name = self.metadata.get("runtimeName")
        if not isinstance(name, str) or not name:
            name = self.type
        return name.removesuffix("-tool")

    @property
    def is_spoken(self) -> bool:
        """Text that will be voiced (and so proves the brain is alive)."""
        return self.type in SPOKEN_TYPES

    @property
    def is_genui(self) -> bool:
        """A GenUI widget the user will see."""
        return self.runtime in GENUI_RUNTIMES

    @property
    def is_structured_form(self) -> bool:
        """The ``user-properties-form`` widget, which the reference client treats specially."""
        return self.runtime == "user-properties-form"

    @property
    def is_perceivable(self) -> bool:
        """Output the user can hear or see; resets the stall watchdog and spiral latch."""
        return self.is_spoken or self.is_genui

    @property
    def is_tool(self) -> bool:
        return self.type == "tool"

    @property
    def is_tool_response(self) -> bool:
        return self.type == "tool_response"

    @property
    def is_think(self) -> bool:
        return self.type == "think"


def _content_text(value: Any) -> str:
    if isinstance(value, str):
        return clamp_text(value)
    if value is None:
        return ""
    try:
        return clamp_text(json.dumps(value, ensure_ascii=False))
    except (TypeError, ValueError, RecursionError):
        return ""


def parse_delta(delta: str, envelope_speech_id: str | None) -> BrainSegment:
    """Parse an ``agent_raw_text.delta`` string; never raises.

    Non-JSON or non-object JSON becomes a ``text`` segment carrying the whole delta, as in
    the reference client, so a brain that forgets to JSON-encode still gets spoken text.
    """
    decoded: Any
    try:
        decoded = json.loads(delta) if isinstance(delta, str) else None
    except (ValueError, RecursionError):
        decoded = None
    if not isinstance(decoded, dict):
        text = clamp_text(delta) if isinstance(delta, str) else ""
        decoded = {"type": "text", "content": text}
    raw: dict[str, Any] = dict(decoded)
    seg_type = raw.get("type")
    if not isinstance(seg_type, str) or not seg_type:
        seg_type = "text"
    content = _content_text(raw.get("content"))
    speech_id = _opt_str(raw.get("speechId"))
    if speech_id is None:
        speech_id = envelope_speech_id if isinstance(envelope_speech_id, str) else None
    raw["type"] = seg_type
    raw["content"] = content
    raw["speechId"] = speech_id
    return BrainSegment(
        type=seg_type,
        content=content,
        speech_id=speech_id,
        thread_id=_opt_str(raw.get("threadId")),
        message_id=_opt_str(raw.get("messageId")),
        is_final=raw.get("isFinal") is True,
        segment_number=_opt_int(raw.get("segmentNumber")),
        metadata=_opt_map(raw.get("metadata")),
        tool_metadata=_opt_map(raw.get("tool_metadata")),
        raw=raw,
    )


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A client-side tool invocation announced by a ``tool`` segment.

    ``fused_args`` holds argument objects of *other* tools that the brain glued in front
    of this one; they are paired with names from the following ``tool_response`` segments.
    """

    name: str
    args: Mapping[str, Any]
    fused_args: tuple[Mapping[str, Any], ...]
    raw: str
    call_id: str | None
    wait_for_response: bool
    tool_type: str | None

    @property
    def dedup_key(self) -> str:
        """Key under which a repeat of the same call within a turn is dropped."""
        return f"{self.name}:{canonical_json(self.args)}"


def _object_end(text: str, start: int) -> int:
    """Index just past the balanced object starting at ``text[start] == '{'``, or -1."""
    depth = 0
    in_string = False
    escaped = False
    for i in range(start, len(text)):
        ch = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i + 1
    return -1


def _split_objects(text: str, start: int) -> list[dict[str, Any]]:
    """Top-level JSON objects laid back to back from ``start``; stops at the first bad one."""
    found: list[dict[str, Any]] = []
    pos = start
    while len(found) < MAX_TOOL_OBJECTS:
        while pos < len(text) and text[pos] in _WS:
            pos += 1
        if pos >= len(text) or text[pos] != "{":
            break
        end = _object_end(text, pos)
        if end < 0:
            break
        try:
            obj = json.loads(text[pos:end])
        except (ValueError, RecursionError):
            break
        if not isinstance(obj, dict):
            break
        found.append(obj)
        pos = end
    return found


def parse_tool_call(seg: BrainSegment) -> ToolCall | None:
    """Parse a ``tool`` segment (``"<name> <json-args>"``); ``None`` if not one. Never raises."""
    content = seg.content
    if seg.type != "tool" or not isinstance(content, str) or not content:
        return None
    scan = content[:MAX_TOOL_SCAN]
    brace = scan.find("{")
    name = (scan if brace < 0 else scan[:brace]).strip()
    if not name:
        return None
    objects = _split_objects(scan, brace) if brace >= 0 else []
    args: Mapping[str, Any] = objects[-1] if objects else {}
    call_id: str | None = None
    wait = False
    tool_type: str | None = None
    meta = seg.tool_metadata
    if isinstance(meta, Mapping):
        meta_id = meta.get("id")
        if isinstance(meta_id, str) and meta_id:
            call_id = meta_id
            wait = meta.get("wait_for_response") is True
            tool_type = _opt_str(meta.get("type"))
    return ToolCall(
        name=name,
        args=args,
        fused_args=tuple(objects[:-1]),
        raw=content,
        call_id=call_id,
        wait_for_response=wait,
        tool_type=tool_type,
    )


def parse_tool_response_name(seg: BrainSegment) -> str | None:
    """Tool name echoed by a ``tool_response`` segment (``"<name> responded with size <n>"``)."""
    if seg.type != "tool_response" or not isinstance(seg.content, str):
        return None
    match = _RESPONDED_RE.match(seg.content[:MAX_TOOL_SCAN].strip())
    return match.group(1) if match else None


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping) and not isinstance(value, dict):
        return dict(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def canonical_json(value: Any) -> str:
    """Deterministic JSON: keys sorted at every depth, arrays in order, no spaces.

    Used as the tool dedup key, so ``{"a":1,"b":2}`` and ``{"b":2,"a":1}`` are one call.
    """
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_plain
    )
