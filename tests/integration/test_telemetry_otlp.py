"""Telemetry exported over OTLP/HTTP by the real exporter, to a local receiver that decodes
what arrives with the ``opentelemetry-proto`` protobuf classes (nothing mocked between the
session and the bytes on the wire)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="the otel test extra")

from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from avatar_sdk.telemetry import Telemetry
from avatar_sdk.telemetry import names as n
from avatar_sdk.testing import StagingServer

from ..otlp_receiver import Receiver, attributes
from .conftest import SessionFactory


@pytest_asyncio.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with Receiver.running() as found:
        yield found


async def test_spans_and_metrics_arrive_over_otlp_http(
    staging: StagingServer, make_session: SessionFactory, receiver: Receiver
) -> None:
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{receiver.url}/v1/traces", timeout=10))
    )
    reader = PeriodicExportingMetricReader(
        OTLPMetricExporter(endpoint=f"{receiver.url}/v1/metrics", timeout=10),
        export_interval_millis=3_600_000,
    )
    meter_provider = MeterProvider(metric_readers=[reader])
    try:
        telemetry = Telemetry(tracer_provider=tracer_provider, meter_provider=meter_provider)
        session = make_session(telemetry=telemetry)
        await session.connect()
        await session.wait_for("agent_turn_ended", timeout=3)
        answered = session.expect("agent_turn_ended", timeout=5)
        await session.speak("hello over the wire")
        await answered
        thread = session.thread_id
        await session.close()
        # the exporters post from their own threads, to the receiver on this loop
        assert await asyncio.to_thread(tracer_provider.force_flush, 10_000)
        assert await asyncio.to_thread(meter_provider.force_flush, 10_000)
    finally:
        await asyncio.to_thread(tracer_provider.shutdown)
        await asyncio.to_thread(meter_provider.shutdown)
    assert receiver.content_types == {"application/x-protobuf"}
    spans = {span.name: span for span in receiver.spans()}
    assert {n.SPAN_SESSION, n.SPAN_CONNECT, n.SPAN_TURN} <= set(spans)
    root = spans[n.SPAN_SESSION]
    assert attributes(root)[n.GEN_AI_CONVERSATION_ID] == thread
    assert attributes(root)[n.SERVER_ADDRESS] == "127.0.0.1"
    turn = spans[n.SPAN_TURN]
    assert turn.parent_span_id == root.span_id and turn.trace_id == root.trace_id
    assert attributes(turn)[n.GEN_AI_OPERATION_NAME] == "invoke_agent"
    assert attributes(turn)[n.TURN_TEXT_LATENCY] > 0
    assert attributes(spans[n.SPAN_CONNECT])[n.CONNECT_STEP] == "connected"
    scopes = {
        scope.scope.name: scope.schema_url
        for request in receiver.traces
        for resource in request.resource_spans
        for scope in resource.scope_spans
    }
    assert scopes == {n.SCOPE: n.SCHEMA_URL}
    assert {n.METRIC_CONNECT_DURATION, n.TURN_TEXT_LATENCY} <= receiver.metric_names()
