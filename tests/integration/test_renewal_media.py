"""A long conversation with audio and video through several renewals, scaled down for
``make test`` (issue 19's target is 10 minutes against a 60 s cap: ``make soak``,
``tests/soak/test_renewal_soak.py``). Real WebRTC and Socket.IO against ``StagingServer``."""

from __future__ import annotations

from avatar_sdk import RenewalPolicy
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
