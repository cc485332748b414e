"""The OpenTelemetry instrumentation of a session: a subscriber, never a part of the core.

:class:`Telemetry` resolves the tracer and meter providers (given, or the global ones) and
attaches a :class:`_SessionTelemetry` to each session it instruments. That object listens
to the session's public events (``session.on``) and is one of its observers
(``session.taps``, :mod:`avatar_sdk.observe`: a turn requested or sent, an ``interrupt()``,
a tool dispatched or acknowledged) and turns them into spans and metrics; the session
itself never calls OpenTelemetry. With no provider set (the API's defaults), nothing is
attached at all. Names: :mod:`avatar_sdk.telemetry.names`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.metrics import Counter, Histogram, MeterProvider
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, TracerProvider

from ..events.stream import Event
from ..logs import sdk_logger
from ..observe import Observer, Point
from . import names as n

log = sdk_logger(__name__)

__all__ = ["Telemetry", "is_configured"]

#: Longest text kept per content attribute (``capture_content=True``), characters.
CONTENT_LIMIT = 4096
#: Events the instrumentation subscribes to (by name: ``"*"`` would cost a call per event).
#: ``agent_text``, the stream's hot path, is subscribed only while a sent turn waits for its
#: first spoken text (or, capturing content, while a turn is open): the rest of an answer's
#: stream costs nothing.
_EVENTS = (
    "state_changed", "connected", "reconnecting", "reconnected", "media_recovering",
    "media_recovered", "gave_up", "ended", "error", "protocol_error", "agent_speech_started",
    "agent_turn_ended", "agent_interrupted", "user_started_talking", "user_speech_ended",
    "user_transcription", "turn_latency",
    "tool_call", "tool_call_result", "tool_call_invalid", "turn_resent",
    "tool_spiral_recovering", "queued",
)  # fmt: skip


def is_configured(tracer_provider: Any, meter_provider: Any) -> tuple[bool, bool]:
    """Whether each provider records anything: not the API's default (a proxy that nothing
    was ever set behind) and not an explicit no-op."""
    from opentelemetry.metrics._internal import _ProxyMeterProvider  # noqa: PLC0415

    tracing = not isinstance(tracer_provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)
    metering = not isinstance(meter_provider, _ProxyMeterProvider | metrics.NoOpMeterProvider)
    return tracing, metering


@dataclass
class _Instruments:
    tracer: trace.Tracer
    histograms: dict[str, Histogram]
    counters: dict[str, Counter]
    capture_content: bool


class Telemetry:
    """OpenTelemetry traces and metrics for the sessions it is attached to.

    ``AvatarSession(..., telemetry=Telemetry())`` or ``Telemetry().attach(session)`` (or
    :func:`avatar_sdk.telemetry.instrument`). ``tracer_provider`` / ``meter_provider``:
    None uses the global ones (``trace.set_tracer_provider``...); with neither configured
    nothing is attached and a session costs nothing. The providers are resolved at the
    first ``attach``. ``capture_content``: put user and agent text (turn texts, tool
    arguments and results) in span attributes; off by default, as the GenAI conventions
    ask. One ``Telemetry`` may instrument any number of sessions.
    """

    def __init__(
        self,
        *,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        capture_content: bool = False,
    ) -> None:
        self._tracer_provider = tracer_provider
        self._meter_provider = meter_provider
        self.capture_content = bool(capture_content)
        self._instruments: _Instruments | None = None
        self._resolved = False

    def __repr__(self) -> str:
        return f"<Telemetry capture_content={self.capture_content}>"

    def instruments(self) -> _Instruments | None:
        """The tracer and the instruments (None: no provider records anything)."""
        if self._resolved:
            return self._instruments
        self._resolved = True
        tp = self._tracer_provider or trace.get_tracer_provider()
        mp = self._meter_provider or metrics.get_meter_provider()
        tracing, metering = is_configured(tp, mp)
        if not (tracing or metering):
            log.debug("no OpenTelemetry provider is set: sessions are not instrumented")
            return None
        from .._version import __version__  # noqa: PLC0415

        tracer = (
            tp.get_tracer(n.SCOPE, __version__, schema_url=n.SCHEMA_URL)
            if tracing
            else trace.NoOpTracer()
        )
        meter = (mp if metering else metrics.NoOpMeterProvider()).get_meter(
            n.SCOPE, __version__, schema_url=n.SCHEMA_URL
        )
        histograms = {
            name: meter.create_histogram(
                name,
                unit=unit,
                description=text,
                explicit_bucket_boundaries_advisory=list(n.LATENCY_BUCKETS),
            )
            for name, (unit, text) in n.HISTOGRAMS.items()
        }
        counters = {
            name: meter.create_counter(name, unit=unit, description=text)
            for name, (unit, text) in n.COUNTERS.items()
        }
        self._instruments = _Instruments(tracer, histograms, counters, self.capture_content)
        return self._instruments

    def attach(self, session: Any) -> None:
        """Instrument ``session`` (an ``AvatarSession`` not yet connected, typically)."""
        instruments = self.instruments()
        if instruments is not None:
            _SessionTelemetry(session, instruments)


# -- one session -------------------------------------------------------------------------------
@dataclass
class _Turn:
    span: Span
    started: float
    source: str
    sent: bool = False
    answered: bool = False
    first_text: float | None = None
    #: Its figures come with the session's ``turn_latency`` event (a typed turn, or a
    #: spoken one whose end of speech the SDK found); ``generated``: its answer ended.
    timed: bool = False
    generated: bool = False
    cut: str | None = None  # cut short while its figures were still to come
    speech_id: str | None = None  # its answer's (which turn_latency event is its own)
    texts: list[str] = field(default_factory=list)
    answer: list[str] = field(default_factory=list)


@dataclass
class _Tool:
    span: Span
    name: str
    call_id: str | None
    waits: bool


def _content(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text[:CONTENT_LIMIT]


def _messages(role: str, texts: list[str]) -> str:
    """GenAI message JSON: one message of text parts."""
    parts = [{"type": "text", "content": t} for t in texts]
    return _content([{"role": role, "parts": parts}])


class _SessionTelemetry(Observer):
    """The spans and metrics of one session, fed by its events and its observer facts."""

    def __init__(self, session: Any, instruments: _Instruments) -> None:
        self._session = session
        self._i = instruments
        self._capture = instruments.capture_content
        info: Mapping[str, Any] = session.taps.info
        self._clock: Callable[[], float] = time.monotonic
        self._base: dict[str, Any] = {
            n.SERVER_ADDRESS: str(info.get("server_address", "")),
            n.SERVER_PORT: int(info.get("server_port", 0)),
            n.MEDIA_MODE: str(info.get("media", "")),
        }
        self._session_span: Span | None = None
        self._session_ctx: otel_context.Context | None = None
        self._connect: Span | None = None
        self._connect_step: str | None = None
        self._recoveries: dict[tuple[str, str | None], tuple[Span, float]] = {}
        self._turn: _Turn | None = None
        self._last_turn: _Turn | None = None
        self._tools: list[_Tool] = []
        self._dispatched: dict[tuple[str, str | None], bool] = {}
        self._state = "idle"
        self._turns = 0
        self._recovered = 0
        self._dropped_reported = 0
        self._text_unsubscribe: Callable[[], None] | None = None
        for name in _EVENTS:
            session.on(name, getattr(self, f"_on_{name}"))
        session.taps.add(self)

    # -- helpers ------------------------------------------------------------------------------
    def _child(
        self,
        name: str,
        attributes: dict[str, Any],
        parent: Span | None = None,
        kind: SpanKind = SpanKind.CLIENT,
    ) -> Span:
        """A span under ``parent`` (default: the session's). CLIENT for what talks to the
        backend (connect, turns); INTERNAL for the SDK's own work (recoveries, tools, which
        run in the application, as the GenAI conventions say of ``execute_tool``)."""
        ctx = (
            trace.set_span_in_context(parent)
            if parent is not None
            else self._session_ctx or self._open_session()
        )
        return self._i.tracer.start_span(name, context=ctx, kind=kind, attributes=attributes)

    def _open_session(self) -> otel_context.Context:
        span = self._i.tracer.start_span(
            n.SPAN_SESSION, kind=SpanKind.CLIENT, attributes=dict(self._base)
        )  # parent: the caller's current context (connect() runs in it)
        thread = self._session.thread_id
        if thread:
            span.set_attribute(n.GEN_AI_CONVERSATION_ID, thread)
        self._session_span = span
        self._session_ctx = trace.set_span_in_context(span)
        return self._session_ctx

    def _count(self, name: str, attributes: dict[str, Any] | None = None, value: int = 1) -> None:
        self._i.counters[name].add(value, attributes)

    def _record(self, name: str, seconds: float, attributes: dict[str, Any] | None = None) -> None:
        self._i.histograms[name].record(max(0.0, seconds), attributes)

    @staticmethod
    def _fail(span: Span, code: str, message: str | None = None) -> None:
        span.set_attribute(n.ERROR_TYPE, code)
        span.set_status(Status(StatusCode.ERROR, message or code))

    def _flush_dropped(self) -> None:
        dropped = int(self._session.stats()["events_dropped"])
        if dropped > self._dropped_reported:
            self._count(n.METRIC_EVENTS_DROPPED, None, dropped - self._dropped_reported)
            self._dropped_reported = dropped

    # -- the session and its connect -----------------------------------------------------------
    def _on_state_changed(self, event: Event) -> None:
        state = str(event.data.get("state"))
        self._state = state
        if self._session_ctx is None:
            self._open_session()
        if state.startswith("connecting_"):
            step = state.removeprefix("connecting_")
            if self._connect is None:
                self._connect = self._child(
                    n.SPAN_CONNECT, {**self._base, n.CONNECT_KIND: "initial"}
                )
            self._connect_step = step
            self._connect.set_attribute(n.CONNECT_STEP, step)
            self._connect.add_event(n.EVENT_STEP, {n.CONNECT_STEP: step})

    def _on_queued(self, event: Event) -> None:
        if self._connect is not None:
            self._connect.add_event(
                "avatar.queued", {"avatar.queued.attempt": event.data["attempt"]}
            )

    def _on_connected(self, event: Event) -> None:
        duration = float(event.data.get("duration") or 0.0)
        thread = event.data.get("thread_id")
        if thread and self._session_span is not None:
            self._session_span.set_attribute(n.GEN_AI_CONVERSATION_ID, str(thread))
        self._record(n.METRIC_CONNECT_DURATION, duration, {n.MEDIA_MODE: self._base[n.MEDIA_MODE]})
        if self._connect is not None:
            self._connect.set_attribute(n.CONNECT_STEP, "connected")
            self._connect.end()
            self._connect = None

    def _on_ended(self, event: Event) -> None:
        data = event.data
        code = data.get("code")
        failed = self._state == "failed"
        if self._connect is not None:
            if code:
                self._fail(self._connect, str(code), f"connect failed at {self._connect_step}")
            self._connect.end()
            self._connect = None
        for key in list(self._recoveries):
            recovery = self._end_recovery(key, "ended")
            if recovery is not None:
                recovery.end()
        if self._turn is not None:  # an answer generated in full was not cut by the end
            self._end_turn(None if self._turn.generated else n.INTERRUPT_SESSION_ENDED)
        for tool in self._tools:
            tool.span.end()
        self._tools.clear()
        self._flush_dropped()
        span = self._session_span
        if span is None:
            return
        thread = self._session.thread_id
        if thread:
            span.set_attribute(n.GEN_AI_CONVERSATION_ID, thread)
        span.set_attribute(n.SESSION_END_REASON, str(data.get("reason")))
        span.set_attribute(n.SESSION_TURNS, self._turns)
        span.set_attribute(n.SESSION_RECOVERIES, self._recovered)
        if failed and code:
            self._fail(span, str(code), str(data.get("message") or code))
        span.end()
        self._session_span = None

    def _on_error(self, event: Event) -> None:
        code = str(event.data.get("code"))
        self._count(n.METRIC_ERRORS, {n.ERROR_TYPE: code})
        if self._session_span is not None:
            recoverable = bool(event.data.get("recoverable"))
            self._session_span.add_event(
                n.EVENT_ERROR, {n.ERROR_TYPE: code, "avatar.error.recoverable": recoverable}
            )

    def _on_protocol_error(self, event: Event) -> None:
        self._count(n.METRIC_PROTOCOL_ERRORS)
        if self._session_span is not None:
            frame = str(event.data.get("event"))[:64]
            self._session_span.add_event(
                n.EVENT_PROTOCOL_ERROR, {"avatar.protocol_error.event": frame}
            )

    # -- recoveries ----------------------------------------------------------------------------
    def _start_recovery(self, key: tuple[str, str | None], attributes: dict[str, Any]) -> Span:
        open_ = self._recoveries.get(key)
        if open_ is not None:
            return open_[0]
        span = self._child(n.SPAN_RECOVERY, attributes, kind=SpanKind.INTERNAL)
        self._recoveries[key] = (span, self._clock())
        return span

    def _end_recovery(
        self, key: tuple[str, str | None], outcome: str, duration: float | None = None
    ) -> Span | None:
        entry = self._recoveries.pop(key, None)
        if entry is None:
            return None
        span, started = entry
        seconds = duration if duration is not None else self._clock() - started
        span.set_attribute(n.RECOVERY_OUTCOME, outcome)
        span.set_attribute(n.RECOVERY_DURATION, seconds)
        tier = key[0]
        self._count(n.METRIC_RECOVERIES, {n.RECOVERY_TIER: tier, n.RECOVERY_OUTCOME: outcome})
        if outcome == "recovered":
            self._recovered += 1
            self._record(n.METRIC_RECOVERY_DURATION, seconds, {n.RECOVERY_TIER: tier})
        return span

    def _on_reconnecting(self, event: Event) -> None:
        data = event.data
        tier = str(data.get("tier"))
        if tier == "cold":  # what the socket or media tier could not mend escalates here
            for key in [k for k in self._recoveries if k[0] != "cold"]:
                escalated = self._end_recovery(key, "escalated")
                if escalated is not None:
                    escalated.end()
        span = self._start_recovery(
            (tier, None),
            {n.RECOVERY_TIER: tier, n.RECOVERY_REASON: str(data.get("reason"))},
        )
        span.set_attribute(n.RECOVERY_ATTEMPTS, int(data.get("attempt") or 1))

    def _on_reconnected(self, event: Event) -> None:
        tier = str(event.data.get("tier"))
        span = self._end_recovery((tier, None), "recovered", float(event.data["duration"]))
        if span is not None:
            span.end()

    def _on_media_recovering(self, event: Event) -> None:
        data = event.data
        channel = str(data.get("channel"))
        span = self._start_recovery(
            ("media", channel),
            {
                n.RECOVERY_TIER: "media",
                n.RECOVERY_CHANNEL: channel,
                n.RECOVERY_REASON: str(data.get("reason")),
            },
        )
        span.set_attribute(n.RECOVERY_ATTEMPTS, int(data.get("attempt") or 1))
        span.set_attribute(n.RECOVERY_METHOD, str(data.get("method")))

    def _on_media_recovered(self, event: Event) -> None:
        data = event.data
        key = ("media", str(data.get("channel")))
        span = self._end_recovery(key, "recovered", float(data["duration"]))
        if span is not None:
            span.set_attribute(n.RECOVERY_METHOD, str(data.get("method")))
            span.end()

    def _on_gave_up(self, event: Event) -> None:
        data = event.data
        span = self._end_recovery((str(data.get("tier")), None), "gave_up")
        if span is not None:
            span.set_attribute(n.RECOVERY_ATTEMPTS, int(data.get("attempts") or 0))
            self._fail(span, str(data.get("code")))
            span.end()

    # -- turns -------------------------------------------------------------------------------
    def session_call(self, name: str, args: dict[str, Any]) -> None:
        if name == "interrupt":  # accepted: the barge-in marker goes out next
            turn = self._turn
            if turn is not None and turn.sent:
                self._end_turn(n.INTERRUPT_CALLED)

    def point(self, point: Point, data: Mapping[str, Any]) -> None:
        if point is Point.TURN_REQUESTED:
            turn = self._turn
            if turn is not None and not turn.sent:
                turn.span.set_attribute(n.TURN_HELD, True)  # held: joins the turn it waits with
                turn.texts.append(str(data["text"]))
                return
            self._begin_turn("speak", str(data["text"]))
        elif point is Point.TURN_SENT:
            turn = self._turn
            if data.get("resent"):
                if turn is None:  # the spiral tier's resend: a turn of its own
                    turn = self._begin_turn("speak", str(data["text"]))
                turn.span.set_attribute(n.TURN_RESENT, True)
            elif turn is None:
                turn = self._begin_turn("speak", str(data["text"]))
            turn.sent = turn.timed = True
            self._watch_text(self._capture or turn.first_text is None)
        elif point is Point.TOOL_DISPATCHED:
            self._dispatched[(str(data["name"]), data.get("call_id"))] = bool(data["waits"])
        elif point is Point.TOOL_ACKED:
            self._on_tool_acked(data)

    def _watch_text(self, on: bool) -> None:
        if on and self._text_unsubscribe is None:
            self._text_unsubscribe = self._session.on("agent_text", self._on_agent_text)
        elif not on and self._text_unsubscribe is not None:
            self._text_unsubscribe()
            self._text_unsubscribe = None

    def _begin_turn(self, source: str, text: str) -> _Turn:
        if self._turn is not None:  # its figures did not come: answered, or cut short
            previous = self._turn
            self._end_turn(previous.cut or (None if previous.generated else n.INTERRUPT_NEW_TURN))
        attributes: dict[str, Any] = {
            n.GEN_AI_OPERATION_NAME: n.OP_INVOKE_AGENT,
            n.TURN_SOURCE: source,
            n.SERVER_ADDRESS: self._base[n.SERVER_ADDRESS],
        }
        thread = self._session.thread_id
        if thread:
            attributes[n.GEN_AI_CONVERSATION_ID] = thread
        span = self._child(n.SPAN_TURN, attributes)
        self._turn = turn = _Turn(span, self._clock(), source, sent=source == "voice")
        if text:
            turn.texts.append(text)
        self._turns += 1
        self._watch_text(turn.sent)
        return turn

    def _end_turn(self, interrupted: str | None) -> None:
        turn, self._turn = self._turn, None
        if turn is None:
            return
        self._watch_text(False)
        self._last_turn = turn
        span = turn.span
        span.set_attribute(n.TURN_INTERRUPTED, interrupted is not None)
        if interrupted is not None:
            span.set_attribute(n.TURN_INTERRUPT_REASON, interrupted)
        if self._capture:
            span.set_attribute(n.GEN_AI_INPUT_MESSAGES, _messages("user", turn.texts))
            if turn.answer:
                span.set_attribute(
                    n.GEN_AI_OUTPUT_MESSAGES, _messages("assistant", ["".join(turn.answer)])
                )
        for tool in [t for t in self._tools if not t.waits]:
            tool.span.end()
            self._tools.remove(tool)
        span.end()
        self._flush_dropped()

    def _on_user_started_talking(self, event: Event) -> None:
        # A voice turn starts when the user does: the hand-off (user_transcription) comes as
        # the answer is already generating, too late to time anything from.
        self._begin_turn("voice", "")

    def _on_user_speech_ended(self, event: Event) -> None:
        # The SDK found the end of the user's speech on its uplink: the turn's figures
        # (voice_to_voice among them) come with its turn_latency event.
        turn = self._turn
        if turn is None or turn.source != "voice" or turn.answered:
            turn = self._begin_turn("voice", "")
        turn.timed = True

    def _on_user_transcription(self, event: Event) -> None:
        if not event.data.get("final"):
            return
        text = str(event.data.get("text") or "")
        turn = self._turn
        if turn is not None and turn.source == "voice":
            turn.texts = [text]
        else:
            self._begin_turn("voice", text)

    def _on_agent_speech_started(self, event: Event) -> None:
        turn = self._turn
        if turn is not None and turn.sent and event.data.get("is_new_turn"):
            turn.answered = True
            speech = event.data.get("speech_id")
            if turn.speech_id is None and isinstance(speech, str):
                turn.speech_id = speech
            if speech and self._capture:
                turn.span.set_attribute(n.TURN_SPEECH_ID, str(speech))

    def _on_agent_text(self, event: Event) -> None:
        turn = self._turn
        if turn is None or not turn.sent or not event.data.get("spoken"):
            return
        turn.answered = True
        if self._capture:
            turn.answer.append(str(event.data.get("content") or ""))
        if turn.first_text is None:  # the moment, on the span; its figure: turn_latency
            turn.first_text = self._clock() - turn.started
            turn.span.add_event(n.EVENT_FIRST_TEXT)
            if not self._capture:
                self._watch_text(False)  # the rest of the answer's stream: not observed

    def _on_agent_turn_ended(self, event: Event) -> None:
        turn = self._turn
        if turn is not None and turn.sent and turn.answered:
            if turn.timed:
                turn.generated = True  # its voice plays on: the span ends with its figures
            else:
                self._end_turn(None)

    def _on_turn_latency(self, event: Event) -> None:
        """A turn's figures, final: the same values as its ``Reply``, recorded under the
        same names (``avatar.turn.<figure>``) on the span and the histograms."""
        data = event.data
        source = str(data.get("source"))
        attrs = {n.TURN_SOURCE: source}
        turn = self._turn
        ours = (
            turn is not None
            and turn.timed
            and turn.source == source
            and turn.speech_id == data.get("speech_id")
        )
        for figure, name in n.TURN_FIGURES.items():
            value = data.get(figure)
            if isinstance(value, int | float) and not isinstance(value, bool):
                self._record(name, float(value), attrs)
                if ours and turn is not None:
                    turn.span.set_attribute(name, float(value))
        if ours and turn is not None:
            cut = turn.cut or (n.INTERRUPT_BARGE_IN if data.get("interrupted") else None)
            self._end_turn(cut)

    def _on_agent_interrupted(self, event: Event) -> None:
        turn = self._turn
        if turn is not None and turn.sent and turn.answered:
            if turn.timed:  # its figures so far still come (turn_latency)
                turn.cut, turn.generated = n.INTERRUPT_BARGE_IN, True
            else:
                self._end_turn(n.INTERRUPT_BARGE_IN)

    def _on_tool_spiral_recovering(self, event: Event) -> None:
        if self._turn is not None:
            self._end_turn(n.INTERRUPT_TOOL_SPIRAL)

    def _on_turn_resent(self, event: Event) -> None:
        tier = str(event.data.get("tier"))
        self._count(n.METRIC_TURNS_RESENT, {n.RECOVERY_TIER: tier})
        turn = self._turn or self._last_turn
        if turn is not None:
            turn.span.set_attribute(n.TURN_RESENT, True)
            turn.span.set_attribute(n.TURN_RESENT_TIER, tier)
            turn.span.add_event(n.EVENT_RESENT, {n.RECOVERY_TIER: tier})

    # -- tools -------------------------------------------------------------------------------
    def _on_tool_call(self, event: Event) -> None:
        data = event.data
        name, call_id = str(data.get("name")), data.get("call_id")
        waits = self._dispatched.pop((name, call_id), False)
        attributes: dict[str, Any] = {
            n.GEN_AI_OPERATION_NAME: n.OP_EXECUTE_TOOL,
            n.GEN_AI_TOOL_NAME: name,
            n.GEN_AI_TOOL_TYPE: n.TOOL_TYPE_FUNCTION,
            n.TOOL_WAITS: waits,
        }
        if call_id:
            attributes[n.GEN_AI_TOOL_CALL_ID] = str(call_id)
        if self._capture:
            attributes[n.GEN_AI_TOOL_CALL_ARGUMENTS] = _content(data.get("args"))
        parent = self._turn.span if self._turn is not None else None
        span = self._child(f"{n.SPAN_TOOL_PREFIX} {name}", attributes, parent, SpanKind.INTERNAL)
        self._tools.append(_Tool(span, name, call_id, waits))

    def _find_tool(self, name: str | None, call_id: Any) -> _Tool | None:
        for tool in self._tools:
            if (call_id and tool.call_id == call_id) or (not call_id and tool.name == name):
                return tool
        return None

    def _on_tool_call_result(self, event: Event) -> None:
        call = event.data.get("call") or {}
        tool = self._find_tool(call.get("name"), call.get("call_id"))
        if tool is None:
            return
        ok = bool(event.data.get("ok"))
        tool.span.set_attribute(n.TOOL_HANDLER_OK, ok)
        if not ok:
            self._fail(tool.span, "tool_handler_error")
        elif self._capture:
            tool.span.set_attribute(n.GEN_AI_TOOL_CALL_RESULT, _content(event.data.get("value")))
        if not tool.waits:
            tool.span.end()
            self._tools.remove(tool)

    def _on_tool_call_invalid(self, event: Event) -> None:
        call = event.data.get("call") or {}
        name = str(call.get("name"))
        self._dispatched.pop((name, call.get("call_id")), None)
        attributes = {n.GEN_AI_OPERATION_NAME: n.OP_EXECUTE_TOOL, n.GEN_AI_TOOL_NAME: name}
        span = self._child(
            f"{n.SPAN_TOOL_PREFIX} {name}", attributes, self._turn.span if self._turn else None
        )
        self._fail(span, "invalid_tool_arguments")
        span.end()

    def _on_tool_acked(self, data: Mapping[str, Any]) -> None:
        tool = self._find_tool(data.get("name"), data.get("call_id"))
        if tool is None:
            return
        reason = str(data.get("reason"))
        tool.span.set_attribute(n.TOOL_ACK_RESULT, reason)
        status = data.get("status")
        if status is not None:
            tool.span.set_attribute(n.TOOL_ACK_STATUS, int(status))
        if data.get("ok"):
            tool.span.end()
            self._tools.remove(tool)
        elif reason in ("unknown_or_stale", "session_rebuilt"):
            self._fail(tool.span, f"tool_ack_{reason}")
            tool.span.end()
            self._tools.remove(tool)
        # a failed delivery (timeout, http error) stays open: the call may be retried
