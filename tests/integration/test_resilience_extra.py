"""Journal, bounded teardown from awkward states, and faults stacked on recoveries."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from avatar_sdk import AvatarError, AvatarSession, RetryPolicy
from avatar_sdk.media import ToneSource
from avatar_sdk.testing import StagingServer

from .conftest import FAST, HANG_GUARD, SessionFactory, sdk_tasks, until
from .test_media_session import open_peers

MEDIA = FAST.with_(overall_connect_timeout=10.0, asr_timeout=5.0, media_recovery_timeout=5.0)


async def test_journal_records_the_incident_without_secrets_or_content(
    staging: StagingServer, make_session: SessionFactory, tmp_path: Path
) -> None:
    path = tmp_path / "session.jsonl"
    session = make_session(journal=path)
    await session.connect()
    await session.speak("my private question")
    await session.wait_for("agent_turn_ended", timeout=2)
    await staging.faults.drop_socket()
    await session.wait_for("reconnected", timeout=3)
    await session.close()
    text = path.read_text()
    lines = [json.loads(line) for line in text.splitlines()]
    names = [entry["event"] for entry in lines]
    assert names[0] == "state_changed" and names[-1] == "ended"
    assert {"connected", "reconnecting", "reconnected"} <= set(names)
    assert staging.token not in text
    assert "my private question" not in text and "agent_text" not in names
    assert all(entry["session"] == session.sticky_id for entry in lines)


async def test_close_is_bounded_while_a_whep_post_never_answers(staging: StagingServer) -> None:
    """close() ends on close_timeout, not on the WHEP answer (never sent) nor on the
    connect's own deadline, set far above the hang guard so that waiting it fails."""
    staging.faults.stuck_ice("stv", mode="no_answer")
    config = MEDIA.with_(overall_connect_timeout=8 * HANG_GUARD)
    session = AvatarSession(
        staging.url, staging.token, audio=ToneSource(), allow_insecure_transport=True, config=config
    )
    task = asyncio.ensure_future(session.connect())
    assert await until(lambda: session.state == "connecting_video", 5)
    started = time.monotonic()
    async with asyncio.timeout(HANG_GUARD):  # a hang fails here, not at pytest's timeout
        await session.close()
    assert time.monotonic() - started < HANG_GUARD < config.overall_connect_timeout
    with pytest.raises(AvatarError):
        await task
    assert await until(lambda: staging.live_sids == [], 2)
    assert sdk_tasks() == []
    staging.faults.clear()
    await staging.stop()
    assert open_peers() == []


async def test_close_is_bounded_in_the_middle_of_a_cold_reconnect(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    """close() ends on close_timeout, not on the cold attempt's join (withheld) nor on its
    timeouts, set far above the hang guard so that waiting any of them fails."""
    config = FAST.with_(
        join_complete_timeout=6 * HANG_GUARD, overall_connect_timeout=8 * HANG_GUARD
    )
    session = make_session(config=config)
    await session.connect()
    staging.faults.withhold("joinComplete")  # the cold attempt hangs in its join
    await staging.faults.drop_socket(recovery=False)
    assert await until(lambda: session.state == "cold_reconnecting", 2)
    started = time.monotonic()
    async with asyncio.timeout(HANG_GUARD):  # a hang fails here, not at pytest's timeout
        await session.close()
    assert time.monotonic() - started < HANG_GUARD < config.join_complete_timeout
    assert session.state == "ended"
    assert await until(lambda: staging.live_sids == [], 2)
    assert sdk_tasks() == []


async def test_a_drop_during_the_cold_tier_is_survived(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = make_session(config=FAST.with_(cold_reconnect=RetryPolicy(max_attempts=4, base=0.05)))
    await session.connect()
    staging.faults.latency(0.05)  # slow the rebuild so the second fault lands inside it
    await staging.faults.drop_socket(recovery=False)
    assert await until(lambda: session.state == "cold_reconnecting" and staging.live_sids, 2)
    await staging.faults.drop_socket(recovery=False)
    staging.faults.clear()
    ev = await session.wait_for("reconnected", timeout=10)
    assert ev.data["tier"] == "cold"
    assert session.state == "connected"
    await session.speak("after two faults")
    await session.wait_for("agent_turn_ended", timeout=3)


async def test_failed_session_leaves_nothing_behind(staging: StagingServer) -> None:
    session = AvatarSession(
        staging.url,
        staging.token,
        audio=ToneSource(),
        allow_insecure_transport=True,
        config=MEDIA.with_(cold_reconnect=RetryPolicy(max_attempts=1, min_span=0.0)),
    )
    await session.connect()
    staging.faults.withhold("onServerConnected")
    await staging.faults.drop_socket(recovery=False)
    await session.wait_for("ended", timeout=10)
    assert session.state == "failed"
    assert await until(lambda: staging.live_sids == [], 2)
    assert sdk_tasks() == []
    staging.faults.clear()
    await staging.stop()
    assert open_peers() == []


async def test_close_is_bounded_in_every_live_state(staging: StagingServer) -> None:
    """paused, reconnecting (socket tier in progress) and recovering_media."""
    for state in ("paused", "reconnecting", "recovering_media"):
        session = AvatarSession(
            staging.url,
            staging.token,
            audio=ToneSource(),
            allow_insecure_transport=True,
            # Every wait close() must not make is far above the hang guard: the re-subscribe
            # (never answered), the socket tier's window and its attempts' socket open.
            config=MEDIA.with_(
                ice_stuck_timeout=30.0,
                media_recovery_timeout=30.0,
                reconnect_window=6 * HANG_GUARD,
                server_connect_timeout=6 * HANG_GUARD,
                overall_connect_timeout=8 * HANG_GUARD,
            ),
        )
        await session.connect()
        if state == "paused":
            await session.pause()
        elif state == "reconnecting":
            staging.faults.withhold("onServerConnected")
            staging.sio.recovery_enabled = False  # the socket tier keeps retrying
            await staging.faults.drop_socket()
        else:
            staging.faults.stuck_ice("stv", mode="no_answer")  # the re-subscribe hangs
            await staging.faults.ice_failure("stv")
        reached = (state, "cold_reconnecting")
        assert await until(lambda s=session, r=reached: s.state in r, 4)
        started = time.monotonic()
        async with asyncio.timeout(HANG_GUARD):  # a hang fails here, not at pytest's timeout
            await session.close()
        assert time.monotonic() - started < HANG_GUARD, state  # close_timeout, not the above
        assert session.state == "ended"
        staging.faults.clear()
    assert await until(lambda: staging.live_sids == [], 2)
    assert sdk_tasks() == []
    await staging.stop()
    assert open_peers() == []
