"""The picture of one session on a time axis, as data (pure): what ``avatar-sdk inspect``
draws, whichever record it was read from (a journal's public events or a cassette's wire).

Times are seconds on the session's clock from the start of the record. A span without an
``end`` lasted to the end of the record (the session was still in it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

#: The latency figures of a turn, in the SDK's vocabulary (docs/latency.md), in the order
#: they happen on a turn's time line.
LATENCY_FIGURES: Final = (
    "text_latency",
    "generated_latency",
    "audio_latency",
    "played_latency",
    "voice_to_voice",
)

#: What each kind of span or mark stands for (the legend, and the filter of a test).
SPAN_KINDS: Final = ("state", "link", "recovery", "renewal", "media_gap")
MARK_KINDS: Final = ("error", "tool_call", "drop", "stall", "swap", "note")


@dataclass(frozen=True, slots=True)
class Span:
    """Something that lasted: a state, a link, a recovery (``tier`` socket, media or
    cold), a renewal, a media gap. ``details``: label and value pairs, shown on hover."""

    kind: str
    label: str
    start: float
    end: float | None = None
    tier: str | None = None
    details: tuple[tuple[str, str], ...] = ()

    @property
    def duration(self) -> float | None:
        return None if self.end is None else max(0.0, self.end - self.start)


@dataclass(frozen=True, slots=True)
class Mark:
    """Something that happened at one moment: an error, a tool call, a socket drop, a
    stall, the swap of a renewal (``swap``)."""

    kind: str
    label: str
    t: float
    tier: str | None = None
    details: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Turn:
    """One turn of the conversation from its origin (``start``), with the figures known
    (``figures``: name in :data:`LATENCY_FIGURES` to seconds from the origin)."""

    index: int
    start: float
    source: str  # "speak" | "voice"
    figures: tuple[tuple[str, float], ...] = ()
    interrupted: bool = False
    label: str = ""
    said: str = ""  # what the avatar said (a cassette's; a journal keeps no content)

    def figure(self, name: str) -> float | None:
        return dict(self.figures).get(name)

    @property
    def end(self) -> float:
        """The last moment a figure reaches (the origin when none is known)."""
        return self.start + max((value for _, value in self.figures), default=0.0)


@dataclass
class Timeline:
    """One session, drawn: its states as bands, the rest as spans, marks and turns.

    ``source``: what it was read from (``journal`` or ``cassette``); ``notes``: what the
    record could not tell (a cassette has no states, a truncated file...)."""

    title: str
    source: str
    duration: float
    states: list[Span] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def of_kind(self, kind: str) -> list[Span | Mark]:
        """Spans and marks of ``kind`` (``recovery``, ``tool_call``...), in time order."""
        found: list[Span | Mark] = [s for s in self.spans if s.kind == kind]
        found += [m for m in self.marks if m.kind == kind]
        return sorted(found, key=lambda item: item.start if isinstance(item, Span) else item.t)


def seconds(value: float | None) -> str:
    """A duration for a human: ``12 ms``, ``1.25 s``; ``-`` when unknown."""
    if value is None:
        return "-"
    if abs(value) < 1.0:
        return f"{value * 1000:.0f} ms"
    return f"{value:.2f} s"


__all__ = [
    "LATENCY_FIGURES",
    "MARK_KINDS",
    "SPAN_KINDS",
    "Mark",
    "Span",
    "Timeline",
    "Turn",
    "seconds",
]
