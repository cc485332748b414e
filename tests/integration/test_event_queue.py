"""A consumer of ``session.events()`` that falls behind a flood is told exactly what it lost
(issue 12, defect 5): real server events over a real socket, a small bound."""

from __future__ import annotations

import asyncio

from avatar_sdk.events.bus import Event
from avatar_sdk.testing import StagingServer
from avatar_sdk.wire import In

from .conftest import FAST, SessionFactory

FLOOD = 2_000


async def test_a_flooded_stream_learns_the_exact_number_it_lost(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    # No probes: every capacity_changed below is one the test sent.
    session = make_session(config=FAST.with_(socket_probe_interval=0.0, event_queue_size=500))
    await session.connect()
    seen = 0
    all_seen = asyncio.Event()

    def count(_: Event) -> None:
        nonlocal seen
        seen += 1
        if seen >= FLOOD:
            all_seen.set()

    session.on("capacity_changed", count)
    stream = session.events("capacity_changed", max_queue=50)  # never read during the flood
    default_bound = session.events("capacity_changed")  # SessionConfig.event_queue_size
    (sid,) = staging.live_sids
    payload = {"available": True, "details": {}}
    for _ in range(FLOOD):
        await staging.sio.emit_recoverable(sid, In.AVAILABILITY_RESULT, payload)
    await asyncio.wait_for(all_seen.wait(), 30)
    await session.close()

    # ``seen`` counts every capacity_changed since the streams subscribed (the flood, plus
    # at most one late answer to the connect's own availability check).
    assert FLOOD <= seen <= FLOOD + 1
    items = [event async for event in stream]
    gaps = [e.data["count"] for e in items if e.name == "events_dropped"]
    delivered = [e for e in items if e.name == "capacity_changed"]
    assert items[0].name == "events_dropped"  # the gap is where it happened: first
    assert gaps == [seen - 50] and len(delivered) == 50
    assert stream.dropped == seen - 50
    assert default_bound.dropped == seen - 500
    assert session.stats()["events_dropped"] == (seen - 50) + (seen - 500)
