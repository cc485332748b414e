"""What a replay matches a client's outbound events on (pure: no I/O, no asyncio).

One matcher for both ways of replaying a cassette (the recorded calls re-run, or the
user's own code driving): an outbound event matches a waiting record of the same link by
name, and a typed turn by its text and flags; the payload is checked against a golden
shape where the record states one. A cassette recorded without content holds
placeholders (``user-text-1``...) where the user's text was: :class:`UserTexts` binds each
placeholder to the first text the client sends in its place (one text per placeholder, one
placeholder per text), and gives the user's text back in what the server sends.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, TypeVar

from ...wire.names import Out

#: A user text's placeholder in a cassette recorded without content.
PLACEHOLDER: Final = re.compile(r"user-text-\d+")
#: How much of a user text a speechId carries (and the recorder replaced there).
SPEECH_ID_TEXT: Final = 60


def out_key(name: str, payload: Any) -> tuple[Any, ...]:
    """What an outbound event is matched on: its name, and for a typed turn its text and
    flags (a barge-in marker is not a turn)."""
    if name == Out.TEXT_ENTERED and isinstance(payload, dict):
        return (name, payload.get("text"), payload.get("isFinal"), payload.get("isSpeechStart"))
    return (name,)


_SHAPE_TYPES: Final[dict[str, type | tuple[type, ...]]] = {
    "str": str,
    "int": int,
    "bool": bool,
    "float": (int, float),
    "NoneType": type(None),
}


def shape_mismatch(payload: Any, shape: Any, where: str = "payload") -> str | None:
    """How ``payload`` differs from a golden ``shape`` (field -> type name, nested), or
    None when every field of the shape is there with its type (extra fields are fine)."""
    if shape is None:
        return None
    if isinstance(shape, dict):
        if not isinstance(payload, dict):
            return f"{where} is not an object"
        for key, sub in shape.items():
            if key not in payload:
                return f"{where}.{key} is missing"
            wrong = shape_mismatch(payload[key], sub, f"{where}.{key}")
            if wrong is not None:
                return wrong
        return None
    expected = _SHAPE_TYPES.get(str(shape))
    if expected is None:
        return None
    ok = isinstance(payload, expected) and not (expected is int and isinstance(payload, bool))
    return None if ok else f"{where} is not {shape}"


@dataclass
class UserTexts:
    """The user's texts bound to a redacted cassette's placeholders. ``redacted``: the
    cassette was recorded without content (otherwise texts are compared as they are)."""

    redacted: bool
    bound: dict[str, str] = field(default_factory=dict)  # placeholder -> the user's text

    def bindings(self, recorded: Any, sent: Any) -> dict[str, str] | None:
        """The new bindings under which ``sent`` is what ``recorded`` says (empty: it is
        already), or None when it cannot be."""
        if not (self.redacted and isinstance(recorded, str) and isinstance(sent, str)):
            return {} if recorded == sent else None
        names = PLACEHOLDER.findall(recorded)
        if not names:
            return {} if recorded == sent else None
        pattern = ""
        fresh: list[str] = []  # the placeholders this match binds
        for literal, name in zip(PLACEHOLDER.split(recorded), [*names, None], strict=True):
            pattern += re.escape(literal)
            if name is None:
                continue
            if name in self.bound:
                pattern += re.escape(self.bound[name])
            elif name in fresh:
                pattern += f"(?P=p{fresh.index(name)})"
            else:
                pattern += f"(?P<p{len(fresh)}>.+?)"
                fresh.append(name)
        found = re.fullmatch(pattern, sent, flags=re.DOTALL)
        if found is None:
            return None
        new = {name: found.group(f"p{i}") for i, name in enumerate(fresh)}
        taken = set(self.bound.values())
        if any(text in taken for text in new.values()) or len(set(new.values())) < len(new):
            return None  # one placeholder per text
        return new

    def key_bindings(
        self, recorded: tuple[Any, ...], sent: tuple[Any, ...]
    ) -> dict[str, str] | None:
        """:meth:`bindings` over two :func:`out_key` tuples, element by element."""
        if len(recorded) != len(sent):
            return None
        new: dict[str, str] = {}
        for r, s in zip(recorded, sent, strict=True):
            found = self.bindings(r, s)
            if found is None:
                return None
            new.update(found)
        return new

    def restore(self, value: Any, key: str = "") -> Any:
        """``value`` (a server event's payload) with each bound placeholder replaced by the
        user's text (cut as a speechId cuts it under a key naming a speech id)."""
        if not self.bound:
            return value
        if isinstance(value, str):
            cut = SPEECH_ID_TEXT if "speech" in key.lower() else None

            def text_of(found: re.Match[str]) -> str:
                text = self.bound.get(found.group(0))
                return found.group(0) if text is None else text[:cut]

            return PLACEHOLDER.sub(text_of, value)
        if isinstance(value, dict):
            return {k: self.restore(v, str(k)) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.restore(v, key) for v in value]
        return value


class Recorded(Protocol):
    """A recorded outbound event (a cassette ``Record`` of kind ``out``): the cassette
    package is not imported here, its reader loads the recorder's I/O with it."""

    @property
    def link(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def data(self) -> dict[str, Any]: ...


R = TypeVar("R", bound=Recorded)


def find_match(
    waiting: Iterable[R], name: str, payload: Any, link: int | None, texts: UserTexts
) -> tuple[R, dict[str, str]] | None:
    """The first waiting ``out`` record an outbound event of ``link`` matches, with the
    text bindings the match makes (not made yet: :attr:`UserTexts.bound` is the caller's
    to update once it takes the match), or None."""
    sent = out_key(name, payload)
    for record in waiting:
        if record.link != link:
            continue
        new = texts.key_bindings(out_key(record.name, record.data.get("payload")), sent)
        if new is not None:
            return record, new
    return None


__all__ = ["PLACEHOLDER", "Recorded", "UserTexts", "find_match", "out_key", "shape_mismatch"]
