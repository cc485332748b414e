"""Telemetry exported over OTLP/HTTP by the real exporter, to a local receiver that decodes
what arrives with the ``opentelemetry-proto`` protobuf classes (nothing mocked between the
session and the bytes on the wire)."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="the otel test extra")

from aiohttp import web
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from avatar_sdk.telemetry import Telemetry
from avatar_sdk.telemetry import names as n
from avatar_sdk.testing import StagingServer

from .conftest import SessionFactory


class Receiver:
    """An OTLP/HTTP collector endpoint on 127.0.0.1: /v1/traces and /v1/metrics."""

    def __init__(self) -> None:
        self.traces: list[ExportTraceServiceRequest] = []
        self.metrics: list[ExportMetricsServiceRequest] = []
        self.content_types: set[str] = set()
        self.url = ""

    async def _body(self, request: web.Request) -> bytes:
        self.content_types.add(request.content_type)
        body = await request.read()
        return gzip.decompress(body) if request.headers.get("Content-Encoding") == "gzip" else body

    async def on_traces(self, request: web.Request) -> web.Response:
        self.traces.append(ExportTraceServiceRequest.FromString(await self._body(request)))
        return web.Response(
            body=ExportTraceServiceResponse().SerializeToString(),
            content_type="application/x-protobuf",
        )

    async def on_metrics(self, request: web.Request) -> web.Response:
        self.metrics.append(ExportMetricsServiceRequest.FromString(await self._body(request)))
        return web.Response(
            body=ExportMetricsServiceResponse().SerializeToString(),
            content_type="application/x-protobuf",
        )

    def spans(self) -> list[Any]:
        return [
            span
            for request in self.traces
            for resource in request.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        ]

    def metric_names(self) -> set[str]:
        return {
            metric.name
            for request in self.metrics
            for resource in request.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
        }


@pytest_asyncio.fixture
async def receiver() -> AsyncIterator[Receiver]:
    found = Receiver()
    app = web.Application()
    app.router.add_post("/v1/traces", found.on_traces)
    app.router.add_post("/v1/metrics", found.on_metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    found.url = f"http://127.0.0.1:{port}"
    yield found
    await runner.cleanup()


def _attributes(span: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in span.attributes:
        value = kv.value
        out[kv.key] = getattr(value, value.WhichOneof("value"))
    return out


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
        await session.wait_for("agent_turn_ended", 3)
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
    assert _attributes(root)[n.GEN_AI_CONVERSATION_ID] == thread
    assert _attributes(root)[n.SERVER_ADDRESS] == "127.0.0.1"
    turn = spans[n.SPAN_TURN]
    assert turn.parent_span_id == root.span_id and turn.trace_id == root.trace_id
    assert _attributes(turn)[n.GEN_AI_OPERATION_NAME] == "invoke_agent"
    assert _attributes(turn)[n.TURN_TIME_TO_FIRST_TEXT] > 0
    assert _attributes(spans[n.SPAN_CONNECT])[n.CONNECT_STEP] == "connected"
    scopes = {
        scope.scope.name: scope.schema_url
        for request in receiver.traces
        for resource in request.resource_spans
        for scope in resource.scope_spans
    }
    assert scopes == {n.SCOPE: n.SCHEMA_URL}
    assert {n.METRIC_CONNECT_DURATION, n.METRIC_TURN_DURATION} <= receiver.metric_names()
