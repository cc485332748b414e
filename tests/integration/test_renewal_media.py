"""A long conversation with audio and video through several renewals, scaled down for
``make test`` (issue 19's target is 10 minutes against a 60 s cap: ``make soak``,
``tests/soak/test_renewal_soak.py``). Real WebRTC and Socket.IO against ``StagingServer``."""

from __future__ import annotations

import asyncio

from avatar_sdk import AvatarSession, RenewalPolicy
from avatar_sdk.media import ToneSource
from avatar_sdk.testing import StagingServer
from avatar_sdk.testing.leaks import LeakCheck
from avatar_sdk.testing.long_conversation import LongRun, run_long_conversation

from .conftest import FAST, HANG_GUARD, until


def check_long_run(run: LongRun, *, min_renewals: int) -> None:
    """What a long conversation through renewals must have been, as the user saw it."""
    assert run.errors == []
    # Every turn answered exactly once, by whichever server session was the user's.
    assert run.replies == {text: f"You said: {text}" for text in run.asked}
    assert sorted(run.server_turns) == sorted(run.asked)
    assert len(run.renewed) >= min_renewals
    assert [r["renewals"] for r in run.renewed] == list(range(1, len(run.renewed) + 1))
    assert {r["strategy"] for r in run.renewed} == {"make_before_break"}
    assert not any(r["cut_turn"] for r in run.renewed)
    assert len(run.thread_ids) == 1  # the thread id never changed
    assert run.greetings == 1  # only the first server session's greeting was seen
    assert run.completed_before_close == 0
    assert "renewing" not in run.states and run.states.count("connected") == 1
    # The swap is a pointer change: the new link was already playing.
    assert len(run.gaps) == len(run.renewed)


async def test_a_long_conversation_outlives_a_short_cap(staging: StagingServer) -> None:
    check = LeakCheck()
    run = await run_long_conversation(
        staging,
        duration=24.0,
        cap=9.0,
        warning=6.0,
        policy=RenewalPolicy(lead_time=5.0, boundary_wait=2.0, safety_margin=1.0),
        turn_every=1.0,
        config=FAST.with_(overall_connect_timeout=8.0, agent_timeout=2.0),
    )
    check_long_run(run, min_renewals=2)
    assert staging.expired_sids == []  # every server session was renewed before its cap
    assert await until(lambda: not staging.live_sids, HANG_GUARD)
    media = staging.media
    assert await until(lambda: media.whep_deletes == media.whep_posts, HANG_GUARD)
    assert await until(lambda: not media.asr_peers, HANG_GUARD)
    assert await check.settle(HANG_GUARD) == []


async def test_the_new_server_session_is_unseen_and_unheard_until_the_swap(
    staging: StagingServer,
) -> None:
    """While the new link waits for the swap (held here by a tool call still pending on the
    old one), its downlink decodes frames that reach no output, and its uplink sends
    silence: the user's microphone reaches only the current server session. After the
    swap, both go over to the new one."""
    session = AvatarSession(
        staging.url, staging.token, genie_url=staging.genie_url, thread_id="thr-unseen",
        audio=ToneSource(amplitude=0.3), config=FAST.with_(renewal=RenewalPolicy()),
        allow_insecure_transport=True,
    )  # fmt: skip
    try:
        await session.connect(wait_for_greeting=True)
        old_sid = staging.live_sids[0]
        called = session.expect("tool_call", timeout=HANG_GUARD)
        staging.brain.tool_calls(['show_slide {"n": 1}'], then="Shown.", wait_for_response=True)
        await session.ask("show slide one", timeout=HANG_GUARD)
        call = (await called).data
        renewal = asyncio.ensure_future(session.renew())
        slot = session._slot

        def prepared_and_over() -> bool:
            links = list(slot.preparing)
            return bool(links) and links[0].lanes is not None and links[0].lanes.stv is not None

        assert await until(prepared_and_over, HANG_GUARD)
        (hidden,) = slot.preparing
        new_sid = next(s for s in staging.live_sids if s != old_sid)
        lanes = hidden.lanes
        assert lanes is not None and lanes.stv is not None
        assert await until(lambda: lanes.stv is not None and lanes.stv.frames["video"] > 10,
                           HANG_GUARD)  # fmt: skip
        assert lanes.stv.first_out_at is None  # decoded, never handed to the outputs
        media = staging.media
        assert await until(lambda: media.asr_stats(new_sid).frames > 20, HANG_GUARD)
        assert media.asr_stats(new_sid).last_rms < 0.01  # silence
        assert media.asr_stats(old_sid).last_rms > 0.05  # the tone, on the current one
        assert not renewal.done()
        await session.respond_to_tool(call["call_id"], {"shown": 1})
        await asyncio.wait_for(renewal, HANG_GUARD)
        assert session._slot.current is hidden
        assert await until(lambda: media.asr_stats(new_sid).last_rms > 0.05, HANG_GUARD)
        assert lanes.stv.first_out_at is not None
    finally:
        await session.close()


async def test_closing_during_a_renewal_leaves_nothing_behind(staging: StagingServer) -> None:
    check = LeakCheck()
    session = AvatarSession(
        staging.url, staging.token, thread_id="thr-close-mid-renewal",
        config=FAST.with_(renewal=RenewalPolicy()), allow_insecure_transport=True,
    )  # fmt: skip
    await session.connect(wait_for_greeting=True)
    renewal = asyncio.ensure_future(session.renew())

    # The new link has joined and subscribed its downlink, its greeting playing unseen.
    def subscribed() -> bool:
        links = list(session._slot.preparing)
        lanes = links[0].lanes if links else None
        return lanes is not None and lanes.stv is not None and lanes.stv.location is not None

    assert await until(subscribed, HANG_GUARD)
    assert not renewal.done()
    await asyncio.wait_for(session.close(), HANG_GUARD)
    await asyncio.wait_for(asyncio.gather(renewal, return_exceptions=True), HANG_GUARD)
    assert session.state == "ended"
    assert await until(lambda: not staging.live_sids, HANG_GUARD)
    media = staging.media
    assert await until(lambda: media.whep_deletes == media.whep_posts, HANG_GUARD)
    assert await until(lambda: not media.asr_peers, HANG_GUARD)
    assert await check.settle(HANG_GUARD) == []
