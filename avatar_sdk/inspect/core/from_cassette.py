"""A cassette (``AvatarSession(record=...)``: the session's wire) as a
:class:`~.timeline.Timeline` (pure).

A cassette holds what was said and heard, not what the SDK concluded, so the picture is
read from the wire: a link's socket opening and closing, a socket reopened in place (the
socket tier) or a new link after a loss (the cold tier), a new link opened while the
current one lives (a renewal, swapped in when the old one is closed), each typed turn from
its ``onTextEntered`` to the first spoken text and the end of its answer on the same link
(``text_latency``, ``generated_latency``; the audio figures need the media, which a cassette
samples once a second only), tool segments, the server's errors, media lanes that left
``connected``, and a second of media samples in which the avatar's audio did not grow.
The states are the phases the wire shows (connecting, connected, reconnecting,
cold_reconnecting, disconnecting); a journal holds the machine's own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from ...wire.names import In, Out
from ...wire.segments import canonical_json, parse_delta, parse_tool_call
from .timeline import Mark, Span, Timeline, Turn

if TYPE_CHECKING:  # the cassette package loads its recorder (asyncio): types only here
    from ...cassette.format import Cassette, Record

#: Inbound events that report a failure (the server's words).
SERVER_ERRORS: Final = frozenset(
    {
        In.SESSION_ERROR,
        In.THROW_TO_NO_AGENT,
        In.THROW_TO_EXCEEDED_TIER,
        In.THROW_TO_BAD_REQUEST,
        In.UNSUPPORTED_CLIENT,
        In.ASR_WEBRTC_ERROR,
        In.STV_TASK_FAIL,
        In.CONVERSATION_TIME_EXPIRED,
    }
)
#: Socket.IO's reason for a close the client asked for (not a loss).
CLIENT_CLOSE: Final = "io client disconnect"
#: Media lane states that mean the lane works.
LANE_UP: Final = frozenset({"connected", "completed"})
#: The longest text shown of an answer or a tool's arguments (characters).
MAX_SHOWN: Final = 300
#: Media counters that flow while the avatar's media does (silence included).
FLOWING: Final = ("audio_in", "video_in")


@dataclass
class OpenTurn:
    """A typed turn whose answer is still awaited on ``link``."""

    index: int
    start: float
    link: int
    text: float | None = None
    generated: float | None = None
    said: str = ""


class CassetteReading:
    """The state of one reading of a cassette's records, in order."""

    def __init__(self, title: str) -> None:
        self.timeline = Timeline(title=title, source="cassette", duration=0.0)
        self.phase: tuple[str, float, str] | None = None
        self.current: int | None = None  # the link of the moment
        self.closing = False
        self.lost: tuple[float, str, int] | None = None  # a loss: when, why, its link
        self.cold: tuple[float, int] | None = None  # a cold attempt: since, its new link
        self.renewal: tuple[float, int, int] | None = None  # a renewal: since, new, old link
        self.released: int | None = None  # the current link, closed by the client
        self.turns: list[OpenTurn] = []
        self.lanes: dict[str, tuple[str, float]] = {}  # lane -> its state, since
        self.gaps: dict[str, float] = {}  # lane -> down since
        self.sample: tuple[float, Mapping[str, Any]] | None = None

    # -- phases ----------------------------------------------------------------------------
    def enter(self, name: str, t: float, why: str) -> None:
        if self.phase is not None and self.phase[0] == name:
            return
        if self.phase is not None:
            previous, start, cause = self.phase
            self.timeline.states.append(Span("state", previous, start, t, details=cause_of(cause)))
        self.phase = (name, t, why)

    # -- records ---------------------------------------------------------------------------
    def read(self, record: Record) -> None:
        t, kind, data = record.t, record.kind, record.data
        if kind == "call":
            self.call(t, record.name)
        elif kind == "open":
            self.opened(t, record.link, bool(data.get("recovered")))
        elif kind == "drop":
            self.dropped(t, record.link, str(data.get("reason", "")))
        elif kind == "refused":
            code = str(data.get("code", "?"))
            self.mark("error", f"socket refused: {code}", t, ("link", str(record.link)))
        elif kind == "out":
            self.sent(t, record.link, record.name, data.get("payload"))
        elif kind == "in":
            args = data.get("args")
            first = args[0] if isinstance(args, list) and args else None
            self.heard(t, record.link, record.name, first if isinstance(first, dict) else {})
        elif kind == "http":
            self.http(t, data)
        elif kind == "media":
            self.lane(t, str(data.get("lane", "?")), str(data.get("state", "?")))
        elif kind == "media_sample":
            counts = data.get("counts")
            self.sampled(t, counts if isinstance(counts, dict) else {})

    def call(self, t: float, name: str) -> None:
        if name == "connect" and self.phase is None:
            self.enter("connecting", t, "connect()")
        elif name == "close":
            self.closing = True
            self.enter("disconnecting", t, "close()")
        elif name == "renew":
            self.mark("note", "renew() called", t)

    def opened(self, t: float, link: int, recovered: bool) -> None:
        if self.current is None:
            self.current = link
            self.enter("connecting", t, "socket open")
            return
        if self.lost is not None and link == self.current and recovered:
            since, reason, _ = self.lost
            self.lost = None
            self.recovery("socket", since, t, "recovered", reason)
            self.enter("connected", t, "socket recovered")
        elif self.lost is not None and link != self.current:
            since, reason, _ = self.lost
            self.lost = None
            if self.cold is None:  # the socket tier failed: a new server session
                self.recovery("socket", since, t, "failed", reason)
                self.cold = (t, link)
                self.enter("cold_reconnecting", t, "socket recovery failed")
            self.current = link
        elif link != self.current and self.lost is None and not self.closing:
            self.renewal = (t, link, self.current)
            if self.released == self.current:  # break before make: the old one is gone
                self.current = link

    def dropped(self, t: float, link: int, reason: str) -> None:
        if self.renewal is not None and link == self.current and reason == CLIENT_CLOSE:
            self.renewed(t, "make before break")
            return
        if link != self.current:
            return
        if self.closing:
            self.enter("ended", t, "socket closed")
            return
        if reason == CLIENT_CLOSE:
            self.released = link
            self.mark("note", "socket closed by the client", t, ("link", str(link)))
            return
        self.mark("drop", f"socket dropped: {reason}", t, ("link", str(link)))
        if self.lost is None and self.cold is None:
            self.lost = (t, reason, link)
            self.enter("reconnecting", t, reason)

    def renewed(self, t: float, strategy: str) -> None:
        if self.renewal is None:
            return
        since, new, old = self.renewal
        self.renewal = None
        self.current = new
        details = (("strategy", strategy), ("old link", str(old)), ("new link", str(new)))
        self.timeline.spans.append(Span("renewal", "renewal", since, t, details=details))
        self.mark("swap", "renewed (swap)", t, *details)

    def sent(self, t: float, link: int, name: str, payload: Any) -> None:
        if name == Out.APPROVED_PERMISSIONS and link == self.current:
            if self.renewal is not None and self.renewal[1] == link:
                self.renewed(t, "break before make")
            if self.cold is not None and self.cold[1] == link:
                since, _ = self.cold
                self.cold = None
                self.recovery("cold", since, t, "recovered", "new server session")
            if self.phase is not None and self.phase[0] != "connected":
                self.enter("connected", t, "permissions approved")
        elif (
            name == Out.TEXT_ENTERED
            and isinstance(payload, dict)
            and payload.get("isFinal") is True
            and payload.get("text")
        ):
            self.turns.append(OpenTurn(len(self.turns) + 1, t, link))

    def heard(self, t: float, link: int, name: str, arg: Mapping[str, Any]) -> None:
        if name in SERVER_ERRORS:
            self.mark("error", name, t, ("link", str(link)))
        elif name == In.CONVERSATION_TIME_WARNING:
            self.mark("note", "time warning", t, ("link", str(link)))
        elif name == In.AGENT_RAW_TEXT and isinstance(arg.get("delta"), str):
            envelope = arg.get("speechId")
            segment = parse_delta(arg["delta"], envelope if isinstance(envelope, str) else None)
            call = parse_tool_call(segment)
            if call is not None:
                args = canonical_json(dict(call.args))[:MAX_SHOWN]
                self.mark("tool_call", f"tool {call.name}", t, ("name", call.name), ("args", args))
            if segment.is_spoken:
                for turn in self.turns:
                    if turn.link == link and turn.generated is None:
                        if turn.text is None:
                            turn.text = t - turn.start
                        turn.said = (turn.said + segment.content)[:MAX_SHOWN]
        elif name == In.AGENT_END_TURN:
            for turn in self.turns:
                if turn.link == link and turn.generated is None:
                    turn.generated = t - turn.start

    def http(self, t: float, data: Mapping[str, Any]) -> None:
        status = data.get("status")
        if status is None or (isinstance(status, int) and status >= 400):
            what = f"{data.get('service', 'http')} {data.get('method', '')} {status}"
            self.mark("error", what, t, ("outcome", str(data.get("outcome", ""))))

    def lane(self, t: float, lane: str, state: str) -> None:
        self.lanes[lane] = (state, t)
        if state in LANE_UP:
            since = self.gaps.pop(lane, None)
            if since is not None:
                label = f"media gap ({lane})"
                span = Span("media_gap", label, since, t, details=(("lane", lane),))
                self.timeline.spans.append(span)
        elif lane not in self.gaps and state in ("disconnected", "failed", "closed"):
            self.gaps[lane] = t

    def sampled(self, t: float, counts: Mapping[str, Any]) -> None:
        previous = self.sample
        self.sample = (t, counts)
        if previous is None or self.phase is None or self.phase[0] != "connected":
            return
        since, before = previous
        for key in FLOWING:
            now, then = counts.get(key), before.get(key)
            if isinstance(now, int) and isinstance(then, int) and now == then and then > 0:
                details = (("counter", key), ("frames", str(now)))
                self.timeline.spans.append(
                    Span("media_gap", f"media stalled ({key})", since, t, details=details)
                )

    # -- helpers ---------------------------------------------------------------------------
    def mark(self, kind: str, label: str, t: float, *details: tuple[str, str]) -> None:
        self.timeline.marks.append(Mark(kind, label, t, details=tuple(details)))

    def recovery(self, tier: str, start: float, end: float, outcome: str, reason: str) -> None:
        details = (("tier", tier), ("outcome", outcome), ("reason", reason))
        label = f"{tier} recovery ({outcome})"
        self.timeline.spans.append(Span("recovery", label, start, end, tier, details))

    def finish(self, end: float) -> Timeline:
        line = self.timeline
        if self.phase is not None:
            name, start, why = self.phase
            line.states.append(Span("state", name, start, end, details=cause_of(why)))
        for turn in self.turns:
            figures = tuple(
                (name, value)
                for name, value in (
                    ("text_latency", turn.text),
                    ("generated_latency", turn.generated),
                )
                if value is not None
            )
            label = f"turn {turn.index}"
            line.turns.append(
                Turn(turn.index, turn.start, "speak", figures, label=label, said=turn.said)
            )
        for lane, since in self.gaps.items():
            line.spans.append(Span("media_gap", f"media gap ({lane})", since, None))
        line.duration = end
        return line


def cause_of(why: str) -> tuple[tuple[str, str], ...]:
    return (("because", why),) if why else ()


def timeline_from_cassette(cassette: Cassette, title: str | None = None) -> Timeline:
    """The cassette's records as a timeline (a truncated cassette: its readable prefix)."""
    reading = CassetteReading(title or cassette.source)
    for record in cassette.records:
        reading.read(record)
    end = max((r.t for r in cassette.records), default=0.0)
    line = reading.finish(end)
    line.notes.append(
        "Read from a cassette (the wire): states are the phases the wire shows, and only the "
        "figures the wire holds (text_latency, generated_latency); a journal holds the rest."
    )
    if not cassette.complete:
        line.notes.append("The cassette has no end record: the recording did not close it.")
    return line


__all__ = ["timeline_from_cassette"]
