"""Figure 3: ``agent_raw_text`` events parsed and dispatched per second, on one core.

(a) pure: ``parse_event("agent_raw_text", [payload])`` + ``ConversationView.apply()`` +
    ``EventBus.emit`` to one synchronous subscriber, in a tight loop over realistic payloads
    (``avatar`` brain segments with ~60-character content, speechId, turnId), no I/O.
    Each stage (parse, apply, emit) is also timed alone on inputs prepared beforehand, to
    show where the time goes. Target: >= 50,000 events/s.
(b) end to end over loopback: the staging server streams agent_raw_text events to one
    connected session; the client counts ``agent_text`` events until the last one arrives.
    Run twice: with the server in the same event loop (one core does both sides, the set-up
    the brief describes) and with the server in a child process (the client has a core to
    itself, which is what a deployed client sees; the client's CPU share tells whether the
    client was the bottleneck).

Rates are medians over several rounds; "first->last" is (n - 1) / (last arrival - first
arrival), "trigger->last" is n / (last arrival - start of streaming).
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any, TypeVar

import aiohttp
from aiohttp import web

from avatar_sdk import AvatarSession
from avatar_sdk.events.bus import Event, EventBus
from avatar_sdk.session.conversation import ConversationView, PublicEvent
from avatar_sdk.testing import StagingServer
from avatar_sdk.wire import In, InboundEvent, make_speech_id, parse_event

from .harness import Stamp
from .stats import FigureResult, Row, Summary, Target, ratio

T = TypeVar("T")

TARGET = Target(">=", 50_000.0, "ev/s")
PURE_ROUNDS = 5
PURE_PER_ROUND = 40_000
PURE_WARMUP = 10_000
STAGE_EVENTS = 40_000
E2E_EVENTS = 20_000
E2E_ROUNDS = 3
E2E_WARMUP = 2_000
ARRIVAL_TIMEOUT = 60.0
GREETING_TAIL = 0.1
INDEX_WIDTH = 7

_FILLERS = (
    "The weather in Lisbon is mild today, with light wind.",
    "Sure, I can walk you through the enrolment steps now.",
    "That course covers statistics, probability and more.",
    "Let me check the schedule for next week's sessions.",
)


# --------------------------------------------------------------------------- payloads


def make_payloads(count: int, *, turn_id: str = "turn-7", start: int = 0) -> list[dict[str, Any]]:
    """Realistic ``agent_raw_text`` payloads, shaped like the staging brain's.

    Content is 60 characters and starts with a zero-padded sequence number so the receiver
    can check order and completeness.
    """
    speech_id = make_speech_id("transcript", "what is the weather like in lisbon")
    payloads: list[dict[str, Any]] = []
    for i in range(start, start + count):
        filler = _FILLERS[i % len(_FILLERS)]
        content = f"{i:0{INDEX_WIDTH}d} {filler}"[:60].ljust(60, ".")
        delta = {
            "role": "assistant",
            "segmentNumber": i + 1,
            "et": round(0.05 * (i + 1), 3),
            "type": "avatar",
            "content": content,
        }
        payloads.append({"speechId": speech_id, "turnId": turn_id, "delta": json.dumps(delta)})
    return payloads


# --------------------------------------------------------------------------- (a) pure


def _median(values: list[float]) -> float:
    return Summary.of(values).median


def _loop_rate(items: Sequence[T], step: Callable[[T], object]) -> float:
    """Items per second of ``step`` over ``items`` in a plain loop."""
    started = time.perf_counter()
    for item in items:
        step(item)
    return len(items) / (time.perf_counter() - started)


def _pure() -> dict[str, Any]:
    view = ConversationView()
    bus = EventBus()
    received = 0

    def subscriber(event: Event) -> None:
        nonlocal received
        received += 1

    bus.on("agent_text", subscriber)

    def full(payload: dict[str, Any]) -> None:
        for name, data in view.apply(parse_event("agent_raw_text", [payload])):
            bus.emit(name, data)

    def parse_only(payload: dict[str, Any]) -> InboundEvent:
        return parse_event("agent_raw_text", [payload])

    def emit_only(public: PublicEvent) -> None:
        bus.emit(*public)

    payloads = make_payloads(PURE_PER_ROUND)
    _loop_rate(payloads[:PURE_WARMUP], full)
    # Stage inputs are prepared up front so each stage is timed on its own.
    stage_payloads = payloads[:STAGE_EVENTS]
    parsed = [parse_only(p) for p in stage_payloads]
    public = [item for event in parsed for item in view.apply(event)]
    rates: list[float] = []
    stage_rates: dict[str, list[float]] = {"parse_event": [], "apply": [], "emit": []}
    received = delivered = 0
    # Rounds interleave the full loop with the stage loops, so that machine noise (another
    # process taking the core for a while) spreads over all of them instead of skewing one.
    for _ in range(PURE_ROUNDS):
        before = received
        rates.append(_loop_rate(payloads, full))
        if received - before != len(payloads):
            raise RuntimeError(f"subscriber saw {received - before} of {len(payloads)} events")
        delivered += received - before
        stage_rates["parse_event"].append(_loop_rate(stage_payloads, parse_only))
        stage_rates["apply"].append(_loop_rate(parsed, view.apply))
        stage_rates["emit"].append(_loop_rate(public, emit_only))
    stages = {name: _median(values) for name, values in stage_rates.items()}
    return {"rates": rates, "delivered": delivered, "stages": stages}


# --------------------------------------------------------------------------- (b) end to end


class Receiver:
    """Counts ``agent_text`` events of one round; checks order through the content index."""

    def __init__(self, session: AvatarSession) -> None:
        self.expected = 0
        self.count = 0
        self.next_index = 0
        self.out_of_order = 0
        self.first = 0.0
        self.last = 0.0
        self._done: asyncio.Future[None] | None = None
        session.on("agent_text", self._on_text)

    def arm(self, count: int, start: int) -> None:
        self.expected, self.count, self.next_index, self.out_of_order = count, 0, start, 0
        self._done = asyncio.get_running_loop().create_future()

    def _on_text(self, event: Event) -> None:
        now = time.perf_counter()
        if self._done is None:
            return
        if self.count == 0:
            self.first = now
        self.count += 1
        if event.data["content"][:INDEX_WIDTH] != f"{self.next_index:0{INDEX_WIDTH}d}":
            self.out_of_order += 1
        self.next_index += 1
        if self.count >= self.expected and not self._done.done():
            self.last = now
            self._done.set_result(None)

    async def wait(self, timeout: float) -> None:
        if self._done is None:
            raise RuntimeError("Receiver.wait() before arm()")
        try:
            await asyncio.wait_for(self._done, timeout)
        finally:
            self._done = None


def _round_record(
    receiver: Receiver, count: int, started: float, cpu: float, extra: dict[str, Any]
) -> dict[str, Any]:
    """One round's rates; ``extra`` adds variant-specific fields."""
    spread = receiver.last - receiver.first
    return {
        "events": count,
        "first_to_last_rate": (count - 1) / spread if spread > 0 else float("inf"),
        "trigger_to_last_rate": count / (receiver.last - started),
        "trigger_to_last_s": receiver.last - started,
        "client_cpu_share": cpu / (receiver.last - started),
        "out_of_order": receiver.out_of_order,
        **extra,
    }


async def _connected_session(staging_url: str, token: str) -> tuple[AvatarSession, Receiver]:
    session = AvatarSession(staging_url, token, media=False, allow_insecure_transport=True)
    greeting = Stamp(session, "agent_turn_ended")
    greeting.arm()
    await session.connect()
    await greeting.next(5.0)
    await asyncio.sleep(GREETING_TAIL)  # stvFinishedGenerating/Talking follow the turn end
    return session, Receiver(session)


async def _e2e_in_process() -> dict[str, Any]:
    rounds: list[dict[str, Any]] = []
    async with StagingServer() as staging:
        session, receiver = await _connected_session(staging.url, staging.token)
        (sid,) = staging.live_sids
        conversation = staging.conversations[sid]
        try:
            start = 0
            for index, count in enumerate([E2E_WARMUP] + [E2E_EVENTS] * E2E_ROUNDS):
                payloads = make_payloads(count, turn_id=f"turn-bench-{index}", start=start)
                events_before = session.stats()["events_in"]
                receiver.arm(count, start)
                cpu_started = time.process_time()
                started = time.perf_counter()
                for payload in payloads:
                    await conversation.emit(In.AGENT_RAW_TEXT, payload)
                queued = time.perf_counter() - started
                await receiver.wait(ARRIVAL_TIMEOUT)
                cpu = time.process_time() - cpu_started
                start += count
                record = _round_record(
                    receiver,
                    count,
                    started,
                    cpu,
                    {
                        "server_queue_s": queued,
                        "events_in_delta": session.stats()["events_in"] - events_before,
                    },
                )
                if index > 0:
                    rounds.append(record)
            protocol_errors = session.stats()["protocol_errors"]
        finally:
            await session.close()
    return {"rounds": rounds, "protocol_errors": protocol_errors}


class _StreamingStagingServer(StagingServer):
    """The staging server plus bench-only routes: prepare a burst, stream it, read CPU time."""

    def __init__(self) -> None:
        super().__init__()
        self._prepared: list[dict[str, Any]] = []

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post("/bench/prepare", self._prepare)
        app.router.add_post("/bench/stream", self._stream)
        app.router.add_get("/bench/cpu", self._cpu)

    async def _prepare(self, request: web.Request) -> web.Response:
        body = await request.json()
        self._prepared = make_payloads(
            int(body["n"]), turn_id=str(body["turn"]), start=int(body["start"])
        )
        return web.json_response({"prepared": len(self._prepared)})

    async def _stream(self, request: web.Request) -> web.Response:
        started = time.perf_counter()
        sent = 0
        for sid in self.live_sids:
            conversation = self.conversations[sid]
            for payload in self._prepared:
                await conversation.emit(In.AGENT_RAW_TEXT, payload)
                sent += 1
        return web.json_response({"sent": sent, "queue_s": time.perf_counter() - started})

    async def _cpu(self, request: web.Request) -> web.Response:
        return web.json_response({"cpu": time.process_time()})


async def _serve(conn: Connection) -> None:
    async with _StreamingStagingServer() as staging:
        conn.send((staging.url, staging.token))
        await asyncio.get_running_loop().run_in_executor(None, conn.recv)


def serve_in_child(conn: Connection) -> None:
    """Child-process entry point: run the streaming server until the parent says stop."""
    asyncio.run(_serve(conn))


async def _e2e_child_process() -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    process = context.Process(target=serve_in_child, args=(child,), daemon=True)
    process.start()
    rounds: list[dict[str, Any]] = []
    try:
        loop = asyncio.get_running_loop()
        if not await loop.run_in_executor(None, parent.poll, 30.0):
            raise RuntimeError("the child staging server did not start within 30 s")
        url, token = parent.recv()
        session, receiver = await _connected_session(url, token)
        try:
            async with aiohttp.ClientSession(base_url=url) as http:
                start = 0
                for index, count in enumerate([E2E_WARMUP] + [E2E_EVENTS] * E2E_ROUNDS):
                    turn = f"turn-bench-{index}"
                    body = {"n": count, "turn": turn, "start": start}
                    async with http.post("/bench/prepare", json=body) as response:
                        response.raise_for_status()
                    async with http.get("/bench/cpu") as response:
                        server_cpu_before = (await response.json())["cpu"]
                    events_before = session.stats()["events_in"]
                    receiver.arm(count, start)
                    cpu_started = time.process_time()
                    started = time.perf_counter()
                    async with http.post("/bench/stream") as response:
                        response.raise_for_status()
                        streamed = await response.json()
                    await receiver.wait(ARRIVAL_TIMEOUT)
                    cpu = time.process_time() - cpu_started
                    async with http.get("/bench/cpu") as response:
                        server_cpu = (await response.json())["cpu"] - server_cpu_before
                    start += count
                    window = receiver.last - started
                    record = _round_record(
                        receiver,
                        count,
                        started,
                        cpu,
                        {
                            "server_queue_s": streamed["queue_s"],
                            "server_cpu_share_upper_bound": server_cpu / window,
                            "events_in_delta": session.stats()["events_in"] - events_before,
                        },
                    )
                    if index > 0:
                        rounds.append(record)
            protocol_errors = session.stats()["protocol_errors"]
        finally:
            await session.close()
    finally:
        parent.send("stop")
        await asyncio.get_running_loop().run_in_executor(None, process.join, 5.0)
        if process.is_alive():
            process.terminate()
            process.join(2.0)
    return {"rounds": rounds, "protocol_errors": protocol_errors}


# --------------------------------------------------------------------------- figure


def _e2e_rows(label: str, data: dict[str, Any]) -> tuple[Row, dict[str, Any]]:
    rounds = data["rounds"]
    rates = [r["first_to_last_rate"] for r in rounds]
    summary = {
        "rounds": len(rounds),
        "events_per_round": E2E_EVENTS,
        "median_first_to_last_rate": _median(rates),
        "median_trigger_to_last_rate": _median([r["trigger_to_last_rate"] for r in rounds]),
        "median_client_cpu_share": _median([r["client_cpu_share"] for r in rounds]),
        "out_of_order_total": sum(r["out_of_order"] for r in rounds),
        "protocol_errors": data["protocol_errors"],
        "rounds_detail": rounds,
    }
    row = Row(label, E2E_EVENTS * len(rounds), summary["median_first_to_last_rate"], "ev/s")
    return row, summary


def _run() -> FigureResult:
    result = FigureResult("throughput", "agent_raw_text throughput (one core)")
    pure = _pure()
    pure_rate = _median(pure["rates"])
    inproc_row, inproc = _e2e_rows(
        "e2e loopback, server in same loop", asyncio.run(_e2e_in_process())
    )
    child_row, child = _e2e_rows(
        "e2e loopback, server in child process", asyncio.run(_e2e_child_process())
    )
    stages = pure["stages"]
    total = PURE_PER_ROUND * PURE_ROUNDS
    result.rows = [
        Row("raw_text pure: parse+apply+emit", total, pure_rate, "ev/s", target=TARGET),
        Row("  stage: parse_event alone", STAGE_EVENTS, stages["parse_event"], "ev/s"),
        Row("  stage: ConversationView.apply alone", STAGE_EVENTS, stages["apply"], "ev/s"),
        Row("  stage: EventBus.emit, 1 callback, alone", STAGE_EVENTS, stages["emit"], "ev/s"),
        inproc_row,
        child_row,
    ]
    per_event_us = 1e6 / pure_rate
    parse_us = 1e6 / stages["parse_event"]
    apply_us = 1e6 / stages["apply"]
    emit_us = 1e6 / stages["emit"]
    result.notes = [
        f"pure: {pure_rate:,.0f} ev/s = {per_event_us:.1f} us/event (stages alone: parse "
        f"{parse_us:.1f} + apply {apply_us:.1f} + emit {emit_us:.1f} = "
        f"{parse_us + apply_us + emit_us:.1f} us); rounds {PURE_ROUNDS} x "
        f"{PURE_PER_ROUND:,}: min {min(pure['rates']):,.0f}, max {max(pure['rates']):,.0f}; "
        f"target {TARGET.label()}: {TARGET.verdict(pure_rate)} "
        f"({pure_rate / TARGET.threshold:.2f}x of target, information only).",
        f"e2e first->last rate, median of {E2E_ROUNDS} rounds x {E2E_EVENTS:,}: same loop "
        f"{inproc['median_first_to_last_rate']:,.0f} ev/s "
        f"({ratio(inproc['median_first_to_last_rate'], pure_rate) or 0:.0%} of pure), "
        f"child-process server {child['median_first_to_last_rate']:,.0f} ev/s "
        f"({ratio(child['median_first_to_last_rate'], pure_rate) or 0:.0%} of pure, client CPU "
        f"busy {child['median_client_cpu_share']:.0%}).",
        f"e2e trigger->last rate: same loop {inproc['median_trigger_to_last_rate']:,.0f} ev/s, "
        f"child process {child['median_trigger_to_last_rate']:,.0f} ev/s; out-of-order/lost: "
        f"{inproc['out_of_order_total'] + child['out_of_order_total']}; protocol errors: "
        f"{inproc['protocol_errors'] + child['protocol_errors']}.",
    ]
    result.data = {
        "target": TARGET.as_json(),
        "pure": {
            "events": total,
            "rounds": PURE_ROUNDS,
            "median_rate": pure_rate,
            "round_rates": pure["rates"],
            "delivered_to_subscriber": pure["delivered"],
            "us_per_event": per_event_us,
            "stage_rates": stages,
            "pass": TARGET.met(pure_rate),
            "ratio_to_target": pure_rate / TARGET.threshold,
        },
        "e2e_same_loop": inproc,
        "e2e_child_process": child,
    }
    return result


def run() -> FigureResult:
    """Run figure 3 (its async parts each in their own event loop)."""
    return _run()
