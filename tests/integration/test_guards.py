"""Brain guards and client-side tools on a live session over loopback."""

from __future__ import annotations

import json
import time
from typing import Any

from avatar_sdk.clock import FakeClock
from avatar_sdk.guards.brain import SPIRAL_RECOVERY_PREFIX
from avatar_sdk.testing import StagingServer
from avatar_sdk.wire import In, build_barge_in_marker, build_text_entered

from .conftest import FAST, SessionFactory, until

GUARDED = FAST.with_(tool_spiral_limit=3, hard_tool_spiral_limit=6, brain_stall_timeout=0.3)
CALL = 'navigate_to_slide {"slide": 1}'


def _session_clock() -> FakeClock:
    """A fake clock for the session's watchdogs, started at the real monotonic time: the
    socket's last-activity marks are real time, so the probe sees no bogus silence."""
    return FakeClock(start=time.monotonic())


def _names(session: Any) -> list[str]:
    seen: list[str] = []
    session.on("*", lambda e: seen.append(e.name))
    return seen


async def _ready(make_session: SessionFactory, **kwargs: Any) -> Any:
    kwargs.setdefault("config", GUARDED)
    session = make_session(**kwargs)
    await session.connect()
    await session.wait_for("agent_turn_ended", timeout=2)
    return session


async def test_soft_spiral_is_signalled_once_per_turn_and_never_interrupts(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = await _ready(make_session, config=GUARDED.with_(hard_tool_spiral_limit=0))
    detected: list[dict[str, Any]] = []
    session.on("tool_spiral_detected", lambda e: detected.append(e.data))
    staging.brain.tool_calls([CALL] * 5, then="Here is slide one.")
    await session.speak("show me slide one")
    await session.wait_for("agent_turn_ended", timeout=3)
    assert detected == [{"count": 3, "limit": 3}]
    markers = [
        r for r in staging.received_events("onTextEntered") if r.payload.get("isSpeechStart")
    ]
    assert len(markers) == 1  # only speak()'s own marker: the breaker never barges in


async def test_ordinary_multi_tool_turns_never_trip_the_hard_tier(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = await _ready(make_session)
    names = _names(session)
    for turn in range(5):
        staging.brain.tool_calls([f'highlight {{"n": {turn}}}'], then=f"Done {turn}.")
        await session.speak(f"turn {turn}")
        await session.wait_for("agent_turn_ended", timeout=3)
    assert "tool_spiral_recovering" not in names
    assert len(staging.received_events("join")) == 1


async def test_hard_spiral_rebuilds_on_a_new_socket_and_resends_the_turn_once(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = await _ready(make_session)
    thread = session.thread_id
    old_sid = staging.live_sids[0]
    staging.brain.tool_calls([CALL] * 8)
    recovering = session.expect("tool_spiral_recovering", timeout=3)
    recovered = session.expect("spiral_recovered", timeout=8)
    await session.speak("walk me through the guidance range")
    assert (await recovering).data == {
        "count": 6,
        "limit": 6,
        "last_turn_text": "walk me through the guidance range",
    }
    assert (await recovered).data == {"text": "walk me through the guidance range"}
    await session.wait_for("agent_turn_ended", timeout=3)  # the resent turn reached the server
    new_sid = staging.live_sids[-1]
    assert new_sid != old_sid and old_sid not in staging.live_sids  # old socket closed
    joins = staging.received_events("join")
    assert len(joins) == 2 and joins[-1].payload["kaltura"]["threadId"] == thread
    on_new = [r.payload for r in staging.received_events("onTextEntered", sid=new_sid)]
    assert on_new == [
        {"text": SPIRAL_RECOVERY_PREFIX + "walk me through the guidance range", "isFinal": True}
    ]
    assert session.state == "connected"


async def test_a_second_spiral_resends_its_own_turn(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = await _ready(make_session)
    texts: list[str] = []
    session.on("spiral_recovered", lambda e: texts.append(e.data["text"]))
    for question in ("first stuck question", "second stuck question"):
        staging.brain.tool_calls([CALL] * 7)
        waiter = session.expect("spiral_recovered", timeout=8)
        await session.speak(question)
        await waiter
        await session.wait_for("agent_turn_ended", timeout=3)  # the resent turn is answered
    assert texts == ["first stuck question", "second stuck question"]
    last_sid = staging.live_sids[-1]
    resent = [r.payload["text"] for r in staging.received_events("onTextEntered", sid=last_sid)]
    assert resent == [SPIRAL_RECOVERY_PREFIX + "second stuck question"]
    assert len(staging.received_events("join")) == 3


async def test_recover_from_spiral_false_only_reports_the_turn(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = await _ready(make_session, config=GUARDED.with_(recover_from_spiral=False))
    names = _names(session)
    staging.brain.tool_calls([CALL] * 7)
    recovering = session.expect("tool_spiral_recovering", timeout=3)
    rebuilt = session.expect("reconnected", timeout=5)
    await session.speak("show me the revenue widget")
    assert (await recovering).data["last_turn_text"] == "show me the revenue widget"
    await rebuilt
    await _answered_without_a_resend(staging, session)
    assert "spiral_recovered" not in names


async def _answered_without_a_resend(staging: StagingServer, session: Any) -> None:
    """After a cold rebuild: a turn spoken now is answered on the new server session, and it
    is the only thing the client ever said there (a resend would have come before it)."""
    # The answer to this turn (the rebuilt session's greeting ends with a turn end too; a
    # turn spoken during that uninterruptible greeting is held until it is over).
    answered = session.expect(
        "agent_turn_ended",
        predicate=lambda e: "is anyone there?" in (e.data["speech_id"] or ""),
        timeout=3,
    )
    await session.speak("is anyone there?")
    await answered
    new_sid = staging.live_sids[-1]
    said = [r.payload for r in staging.received_events("onTextEntered", sid=new_sid)]
    assert said == [build_barge_in_marker(), build_text_entered("is anyone there?")]


async def test_socket_triggered_cold_reconnect_never_resends(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = await _ready(make_session)
    names = _names(session)
    await session.speak("a normal question")
    await session.wait_for("agent_turn_ended", timeout=3)
    rebuilt = session.expect("reconnected", timeout=5)
    await staging.faults.drop_socket(recovery=False)
    assert (await rebuilt).data["tier"] == "cold"
    await _answered_without_a_resend(staging, session)
    assert "spiral_recovered" not in names


async def test_brain_stall_repeats_until_the_brain_speaks(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    clock = _session_clock()
    session = await _ready(make_session, clock=clock)
    stalls: list[dict[str, Any]] = []
    session.on("brain_stalled", lambda e: stalls.append(e.data))
    names = _names(session)
    staging.brain.stall(1.0)  # real seconds: the session's clock moves only when told to
    answered = session.expect("agent_turn_ended", timeout=3)
    await session.speak("are you there?")
    await clock.advance(0.3)  # one stall window of silence
    assert await until(lambda: len(stalls) == 1, 2)
    await clock.advance(0.3)  # and another: it repeats
    assert await until(lambda: len(stalls) == 2, 2)
    await answered
    await clock.advance(3.0)  # ten more windows: spoken output cleared it, no more firings
    assert [s["count"] for s in stalls] == [1, 2]
    assert all(s["after"] == 0.3 for s in stalls)
    assert names.index("response_pending") < names.index("response_settled")


async def test_tool_segments_do_not_clear_the_stall_watchdog(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    clock = _session_clock()
    session = await _ready(make_session, config=GUARDED.with_(tool_spiral_limit=0), clock=clock)
    conv = staging.conversations[staging.live_sids[0]]
    stalls: list[dict[str, Any]] = []
    session.on("brain_stalled", lambda e: stalls.append(e.data))
    staging.brain.stall(5.0)  # the scripted answer stays silent: only our tool segments come
    await session.speak("do something")
    for slide in range(1, 6):  # a tool segment every 50 ms of the 0.3 s stall window
        handled = session.expect("tool_call", timeout=2)
        delta = json.dumps({"type": "tool", "content": f'navigate_to_slide {{"slide": {slide}}}'})
        await conv.emit(In.AGENT_RAW_TEXT, {"speechId": "x1", "turnId": "t", "delta": delta})
        await handled
        await clock.advance(0.05)
    assert stalls == []  # 0.25 s: not yet
    await clock.advance(0.1)  # the window is over and only tool segments came: still silent
    assert await until(lambda: bool(stalls), 2)
    assert [s["count"] for s in stalls] == [1]


async def test_tool_dispatch_validation_results_and_fused_calls(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = await _ready(make_session, config=GUARDED.with_(tool_spiral_limit=0))
    calls: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    invalid: list[dict[str, Any]] = []
    session.on("tool_call", lambda e: calls.append(e.data))
    session.on("tool_call_result", lambda e: results.append(e.data))
    session.on("tool_call_invalid", lambda e: invalid.append(e.data))
    session.on_tool_call("open_filing", lambda args, call: {"opened": args["doc"]})

    async def highlight(args: dict[str, Any], call: dict[str, Any]) -> None:
        raise RuntimeError("chart missing")

    session.on_tool_call("highlight_chart", highlight)
    schema = {"type": "object", "required": ["slide"], "properties": {"slide": {"type": "integer"}}}
    session.on_tool_call("navigate_to_slide", lambda args, call: None, schema=schema)
    conv = staging.conversations[staging.live_sids[0]]

    async def seg(kind: str, content: str) -> None:
        delta = json.dumps({"type": kind, "content": content})
        await conv.emit(In.AGENT_RAW_TEXT, {"speechId": "s1", "turnId": "t1", "delta": delta})

    await conv.emit(In.AGENT_START_SPEECH, {"speechId": "s1", "turnId": "t1", "isNewTurn": True})
    await seg("tool", 'open_filing {"chart": "q3"}{"doc": "10-K"}')  # fused: two calls
    await seg("tool", 'open_filing {"chart": "q3"}{"doc": "10-K"}')  # a repeat: dropped
    await seg("tool_response", "highlight_chart responded with size 113")
    await seg("tool_response", "open_filing responded with size 104")
    await seg("tool", 'navigate_to_slide {"slide": "three"}')
    await seg("text", "Here it is.")
    await session.wait_for("agent_text", timeout=2)
    assert await until(lambda: len(results) >= 2, 2)  # the handlers' own tasks have run
    assert [c["name"] for c in calls] == ["open_filing", "highlight_chart"]
    assert calls[1]["args"] == {"chart": "q3"}  # the unnamed blob, attributed by its echo
    assert {r["call"]["name"]: r["ok"] for r in results} == {
        "open_filing": True,
        "highlight_chart": False,
    }
    assert results[0]["value"] == {"opened": "10-K"}
    assert invalid and invalid[0]["call"]["name"] == "navigate_to_slide"
    assert invalid[0]["errors"] == ["$.slide: 'three' is not of type 'integer'"]
