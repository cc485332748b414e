"""A journal's lines (``AvatarSession(journal=...)``: the public events of a session) as
:class:`~.timeline.Timeline` s, one per session label (pure).

The journal holds the SDK's own words for what happened: every state change, each
recovery tier with its duration, the media recoveries, renewals, errors, each turn's
``turn_latency`` figures. A turn's origin is not journaled: its ``turn_latency`` line is
written once its last figure is known, so the origin is that line's time minus the
largest figure (exact to the event loop's scheduling).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .timeline import LATENCY_FIGURES, Mark, Span, Timeline, Turn, seconds

#: Events drawn as an error mark (the code, or the tier that gave up, is its label).
ERROR_EVENTS = frozenset(
    {"error", "session_error", "protocol_error", "callback_error", "gave_up", "connect_retrying"}
)
#: Events drawn as a note mark on the axis.
NOTE_EVENTS = frozenset({"queued", "network_changed", "turn_resent", "journal_gap"})


def details_of(data: Mapping[str, Any], *skip: str) -> tuple[tuple[str, str], ...]:
    """An event's fields as hover details (durations in seconds, as numbers)."""
    out = []
    for key, value in data.items():
        if key in skip or isinstance(value, dict | list):
            continue
        out.append((key, f"{value:.4g}" if isinstance(value, float) else str(value)))
    return tuple(out)


def timelines_from_journal(entries: Iterable[Mapping[str, Any]]) -> list[Timeline]:
    """Every session of a journal, in the order each first appears (a journal file is
    appended to: several sessions may share one)."""
    by_session: dict[str, list[Mapping[str, Any]]] = {}
    for entry in entries:
        if not isinstance(entry.get("event"), str):
            continue  # not a journal line
        label = entry.get("session")
        by_session.setdefault(str(label) if label is not None else "session", []).append(entry)
    return [timeline_from_journal(lines, label) for label, lines in by_session.items()]


class JournalReading:
    """The state of one reading: the spans still open."""

    def __init__(self, title: str) -> None:
        self.timeline = Timeline(title=title, source="journal", duration=0.0)
        self.state: tuple[str, float, tuple[tuple[str, str], ...]] | None = None
        self.recovering: dict[str, tuple[float, int, str]] = {}  # tier -> start, attempts, why
        self.media: dict[str, tuple[float, Mapping[str, Any]]] = {}  # channel -> start, data
        self.renewing: tuple[float, Mapping[str, Any]] | None = None

    # -- spans ---------------------------------------------------------------------------
    def close_state(self, t: float) -> None:
        if self.state is not None:
            name, start, details = self.state
            self.timeline.states.append(Span("state", name, start, t, details=details))
            self.state = None

    def close_recovery(self, tier: str, t: float, outcome: str, data: Mapping[str, Any]) -> None:
        opened = self.recovering.pop(tier, None)
        if opened is None:
            return
        start, attempts, reason = opened
        details = (
            ("tier", tier),
            ("outcome", outcome),
            ("attempts", str(attempts)),
            ("reason", reason),
            *details_of(data, "tier"),
        )
        label = f"{tier} recovery ({outcome})"
        self.timeline.spans.append(Span("recovery", label, start, t, tier=tier, details=details))

    # -- one line --------------------------------------------------------------------------
    def read(self, t: float, name: str, data: Mapping[str, Any]) -> None:
        line = self.timeline
        if name == "state_changed":
            self.close_state(t)
            trigger = str(data.get("trigger", ""))
            self.state = (str(data.get("state", "?")), t, (("trigger", trigger),))
        elif name == "reconnecting":
            tier = str(data.get("tier", "?"))
            if tier == "cold" and "socket" in self.recovering:
                self.close_recovery("socket", t, "failed", {})
            start, attempts, reason = self.recovering.get(tier, (t, 0, ""))
            self.recovering[tier] = (start, attempts + 1, reason or str(data.get("reason", "")))
        elif name == "reconnected":
            self.close_recovery(str(data.get("tier", "?")), t, "recovered", data)
        elif name == "gave_up":
            self.close_recovery(str(data.get("tier", "?")), t, "gave up", data)
        elif name == "media_recovering":
            self.media.setdefault(str(data.get("channel", "?")), (t, data))
        elif name == "media_recovered":
            channel = str(data.get("channel", "?"))
            start, began = self.media.pop(channel, (t, {}))
            details = (("channel", channel), ("reason", str(began.get("reason", ""))))
            line.spans.append(
                Span(
                    "recovery",
                    f"media recovery ({channel})",
                    start,
                    t,
                    tier="media",
                    details=details + details_of(data, "channel"),
                )
            )
        elif name == "session_renewing":
            self.renewing = (t, data)
        elif name == "session_renewed":
            start, began = self.renewing if self.renewing is not None else (t, {})
            self.renewing = None
            facts = details_of(began) + details_of(data, "abandoned_tool_calls")
            line.spans.append(Span("renewal", "renewal", start, t, details=facts))
            line.marks.append(Mark("swap", "renewed (swap)", t, details=facts))
            gap = data.get("gap")
            if isinstance(gap, int | float) and gap > 0:
                line.spans.append(
                    Span(
                        "media_gap",
                        f"media gap {seconds(gap)} (renewal)",
                        t - gap,
                        t,
                        details=(("gap", f"{gap:.4g}"), ("during", "renewal swap")),
                    )
                )
        elif name == "turn_latency":
            figures = tuple(
                (key, float(data[key]))
                for key in LATENCY_FIGURES
                if isinstance(data.get(key), int | float) and not isinstance(data.get(key), bool)
            )
            origin = t - max((value for _, value in figures), default=0.0)
            index = len(line.turns) + 1
            line.turns.append(
                Turn(
                    index,
                    origin,
                    str(data.get("source", "speak")),
                    figures,
                    interrupted=bool(data.get("interrupted")),
                    label=f"turn {index}",
                )
            )
        elif name == "tool_call":
            line.marks.append(
                Mark("tool_call", f"tool {data.get('name', '?')}", t, details=details_of(data))
            )
        elif name == "brain_stalled":
            line.marks.append(Mark("stall", "brain stalled", t, details=details_of(data)))
        elif name in ERROR_EVENTS:
            label = str(data.get("code") or data.get("tier") or name)
            line.marks.append(Mark("error", f"{name}: {label}", t, details=details_of(data)))
        elif name in NOTE_EVENTS:
            line.marks.append(Mark("note", name, t, details=details_of(data)))
        elif name == "ended" and data.get("code"):
            line.marks.append(
                Mark("error", f"ended: {data.get('code')}", t, details=details_of(data))
            )

    def finish(self, end: float) -> Timeline:
        self.close_state(end)
        for tier in list(self.recovering):
            self.close_recovery(tier, end, "unfinished", {})
        for channel, (start, data) in self.media.items():
            details = (("channel", channel), ("outcome", "unfinished"), *details_of(data))
            self.timeline.spans.append(
                Span("recovery", f"media recovery ({channel})", start, None, "media", details)
            )
        if self.renewing is not None:
            start, data = self.renewing
            self.timeline.spans.append(
                Span("renewal", "renewal (unfinished)", start, None, details=details_of(data))
            )
        self.timeline.duration = end
        return self.timeline


def timeline_from_journal(entries: Iterable[Mapping[str, Any]], title: str) -> Timeline:
    """One session's journal lines (in the order written) as a timeline."""
    reading = JournalReading(title)
    end = 0.0
    for entry in entries:
        t = entry.get("t")
        name = entry.get("event")
        data = entry.get("data")
        if not isinstance(t, int | float) or isinstance(t, bool) or not isinstance(name, str):
            continue
        end = max(end, float(t))
        reading.read(float(t), name, data if isinstance(data, Mapping) else {})
    return reading.finish(end)


__all__ = ["timeline_from_journal", "timelines_from_journal"]
