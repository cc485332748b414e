"""The telemetry setup the fleet tests' worker processes run (``FleetTelemetry.setup``):
global providers exporting over OTLP/HTTP to the test's receiver (not a test module)."""

from __future__ import annotations

from collections.abc import Mapping

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor


def setup(options: Mapping[str, str]) -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": options["service"]}))
    exporter = OTLPSpanExporter(endpoint=f"{options['endpoint']}/v1/traces", timeout=10)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
