"""Figure 1: ``connect()`` call to the ``connected`` event, control plane only.

N sessions run one after the other against one staging server; each is closed before the
next one starts. Two measurements per session:

* wall: ``time.perf_counter()`` just before ``await session.connect()`` to the instant the
  ``connected`` event is emitted (stamped inside the emitting call);
* SDK: ``stats()["connect_duration"]``, the SDK's own measurement of the same interval.

Then ``N_REFUSED`` sessions with a wrong token: ``time.perf_counter()`` before
``connect()`` to its ``auth_failed`` raise (the refusal is final: one CONNECT, no retry, which
``tests/integration/test_connect.py`` asserts; this is how long it takes).

A couple of warm-up sessions run first and are not counted (first-use costs such as
imports and TLS-free aiohttp session set-up); the cold first connect is reported apart.
"""

from __future__ import annotations

import asyncio
import time

from avatar_sdk import AvatarError, AvatarSession, ErrorCode
from avatar_sdk.testing import StagingServer

from .harness import Stamp, ms, new_session
from .stats import FigureResult, Row, Summary

N_SESSIONS = 30
WARMUP = 2
CONNECT_TIMEOUT = 10.0
N_REFUSED = 10


async def _run(n: int, warmup: int) -> FigureResult:
    result = FigureResult("connect", "connect() -> connected (control plane)")
    walls: list[float] = []
    sdk: list[float] = []
    closes: list[float] = []
    cold: float | None = None
    async with StagingServer() as staging:
        for index in range(warmup + n):
            session = new_session(staging)
            stamp = Stamp(session, "connected")
            stamp.arm()
            started = time.perf_counter()
            await asyncio.wait_for(session.connect(), CONNECT_TIMEOUT)
            emitted, _ = await stamp.next(1.0)
            duration = session.stats()["connect_duration"]
            closing = time.perf_counter()
            await session.close()
            closed = time.perf_counter()
            if cold is None:
                cold = emitted - started
            if index < warmup:
                continue
            walls.append(emitted - started)
            sdk.append(float(duration))
            closes.append(closed - closing)
        await asyncio.sleep(0.2)  # let the server process the last goodbye
        left_live = len(staging.live_sids)
        left_recoverable = len(staging.sio.sessions_by_sid)
        connections = staging.connections
        refused_before = staging.refused_connections
        refusals = [await _refused(staging) for _ in range(N_REFUSED)]
        refused_connects = staging.refused_connections - refused_before

    wall = Summary.of(walls).scaled(1000.0)
    reported = Summary.of(sdk).scaled(1000.0)
    close = Summary.of(closes).scaled(1000.0)
    refused = Summary.of(refusals).scaled(1000.0)
    result.rows = [
        Row("connect: wall, connect() -> connected", n, wall.median, "ms", wall.p90, wall.maximum),
        Row(
            "connect: SDK stats connect_duration",
            n,
            reported.median,
            "ms",
            reported.p90,
            reported.maximum,
        ),
        Row("close(): wall (informational)", n, close.median, "ms", close.p90, close.maximum),
        Row(
            "connect(): wrong token -> auth_failed raised",
            N_REFUSED,
            refused.median,
            "ms",
            refused.p90,
            refused.maximum,
        ),
    ]
    result.notes = [
        f"{warmup} warm-up session(s) not counted; the cold first connect took "
        f"{ms(cold or 0.0):.1f} ms.",
        f"p90/median (wall): {wall.p90 / wall.median:.2f}x; "
        f"server sessions left after {warmup + n} closes: {left_live} live, "
        f"{left_recoverable} held for recovery.",
        f"{N_REFUSED} wrong-token connects: {refused_connects} CONNECT(s) refused by the server.",
    ]
    result.data = {
        "sessions": n,
        "warmup": warmup,
        "cold_first_connect_ms": ms(cold or 0.0),
        "wall": wall.as_json("ms"),
        "sdk_connect_duration": reported.as_json("ms"),
        "close": close.as_json("ms"),
        "auth_failed": refused.as_json("ms"),
        "refused_connects": refused_connects,
        "samples_wall_ms": [ms(v) for v in walls],
        "samples_sdk_ms": [ms(v) for v in sdk],
        "server_connections": connections,
        "server_sessions_left_live": left_live,
        "server_sessions_left_recoverable": left_recoverable,
    }
    return result


async def _refused(staging: StagingServer) -> float:
    """Seconds from ``connect()`` with a wrong token to its ``auth_failed``."""
    session = AvatarSession(
        staging.url, "not-the-token", media=False, allow_insecure_transport=True
    )
    started = time.perf_counter()
    try:
        await asyncio.wait_for(session.connect(), CONNECT_TIMEOUT)
    except AvatarError as error:
        if error.code is not ErrorCode.AUTH_FAILED:
            raise
        return time.perf_counter() - started
    finally:
        await session.close()
    raise RuntimeError("a wrong token was accepted")


def run(n: int = N_SESSIONS, warmup: int = WARMUP) -> FigureResult:
    """Run figure 1 in its own event loop."""
    return asyncio.run(_run(n, warmup))
