"""OpenTelemetry spans and metrics of a real session against the staging backend.

The SDK's in-memory exporters collect what one session produces through a socket drop (with
a turn the server never took, resent once), a cold reconnect, a tool call acknowledged over
genie, a malformed frame, a restarting agent and a slow ``events()`` consumer; each span and
metric the observability page names is asserted on it, and no user text is in any attribute
unless content capture is asked for.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel test extra (dev-core) is not installed")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from avatar_sdk import AvatarError, ErrorCode
from avatar_sdk.telemetry import Telemetry
from avatar_sdk.telemetry import names as n
from avatar_sdk.testing import StagingServer
from avatar_sdk.wire import In

from .conftest import FAST, SessionFactory, until

USER_TEXTS = ("please collect my email", "are you there?", "after the cold one")


@dataclass
class Otel:
    spans: InMemorySpanExporter
    reader: InMemoryMetricReader
    tracer_provider: TracerProvider
    meter_provider: MeterProvider

    def telemetry(self, **kw: Any) -> Telemetry:
        return Telemetry(
            tracer_provider=self.tracer_provider, meter_provider=self.meter_provider, **kw
        )

    def finished(self, name: str | None = None) -> list[ReadableSpan]:
        spans = list(self.spans.get_finished_spans())
        return [s for s in spans if name is None or s.name == name]

    def metrics(self) -> dict[str, list[Any]]:
        """metric name -> its data points."""
        data = self.reader.get_metrics_data()
        out: dict[str, list[Any]] = {}
        for resource in data.resource_metrics if data else []:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    out.setdefault(metric.name, []).extend(metric.data.data_points)
        return out


@pytest.fixture
def otel() -> Iterator[Otel]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    yield Otel(exporter, reader, tracer_provider, meter_provider)
    tracer_provider.shutdown()
    meter_provider.shutdown()


def _all_attribute_text(spans: list[ReadableSpan]) -> str:
    parts: list[str] = []
    for span in spans:
        parts.append(span.name)
        parts.extend(f"{k}={v}" for k, v in (span.attributes or {}).items())
        for event in span.events:
            parts.append(event.name)
            parts.extend(f"{k}={v}" for k, v in (event.attributes or {}).items())
    return "\n".join(parts)


def _points(metrics: dict[str, list[Any]], name: str, **attrs: Any) -> list[Any]:
    return [
        p for p in metrics.get(name, []) if all(p.attributes.get(k) == v for k, v in attrs.items())
    ]


async def _run_eventful_session(
    staging: StagingServer, make_session: SessionFactory, telemetry: Telemetry
) -> Any:
    session = make_session(
        genie_url=staging.genie_url,
        telemetry=telemetry,
        config=FAST.with_(turn_confirm_timeout=0.3, tool_spiral_limit=0),
    )
    await session.connect()
    await session.wait_for("agent_turn_ended", timeout=3)  # the greeting (no turn of ours)
    slow = session.events("agent_text", max_queue=1)  # never read: it drops
    # 1. a malformed frame, a restarting agent
    protocol = session.expect("protocol_error", timeout=3)
    await staging.faults.malformed(In.AGENT_START_SPEECH)
    await protocol
    restarted = session.expect(
        "error", predicate=lambda e: e.data["code"] == "agent_restarted", timeout=3
    )
    await staging.faults.agent_crash(recoverable=True, restart_after=0.1)
    await restarted  # the next turn is held until the agent is back
    # 2. a tool call that waits for its acknowledgement
    staging.brain.tool_calls(
        ['collect_contact {"field": "email"}'], then="Thanks, noted.", wait_for_response=True
    )
    session.on_tool_call("collect_contact", lambda args, call: {"collected": args["field"]})
    call = session.expect("tool_call", timeout=3)
    answered = session.expect("agent_turn_ended", timeout=5)
    await session.speak(USER_TEXTS[0])
    call_id = (await call).data["call_id"]
    assert (await session.respond_to_tool(call_id, {"email": "a@example.com"}))["ok"]
    await answered
    # 3. a socket drop, with a turn the server took in and never answered: resent once
    conv = staging.conversations[staging.live_sids[0]]
    conv.agent_down = True
    await session.speak(USER_TEXTS[1])
    assert await until(lambda: conv.dropped_turns == [USER_TEXTS[1]], 2)
    conv.agent_down = False
    resent = session.expect("turn_resent", timeout=5)
    answered = session.expect(
        "agent_turn_ended",
        predicate=lambda e: "are you there" in (e.data["speech_id"] or ""),
        timeout=5,
    )
    await staging.faults.drop_socket(recovery=True)
    await resent
    await answered
    # 4. a cold reconnect
    cold = session.expect("reconnected", predicate=lambda e: e.data["tier"] == "cold", timeout=10)
    await staging.faults.drop_socket(recovery=False)
    await cold
    # 5. one more turn
    answered = session.expect(
        "agent_turn_ended",
        predicate=lambda e: "after the cold" in (e.data["speech_id"] or ""),
        timeout=5,
    )
    await session.speak(USER_TEXTS[2])
    await answered
    thread = session.thread_id
    await session.close()
    await slow.aclose()
    return thread


async def test_every_span_and_metric_of_an_eventful_session(
    staging: StagingServer, make_session: SessionFactory, otel: Otel
) -> None:
    thread = await _run_eventful_session(staging, make_session, otel.telemetry())
    spans = otel.finished()
    [root] = otel.finished(n.SPAN_SESSION)
    ctx = root.context
    assert ctx is not None
    attrs = root.attributes or {}
    assert attrs[n.GEN_AI_CONVERSATION_ID] == thread
    assert attrs[n.SERVER_ADDRESS] == "127.0.0.1"
    assert attrs[n.SERVER_PORT] == int(staging.url.rsplit(":", 1)[1])
    assert attrs[n.MEDIA_MODE] == "control"
    assert attrs[n.SESSION_END_REASON] == "closed"
    assert attrs[n.SESSION_RECOVERIES] == 2
    assert root.status.status_code is not StatusCode.ERROR
    assert root.parent is None
    for span in spans:  # one trace, everything under the session span
        assert span.context is not None and span.context.trace_id == ctx.trace_id
    # connect: the step it reached
    [connect] = otel.finished(n.SPAN_CONNECT)
    assert connect.parent is not None and connect.parent.span_id == ctx.span_id
    assert (connect.attributes or {})[n.CONNECT_STEP] == "connected"
    steps = [e.attributes[n.CONNECT_STEP] for e in connect.events if e.attributes]
    assert steps[:2] == ["socket", "joining"] and "approving" in steps
    # turns
    turns = otel.finished(n.SPAN_TURN)
    assert len(turns) == 3
    for turn in turns:
        t = turn.attributes or {}
        assert t[n.GEN_AI_OPERATION_NAME] == "invoke_agent"
        assert t[n.TURN_SOURCE] == "speak"
        assert t[n.TURN_INTERRUPTED] is False
        assert 0 < t[n.TURN_TEXT_LATENCY] <= t[n.TURN_GENERATED_LATENCY] < 10
        assert n.TURN_AUDIO_LATENCY not in t  # media=False: no frame is ever heard
        assert turn.parent is not None and turn.parent.span_id == ctx.span_id
    resent = [t for t in turns if (t.attributes or {}).get(n.TURN_RESENT)]
    assert len(resent) == 1
    assert (resent[0].attributes or {})[n.TURN_RESENT_TIER] == "socket"
    # recoveries: the socket tier mends the first drop; the second (recovery refused) tries
    # the socket tier, which escalates to a cold reconnect
    recoveries = [
        (r[n.RECOVERY_TIER], r[n.RECOVERY_OUTCOME])
        for r in (s.attributes or {} for s in otel.finished(n.SPAN_RECOVERY))
    ]
    assert sorted(recoveries) == [
        ("cold", "recovered"), ("socket", "escalated"), ("socket", "recovered")
    ]  # fmt: skip
    for span in otel.finished(n.SPAN_RECOVERY):
        r = span.attributes or {}
        assert r[n.RECOVERY_ATTEMPTS] >= 1
        assert r[n.RECOVERY_DURATION] >= 0
        assert r[n.RECOVERY_REASON]
        assert span.parent is not None and span.parent.span_id == ctx.span_id
    # the tool call, under the turn that made it
    [tool] = otel.finished("execute_tool collect_contact")
    t = tool.attributes or {}
    assert t[n.GEN_AI_OPERATION_NAME] == "execute_tool"
    assert t[n.GEN_AI_TOOL_NAME] == "collect_contact"
    assert t[n.GEN_AI_TOOL_CALL_ID]
    assert t[n.TOOL_WAITS] is True
    assert t[n.TOOL_HANDLER_OK] is True
    assert t[n.TOOL_ACK_RESULT] == "ok"
    parents = {s.context.span_id: s for s in turns if s.context}
    assert tool.parent is not None and tool.parent.span_id in parents
    # errors and protocol errors on the session span
    errors = [e for e in root.events if e.name == n.EVENT_ERROR]
    assert [e.attributes[n.ERROR_TYPE] for e in errors if e.attributes] == ["agent_restarted"]
    assert [e.name for e in root.events].count(n.EVENT_PROTOCOL_ERROR) == 1
    # content capture is off: no user text, no tool argument, no agent answer anywhere
    text = _all_attribute_text(spans)
    for secret in (*USER_TEXTS, "email", "a@example.com", "Thanks, noted"):
        assert secret not in text
    # metrics
    m = otel.metrics()
    for name in (n.TURN_TEXT_LATENCY, n.TURN_GENERATED_LATENCY):
        assert sum(p.count for p in m[name]) == 3, name
    assert n.TURN_AUDIO_LATENCY not in m and n.TURN_PLAYED_LATENCY not in m
    assert sum(p.count for p in m[n.METRIC_CONNECT_DURATION]) == 1
    for tier in ("socket", "cold"):
        [point] = _points(m, n.METRIC_RECOVERY_DURATION, **{n.RECOVERY_TIER: tier})
        assert point.count == 1 and point.sum > 0
    recovery_counts = {
        (p.attributes[n.RECOVERY_TIER], p.attributes[n.RECOVERY_OUTCOME]): p.value
        for p in m[n.METRIC_RECOVERIES]
    }
    assert recovery_counts == {
        ("socket", "recovered"): 1, ("socket", "escalated"): 1, ("cold", "recovered"): 1
    }  # fmt: skip
    assert [p.value for p in m[n.METRIC_TURNS_RESENT]] == [1]
    assert [p.value for p in m[n.METRIC_PROTOCOL_ERRORS]] == [1]
    [errors_point] = m[n.METRIC_ERRORS]
    assert errors_point.attributes == {n.ERROR_TYPE: "agent_restarted"}
    assert errors_point.value == 1
    assert m[n.METRIC_EVENTS_DROPPED][0].value > 0
    for point in m[n.TURN_GENERATED_LATENCY]:
        assert point.sum < 30  # seconds, not milliseconds


async def test_content_is_captured_only_when_asked(
    staging: StagingServer, make_session: SessionFactory, otel: Otel
) -> None:
    session = make_session(
        genie_url=staging.genie_url, telemetry=otel.telemetry(capture_content=True)
    )
    await session.connect()
    await session.wait_for("agent_turn_ended", timeout=3)
    staging.brain.tool_calls(['collect_contact {"field": "email"}'], then="Thanks, noted.")
    session.on_tool_call("collect_contact", lambda args, call: {"collected": args["field"]})
    answered = session.expect("agent_turn_ended", timeout=5)
    await session.speak("please collect my email")
    await answered
    await session.close()
    [turn] = otel.finished(n.SPAN_TURN)
    attrs = turn.attributes or {}
    [message] = json.loads(str(attrs[n.GEN_AI_INPUT_MESSAGES]))
    assert message == {
        "role": "user",
        "parts": [{"type": "text", "content": "please collect my email"}],
    }
    assert "Thanks, noted." in str(attrs[n.GEN_AI_OUTPUT_MESSAGES])
    [tool] = otel.finished("execute_tool collect_contact")
    t = tool.attributes or {}
    assert json.loads(str(t[n.GEN_AI_TOOL_CALL_ARGUMENTS])) == {"field": "email"}
    assert json.loads(str(t[n.GEN_AI_TOOL_CALL_RESULT])) == {"collected": "email"}
    assert t[n.TOOL_WAITS] is False  # no acknowledgement expected: ended with its result


async def test_a_failed_connect_records_its_step_and_error_type(
    staging: StagingServer, make_session: SessionFactory, otel: Otel
) -> None:
    staging.faults.withhold("showAgent")
    session = make_session(telemetry=otel.telemetry())
    with pytest.raises(AvatarError) as failed:
        await session.connect()
    assert failed.value.code is ErrorCode.AGENT_TIMEOUT
    [connect] = otel.finished(n.SPAN_CONNECT)
    attrs = connect.attributes or {}
    assert attrs[n.CONNECT_STEP] == "agent"
    assert attrs[n.ERROR_TYPE] == "agent_timeout"
    assert connect.status.status_code is StatusCode.ERROR
    [root] = otel.finished(n.SPAN_SESSION)
    assert (root.attributes or {})[n.ERROR_TYPE] == "agent_timeout"
    assert root.status.status_code is StatusCode.ERROR
    [point] = otel.metrics()[n.METRIC_ERRORS]
    assert point.attributes == {n.ERROR_TYPE: "agent_timeout"}


async def test_voice_and_interrupted_turns(
    staging: StagingServer, make_session: SessionFactory, otel: Otel
) -> None:
    session = make_session(telemetry=otel.telemetry())
    await session.connect()
    await session.wait_for("agent_talking", timeout=3, predicate=lambda e: not e.data["talking"])
    # a voice turn: the server hands the user's utterance to the brain
    answered = session.expect("agent_turn_ended", timeout=5)
    assert await staging.brain.voice_turn("what time is it") == 1
    await answered
    # a typed turn cut by interrupt(), then one cut by the next turn
    staging.speech_time_scale = 4.0  # a word lasts 0.4 s: the answers are long
    staging.brain.reply(" ".join(f"word{i}" for i in range(20)))
    talking = session.expect("agent_talking", predicate=lambda e: e.data["talking"], timeout=3)
    await session.speak("tell me a long story")
    await talking
    interrupted = session.expect("agent_interrupted", timeout=3)
    await session.interrupt()
    await interrupted
    staging.brain.reply(" ".join(f"word{i}" for i in range(20)))
    talking = session.expect("agent_talking", predicate=lambda e: e.data["talking"], timeout=3)
    await session.speak("another long one")
    await talking
    staging.speech_time_scale = 1.0
    answered = session.expect(
        "agent_turn_ended",
        predicate=lambda e: "never mind" in (e.data["speech_id"] or ""),
        timeout=10,
    )
    await session.speak("never mind")
    await answered
    await session.close()
    turns = [s.attributes or {} for s in otel.finished(n.SPAN_TURN)]
    assert [(t[n.TURN_SOURCE], t.get(n.TURN_INTERRUPT_REASON)) for t in turns] == [
        ("voice", None),
        ("speak", "interrupt"),
        ("speak", "new_turn"),
        ("speak", None),
    ]
    assert [t[n.TURN_INTERRUPTED] for t in turns] == [False, True, True, False]
    # a voice turn the SDK did not time (no uplink of its own: media=False) has no figures;
    # they count from the end of speech the SDK finds (docs/latency.md)
    assert n.TURN_TEXT_LATENCY not in turns[0]
    assert "what time is it" not in _all_attribute_text(otel.finished())
