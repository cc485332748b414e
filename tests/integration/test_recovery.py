"""Socket-tier recovery, recovery refused, and non-recoverable endings over real sockets."""

from __future__ import annotations

import asyncio
import json

import pytest

from avatar_sdk import AvatarError, RetryPolicy
from avatar_sdk.testing import StagingServer
from avatar_sdk.wire import In

from .conftest import FAST, HANG_GUARD, SessionFactory, sdk_tasks, until


def _raw_text(i: int) -> dict[str, object]:
    delta = {"type": "avatar", "content": f"gap-{i}", "role": "assistant"}
    return {"speechId": "gAp1-transcript-x", "turnId": "t-gap", "delta": json.dumps(delta)}


async def _connected(make_session: SessionFactory) -> object:
    session = make_session()
    await session.connect()
    await session.wait_for("agent_turn_ended", timeout=2)
    return session


async def test_same_pod_recovery_replays_gap_events_once_in_order_without_rejoin(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = make_session()
    await session.connect()
    await session.wait_for("agent_turn_ended", timeout=2)
    sid_before = staging.live_sids[0]
    conv = staging.conversations[sid_before]
    seen: list[str] = []
    session.on("agent_text", lambda e: seen.append(e.data["content"]))
    events: list[str] = []
    session.on("*", lambda e: events.append(e.name))

    assert await staging.faults.drop_socket() == 1
    for i in range(20):  # emitted while the transport is down: buffered server-side
        await conv.emit(In.AGENT_RAW_TEXT, _raw_text(i))
    ev = await session.wait_for("reconnected", timeout=3)

    assert ev.data["tier"] == "socket"
    assert ev.data["recovered"] is True
    # No bound on ev.data["duration"]: the socket tier recovering at all (no cold fallback,
    # below) is the behaviour; how fast is `make bench` (figure recovery).
    assert [c for c in seen if c.startswith("gap-")] == [f"gap-{i}" for i in range(20)]
    assert len(staging.received_events("join")) == 1  # no re-join
    assert staging.live_sids == [sid_before]  # same server session
    assert staging.sio.recoveries == 1
    assert events.count("reconnecting") == 1
    assert session.stats()["reconnects"]["socket"] == 1
    # The session is fully usable afterwards.
    await session.speak("still there?")
    await session.wait_for("agent_turn_ended", timeout=2)
    assert staging.received_events("onTextEntered")[-1].sid == sid_before


async def test_recovery_refused_falls_back_to_cold_reconnect_keeping_the_thread(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = make_session()
    await session.connect()
    await session.wait_for("agent_turn_ended", timeout=2)
    thread = session.thread_id
    old_sid = staging.live_sids[0]
    tiers: list[tuple[str, object]] = []
    session.on("reconnecting", lambda e: tiers.append((e.data["tier"], e.data["attempt"])))

    await staging.faults.drop_socket(recovery=False)
    ev = await session.wait_for("reconnected", timeout=5)

    assert ev.data == {"tier": "cold", "recovered": False, "duration": ev.data["duration"]}
    assert tiers[0][0] == "socket"
    assert tiers[-1] == ("cold", 1)
    joins = staging.received_events("join")
    assert len(joins) == 2
    assert joins[-1].payload["kaltura"]["threadId"] == thread  # memory continues
    assert joins[-1].sid != old_sid  # a brand-new server session
    assert session.state == "connected"
    assert session.thread_id == thread
    assert staging.sio.refused_recoveries >= 1


async def test_non_recoverable_disconnect_ends_with_that_reason(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = make_session()
    await session.connect()
    names: list[str] = []
    session.on("*", lambda e: names.append(e.name))
    await staging.faults.server_disconnect()
    ended = await session.wait_for("ended", timeout=2)
    assert ended.data["reason"] == "io server disconnect"
    assert ended.data["code"] == "server_ended"
    assert "reconnecting" not in names
    assert "error" not in names
    assert session.state == "ended"
    assert await until(lambda: staging.live_sids == [], 2)
    assert sdk_tasks() == []


async def test_second_drop_after_recovery_recovers_again(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = make_session()
    await session.connect()
    for _ in range(3):
        waiter = session.expect("reconnected", timeout=3)
        await staging.faults.drop_socket()
        assert (await waiter).data["recovered"] is True
    assert session.stats()["reconnects"]["socket"] == 3
    assert len(staging.received_events("join")) == 1


async def test_speak_during_cold_reconnect_is_held_and_delivered_once(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = make_session()
    await session.connect()
    await session.wait_for("agent_turn_ended", timeout=2)
    staging.faults.latency(0.05)  # slows the new handshake so the turn is sent mid-recovery
    await staging.faults.drop_socket(recovery=False)
    await session.wait_for("reconnecting", timeout=2)
    await session.speak("held turn")
    staging.faults.clear()
    assert session.state == "connected"
    await session.wait_for("agent_turn_ended", timeout=3)
    texts = [
        r.payload["text"] for r in staging.received_events("onTextEntered") if r.payload["text"]
    ]
    assert texts == ["held turn"]
    assert staging.received_events("onTextEntered")[-1].sid == staging.live_sids[-1]


async def test_held_turn_fails_clearly_when_the_session_ends(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = make_session(
        config=FAST.with_(cold_reconnect=RetryPolicy(max_attempts=2, base=0.01, min_span=0.0))
    )
    await session.connect()
    staging.faults.withhold("onServerConnected")  # every cold attempt now fails
    await staging.faults.drop_socket(recovery=False)
    await session.wait_for("reconnecting", timeout=2)
    with pytest.raises(AvatarError):
        await asyncio.wait_for(session.speak("lost?"), 30)
    assert session.state in ("failed", "ended")


async def test_cold_reconnect_gives_up_after_its_budget(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    # min_span=0: the two attempts alone decide (the span floor has its own tests).
    cfg = FAST.with_(cold_reconnect=RetryPolicy(max_attempts=2, base=0.01, cap=0.02, min_span=0.0))
    session = make_session(config=cfg)
    await session.connect()
    staging.faults.withhold("clientConfiguration")
    await staging.faults.drop_socket(recovery=False)
    gave_up = await session.wait_for("gave_up", timeout=10)
    assert gave_up.data == {"tier": "cold", "attempts": 2, "code": "join_timeout"}
    ended = await session.wait_for("ended", timeout=2)
    assert ended.data["reason"] == "gave_up"
    assert session.state == "failed"
    assert session.health().upstream == "failed"
    assert await until(lambda: staging.live_sids == [], 2)
    assert sdk_tasks() == []


@pytest.mark.staging_leftovers(
    "a silenced socket: the server never hears the client go, by design of the fault"
)
async def test_silently_dead_socket_is_found_by_the_probe_and_recovered(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    cfg = FAST.with_(socket_probe_interval=0.5, socket_probe_timeout=0.3)
    session = make_session(config=cfg)
    await session.connect()
    await session.wait_for("agent_turn_ended", timeout=2)
    conv = staging.conversations[staging.live_sids[0]]
    # The greeting is over (the server has nothing more to send) before the socket dies.
    assert await until(lambda: conv.turn_task is None or conv.turn_task.done(), 3)
    started = asyncio.get_running_loop().time()
    assert staging.faults.silent_socket() == 1
    lost = await session.wait_for("reconnecting", timeout=HANG_GUARD)
    detected = asyncio.get_running_loop().time() - started
    assert lost.data["reason"] == "ping timeout"
    # Found by the SDK's probe (it counts its detections), not by Engine.IO's heartbeat,
    # which would take the server's 25 + 20 s; the wall clock is only a hang guard.
    assert session.stats().get("dead_socket_detections") == 1
    assert detected < HANG_GUARD
    ev = await session.wait_for("reconnected", timeout=10)
    # Like a server behind a dead NAT, staging never hears of the abort (no FIN reaches it)
    # and has not timed the socket out yet: the in-place offer is refused, the cold tier
    # takes over. tests/integration/test_silent_socket.py covers both server behaviours.
    assert ev.data["tier"] == "cold"
    assert session.state == "connected"
    await session.speak("still here")
    await session.wait_for("agent_turn_ended", timeout=3)


async def test_probe_keeps_a_quiet_healthy_socket(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    cfg = FAST.with_(socket_probe_interval=0.3, socket_probe_timeout=0.3)
    session = make_session(config=cfg)
    await session.connect()
    names: list[str] = []
    session.on("*", lambda e: names.append(e.name))
    probes = len(staging.received_events("checkAvailability"))
    # Probes go one at a time: the sixth arrives only once the five before it were answered
    # (or timed out, which drops the socket and counts a dead-socket detection first).
    assert await until(lambda: len(staging.received_events("checkAvailability")) >= probes + 6, 6)
    assert "reconnecting" not in names
    assert session.stats().get("dead_socket_detections", 0) == 0
    assert {r.sid for r in staging.received_events("checkAvailability")} == {staging.live_sids[0]}
