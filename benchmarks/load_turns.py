"""``load`` (b): control-only sessions per process, and the reply latency at each level.

The whole ramp runs in one fresh ``spawn`` child (the client process measured); the staging
server runs in another child (:class:`~benchmarks.media.ChildServer`). At each level:

1. connect: ``level`` control-only sessions in concurrent batches of ``batch`` (a connect
   burst of the whole level would be measured instead of the steady state), each waiting
   for its greeting to be over (``agent_talking`` false: a turn sent during the greeting
   is held by the SDK until then, and would measure the hold);
2. turns: every session sends ``turns`` text turns (``speak``), the sends spread evenly
   over ``spread`` seconds; a session's next turn waits until its previous reply is over.
   Latency per turn from just before ``speak()`` to the instant ``agent_turn_ended`` (and
   the first ``agent_text``) is emitted, stamped inside the emitting call; a turn answered
   within ``turn_timeout`` counts as answered;
3. close every session, wait until the server holds no conversation, and check that
   nothing leaked in the client (asyncio tasks, file descriptors) against the level's start.

Client and server CPU over the turn window (``process_time`` each side) tell which side
saturated first; the machine's other load is recorded too.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import math
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from multiprocessing.connection import Connection
from typing import Any

import aiohttp

from avatar_sdk import AvatarSession
from avatar_sdk.events.bus import Event

from .harness import describe_error
from .load_cpu import sdk_control
from .media import (
    GcPauses,
    LoopLag,
    busy_cores,
    close_all,
    delta,
    machine_cpu,
    server_lag_start,
    server_lag_stop,
    server_stats,
)
from .stats import Summary


@dataclass(frozen=True)
class TurnPlan:
    """What part (b) does; plain data, sent to the child process as a dict."""

    levels: tuple[int, ...] = (1, 100, 250, 500, 1000)
    batch: int = 50
    spread: float = 4.0
    #: At least this many turns at every level (the single session does them in turn).
    min_turns: int = 20
    turn_timeout: float = 15.0
    greeting_timeout: float = 30.0
    idle_timeout: float = 15.0
    #: Stop the ramp once a level took this long (s): the next one would blow the budget.
    level_budget: float = 90.0
    #: Once a level's sessions are connected, ``gc.freeze()`` them (``gc.unfreeze()`` after
    #: the level), in the client and the staging server: CPython's full collections then
    #: skip the long-lived session graphs (about 1,300 tracked objects a session; one full
    #: collection held a 1,000-session client's loop for 1.1 s in issue 23's run). Off by
    #: default: the figure measures the SDK as an application runs it; its effect was not
    #: confirmed on an idle machine (``docs/fleet.md``).
    freeze_gc: bool = False


class TurnClock:
    """One session's stamps for the turn in flight: first ``agent_text``, ``agent_turn_ended``."""

    def __init__(self, session: AvatarSession) -> None:
        self.first_text: float | None = None
        self.ended: asyncio.Future[float] | None = None
        self.talking: asyncio.Future[None] | None = None
        session.on("agent_text", self._on_text)
        session.on("agent_turn_ended", self._on_ended)
        session.on("agent_talking", self._on_talking)

    def arm(self) -> None:
        loop = asyncio.get_running_loop()
        self.first_text = None
        self.ended = loop.create_future()
        self.talking = loop.create_future()

    def _on_text(self, event: Event) -> None:
        if self.ended is not None and self.first_text is None:
            self.first_text = time.perf_counter()

    def _on_ended(self, event: Event) -> None:
        if self.ended is not None and not self.ended.done():
            self.ended.set_result(time.perf_counter())

    def _on_talking(self, event: Event) -> None:
        if not event.data.get("talking") and self.talking is not None and not self.talking.done():
            self.talking.set_result(None)


@dataclass
class _Member:
    session: AvatarSession
    clock: TurnClock
    greeted: asyncio.Future[None]


async def _connect(
    url: str, token: str, level: int, plan: TurnPlan, members: list[_Member]
) -> tuple[list[float], list[str]]:
    """Connect ``level`` sessions in batches; connect times and failures."""
    times: list[float] = []
    failures: list[str] = []

    async def one() -> None:
        started = time.perf_counter()
        session = sdk_control(url, token)
        clock = TurnClock(session)
        clock.arm()  # the greeting is the first turn: its end is "talking" going false
        assert clock.talking is not None
        members.append(_Member(session, clock, clock.talking))
        try:
            await session.connect()
        except Exception as exc:
            failures.append(describe_error(exc))
            return
        times.append(time.perf_counter() - started)

    for first in range(0, level, plan.batch):
        await asyncio.gather(*(one() for _ in range(min(plan.batch, level - first))))
    return times, failures


async def _turns(
    member: _Member, offsets: Sequence[float], start: float, plan: TurnPlan
) -> dict[str, Any]:
    """This session's turns at ``start + offset``; latencies (s) and unanswered count."""
    texts: list[float] = []
    ended: list[float] = []
    unanswered = 0
    errors: list[str] = []
    clock = member.clock
    for index, offset in enumerate(offsets):
        wait = start + offset - time.perf_counter()
        if wait > 0:
            await asyncio.sleep(wait)
        clock.arm()
        assert clock.ended is not None and clock.talking is not None
        sent = time.perf_counter()
        try:
            await member.session.speak(f"ping {index}")
            done = await asyncio.wait_for(asyncio.shield(clock.ended), plan.turn_timeout)
        except Exception as exc:  # counted as unanswered, and why
            unanswered += 1
            errors.append(describe_error(exc))
            continue
        ended.append(done - sent)
        if clock.first_text is not None:
            texts.append(clock.first_text - sent)
        # The reply is over (the avatar done talking) before the next turn.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(clock.talking), plan.turn_timeout)
    return {"first_text": texts, "ended": ended, "unanswered": unanswered, "errors": errors}


#: A side counts as saturated when its loop's lag p90 reaches this (ms) or its process
#: used this share of a core (one event loop: one core at most, less the GIL's threads).
SATURATED_LAG_MS = 20.0
SATURATED_SHARE = 0.85
#: The machine counts as saturated when this many of its cores were busy (all processes).
SATURATED_MACHINE = 0.95
#: A garbage collection that held a side's loop this long (ms) is named as the cause: one
#: full collection over 1,000 sessions' objects held the client's loop for 0.5 s.
GC_PAUSE_MS = 100.0


def saturation(record: dict[str, Any]) -> list[str]:
    """Whose saturation a level measured: any of ``client``, ``server``, ``machine``
    (every core busy, whoever used them), and ``client GC``/``server GC`` when one garbage
    collection held that loop for :data:`GC_PAUSE_MS` or more; empty when nothing was."""
    found: list[str] = []
    for side, lag_key, share_key in (
        ("client", "loop_lag_ms", "client_core_share"),
        ("server", "server_loop_lag_ms", "server_core_share"),
    ):
        lag = (record.get(lag_key) or {}).get("p90_ms")
        share = record.get(share_key)
        if (lag is not None and lag >= SATURATED_LAG_MS) or (
            share is not None and share >= SATURATED_SHARE
        ):
            found.append(side)
    for side, gc_key in (("client", "client_gc"), ("server", "server_gc")):
        longest = (record.get(gc_key) or {}).get("longest_ms")
        if longest is not None and longest >= GC_PAUSE_MS:
            found.append(f"{side} GC ({longest:.0f} ms pause)")
    busy = record.get("machine_busy_cores")
    cores = os.cpu_count() or 1
    if busy is not None and not math.isnan(busy) and busy >= SATURATED_MACHINE * cores:
        found.append("machine")
    return found


def offsets_for(level: int, turns: int, spread: float) -> list[list[float]]:
    """Send offsets (s) of each session's turns: ``level * turns`` sends spaced evenly over
    ``spread`` seconds, session ``i``'s ``j``-th at slot ``j * level + i``."""
    total = level * turns
    step = spread / total
    return [[(j * level + i) * step for j in range(turns)] for i in range(level)]


def turns_per_session(level: int, plan: TurnPlan) -> int:
    return max(1, -(-plan.min_turns // level))


def _fds() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return -1


async def _tasks_over(baseline: set[asyncio.Task[Any]], timeout: float) -> int:
    """Tasks started since ``baseline`` still alive once they had ``timeout`` seconds to
    end (closing sessions finish their last callbacks)."""
    extra = asyncio.all_tasks() - baseline - {asyncio.current_task()}
    if extra:
        _, pending = await asyncio.wait(extra, timeout=timeout)
        return len(pending)
    return 0


async def _wait_idle(http: aiohttp.ClientSession, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    left = int((await server_stats(http))["conversations"])
    while left and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        left = int((await server_stats(http))["conversations"])
    return left


async def _level(
    http: aiohttp.ClientSession, url: str, token: str, level: int, plan: TurnPlan
) -> dict[str, Any]:
    record: dict[str, Any] = {"level": level}
    tasks_before = set(asyncio.all_tasks())
    fds_before = _fds()
    started = time.monotonic()
    members: list[_Member] = []
    try:
        connect_times, failures = await _connect(url, token, level, plan, members)
        record["connect_s"] = time.monotonic() - started
        record["connected"] = len(connect_times)
        record["connect_failures"] = failures[:5]
        if connect_times:
            record["connect_ms"] = Summary.of(connect_times).scaled(1000.0).as_json("ms")
        live = [m for m in members if m.session.state == "connected"]
        greeted = await asyncio.wait(
            [asyncio.ensure_future(asyncio.shield(m.greeted)) for m in live],
            timeout=plan.greeting_timeout,
        )
        for pending in greeted[1]:
            pending.cancel()
        record["greeted"] = len(greeted[0])
        if plan.freeze_gc:
            gc.collect()
            gc.freeze()
            record["frozen_objects"] = gc.get_freeze_count()
        turns = turns_per_session(level, plan)
        offsets = offsets_for(level, turns, plan.spread)
        lag = LoopLag()
        pauses = GcPauses()
        await server_lag_start(http, freeze_gc=plan.freeze_gc)
        pauses.start()
        server_before = await server_stats(http)
        machine_before = machine_cpu()
        cpu_before = time.process_time()
        window_start = time.monotonic()
        lag.start()
        start = time.perf_counter() + 0.05
        results = await asyncio.gather(
            *(_turns(m, offsets[i], start, plan) for i, m in enumerate(members))
        )
        window = time.monotonic() - window_start
        cpu = time.process_time() - cpu_before
        machine = busy_cores(machine_before, machine_cpu())
        lags = await lag.stop()
        client_gc = pauses.stop()
        served = delta(await server_stats(http), server_before)
        server_lag = await server_lag_stop(http)
        ended = [x for r in results for x in r["ended"]]
        texts = [x for r in results for x in r["first_text"]]
        answered = sum(1 for r in results if r["ended"] and not r["unanswered"])
        errors = [e for r in results for e in r["errors"]]
        record.update(
            turns_per_session=turns,
            turns_sent=level * turns,
            turns_answered=len(ended),
            turn_errors=errors[:5],
            sessions_answered=answered,
            ended_ms=Summary.of(ended).scaled(1000.0).as_json("ms") if ended else None,
            first_text_ms=Summary.of(texts).scaled(1000.0).as_json("ms") if texts else None,
            window_s=window,
            client_core_share=cpu / window,
            server_core_share=served["cpu"] / window,
            other_processes_cores=machine - (cpu + served["cpu"]) / window,
            loop_lag_ms=lags.scaled(1000.0).as_json("ms") if lags is not None else None,
            server_loop_lag_ms=server_lag or None,
            client_gc=client_gc,
            server_gc=server_lag.get("gc"),
            machine_busy_cores=machine,
        )
        record["saturated"] = saturation(record)
        return record
    except Exception as exc:
        record["error"] = describe_error(exc)
        return record
    finally:
        closing = time.monotonic()
        for first in range(0, len(members), 200):
            await close_all([m.session for m in members[first : first + 200]])
        record["close_s"] = time.monotonic() - closing
        members.clear()
        if plan.freeze_gc:
            gc.unfreeze()  # the closed sessions' graphs are collectable again
        record["server_left"] = await _wait_idle(http, plan.idle_timeout)
        record["tasks_leaked"] = await _tasks_over(tasks_before, plan.idle_timeout)
        record["fds_leaked"] = _fds() - fds_before
        record["seconds"] = time.monotonic() - started


async def ramp(url: str, token: str, plan: TurnPlan) -> list[dict[str, Any]]:
    """Every level in turn (stops early when a level runs past ``level_budget``)."""
    levels: list[dict[str, Any]] = []
    async with aiohttp.ClientSession(base_url=url) as http:
        # Warm-up, not recorded: first-use costs (imports, pools) are not a level's.
        await _level(http, url, token, 1, replace(plan, min_turns=2))
        for level in plan.levels:
            record = await _level(http, url, token, level, plan)
            levels.append(record)
            if record["seconds"] > plan.level_budget:
                break
    return levels


def ramp_in_child(conn: Connection, url: str, token: str, plan: dict[str, Any]) -> None:
    """Child-process entry point of part (b); the level records (or ``{"error"}``) to ``conn``."""
    logging.getLogger("engineio.client").setLevel(logging.ERROR)
    try:
        conn.send({"levels": asyncio.run(ramp(url, token, TurnPlan(**plan)))})
    except Exception as exc:
        conn.send({"error": describe_error(exc)})


def plan_dict(plan: TurnPlan) -> dict[str, Any]:
    data = asdict(plan)
    data["levels"] = tuple(plan.levels)
    return data
