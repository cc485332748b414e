"""Trace context for the fleet runner: one run is one trace, across processes and machines.

The driver opens the run's span and writes its W3C trace context (``traceparent``,
``tracestate``) into the plan's :class:`~avatar_sdk.fleet.plan.FleetTelemetry`, which is
plain picklable data; every worker (the driver's own loop, a ``spawn`` process, a Ray
actor) opens its worker span as a child of that context, and a span per session beneath
it, inside which the session's own spans are made. Imported by the fleet only when a plan
asks for telemetry.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from ..logs import sdk_logger
from . import names as n
from .otel import Telemetry

log = sdk_logger(__name__)

__all__ = ["carrier_of", "flush_global_providers", "span", "tracer_of"]

#: W3C Trace Context only: the carrier must mean the same in every process, whatever
#: propagators the application configured.
_W3C = TraceContextTextMapPropagator()


def tracer_of(telemetry: Telemetry) -> trace.Tracer | None:
    """The tracer ``telemetry`` records with (None: nothing is configured)."""
    instruments = telemetry.instruments()
    return instruments.tracer if instruments is not None else None


def carrier_of(span_: Span) -> dict[str, str]:
    """The W3C trace context of ``span_``: ``{"traceparent": ..., ["tracestate": ...]}``."""
    carrier: dict[str, str] = {}
    _W3C.inject(carrier, context=trace.set_span_in_context(span_))
    return carrier


@contextmanager
def span(
    tracer: trace.Tracer | None,
    name: str,
    attributes: Mapping[str, Any],
    carrier: Mapping[str, str] | None = None,
) -> Iterator[Span | None]:
    """A span made current for the block (its parent: ``carrier``'s context if given, else
    the current one); None and nothing at all without a tracer. An exception escaping the
    block marks it failed with the exception's type as ``error.type``."""
    if tracer is None:
        yield None
        return
    parent = _W3C.extract(dict(carrier)) if carrier else None
    with tracer.start_as_current_span(
        name,
        context=parent,
        kind=SpanKind.INTERNAL,
        attributes=dict(attributes),
        record_exception=False,
        set_status_on_exception=False,
    ) as current:
        try:
            yield current
        except BaseException as exc:
            current.set_attribute(n.ERROR_TYPE, type(exc).__name__)
            current.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            raise


async def flush_global_providers(timeout: float = 10.0) -> None:
    """Export what this process's global providers still hold (a worker process is about to
    exit, and batching processors would lose their last spans); off the loop."""
    for provider in (trace.get_tracer_provider(), metrics.get_meter_provider()):
        flush = getattr(provider, "force_flush", None)
        if flush is None:
            continue
        try:
            await asyncio.to_thread(flush, int(timeout * 1000))
        except Exception as exc:  # an exporter's trouble must not fail the worker
            log.warning("flushing telemetry failed: %s", type(exc).__name__)
