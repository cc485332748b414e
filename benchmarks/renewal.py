"""Figure ``renewal``: the gap a renewal past the server's time cap leaves in the avatar's
media (issue 19), loopback, one audio+video session.

* make-before-break: ``session.renew()`` ``RENEWALS`` times, a turn answered between two:
  ``session_renewed.gap``, from the old link's last avatar frame handed to the outputs to
  the new link's first. The new link was already playing (unseen), so the swap is a
  pointer change: target a median under 100 ms.
* break-before-make: the same against a staging backend that refuses a second live session
  on the thread (the old link is closed first, the new one joined, its greeting let play
  unseen). Compared with the cold tier's own figure measured here (a cold reconnect:
  ``drop_socket(recovery=False)`` to ``reconnected``) plus the opening (the greeting's
  length: ``connect(wait_for_greeting=True)`` less the connect itself): the target is to
  stay under their sum.
"""

from __future__ import annotations

import asyncio
import time

from avatar_sdk import AvatarSession, Event, RenewalPolicy, SessionConfig
from avatar_sdk.testing import StagingServer

from .stats import FigureResult, Row, Summary, Target

TITLE = "renewal: gap in the avatar's media across a renewal (loopback, audio+video)"
RENEWALS = 6
COLD = 3
#: Make-before-break: the swap is a pointer change (issue 19's target).
MBB_TARGET = Target("<", 100.0, "ms")
CONFIG = SessionConfig(renewal=RenewalPolicy(boundary_wait=5.0))


async def _session(staging: StagingServer, thread: str) -> tuple[AvatarSession, float]:
    session = AvatarSession(
        staging.url,
        staging.token,
        thread_id=thread,
        config=CONFIG,
        allow_insecure_transport=True,
    )
    started = time.perf_counter()
    await session.connect(wait_for_greeting=True)  # returns once the greeting was said
    total = time.perf_counter() - started
    return session, max(0.0, total - (session.stats()["connect_duration"] or 0.0))


async def _renewals(staging: StagingServer, thread: str, count: int) -> tuple[list[float], float]:
    gaps: list[float] = []
    session, opening = await _session(staging, thread)
    try:
        for n in range(count):
            renewed = session.expect("session_renewed", timeout=30.0)
            await session.renew()
            event: Event = await renewed
            gap = event.data.get("gap")
            if gap is not None:
                gaps.append(float(gap))
            await session.ask(f"after renewal {n + 1}", timeout=30.0)
    finally:
        await session.close()
    return gaps, opening


async def _cold(staging: StagingServer, count: int) -> list[float]:
    durations: list[float] = []
    session, _ = await _session(staging, "thr-bench-cold")
    try:
        for n in range(count):
            back = session.expect(
                "reconnected", predicate=lambda e: e.data["tier"] == "cold", timeout=30.0
            )
            await staging.faults.drop_socket(recovery=False)
            durations.append(float((await back).data["duration"]))
            await session.ask(f"after cold {n + 1}", timeout=30.0)
    finally:
        await session.close()
    return durations


async def _run(renewals: int, cold: int) -> FigureResult:
    result = FigureResult("renewal", TITLE)
    async with StagingServer() as staging:
        mbb, opening = await _renewals(staging, "thr-bench-mbb", renewals)
        colds = await _cold(staging, cold)
    async with StagingServer(concurrent_thread_sessions=False) as staging:
        bbm, _ = await _renewals(staging, "thr-bench-bbm", renewals)
    cold_s = Summary.of(colds).scaled(1000.0)
    bbm_target = Target("<", cold_s.median + opening * 1000.0, "ms")
    for label, values, target in (
        ("make-before-break gap", mbb, MBB_TARGET),
        ("break-before-make gap", bbm, bbm_target),
    ):
        if not values:
            result.notes.append(f"{label}: no gap measured")
            continue
        s = Summary.of(values).scaled(1000.0)
        result.rows.append(Row(label, s.n, s.median, "ms", s.p90, s.maximum, target))
        result.data[label.split(" gap")[0].replace("-", "_")] = s.as_json("ms")
    result.rows.append(
        Row("cold reconnect (for comparison)", cold_s.n, cold_s.median, "ms", cold_s.p90,
            cold_s.maximum)
    )  # fmt: skip
    result.data.update(
        {
            "renewals": renewals,
            "cold_reconnect": cold_s.as_json("ms"),
            "opening_ms": opening * 1000.0,
        }
    )
    result.notes.append(
        f"{renewals} renewals of each kind, a turn answered between two; break-before-make's"
        f" target: the cold reconnect's median plus the opening ({opening * 1000:.0f} ms)."
    )
    return result


def run(renewals: int = RENEWALS, cold: int = COLD) -> FigureResult:
    """Run the renewal figure in its own event loop."""
    return asyncio.run(_run(renewals, cold))
