"""Figure 6: what the brain guards cost per inbound event, and ``close()`` to the
``session_completed`` POST.

(a) pure, no I/O: one inbound event through ``parse_event`` + ``ConversationView.apply``
    (the bare path) against the same plus ``ConversationGuards.observe`` with the default
    guards (``SessionConfig()``) and with the guards switched off
    (``SessionConfig(tool_spiral_limit=0, brain_stall_timeout=0)``). Each variant has its
    own view and guards and sees the same stream: the staging brain's turns (PROTOCOL.md
    §3.9) reduced to ``agent_start_speech``, ``agent_raw_text`` think / tool /
    tool_response / avatar segments and ``agent_end_turn``. Every event is timed on its
    own (``time.perf_counter_ns``) in all three variants back to back, in an order that
    rotates from event to event, so the variants are measured interleaved under the same
    machine conditions and each event gives a paired difference. The garbage collector is
    off while timing (as ``timeit`` does): a collection would land in one variant at random.
    The guards' own events (``tool_call``...) go to a counting no-op, as ``apply``'s public
    events are not emitted either: the bus is measured by figure 3.
(b) ``close()`` to the ``session_completed`` POST reaching the staging backend: N
    sequential control-plane sessions with ``genie_url``; each connects, waits for the
    greeting turn to end (the thread id is known by then), then ``t0 = time.monotonic()``,
    ``await session.close()``; the server stamps each POST with ``time.monotonic()`` in
    the same process (``staging.completion_requests``). If no POST arrives for the first
    session, (b) is reported as not available.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from avatar_sdk import AvatarSession, SessionConfig
from avatar_sdk.events.bus import Event
from avatar_sdk.guards.brain import ConversationGuards
from avatar_sdk.session.conversation import ConversationView
from avatar_sdk.testing import StagingServer
from avatar_sdk.testing.staging.brain import Brain
from avatar_sdk.wire import In, make_speech_id, parse_event

from .harness import Stamp, describe_error, ms
from .stats import FigureResult, Row, Summary, percentile

TITLE = "brain guards: per-event cost; close() -> session_completed"

# (a)
TURNS = 6
ROUNDS = 300
WARMUP_ROUNDS = 20
KEPT = frozenset({In.AGENT_START_SPEECH, In.AGENT_RAW_TEXT, In.AGENT_END_TURN})
ANSWER = (
    "Sure. The enrolment opens on Monday and closes two weeks later; you will need your "
    "student number, a photo and the fee receipt. I can show you the form now if you like."
)
VARIANTS = ("bare", "guards", "guards_off")
VARIANT_LABEL = {
    "bare": "parse+apply (no guards)",
    "guards": "+observe, default guards",
    "guards_off": "+observe, spiral 0 / stall 0",
}

# (b)
COMPLETION_SESSIONS = 20
COMPLETION_WARMUP = 1
CONNECT_TIMEOUT = 10.0
GREETING_TIMEOUT = 5.0
#: How long to wait for the POST after close() returned (it normally arrives before).
POST_WAIT = 2.0
POST_POLL = 0.01

WireEvent = tuple[str, list[Any]]


# --------------------------------------------------------------------------- (a) pure


def make_stream(turns: int = TURNS) -> list[tuple[str, WireEvent]]:
    """A realistic inbound stream: ``(kind, (event name, args))`` per event, every turn
    with two tool calls (each with its ``tool_response``) and a spoken answer."""
    brain = Brain()
    stream: list[tuple[str, WireEvent]] = []
    for turn in range(turns):
        calls = [
            f'navigate_to_slide {{"slide": {turn + 1}}}',
            f'highlight_item {{"item": "row-{turn}", "color": "yellow"}}',
        ]
        events = brain.turn_events(
            speech_id=make_speech_id("transcript", f"question number {turn}"),
            turn_id=f"turn-{turn + 1}",
            text=ANSWER,
            thread_id="thread-bench-1" if turn == 0 else None,
            tool_calls=calls,
            turn_splits=(),
        )
        for name, payload in events:
            if name in KEPT:
                stream.append((_kind(name, payload), (name, [payload])))
    return stream


def _kind(name: str, payload: dict[str, Any]) -> str:
    if name != In.AGENT_RAW_TEXT:
        return name
    delta = payload.get("delta", "")
    for kind in ("tool_response", "tool", "avatar", "think"):
        if f'"type": "{kind}"' in delta:
            return kind
    return "agent_raw_text"


class Variant:
    """One way of handling an inbound event, with its own conversation state."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.view = ConversationView()
        self.public = 0
        self.guard_events = 0
        self.guards: ConversationGuards | None = None
        if key == "guards":
            self.guards = ConversationGuards(SessionConfig(), self._count)
        elif key == "guards_off":
            config = SessionConfig(tool_spiral_limit=0, brain_stall_timeout=0)
            self.guards = ConversationGuards(config, self._count)
        self.step: Callable[[str, list[Any]], None] = (
            self._bare if self.guards is None else self._guarded
        )

    def _count(self, name: str, data: dict[str, Any]) -> None:
        self.guard_events += 1

    def _bare(self, name: str, args: list[Any]) -> None:
        self.public += len(self.view.apply(parse_event(name, args)))

    def _guarded(self, name: str, args: list[Any]) -> None:
        parsed = parse_event(name, args)
        self.public += len(self.view.apply(parsed))
        assert self.guards is not None
        if self.guards.observe(parsed) is not None:
            raise RuntimeError("the hard spiral limit tripped on a realistic stream")


def _timer_overhead(samples: int = 20_000) -> float:
    """ns of one ``perf_counter_ns`` pair around nothing (median)."""
    clock = time.perf_counter_ns
    values = []
    for _ in range(samples):
        started = clock()
        values.append(clock() - started)
    return Summary.of([float(v) for v in values]).median


def _pure(rounds: int = ROUNDS, warmup: int = WARMUP_ROUNDS) -> dict[str, Any]:
    stream = make_stream()
    variants = [Variant(key) for key in VARIANTS]
    costs: dict[str, list[float]] = {key: [] for key in VARIANTS}
    kinds: list[str] = []
    clock = time.perf_counter_ns
    orders = [variants[i:] + variants[:i] for i in range(len(variants))]
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        for round_index in range(warmup + rounds):
            counted = round_index >= warmup
            for index, (kind, (name, args)) in enumerate(stream):
                for variant in orders[(round_index + index) % len(orders)]:
                    started = clock()
                    variant.step(name, args)
                    elapsed = clock() - started
                    if counted:
                        costs[variant.key].append(elapsed / 1000.0)
                if counted:
                    kinds.append(kind)
    finally:
        if enabled:
            gc.enable()
    guard_events = {v.key: v.guard_events for v in variants}
    public = {v.key: v.public for v in variants}
    if len(set(public.values())) != 1:
        raise RuntimeError(f"the variants produced different public events: {public}")
    return {
        "costs": costs,
        "kinds": kinds,
        "events_per_round": len(stream),
        "guard_events": guard_events,
        "timer_overhead_ns": _timer_overhead(),
    }


def _per_kind(costs: dict[str, list[float]], kinds: list[str]) -> dict[str, dict[str, float]]:
    """Median cost (µs) of each event kind per variant, and the paired guard overhead."""
    table: dict[str, dict[str, float]] = {}
    for kind in sorted(set(kinds)):
        picked = [i for i, k in enumerate(kinds) if k == kind]
        row = {key: Summary.of([costs[key][i] for i in picked]).median for key in VARIANTS}
        row["observe_overhead"] = Summary.of(
            [costs["guards"][i] - costs["bare"][i] for i in picked]
        ).median
        row["share_of_stream"] = len(picked) / len(kinds)
        table[kind] = row
    return table


# --------------------------------------------------------------------------- (b) completion


@dataclass(frozen=True)
class Completion:
    """One session's close: seconds after the ``close()`` call."""

    post_at: float
    close_returned: float
    delivered: object
    reason: object


async def _completions(n: int, warmup: int) -> dict[str, Any]:
    samples: list[Completion] = []
    missing: list[str] = []
    async with StagingServer() as staging:
        for index in range(warmup + n):
            session = AvatarSession(
                staging.url,
                staging.token,
                genie_url=staging.genie_url,
                media=False,
                allow_insecure_transport=True,
            )
            completed: list[Event] = []
            session.on("session_completed", completed.append)
            greeting = Stamp(session, "agent_turn_ended")
            greeting.arm()
            try:
                await asyncio.wait_for(session.connect(), CONNECT_TIMEOUT)
                await greeting.next(GREETING_TIMEOUT)
            except BaseException:
                await session.close()
                raise
            thread_id = session.thread_id
            before = len(staging.completion_requests)
            started = time.monotonic()
            await session.close()
            returned = time.monotonic()
            for _ in range(int(POST_WAIT / POST_POLL)):  # the server stamps it; just wait
                if len(staging.completion_requests) > before:
                    break
                await asyncio.sleep(POST_POLL)
            requests = staging.completion_requests[before:]
            if not requests:
                event = completed[0].data if completed else None
                if index == 0:
                    return {
                        "available": False,
                        "thread_id_known": thread_id is not None,
                        "event": event,
                        "close_s": returned - started,
                    }
                missing.append(f"session {index}: no POST (event {event})")
                continue
            if requests[-1]["id"] != thread_id or len(requests) != 1:
                missing.append(f"session {index}: {len(requests)} POST(s) for {thread_id!r}")
            if index < warmup:
                continue
            event = completed[0].data if completed else {}
            samples.append(
                Completion(
                    post_at=float(requests[-1]["at"]) - started,
                    close_returned=returned - started,
                    delivered=event.get("delivered"),
                    reason=event.get("reason"),
                )
            )
    return {"available": True, "samples": samples, "problems": missing}


# --------------------------------------------------------------------------- figure


def _pure_rows(pure: dict[str, Any]) -> tuple[list[Row], list[str], dict[str, Any]]:
    costs: dict[str, list[float]] = pure["costs"]
    n = len(costs["bare"])
    summaries = {key: Summary.of(values) for key, values in costs.items()}
    p99 = {key: percentile(values, 99.0) for key, values in costs.items()}
    paired = {
        key: Summary.of([g - b for g, b in zip(costs[key], costs["bare"], strict=True)])
        for key in ("guards", "guards_off")
    }
    paired_p99 = {
        key: percentile([g - b for g, b in zip(costs[key], costs["bare"], strict=True)], 99.0)
        for key in paired
    }
    rows = [
        Row(
            f"(a) {VARIANT_LABEL[key]}",
            n,
            summaries[key].median,
            "µs",
            summaries[key].p90,
            summaries[key].maximum,
        )
        for key in VARIANTS
    ]
    rows += [
        Row(
            f"(a) observe cost, {label} (paired)",
            n,
            paired[key].median,
            "µs",
            paired[key].p90,
            paired[key].maximum,
        )
        for key, label in (("guards", "default"), ("guards_off", "off"))
    ]
    rows += [Row(f"(a) p99: {VARIANT_LABEL[key]}", n, p99[key], "µs") for key in VARIANTS]
    rows += [
        Row(f"(a) p99 difference, {label}", n, p99[key] - p99["bare"], "µs")
        for key, label in (("guards", "default"), ("guards_off", "off"))
    ]
    kinds = _per_kind(costs, pure["kinds"])
    bare, guarded = summaries["bare"], summaries["guards"]
    costly = max(kinds, key=lambda k: kinds[k]["observe_overhead"])
    notes = [
        f"(a) {n:,} events per variant ({pure['events_per_round']} per conversation of {TURNS} "
        f"turns, {ROUNDS} rounds after {WARMUP_ROUNDS} warm-up), the three variants timed "
        f"back to back on every event; GC off while timing; timer overhead "
        f"{pure['timer_overhead_ns']:.0f} ns per sample, included in every figure. Default "
        f"guards: median {guarded.median:.2f} vs {bare.median:.2f} µs "
        f"(+{guarded.median - bare.median:.2f} µs, "
        f"{(guarded.median - bare.median) / bare.median:+.0%}); p99 {p99['guards']:.2f} vs "
        f"{p99['bare']:.2f} µs (+{p99['guards'] - p99['bare']:.2f}); paired per-event "
        f"difference median {paired['guards'].median:.2f} µs, p99 "
        f"{paired_p99['guards']:.2f} µs. Guards off: paired median "
        f"{paired['guards_off'].median:.2f} µs.",
        "(a) median µs per event kind (bare / default guards / paired overhead): "
        + "; ".join(
            f"{kind} {row['bare']:.1f} / {row['guards']:.1f} / +{row['observe_overhead']:.2f}"
            f" ({row['share_of_stream']:.0%})"
            for kind, row in kinds.items()
        )
        + f". Costliest for the guards: {costly} segments (parse_tool_call, the canonical-JSON "
        f"dedup key, the tool_call event); they run whether or not the spiral breaker and the "
        f"stall watchdog are on, so switching those off saves "
        f"{round(paired['guards'].median - paired['guards_off'].median, 2) + 0.0:.2f} µs per "
        f"event (paired "
        f"medians). Guard events emitted per conversation: "
        f"{pure['guard_events']['guards'] // (ROUNDS + WARMUP_ROUNDS)} (default), "
        f"{pure['guard_events']['guards_off'] // (ROUNDS + WARMUP_ROUNDS)} (off).",
    ]
    data = {
        "events_per_variant": n,
        "events_per_round": pure["events_per_round"],
        "turns": TURNS,
        "rounds": ROUNDS,
        "warmup_rounds": WARMUP_ROUNDS,
        "timer_overhead_ns": pure["timer_overhead_ns"],
        "per_event_us": {
            key: {**summaries[key].as_json("us"), "p99_us": p99[key]} for key in VARIANTS
        },
        "median_difference_us": {
            key: summaries[key].median - summaries["bare"].median for key in paired
        },
        "p99_difference_us": {key: p99[key] - p99["bare"] for key in paired},
        "paired_difference_us": {
            key: {**paired[key].as_json("us"), "p99_us": paired_p99[key]} for key in paired
        },
        "per_kind_median_us": kinds,
        "guard_events_total": pure["guard_events"],
    }
    return rows, notes, data


def _completion_rows(found: dict[str, Any]) -> tuple[list[Row], list[str], dict[str, Any]]:
    if not found["available"]:
        note = (
            f"(b) close() -> session_completed POST: not available yet: no POST reached the "
            f"staging backend within {POST_WAIT:g} s of close() (thread id known: "
            f"{found['thread_id_known']}; session_completed event: {found['event']}; close() "
            f"took {ms(found['close_s']):.0f} ms)."
        )
        return [], [note], {"available": False, **found}
    samples: list[Completion] = found["samples"]
    if not samples:
        raise RuntimeError(f"no session_completed POST measured: {found['problems'][:3]}")
    post = Summary.of([s.post_at for s in samples]).scaled(1000.0)
    closed = Summary.of([s.close_returned for s in samples]).scaled(1000.0)
    before = sum(1 for s in samples if s.post_at <= s.close_returned)
    rows = [
        Row(
            "(b) close() -> session_completed POST",
            post.n,
            post.median,
            "ms",
            post.p90,
            post.maximum,
        ),
        Row(
            "(b) close() returned (same sessions)",
            closed.n,
            closed.median,
            "ms",
            closed.p90,
            closed.maximum,
        ),
    ]
    outcomes = sorted({f"{s.delivered}/{s.reason}" for s in samples})
    notes = [
        f"(b) {post.n} sequential sessions after {COMPLETION_WARMUP} warm-up (control plane, "
        f"genie_url = staging); the POST arrived before close() returned in {before}/{post.n}; "
        f"session_completed events (delivered/reason): {', '.join(outcomes)}"
        + (f"; problems: {'; '.join(found['problems'][:3])}" if found["problems"] else "")
        + ".",
    ]
    data = {
        "available": True,
        "sessions": post.n,
        "warmup": COMPLETION_WARMUP,
        "post_after_close_call": post.as_json("ms"),
        "close_returned": closed.as_json("ms"),
        "post_before_close_returned": before,
        "problems": found["problems"],
        "samples_post_ms": [ms(s.post_at) for s in samples],
        "samples_close_ms": [ms(s.close_returned) for s in samples],
    }
    return rows, notes, data


def _run() -> FigureResult:
    result = FigureResult("guards", TITLE)
    pure_rows, pure_notes, pure_data = _pure_rows(_pure())
    result.rows, result.notes = pure_rows, pure_notes
    result.data = {"per_event": pure_data}
    try:
        found = asyncio.run(_completions(COMPLETION_SESSIONS, COMPLETION_WARMUP))
        completion_rows, completion_notes, completion_data = _completion_rows(found)
    except Exception as exc:  # (a) stands on its own: keep its rows, report (b) as the error
        result.error = f"(b) close() -> session_completed: {describe_error(exc)}"
        result.data["completion"] = {"available": None, "error": result.error}
        return result
    result.rows += completion_rows
    result.notes += completion_notes
    result.data["completion"] = completion_data
    return result


def run() -> FigureResult:
    """Run figure 6 ((a) in this thread, (b) in its own event loop)."""
    return _run()
