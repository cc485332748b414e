"""A local OTLP/HTTP collector endpoint for the telemetry tests (not a test module): an
aiohttp app on 127.0.0.1 that decodes every request with the ``opentelemetry-proto``
protobuf classes and keeps it."""

from __future__ import annotations

import gzip
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


def attributes(span: Any) -> dict[str, Any]:
    """A decoded span's attributes as a plain dict."""
    out: dict[str, Any] = {}
    for kv in span.attributes:
        value = kv.value
        out[kv.key] = getattr(value, value.WhichOneof("value"))
    return out


class Receiver:
    """An OTLP/HTTP collector endpoint on 127.0.0.1: /v1/traces and /v1/metrics."""

    @classmethod
    @asynccontextmanager
    async def running(cls) -> AsyncIterator[Receiver]:
        """A receiver listening on 127.0.0.1 for the block (``url``: its base URL)."""
        found = cls()
        app = web.Application()
        app.router.add_post("/v1/traces", found.on_traces)
        app.router.add_post("/v1/metrics", found.on_metrics)
        runner = web.AppRunner(app)
        await runner.setup()
        try:
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            found.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
            yield found
        finally:
            await runner.cleanup()

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
