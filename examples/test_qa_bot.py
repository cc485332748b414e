"""How you test your own bot: the pytest plugin's fixtures against the embedded staging
backend, with scripted answers and injected faults. Here the bot is ``qa_bot.converse``.

Run: ``pip install 'avatar-sdk[testing]'`` then ``pytest examples/test_qa_bot.py``.
The fixtures come from the plugin avatar-sdk installs; nothing to import or configure.
Each test is marked ``asyncio``, so this file also runs in pytest-asyncio's strict mode.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from qa_bot import converse

from avatar_sdk import AvatarSession, SessionConfig
from avatar_sdk.testing import StagingServer, expect_events

pytestmark = pytest.mark.asyncio


async def test_the_bot_returns_what_the_avatar_says(
    avatar_session: AvatarSession, staging: StagingServer
) -> None:
    staging.brain.tool_calls(['open_filing {"doc": "10-K"}'], then="Here is the 10-K.")
    assert await converse(avatar_session, ["Show me the annual report"]) == ["Here is the 10-K."]
    assert staging.conversations[staging.live_sids[0]].user_turns == ["Show me the annual report"]


async def test_the_bot_survives_a_network_blip(
    avatar_session: AvatarSession, staging: StagingServer
) -> None:
    recovered = expect_events(
        avatar_session, ["reconnecting", ("reconnected", {"tier": "socket"})], timeout=10
    )
    await staging.faults.drop_socket()
    await recovered
    assert await converse(avatar_session, ["Still there?"]) == ["You said: Still there?"]


@pytest.mark.avatar_session(config=SessionConfig(brain_stall_timeout=0.3))
async def test_the_bot_waits_out_a_slow_agent(
    avatar_session: AvatarSession, staging: StagingServer
) -> None:
    staging.brain.stall(1.0)
    stalled = expect_events(avatar_session, ["brain_stalled"], timeout=5)
    assert await converse(avatar_session, ["Take your time"]) == ["You said: Take your time"]
    await stalled


async def test_two_users_at_once(
    avatar_session_factory: Callable[..., Awaitable[AvatarSession]],
) -> None:
    alice, bob = await avatar_session_factory(), await avatar_session_factory()
    answers = await asyncio.gather(converse(alice, ["I am Alice"]), converse(bob, ["I am Bob"]))
    assert answers == [["You said: I am Alice"], ["You said: I am Bob"]]
    assert alice.thread_id != bob.thread_id
