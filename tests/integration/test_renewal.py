"""Renewal past the server's time cap (issue 19): make-before-break on the same thread with
the new server session's greeting unseen, break-before-make when the service refuses a
second live session, faults during a renewal, ``time_left``. Real Socket.IO (and WebRTC
where media is on) against ``StagingServer`` over loopback."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from avatar_sdk import AvatarError, AvatarSession, ErrorCode, Event, RenewalPolicy
from avatar_sdk.media import ToneSource
from avatar_sdk.testing import StagingServer
from avatar_sdk.testing.staging.brain import RECALL_PROMPT

from .conftest import FAST, HANG_GUARD, SessionFactory, until

#: A cap of a few seconds, renewed well before it.
CAP = 6.0
POLICY = RenewalPolicy(lead_time=3.5, boundary_wait=1.5, safety_margin=1.0)
RENEWING = FAST.with_(renewal=POLICY)


def capped(staging: StagingServer, cap: float = CAP, warning: float = 4.0) -> None:
    staging.max_conversation_length = cap
    staging.time_warning_before = warning


class Recorder:
    """Every event of a session, in order."""

    def __init__(self, session: AvatarSession) -> None:
        self.events: list[Event] = []
        session.on("*", self.events.append)

    def named(self, name: str) -> list[Event]:
        return [e for e in self.events if e.name == name]

    def greetings(self) -> int:
        """Opening greetings the user saw begin (their speechId's trigger)."""
        return sum(
            1
            for e in self.named("agent_speech_started")
            if "approved-permissions" in str(e.data.get("speech_id"))
        )


async def test_make_before_break_keeps_the_thread_and_hides_the_new_greeting(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    capped(staging)
    session = make_session(thread_id="thr-renewal-1", config=RENEWING)
    seen = Recorder(session)
    renewing = session.expect("session_renewing", timeout=HANG_GUARD + CAP)
    renewed = session.expect("session_renewed", timeout=HANG_GUARD + CAP)
    await session.connect(wait_for_greeting=True)
    first_sid = staging.live_sids[0]
    reply = await session.ask("my dog is called Rex", timeout=HANG_GUARD)
    assert reply.text == "You said: my dog is called Rex"
    started = await renewing
    assert started.data["reason"] == "time_cap"
    assert 0 < started.data["time_left"] <= POLICY.lead_time
    done = (await renewed).data
    assert done["strategy"] == "make_before_break"
    assert done["thread_id"] == "thr-renewal-1"
    assert done["renewals"] == 1
    assert done["cut_turn"] is False
    assert done["gap"] is None  # control plane only: no frames to measure
    # The old server session was closed by the SDK before its cap, without completing.
    assert await until(lambda: first_sid not in staging.conversations, HANG_GUARD)
    assert staging.expired_sids == []
    assert staging.completed_threads == []
    # The new server session is the user's: on the same thread, and its brain remembers.
    (new_sid,) = staging.live_sids
    assert staging.conversations[new_sid].thread_id == "thr-renewal-1"
    recall = await session.ask(RECALL_PROMPT, timeout=HANG_GUARD)
    assert recall.text == "Before, you said: my dog is called Rex"
    # Seen by the user: one greeting, and the session never left connected.
    assert seen.greetings() == 1
    states = [e.data["state"] for e in seen.named("state_changed")]
    assert states[-1] == "connected" and "renewing" not in states
    assert states.count("connected") == 1
    assert session.stats()["renewals"] == 1
    assert session.time_left is not None and session.time_left > POLICY.lead_time


async def test_renew_on_demand_and_time_left_counts_down(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = make_session(thread_id="thr-manual", config=FAST.with_(max_conversation_length=600))
    assert session.time_left is None
    await session.connect(wait_for_greeting=True)
    left = session.time_left
    assert left is not None and 590 < left <= 600
    renewing = session.expect("session_renewing", timeout=HANG_GUARD)
    await asyncio.wait_for(session.renew(), HANG_GUARD)
    assert (await renewing).data["reason"] == "manual"
    assert session.stats()["renewals"] == 1
    assert session.thread_id == "thr-manual"
    reply = await session.ask("after the renewal", timeout=HANG_GUARD)
    assert reply.text == "You said: after the renewal"


async def test_time_left_follows_the_servers_warning(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = make_session()
    await session.connect()
    assert session.time_left is None
    warned = session.expect("time_warning", timeout=HANG_GUARD)
    await staging.faults.time_warning(remaining=120.0)
    await warned
    left = session.time_left
    assert left is not None and 115 < left <= 120


async def test_break_before_make_when_a_second_live_session_is_refused(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    capped(staging)
    staging.concurrent_thread_sessions = False
    session = make_session(thread_id="thr-bbm", config=RENEWING)
    seen = Recorder(session)
    renewed = session.expect("session_renewed", timeout=HANG_GUARD + CAP)
    await session.connect(wait_for_greeting=True)
    await session.ask("remember the blue door", timeout=HANG_GUARD)
    done = (await renewed).data
    assert done["strategy"] == "break_before_make"
    assert done["thread_id"] == "thr-bbm"
    assert staging.refused_thread_joins >= 1
    assert staging.completed_threads == []
    states = [e.data["state"] for e in seen.named("state_changed")]
    assert states[-2:] == ["renewing", "connected"]
    assert seen.greetings() == 1
    recall = await session.ask(RECALL_PROMPT, timeout=HANG_GUARD)
    assert recall.text == "Before, you said: remember the blue door"


async def test_a_turn_spoken_during_break_before_make_is_held_and_sent_once(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    staging.concurrent_thread_sessions = False
    session = make_session(
        thread_id="thr-held",
        config=FAST.with_(renewal=POLICY.__class__(make_before_break=False, lead_time=3.5,
                                                   boundary_wait=1.5, safety_margin=1.0)),
    )  # fmt: skip
    await session.connect(wait_for_greeting=True)
    state = session.expect("state_changed", predicate=lambda e: e.data["state"] == "renewing")
    renewal = asyncio.ensure_future(session.renew())
    await asyncio.wait_for(state, HANG_GUARD)
    handle = session.speak("held during the renewal")
    await asyncio.wait_for(renewal, HANG_GUARD)
    reply = await handle.reply(timeout=HANG_GUARD)
    assert reply.text == "You said: held during the renewal"
    sent = [t for c in staging.conversations.values() for t in c.user_turns]
    assert sent.count("held during the renewal") == 1


async def test_a_renewal_waits_for_the_turn_in_progress(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = make_session(thread_id="thr-wait", config=RENEWING)
    await session.connect(wait_for_greeting=True)
    staging.brain.stall(1.0)  # the answer takes a second to begin
    handle = session.speak("a slow question")
    await handle.sent()
    renewed = session.expect("session_renewed", timeout=HANG_GUARD)
    renewal = asyncio.ensure_future(session.renew())
    reply = await handle.reply(timeout=HANG_GUARD)
    done = (await renewed).data
    await renewal
    assert done["cut_turn"] is False
    assert reply.text == "You said: a slow question"


async def test_no_boundary_before_the_last_safe_moment_cuts_the_turn(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    policy = RenewalPolicy(lead_time=3.5, boundary_wait=0.5, safety_margin=1.0)
    session = make_session(thread_id="thr-cut", config=FAST.with_(renewal=policy))
    await session.connect(wait_for_greeting=True)
    staging.brain.stall(30.0)  # an answer that never comes in time
    handle = session.speak("a question the cap cuts short")
    await handle.sent()
    renewed = session.expect("session_renewed", timeout=HANG_GUARD)
    resent = session.expect("turn_resent", timeout=HANG_GUARD)
    await asyncio.wait_for(session.renew(), HANG_GUARD)
    assert (await renewed).data["cut_turn"] is True
    # The cut turn's answer never ends on the old server session: asked once more on the
    # new one, whose answer is the reply.
    assert (await resent).data == {"text": "a question the cap cuts short", "tier": "renewal"}
    reply = await handle.reply(timeout=HANG_GUARD)
    assert reply.text == "You said: a question the cap cuts short"
    assert reply.resent is True
    # The session takes the next turn at once: nothing holds the floor.
    after = await session.ask("and now?", timeout=HANG_GUARD)
    assert after.text == "You said: and now?"


@pytest.mark.parametrize("fault", ["drop", "whep_404", "unplayable"])
async def test_a_failing_new_link_keeps_the_current_one_and_is_retried(
    staging: StagingServer, make_session: SessionFactory, fault: str
) -> None:
    media = fault != "drop"
    session = make_session(thread_id=f"thr-fault-{fault}", config=RENEWING, media=media)
    await session.connect(wait_for_greeting=True)
    first_sid = staging.live_sids[0]
    attempts = session.expect("session_renewing", timeout=HANG_GUARD)
    if fault == "whep_404":
        staging.faults.whep_404(times=1)
    elif fault == "unplayable":
        staging.faults.unplayable_whep(times=1)
    else:
        staging.faults.refuse_joins(times=1)  # the new link's socket is dropped at join
    renewed = session.expect("session_renewed", timeout=HANG_GUARD * 2)
    await asyncio.wait_for(session.renew(), HANG_GUARD * 2)
    done = (await renewed).data
    await attempts
    assert done["thread_id"] == f"thr-fault-{fault}"
    # The first attempt failed and was given up; a second one on a new socket replaced it.
    joins = staging.received_events("join")
    assert len(joins) == 3  # the first connect, the failed attempt, the retry
    assert session.stats()["renewals"] == 1
    assert await until(lambda: first_sid not in staging.live_sids, HANG_GUARD)
    assert session.state == "connected"
    reply = await session.ask("still here?", timeout=HANG_GUARD)
    assert reply.text == "You said: still here?"


async def test_renewal_is_off_by_default_and_the_cap_ends_the_session(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    capped(staging, cap=2.0, warning=1.0)
    session = make_session()
    ended = session.expect("ended", timeout=HANG_GUARD)
    await session.connect()
    assert (await ended).data["reason"] == "conversation_ended"
    assert session.stats().get("renewals", 0) == 0


async def test_max_renewals_bounds_what_an_app_runs_up(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    capped(staging, cap=3.0, warning=2.5)
    policy = RenewalPolicy(lead_time=2.0, boundary_wait=0.5, safety_margin=0.5, max_renewals=0)
    session = make_session(config=FAST.with_(renewal=policy))
    ended = session.expect("ended", timeout=HANG_GUARD)
    await session.connect()
    assert (await ended).data["reason"] == "conversation_ended"
    assert session.stats().get("renewals", 0) == 0


async def test_renew_refused_when_not_connected(make_session: SessionFactory) -> None:
    session = make_session()
    with pytest.raises(AvatarError) as refused:
        await session.renew()
    assert refused.value.code is ErrorCode.INVALID_STATE


def _unused(*_: Any) -> None:  # keeps the typing imports honest
    return None


async def test_a_cap_that_was_never_announced_is_renewed_when_it_ends(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    capped(staging, cap=2.5, warning=0.0)  # no warning: the cap is known only when it ends
    session = make_session(thread_id="thr-unannounced", config=RENEWING)
    seen = Recorder(session)
    renewed = session.expect("session_renewed", timeout=HANG_GUARD * 2)
    await session.connect(wait_for_greeting=True)
    await session.ask("the green umbrella", timeout=HANG_GUARD)
    staging.max_conversation_length = None  # the renewed server session is not capped
    done = (await renewed).data
    assert done["strategy"] == "break_before_make"
    assert len(staging.expired_sids) == 1
    assert session.state == "connected"
    assert "ended" not in [e.name for e in seen.events]
    assert seen.greetings() == 1
    recall = await session.ask(RECALL_PROMPT, timeout=HANG_GUARD)
    assert recall.text == "Before, you said: the green umbrella"
    # Only a warning tells the cap: an unannounced one leaves time_left unknown.
    assert session.time_left is None


async def test_a_conversation_ended_on_purpose_is_not_renewed(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = make_session(config=RENEWING)
    ended = session.expect("ended", timeout=HANG_GUARD)
    await session.connect()
    await staging.faults.end_conversation(expired=False)
    assert (await ended).data["reason"] == "conversation_ended"
    assert session.stats().get("renewals", 0) == 0


async def test_a_pending_tool_call_is_answered_on_the_old_link_before_the_swap(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = make_session(thread_id="thr-tool", genie_url=staging.genie_url, config=RENEWING)
    await session.connect(wait_for_greeting=True)
    called = session.expect("tool_call", timeout=HANG_GUARD)
    staging.brain.tool_calls(['show_slide {"n": 3}'], then="Shown.", wait_for_response=True)
    await session.ask("show me slide three", timeout=HANG_GUARD)
    call = (await called).data
    renewed = session.expect("session_renewed", timeout=HANG_GUARD)
    renewal = asyncio.ensure_future(session.renew())
    # The swap waits for the answer: the tool call is still pending on the old link.
    assert await until(lambda: len(staging.live_sids) == 2, HANG_GUARD)
    assert not renewal.done()
    outcome = await session.respond_to_tool(call["call_id"], {"shown": 3})
    assert outcome == {"ok": True, "reason": "ok"}
    await asyncio.wait_for(renewal, HANG_GUARD)
    done = (await renewed).data
    assert done["cut_turn"] is False and done["abandoned_tool_calls"] == []
    assert [r["tool_id"] for r in staging.tool_responses] == [call["call_id"]]


async def test_a_tool_call_still_pending_at_the_last_safe_moment_is_reported_abandoned(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    policy = RenewalPolicy(lead_time=3.5, boundary_wait=0.5, safety_margin=1.0)
    session = make_session(
        thread_id="thr-tool-cut", genie_url=staging.genie_url, config=FAST.with_(renewal=policy)
    )
    await session.connect(wait_for_greeting=True)
    called = session.expect("tool_call", timeout=HANG_GUARD)
    staging.brain.tool_calls(['show_slide {"n": 4}'], then="Shown.", wait_for_response=True)
    await session.ask("show me slide four", timeout=HANG_GUARD)
    call = (await called).data
    renewed = session.expect("session_renewed", timeout=HANG_GUARD)
    await asyncio.wait_for(session.renew(), HANG_GUARD)
    done = (await renewed).data
    assert done["cut_turn"] is True
    assert done["abandoned_tool_calls"] == [call["call_id"]]
    late = await session.respond_to_tool(call["call_id"], {"shown": 4})
    assert late["ok"] is False  # never silently taken for an answer


async def test_an_answer_whose_playout_a_forced_swap_cuts_frees_the_floor(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    policy = RenewalPolicy(lead_time=3.5, boundary_wait=0.3, safety_margin=1.0)
    session = make_session(thread_id="thr-cut-talking", config=FAST.with_(renewal=policy))
    await session.connect(wait_for_greeting=True)
    long = "A long answer: " + " ".join(f"word{i}" for i in range(240))  # said for 6 s
    staging.brain.reply(long)
    talking = session.expect("agent_talking", predicate=lambda e: e.data["talking"] is True)
    handle = session.speak("tell me everything")
    await asyncio.wait_for(talking, HANG_GUARD)  # its text is out, its voice goes on
    renewed = session.expect("session_renewed", timeout=HANG_GUARD)
    await asyncio.wait_for(session.renew(), HANG_GUARD)
    assert (await renewed).data["cut_turn"] is True
    reply = await handle.reply(timeout=HANG_GUARD)
    assert reply.text == long and reply.resent is False  # answered once: not asked again
    # The old server session will never say it stopped talking: the floor is free now.
    after = await session.ask("and now?", timeout=HANG_GUARD)
    assert after.text == "You said: and now?"


async def test_break_before_make_waits_for_the_greeting_in_progress(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    staging.concurrent_thread_sessions = False
    staging.brain.greeting = "Hello! " + " ".join(f"word{i}" for i in range(40))  # 1 s said
    session = make_session(thread_id="thr-bbm-greeting", config=RENEWING)
    await session.connect()  # the greeting is beginning
    renewed = session.expect("session_renewed", timeout=HANG_GUARD)
    await asyncio.wait_for(session.renew(), HANG_GUARD)
    done = (await renewed).data
    assert done["strategy"] == "break_before_make" and done["cut_turn"] is False
    reply = await session.ask("are you there?", timeout=HANG_GUARD)
    assert reply.text == "You said: are you there?"


async def test_when_every_attempt_fails_the_current_link_serves_until_its_cap_then_bbm(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    capped(staging)
    session = make_session(thread_id="thr-all-fail", config=RENEWING)
    seen = Recorder(session)
    renewed = session.expect("session_renewed", timeout=HANG_GUARD + CAP)
    await session.connect(wait_for_greeting=True)
    staging.faults.refuse_joins(times=POLICY.retry.max_attempts)  # every attempt's join
    done = (await renewed).data
    # The watch gave up on the link after its attempts (no retry storm), the link served
    # until its cap, and the cap's end was taken over: break before make.
    assert done["strategy"] == "break_before_make"
    assert len(staging.received_events("join")) == 1 + POLICY.retry.max_attempts + 1
    assert len(staging.expired_sids) == 1
    assert session.state == "connected"
    assert "ended" not in [e.name for e in seen.events]
    reply = await session.ask("still with me?", timeout=HANG_GUARD)
    assert reply.text == "You said: still with me?"


async def test_a_turn_cut_mid_answer_by_a_renewal_finishes_its_playout(
    staging: StagingServer,
) -> None:
    """A renewal that cuts a turn while the avatar is saying its answer (``cut_turn``):
    that turn's ``wait_for_playout`` returns once the resent turn's answer has played,
    not at its timeout (it used to wait the whole 30 s out)."""
    staging.speech_time_scale = 1.0  # the answer lasts seconds: the cut lands mid-answer
    session = AvatarSession(
        staging.url, staging.token, thread_id="thr-cut-playout", audio=ToneSource(),
        config=FAST.with_(renewal=RenewalPolicy(lead_time=3.5, boundary_wait=0.3,
                                                safety_margin=1.0)),
        allow_insecure_transport=True,
    )  # fmt: skip
    try:
        await session.connect(wait_for_greeting=True)
        await session.wait_until_quiet(timeout=HANG_GUARD)
        text = " ".join(f"word{i}" for i in range(40))
        handle = session.speak(text)
        await session.wait_for(
            "agent_talking", timeout=HANG_GUARD, predicate=lambda e: e.data["talking"]
        )
        renewed = session.expect("session_renewed", timeout=HANG_GUARD)
        await asyncio.wait_for(session.renew(), HANG_GUARD)
        assert (await renewed).data["cut_turn"] is True
        reply = await handle.wait_for_playout(timeout=20.0)
        assert reply.text.startswith("You said: word0")
        assert reply.interrupted and reply.interrupted_by == "renewal"
        assert reply.played_latency is not None  # what of its voice had arrived played
        after = await session.ask("and now?", timeout=HANG_GUARD)
        assert after.text == "You said: and now?"
    finally:
        await session.close()


async def test_the_gap_of_a_renewal_in_the_avatars_silence_counts_from_the_swap(
    staging: StagingServer,
) -> None:
    """An audio-only session whose avatar has been silent a while: the renewal's ``gap`` is
    the swap's own interruption, not the silence before it (it read the seconds since the
    greeting's last frame: 15 s under a 20 s cap)."""
    session = AvatarSession(
        staging.url, staging.token, video=False, thread_id="thr-quiet-gap",
        config=FAST.with_(renewal=RenewalPolicy()), allow_insecure_transport=True,
    )  # fmt: skip
    try:
        await session.connect(wait_for_greeting=True)
        await session.wait_until_quiet(timeout=HANG_GUARD)
        await asyncio.sleep(2.0)  # the avatar silent: no voice frame handed on meanwhile
        renewed = session.expect("session_renewed", timeout=HANG_GUARD)
        await asyncio.wait_for(session.renew(), HANG_GUARD)
        gap = (await renewed).data["gap"]
        assert gap is not None and gap < 1.0
    finally:
        await session.close()
