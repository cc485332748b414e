"""Figure ``telemetry``: what OpenTelemetry costs the inbound pipeline.

The ``throughput`` figure's end-to-end measurement (the staging server in the same loop
streams ``agent_raw_text`` events to one connected session, which counts ``agent_text``
events; first->last rate), with a user turn open (sent, its answer streaming: the turn span
and its first-text bookkeeping are live, the representative hot path), in three variants
(rates per CPU-second of the process, beside the wall-clock rates):

* ``off``: no instrumentation at all (the extra not used);
* ``no provider``: ``avatar_sdk.telemetry.instrument(session)`` with no provider set (the
  API installed, nothing configured): nothing is attached;
* ``no-op exporter``: ``Telemetry`` on the OpenTelemetry SDK's ``TracerProvider`` with a
  ``SimpleSpanProcessor`` whose exporter discards every span, and the SDK's
  ``MeterProvider`` with an in-memory reader (metrics aggregated, never exported).

Rounds run in ABCCBA order, repeated, each on a fresh session; medians per variant and the
ratios to ``off``. Target: the no-op exporter within 5% of ``off``. Loopback wall-clock
rates on a shared machine swing by tens of percent from round to round, so the same
comparison is also made on the pure pipeline (``parse_event`` + ``ConversationView.apply``
+ the session's own bus, with and without the instrumentation subscribed and a turn open),
CPU-bound and interleaved ABBA over many rounds: the figure that resolves a few percent.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

from avatar_sdk import AvatarSession
from avatar_sdk.observe import Point
from avatar_sdk.session.conversation import ConversationView
from avatar_sdk.testing import StagingServer
from avatar_sdk.wire import In, parse_event

from .harness import Stamp
from .stats import FigureResult, Row, Summary, Target
from .throughput import ARRIVAL_TIMEOUT, GREETING_TAIL, Receiver, make_payloads

TITLE = "telemetry overhead on agent_raw_text throughput (one core)"
#: The no-op exporter's throughput as a share of no telemetry at all.
TARGET = Target(">=", 0.95, "x of off")
EVENTS = 10_000
WARMUP = 1_000
BLOCKS = 3
PURE_EVENTS = 20_000
PURE_ROUNDS = 16
ORDER = ("off", "no provider", "no-op exporter", "no-op exporter", "no provider", "off")


def _noop_telemetry() -> tuple[Any, Callable[[], None]]:
    from opentelemetry.sdk.metrics import MeterProvider  # noqa: PLC0415
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: PLC0415
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: PLC0415
    from opentelemetry.sdk.trace.export import (  # noqa: PLC0415
        SimpleSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    from avatar_sdk.telemetry import Telemetry  # noqa: PLC0415

    class Discard(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(Discard()))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])

    def shutdown() -> None:
        tracer_provider.shutdown()
        meter_provider.shutdown()

    telemetry = Telemetry(tracer_provider=tracer_provider, meter_provider=meter_provider)
    return telemetry, shutdown


async def _round(
    staging: StagingServer, variant: str, telemetry: Any, start: int
) -> tuple[float, float]:
    """One round: (wall-clock first->last rate, events per CPU-second of this process)."""
    from avatar_sdk.telemetry import instrument  # noqa: PLC0415

    session = AvatarSession(
        staging.url,
        staging.token,
        media=False,
        allow_insecure_transport=True,
        telemetry=telemetry if variant == "no-op exporter" else None,
    )
    if variant == "no provider" and instrument(session):
        raise RuntimeError("a global provider is set: the 'no provider' variant is not one")
    try:
        greeting = Stamp(session, "agent_turn_ended")
        greeting.arm()
        await session.connect()
        await greeting.next(5.0)
        await asyncio.sleep(GREETING_TAIL)
        receiver = Receiver(session)
        staging.brain.stall(600)  # the turn stays open: its answer is the streamed burst
        await session.speak("what is the weather like in lisbon")
        (sid,) = staging.live_sids
        conversation = staging.conversations[sid]
        cpu = 0.0
        for index, count in enumerate((WARMUP, EVENTS)):
            payloads = make_payloads(count, turn_id=f"turn-bench-{index}", start=start)
            receiver.arm(count, start)
            cpu_started = time.process_time()
            for payload in payloads:
                await conversation.emit(In.AGENT_RAW_TEXT, payload)
            await receiver.wait(ARRIVAL_TIMEOUT)
            cpu = time.process_time() - cpu_started
            if receiver.out_of_order:
                raise RuntimeError(f"{receiver.out_of_order} events out of order")
            start += count
        spread = receiver.last - receiver.first
        return (EVENTS - 1) / spread, EVENTS / cpu
    finally:
        await session.close()


async def _measure() -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Per variant: the rounds' wall-clock rates and their CPU-time rates."""
    rates: dict[str, list[float]] = {name: [] for name in dict.fromkeys(ORDER)}
    cpu_rates: dict[str, list[float]] = {name: [] for name in dict.fromkeys(ORDER)}
    telemetry, shutdown = _noop_telemetry()
    try:
        async with StagingServer() as staging:
            start = 0
            for _ in range(BLOCKS):
                for variant in ORDER:
                    wall, cpu = await _round(staging, variant, telemetry, start)
                    rates[variant].append(wall)
                    cpu_rates[variant].append(cpu)
                    start += WARMUP + EVENTS
    finally:
        shutdown()
    return rates, cpu_rates


async def _pure() -> dict[str, list[float]]:
    """The pipeline's CPU-bound part, on real (unconnected) sessions' buses: ``off`` and the
    no-op exporter, interleaved ABBA."""
    telemetry, shutdown = _noop_telemetry()
    # "off again": a second session without telemetry, the A/A control that shows the noise
    rates: dict[str, list[float]] = {"off": [], "no-op exporter": [], "off again": []}
    try:
        sessions = {
            name: AvatarSession(
                "http://127.0.0.1:9", "bench-token", media=False, allow_insecure_transport=True,
                telemetry=telemetry if name == "no-op exporter" else None,
            )
            for name in rates
        }  # fmt: skip
        for session in sessions.values():  # a turn open, as in the middle of an answer
            session.taps.point(Point.TURN_REQUESTED, {"text": "what is the weather like"})
            session.taps.point(
                Point.TURN_SENT, {"text": "what is the weather like", "resent": False}
            )
        payloads = make_payloads(PURE_EVENTS)

        def rate(session: AvatarSession) -> float:
            view, emit = ConversationView(), session._bus.emit
            begun = time.process_time()  # CPU time: other processes' load does not count
            for payload in payloads:
                for name, data in view.apply(parse_event("agent_raw_text", [payload])):
                    emit(name, data)
            return len(payloads) / (time.process_time() - begun)

        for name in rates:
            rate(sessions[name])  # warm-up
        for _ in range(PURE_ROUNDS // 2):
            for name in (*rates, *reversed(rates)):  # ABCCBA
                rates[name].append(rate(sessions[name]))
        for session in sessions.values():
            await session.close()
    finally:
        shutdown()
    return rates


def run() -> FigureResult:
    result = FigureResult("telemetry", TITLE)
    started = time.monotonic()
    pure = asyncio.run(_pure())
    pure_medians = {name: Summary.of(values).median for name, values in pure.items()}
    pure_ratio = pure_medians["no-op exporter"] / pure_medians["off"]
    control_ratio = pure_medians["off again"] / pure_medians["off"]
    rates, cpu_rates = asyncio.run(_measure())
    wall = {name: Summary.of(values).median for name, values in rates.items()}
    medians = {name: Summary.of(values).median for name, values in cpu_rates.items()}
    off = medians["off"]
    ratios = {name: value / off for name, value in medians.items()}
    wall_ratios = {name: value / wall["off"] for name, value in wall.items()}
    rounds = len(rates["off"])
    result.rows = [
        Row("agent_raw_text per CPU-s, telemetry off", EVENTS * rounds, off, "ev/s"),
        Row("  API but no provider", EVENTS * rounds, medians["no provider"], "ev/s"),
        Row("  no-op exporter", EVENTS * rounds, medians["no-op exporter"], "ev/s"),
        Row("no-op exporter / off", rounds, ratios["no-op exporter"], "x", target=TARGET),
        Row("no provider / off", rounds, ratios["no provider"], "x"),
        Row("wall-clock rate, telemetry off", EVENTS * rounds, wall["off"], "ev/s"),
        Row("  wall-clock: no-op exporter / off", rounds, wall_ratios["no-op exporter"], "x"),
        Row(
            "pure pipeline, telemetry off",
            PURE_EVENTS * len(pure["off"]),
            pure_medians["off"],
            "ev/s",
        ),
        Row(
            "pure pipeline, no-op exporter",
            PURE_EVENTS * len(pure["off"]),
            pure_medians["no-op exporter"],
            "ev/s",
        ),
        Row("pure: no-op exporter / off", len(pure["off"]), pure_ratio, "x", target=TARGET),
        Row("pure: off again / off (A/A noise)", len(pure["off"]), control_ratio, "x"),
    ]
    overhead = 1 - ratios["no-op exporter"]
    result.notes = [
        f"loopback, server in the same loop, a user turn open; {rounds} rounds per variant x "
        f"{EVENTS:,} events (ABCCBA x {BLOCKS}, a fresh session each round). Rates per "
        f"CPU-second of the process (server and client alike, the same work in every "
        f"variant), so another process's load on the shared cores does not count; medians: off "
        f"{off:,.0f}, no provider {medians['no provider']:,.0f}, no-op exporter "
        f"{medians['no-op exporter']:,.0f} ev/s. Wall-clock first->last medians: off "
        f"{wall['off']:,.0f}, no provider {wall['no provider']:,.0f}, no-op exporter "
        f"{wall['no-op exporter']:,.0f} ev/s (swinging with the machine's load).",
        f"no-op exporter overhead (per CPU-s): {overhead:.1%} (target under 5%: "
        f"{TARGET.verdict(ratios['no-op exporter'])}, information only); no provider: "
        f"{1 - ratios['no provider']:+.1%} (nothing is attached: noise).",
        f"pure pipeline (parse + apply + the session's bus, a turn open; CPU time), "
        f"{len(pure['off'])} rounds x {PURE_EVENTS:,} per variant, ABCCBA: off "
        f"{pure_medians['off']:,.0f}, no-op exporter {pure_medians['no-op exporter']:,.0f} "
        f"ev/s, overhead {1 - pure_ratio:.1%} ({TARGET.verdict(pure_ratio)}); the A/A control "
        f"(a second session without telemetry) differs by {1 - control_ratio:+.1%}: the noise.",
        "round rates per CPU-s: " + "; ".join(
            f"{name} " + ", ".join(f"{r:,.0f}" for r in values)
            for name, values in cpu_rates.items()
        ) + f"; {time.monotonic() - started:.0f} s.",
    ]  # fmt: skip
    result.data = {
        "target": TARGET.as_json(),
        "events_per_round": EVENTS,
        "order": list(ORDER),
        "blocks": BLOCKS,
        "round_rates_per_cpu_s": cpu_rates,
        "median_rates_per_cpu_s": medians,
        "ratios_to_off": ratios,
        "round_rates_wall": rates,
        "median_rates_wall": wall,
        "wall_ratios_to_off": wall_ratios,
        "pass": TARGET.met(ratios["no-op exporter"]),
        "pure": {
            "events_per_round": PURE_EVENTS,
            "round_rates": pure,
            "median_rates": pure_medians,
            "ratio_to_off": pure_ratio,
            "pass": TARGET.met(pure_ratio),
        },
    }
    return result
