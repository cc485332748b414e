"""One latency vocabulary (issue 30): a turn's figures agree on its ``Reply``, the
``turn_latency`` event, its span and its metrics, over real WebRTC against the staging
backend; ``ask(..., wait_for_playout=True)`` knows when the reply was played; a turn the
user speaks into the uplink reports voice-to-voice."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel test extra (dev-core) is not installed")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from avatar_sdk.events.bus import Event
from avatar_sdk.media import ToneSource
from avatar_sdk.session.core import latency
from avatar_sdk.telemetry import Telemetry
from avatar_sdk.telemetry import names as n
from avatar_sdk.testing import StagingServer

from .conftest import FAST, SessionFactory

FIGURES = (*latency.FIGURES, latency.VOICE_TO_VOICE)


class Otel:
    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def telemetry(self) -> Telemetry:
        return Telemetry(tracer_provider=self.tracer_provider, meter_provider=self.meter_provider)

    def turns(self) -> list[dict[str, Any]]:
        return [
            dict(s.attributes or {})
            for s in self.spans.get_finished_spans()
            if s.name == n.SPAN_TURN
        ]

    def histograms(self) -> dict[tuple[str, str], list[Any]]:
        """(metric name, avatar.turn.source) -> its data points."""
        data = self.reader.get_metrics_data()
        out: dict[tuple[str, str], list[Any]] = {}
        for resource in data.resource_metrics if data else []:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    for point in metric.data.data_points:
                        source = str((point.attributes or {}).get(n.TURN_SOURCE))
                        out.setdefault((metric.name, source), []).append(point)
        return out


@pytest.fixture
def otel() -> Iterator[Otel]:
    kit = Otel()
    yield kit
    kit.tracer_provider.shutdown()
    kit.meter_provider.shutdown()


def collect(session: Any, name: str) -> list[Event]:
    seen: list[Event] = []
    session.on(name, seen.append)
    return seen


async def test_one_turns_figures_agree_on_the_reply_the_event_the_span_and_the_metric(
    staging: StagingServer, make_session: SessionFactory, otel: Otel
) -> None:
    session = make_session(
        media=True,
        video=False,
        telemetry=otel.telemetry(),
        config=FAST.with_(wait_for_greeting=True, agent_timeout=5),
    )
    timed = collect(session, "turn_latency")
    async with session:
        reply = await session.ask("Hello?", timeout=15, wait_for_playout=True)
    # played means something: its last audible frame handed to the application
    assert reply.played and reply.played_latency is not None
    assert reply.text_latency is not None and reply.audio_latency is not None
    assert reply.generated_latency is not None
    assert reply.text_latency <= reply.generated_latency
    assert reply.audio_latency <= reply.played_latency
    figures = {
        latency.TEXT: reply.text_latency,
        latency.AUDIO: reply.audio_latency,
        latency.GENERATED: reply.generated_latency,
        latency.PLAYED: reply.played_latency,
    }
    [event] = [e.data for e in timed if e.data["speech_id"] == reply.speech_id]
    assert event["source"] == "speak" and event["voice_to_voice"] is None
    assert {f: event[f] for f in figures} == figures
    [span] = [t for t in otel.turns() if t[n.TURN_SOURCE] == "speak"]
    assert {f: span[n.TURN_FIGURES[f]] for f in figures} == figures
    assert n.TURN_VOICE_TO_VOICE not in span
    metrics = otel.histograms()
    for figure, value in figures.items():
        [point] = metrics[(n.TURN_FIGURES[figure], "speak")]
        assert (point.count, point.sum) == (1, pytest.approx(value)), figure


async def test_a_turn_spoken_into_the_uplink_reports_voice_to_voice(
    staging: StagingServer, make_session: SessionFactory, otel: Otel
) -> None:
    staging.brain.listen(["hello from the microphone"], min_speech=0.2, silence=0.4)
    staging.brain.reply("I heard you.")
    session = make_session(
        media=True,
        video=False,
        audio=ToneSource(),
        telemetry=otel.telemetry(),
        config=FAST.with_(overall_connect_timeout=10.0, asr_timeout=5.0),
    )
    session.mic_enabled = False  # silence until the greeting is over
    ended = collect(session, "user_speech_ended")
    async with session:
        await session.wait_for(
            "agent_talking", timeout=5, predicate=lambda e: not e.data["talking"]
        )
        onset = session.expect("user_started_talking", timeout=5)
        timed = session.expect(
            "turn_latency", predicate=lambda e: e.data["source"] == "voice", timeout=10
        )
        session.mic_enabled = True  # the user talks (a 0.3-amplitude tone)...
        await onset
        session.mic_enabled = False  # ...then stops
        event = (await timed).data
    assert len(ended) == 1 and ended[0].data["duration"] > 0.2
    assert "microphone" in (event["speech_id"] or "")
    v2v = event["voice_to_voice"]
    assert v2v is not None and v2v == event["audio_latency"]
    assert v2v > 0.4  # the server's own end-of-utterance silence comes first
    [span] = [t for t in otel.turns() if t[n.TURN_SOURCE] == "voice"]
    assert span[n.TURN_VOICE_TO_VOICE] == v2v
    [point] = otel.histograms()[(n.TURN_VOICE_TO_VOICE, "voice")]
    assert (point.count, point.sum) == (1, pytest.approx(v2v))
