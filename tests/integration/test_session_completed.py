"""session_completed on AvatarSession: exactly when a conversation genuinely ends."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from avatar_sdk import AvatarSession
from avatar_sdk.lifecycle.completion import default_hooks
from avatar_sdk.media import ToneSource
from avatar_sdk.testing import StagingServer
from avatar_sdk.wire import In

from .conftest import FAST, SessionFactory

ROOT = Path(__file__).resolve().parents[2]
TOUR = FAST.with_(overall_connect_timeout=10.0, asr_timeout=5.0, media_recovery_timeout=5.0)


async def _greeted(make_session: SessionFactory, staging: StagingServer, **kw: Any) -> Any:
    kw.setdefault("genie_url", staging.genie_url)
    session = make_session(**kw)
    await session.connect()
    await session.wait_for("agent_turn_ended", timeout=3)  # the thread id rides the greeting
    assert session.thread_id is not None
    return session


async def test_close_sends_it_exactly_once(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = await _greeted(make_session, staging)
    events: list[dict[str, Any]] = []
    session.on("session_completed", lambda e: events.append(e.data))
    await session.close()
    await session.close()
    assert staging.completed_threads == [session.thread_id]
    assert len(events) == 1
    assert events[0]["thread_id"] == session.thread_id
    assert events[0]["delivered"] is True and events[0]["reason"] == "close"


async def test_leaving_async_with_sends_it(staging: StagingServer) -> None:
    async with AvatarSession(
        staging.url,
        staging.token,
        genie_url=staging.genie_url,
        media=False,
        allow_insecure_transport=True,
        config=FAST,
    ) as session:
        await session.wait_for("agent_turn_ended", timeout=3)
    assert staging.completed_threads == [session.thread_id]


async def test_a_full_fault_tour_sends_nothing_until_the_real_end(staging: StagingServer) -> None:
    session = AvatarSession(
        staging.url,
        staging.token,
        genie_url=staging.genie_url,
        audio=ToneSource(),
        allow_insecure_transport=True,
        config=TOUR.with_(tool_spiral_limit=2, hard_tool_spiral_limit=4),
    )
    try:
        await session.connect()
        await session.wait_for("agent_turn_ended", timeout=3)
        waiter = session.expect("reconnected", timeout=5)
        await staging.faults.drop_socket()  # socket tier
        await waiter
        waiter = session.expect("reconnected", timeout=10)
        await staging.faults.drop_socket(recovery=False)  # cold tier
        await waiter
        waiter = session.expect("media_recovered", timeout=8)
        await staging.faults.ice_failure("stv")  # media tier
        await waiter
        await session.pause()
        await session.resume()
        staging.brain.tool_calls(['navigate_to_slide {"slide": 2}'] * 5)
        waiter = session.expect("spiral_recovered", timeout=10)
        await session.speak("show the next slide")  # hard spiral: a new server session
        await waiter
        assert staging.completed_threads == []
    finally:
        await session.close()
    assert staging.completed_threads == [session.thread_id]


async def test_server_ended_conversation_is_not_completed_by_default(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = await _greeted(make_session, staging)
    await staging.faults.end_conversation()
    await session.wait_for("ended", timeout=3)
    await session.close()
    assert staging.completed_threads == []


async def test_complete_on_server_end_opt_in(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = await _greeted(make_session, staging, config=FAST.with_(complete_on_server_end=True))
    await staging.faults.end_conversation()
    await session.wait_for("ended", timeout=3)
    assert staging.completed_threads == [session.thread_id]


async def test_a_fatal_end_is_not_a_completion(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = await _greeted(make_session, staging)
    await staging.faults.agent_crash(recoverable=False)
    await session.wait_for("ended", timeout=3)
    await session.close()
    assert staging.completed_threads == []


async def test_suppressed_while_another_session_holds_the_thread_then_sent_by_the_last(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    first = await _greeted(make_session, staging)
    second = make_session(genie_url=staging.genie_url, thread_id=first.thread_id)
    await second.connect()
    outcomes: list[str] = []
    first.on("session_completed", lambda e: outcomes.append(e.data["outcome"]))
    await first.close()
    assert staging.completed_threads == []
    assert outcomes == ["suppressed"]
    await second.close()
    assert staging.completed_threads == [first.thread_id]


async def test_idle_timeout_ends_and_completes(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = await _greeted(make_session, staging, config=FAST.with_(idle_timeout=0.5))
    ended = await session.wait_for("ended", timeout=3)
    assert ended.data["reason"] == "idle_timeout"
    assert staging.completed_threads == [session.thread_id]


async def test_a_slow_genie_never_stretches_close(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    """close() gives up on the POST at close_timeout: it waits neither for the genie's answer
    (5 s) nor for session_complete_timeout (set far above it here)."""
    genie_delay = 5.0
    config = FAST.with_(session_complete_timeout=6 * genie_delay)
    session = await _greeted(make_session, staging, config=config)
    staging.faults.genie_delay(genie_delay)
    events: list[dict[str, Any]] = []
    session.on("session_completed", lambda e: events.append(e.data))
    started = asyncio.get_running_loop().time()
    await session.close()
    elapsed = asyncio.get_running_loop().time() - started
    assert [(e["delivered"], e["outcome"]) for e in events] == [(False, "timeout")]
    assert elapsed < genie_delay - 1.0  # before the answer: a hang guard, not a speed claim
    staging.faults.clear()
    default_hooks().untrack(session._completion)  # the exit hook would retry at exit


async def test_sigterm_closes_the_session_and_completes_the_thread(staging: StagingServer) -> None:
    env = {
        **os.environ,
        "AVATAR_TEST_URL": staging.url,
        "AVATAR_TEST_GENIE_URL": staging.genie_url,
        "AVATAR_TEST_TOKEN": staging.token,
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.integration._session_child",
        stdout=asyncio.subprocess.PIPE, env=env, cwd=str(ROOT),
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 20)).decode().split()
        assert line[0] == "READY"
        thread = line[1]
        started = asyncio.get_running_loop().time()
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(proc.wait(), 10)
        elapsed = asyncio.get_running_loop().time() - started
        assert staging.completed_threads == [thread]
        assert code == -signal.SIGTERM  # it still dies by the signal, like an untouched process
        assert elapsed < 3.0
        assert staging.live_sids == []  # the socket was closed gracefully, not dropped
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_spiral_across_an_idle_wake_up_turn_still_trips_the_hard_tier(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    cfg = FAST.with_(tool_spiral_limit=3, hard_tool_spiral_limit=6)
    session = await _greeted(make_session, staging, config=cfg)
    detected: list[dict[str, Any]] = []
    session.on("tool_spiral_detected", lambda e: detected.append(e.data))
    staging.brain.tool_spiral(7, turn_boundaries=1)  # 4 tools, a wake-up turn, 3 tools
    waiter = session.expect("tool_spiral_recovering", timeout=5)
    await session.speak("navigate for me")
    assert (await waiter).data["count"] == 6
    assert len(detected) == 2  # the soft tier signals once in each of the two turns
    await session.wait_for("reconnected", timeout=5)


async def test_respond_to_tool_acknowledges_a_waiting_call(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = await _greeted(make_session, staging, config=FAST.with_(tool_spiral_limit=0))
    conv = staging.conversations[staging.live_sids[0]]
    calls: list[dict[str, Any]] = []
    session.on("tool_call", lambda e: calls.append(e.data))
    delta = json.dumps(
        {
            "type": "tool",
            "content": 'collect_contact {"field": "email"}',
            "tool_metadata": {"id": "call-77", "wait_for_response": True},
        }
    )
    waiter = session.expect("tool_call", timeout=2)
    await conv.emit(In.AGENT_RAW_TEXT, {"speechId": "s9", "turnId": "t9", "delta": delta})
    await waiter
    assert calls[0]["call_id"] == "call-77"
    outcome = await session.respond_to_tool("call-77", {"email": "a@example.com"})
    assert outcome == {"ok": True, "reason": "ok"}
    assert staging.tool_responses[-1]["tool_id"] == "call-77"
    assert staging.tool_responses[-1]["response"] == {"email": "a@example.com"}
    again = await session.respond_to_tool("call-77", {"email": "a@example.com"})
    assert again["reason"] == "unknown_or_stale"
    staging.faults.genie_status(500)
    waiter = session.expect("tool_call", timeout=2)
    second = delta.replace("77", "78").replace("email", "phone")  # a repeat would be deduped
    await conv.emit(In.AGENT_RAW_TEXT, {"speechId": "s9", "turnId": "t9", "delta": second})
    await waiter
    failed = await session.respond_to_tool("call-78", {"ok": 1})
    assert failed["ok"] is False and failed["reason"] == "http_error"
    retried = await session.respond_to_tool("call-78", {"ok": 1})  # still pending: retry works
    assert retried["ok"] is True


async def test_respond_to_tool_after_close_sends_nothing_and_leaks_nothing(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    """A tool acknowledged after close() is refused (``closed``): no POST, and no HTTP
    session reopened that nobody would close (it used to be, an unclosed aiohttp session)."""
    session = await _greeted(make_session, staging, config=FAST.with_(tool_spiral_limit=0))
    conv = staging.conversations[staging.live_sids[0]]
    delta = json.dumps(
        {
            "type": "tool",
            "content": 'collect_contact {"field": "email"}',
            "tool_metadata": {"id": "call-90", "wait_for_response": True},
        }
    )
    waiter = session.expect("tool_call", timeout=2)
    await conv.emit(In.AGENT_RAW_TEXT, {"speechId": "s9", "turnId": "t9", "delta": delta})
    await waiter
    await session.close()
    outcome = await session.respond_to_tool("call-90", {"email": "a@example.com"})
    assert outcome == {"ok": False, "reason": "closed"}
    assert staging.tool_responses == []
    genie = session._parts.genie.client
    assert genie is not None and genie._http is None  # nothing reopened
