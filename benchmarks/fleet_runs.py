"""``fleet`` figure, the measuring side: N control-only one-turn sessions, three ways.

Every way does the same work per session, on the same ramp (session ``i`` starts at
``i / rate`` s): build a control-only ``AvatarSession``, register a waiter for the greeting's
``agent_turn_ended``, connect, wait for it, send one text turn and wait for its
``agent_turn_ended``, close.

- ``hand``: that, hand-written, one task per session in a ``TaskGroup``: the floor.
- ``inline``: :func:`avatar_sdk.fleet.run_fleet` with ``engine="inline"`` running
  :func:`~.fleet_scenario.one_turn` (one ``ctx.turn``), JSON Lines written, on this
  process's loop: its CPU is directly comparable with ``hand``'s.
- ``local``: the same with ``engine="local", workers=1``: one worker process runs the
  sessions, this process is the driver (pipe reader, aggregation, JSON Lines). The worker's
  CPU is ``getrusage(RUSAGE_CHILDREN)`` across the run (the engine joins its worker before
  ``run_fleet`` returns), the driver's this process's ``process_time``.

One :func:`measure` is one fresh ``spawn`` child of the benchmark (``local``'s driver too:
a non-daemon child, since it has a child of its own) that makes three runs: a one-session
warm-up (first-use costs), a one-session baseline, then N sessions. The figure's CPU per
session is the marginal ``(CPU(N) - CPU(1)) / (N - 1)``: fixed costs (a worker's spawn and
imports, the runner's setup) drop out, which is what a per-session overhead means.
"""

from __future__ import annotations

import asyncio
import json
import logging
import resource
import tempfile
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import aiohttp

from avatar_sdk import AvatarSession, SessionConfig
from avatar_sdk.fleet import FleetPlan, SessionSpec, run_fleet

from .fleet_scenario import TURN_TEXT, one_turn
from .harness import describe_error
from .media import busy_cores, delta, machine_cpu, server_stats

#: The ways, in the figure's order.
WAYS: tuple[str, ...] = ("hand", "inline", "local")
#: ``SessionConfig`` fields of every session, whichever way builds it (media.CONFIG's).
CONFIG_FIELDS: dict[str, Any] = {"overall_connect_timeout": 20.0, "close_timeout": 2.0}
GREETING_TIMEOUT = 30.0
IDLE_TIMEOUT = 10.0


@dataclass(frozen=True)
class RunArgs:
    """One child's work: ``way`` with ``sessions`` sessions at ``rate`` per second."""

    url: str
    token: str
    way: str
    sessions: int
    rate: float
    turn_timeout: float = 15.0


def children_cpu() -> float:
    """CPU seconds (user + system) of this process's terminated, waited-for children."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


# --------------------------------------------------------------------------- hand-written


async def _hand_session(args: RunArgs, start_at: float) -> float:
    """One session by hand; speak -> ``agent_turn_ended`` in seconds."""
    await asyncio.sleep(max(0.0, start_at - time.monotonic()))
    session = AvatarSession(
        args.url,
        args.token,
        media=False,
        video=False,
        config=SessionConfig(**CONFIG_FIELDS),
        allow_insecure_transport=True,
    )
    try:
        greeting = session.expect("agent_turn_ended", timeout=GREETING_TIMEOUT)
        try:
            await session.connect()
            await greeting
        finally:
            greeting.cancel()
        ended = session.expect("agent_turn_ended", timeout=args.turn_timeout)
        started = time.monotonic()
        try:
            await session.speak(TURN_TEXT)
            event = await ended
        finally:
            ended.cancel()
        return event.at - started
    finally:
        await session.close()


async def _hand(args: RunArgs, count: int) -> dict[str, Any]:
    ended: list[float] = []
    errors: list[str] = []

    async def one(start_at: float) -> None:
        try:
            ended.append(await _hand_session(args, start_at))
        except Exception as exc:  # counted as a failed session, and why
            errors.append(describe_error(exc))

    t0 = time.monotonic()
    async with asyncio.TaskGroup() as tasks:
        for index in range(count):
            tasks.create_task(one(t0 + index / args.rate))
    return {"ok": len(ended), "failed": len(errors), "ended_s": ended, "errors": errors[:5]}


# --------------------------------------------------------------------------- the runner


def fleet_plan(args: RunArgs, count: int) -> FleetPlan:
    """The runner's plan for ``count`` sessions of the same work as :func:`_hand`."""
    spec = SessionSpec(args.url, args.token, allow_insecure_transport=True, config=CONFIG_FIELDS)
    return FleetPlan(
        one_turn,
        spec,
        sessions=count,
        rate=args.rate,
        workers=1,
        turn_timeout=args.turn_timeout,
        greeting_timeout=GREETING_TIMEOUT,
    )


async def _fleet(args: RunArgs, count: int, jsonl: Path) -> dict[str, Any]:
    report = await run_fleet(fleet_plan(args, count), engine=args.way, jsonl=jsonl)
    stats = report.stats
    return {
        "ok": int(stats["ok"]),
        "failed": int(stats["failed"]),
        "errors": [f"{code} x{n}" for code, n in stats["failures"].items()][:5],
    }


def turn_latencies(lines: list[str]) -> list[float]:
    """``ended_s`` of every answered ``turn`` measurement of a run's JSON Lines."""
    out: list[float] = []
    for line in lines:
        item = json.loads(line)
        if item.get("kind") == "turn" and item.get("ok") and item.get("ended_s") is not None:
            out.append(float(item["ended_s"]))
    return out


# --------------------------------------------------------------------------- one run


async def _wait_idle(http: aiohttp.ClientSession) -> int:
    """Wait until the server holds no conversation (the next run starts clean)."""
    deadline = time.monotonic() + IDLE_TIMEOUT
    left = int((await server_stats(http))["conversations"])
    while left and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
        left = int((await server_stats(http))["conversations"])
    return left


async def timed_run(
    http: aiohttp.ClientSession, args: RunArgs, count: int, jsonl: Path
) -> dict[str, Any]:
    """One run of ``count`` sessions, its CPU (this process, its children) over the whole
    run: connect, turn, close. Server and machine readings are taken outside the window."""
    server_before = await server_stats(http)
    machine_before = machine_cpu()
    kids_before = children_cpu()
    cpu_before = time.process_time()
    wall_before = time.monotonic()
    if args.way == "hand":
        outcome = await _hand(args, count)
    else:
        outcome = await _fleet(args, count, jsonl)
    wall = time.monotonic() - wall_before
    cpu = time.process_time() - cpu_before
    kids = children_cpu() - kids_before
    machine = busy_cores(machine_before, machine_cpu())
    server = delta(await server_stats(http), server_before)
    if args.way != "hand":
        lines = await asyncio.to_thread(jsonl.read_text, encoding="utf-8")
        outcome["ended_s"] = turn_latencies(lines.splitlines())
        outcome["jsonl_lines"] = len(lines.splitlines())
    return {
        **outcome,
        "sessions": count,
        "cpu_s": cpu,
        "children_cpu_s": kids,
        "wall_s": wall,
        "server_cpu_s": server["cpu"],
        "machine_busy_cores": machine,
        "other_processes_cores": machine - (cpu + kids + server["cpu"]) / wall,
        "server_left": await _wait_idle(http),
    }


async def measure(args: RunArgs, folder: Path) -> dict[str, Any]:
    """Warm-up (1 session), baseline (1 session), then ``args.sessions``: their records."""
    runs: dict[str, Any] = {}
    async with aiohttp.ClientSession(base_url=args.url) as http:
        for name, count in (("warmup", 1), ("baseline", 1), ("run", args.sessions)):
            runs[name] = await timed_run(http, args, count, folder / f"{name}.jsonl")
    return {"way": args.way, "rate": args.rate, **runs}


def measure_in_child(conn: Connection, args: RunArgs) -> None:
    """Child-process entry point: :func:`measure`'s records (or ``{"error"}``) to ``conn``."""
    # close chatter; "engineio" itself so the local engine's worker mirrors the level
    logging.getLogger("engineio").setLevel(logging.ERROR)
    try:
        with tempfile.TemporaryDirectory(prefix="bench-fleet-") as folder:
            conn.send(asyncio.run(measure(args, Path(folder))))
    except Exception as exc:
        conn.send({"way": args.way, "error": describe_error(exc)})
