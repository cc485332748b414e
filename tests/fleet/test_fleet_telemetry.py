"""A traced fleet run is one trace: the run's span in the driver, a span per worker and per
session beneath it, and each session's own spans beneath those, whether the workers run on
the driver's loop (inline), in spawned processes (local) or in Ray actors; the trace
context crosses to the workers in the picklable plan."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="the otel test extra")

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from avatar_sdk.fleet import FleetPlan, FleetTelemetry, run_fleet
from avatar_sdk.telemetry import Telemetry
from avatar_sdk.telemetry import names as n
from avatar_sdk.testing import StagingServer

from ..otlp_receiver import Receiver, attributes
from .conftest import spec_for

SCENARIO = "tests.fleet.scenarios:one_turn"
SCENARIO_FILE = f"{Path(__file__).with_name('scenarios.py')}:one_turn"


@pytest_asyncio.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with Receiver.running() as found:
        yield found


@pytest.fixture
def driver() -> Any:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


async def test_an_inline_run_is_one_trace(staging: StagingServer, driver: Any) -> None:
    provider, exporter = driver
    plan = FleetPlan(SCENARIO, spec_for(staging), sessions=2, rate=50, telemetry=FleetTelemetry())
    report = await run_fleet(plan, engine="inline", telemetry=Telemetry(tracer_provider=provider))
    assert report.ok
    spans = list(exporter.get_finished_spans())
    [run] = [s for s in spans if s.name == n.SPAN_FLEET_RUN]
    assert run.parent is None and run.context is not None
    assert {s.context.trace_id for s in spans if s.context} == {run.context.trace_id}
    by_id = {s.context.span_id: s for s in spans if s.context}

    def parent_name(span: Any) -> str:
        return by_id[span.parent.span_id].name

    [worker] = [s for s in spans if s.name == n.SPAN_FLEET_WORKER]
    assert parent_name(worker) == n.SPAN_FLEET_RUN
    sessions = [s for s in spans if s.name == n.SPAN_FLEET_SESSION]
    assert sorted((s.attributes or {})[n.FLEET_SESSION_INDEX] for s in sessions) == [0, 1]
    assert all(parent_name(s) == n.SPAN_FLEET_WORKER for s in sessions)
    assert all((s.attributes or {})[n.FLEET_STATUS] == "ok" for s in sessions)
    avatar = [s for s in spans if s.name == n.SPAN_SESSION]
    assert len(avatar) == 2 and all(parent_name(s) == n.SPAN_FLEET_SESSION for s in avatar)
    turns = [s for s in spans if s.name == n.SPAN_TURN]
    assert len(turns) == 2 and all(parent_name(s) == n.SPAN_SESSION for s in turns)


async def _assert_one_trace_across_processes(
    receiver: Receiver, exporter: InMemorySpanExporter, workers: int
) -> None:
    [run] = [s for s in exporter.get_finished_spans() if s.name == n.SPAN_FLEET_RUN]
    assert run.context is not None
    trace_id, run_id = run.context.trace_id, run.context.span_id
    remote = receiver.spans()
    assert remote, "nothing arrived from the workers"
    assert {int.from_bytes(s.trace_id, "big") for s in remote} == {trace_id}
    worker_spans = [s for s in remote if s.name == n.SPAN_FLEET_WORKER]
    assert len(worker_spans) == workers
    assert all(int.from_bytes(s.parent_span_id, "big") == run_id for s in worker_spans)
    worker_ids = {s.span_id for s in worker_spans}
    sessions = [s for s in remote if s.name == n.SPAN_FLEET_SESSION]
    assert len(sessions) == 2 and all(s.parent_span_id in worker_ids for s in sessions)
    session_ids = {s.span_id for s in sessions}
    avatar = [s for s in remote if s.name == n.SPAN_SESSION]
    assert len(avatar) == 2 and all(s.parent_span_id in session_ids for s in avatar)
    assert all(attributes(s)[n.GEN_AI_CONVERSATION_ID] for s in avatar)
    assert len([s for s in remote if s.name == n.SPAN_TURN]) == 2


async def test_local_worker_processes_join_the_run_trace(
    staging: StagingServer, driver: Any, receiver: Receiver
) -> None:
    provider, exporter = driver
    telemetry = FleetTelemetry(
        setup="tests.fleet.otel_setup:setup",
        options={"endpoint": receiver.url, "service": "fleet-local"},
    )
    plan = FleetPlan(
        SCENARIO, spec_for(staging), sessions=2, rate=50, workers=2, telemetry=telemetry
    )
    report = await asyncio.wait_for(
        run_fleet(plan, engine="local", telemetry=Telemetry(tracer_provider=provider)), 60
    )
    assert report.ok
    await _assert_one_trace_across_processes(receiver, exporter, workers=2)


@pytest.mark.xdist_group("ray")  # with the other Ray tests: see test_fleet_ray.py
@pytest.mark.timeout(240)
async def test_ray_actors_join_the_run_trace(
    staging: StagingServer, driver: Any, receiver: Receiver
) -> None:
    pytest.importorskip("ray", reason="the ray extra is not installed on this interpreter")
    from .test_fleet_ray import ray_engine  # noqa: PLC0415 - only once ray imports

    provider, exporter = driver
    telemetry = FleetTelemetry(
        setup=f"{Path(__file__).with_name('otel_setup.py')}:setup",  # by path, as actors load it
        options={"endpoint": receiver.url, "service": "fleet-ray"},
    )
    plan = FleetPlan(
        SCENARIO_FILE, spec_for(staging), sessions=2, rate=50, workers=2, telemetry=telemetry
    )
    report = await asyncio.wait_for(
        run_fleet(plan, engine=ray_engine(), telemetry=Telemetry(tracer_provider=provider)), 120
    )
    assert report.ok
    await _assert_one_trace_across_processes(receiver, exporter, workers=2)
