"""Soak: a seeded random tour of faults on one audio+video session (``make soak``).

The seed is printed so a failure can be replayed: ``AVATAR_SOAK_SEED=<n> make soak``.
"""

from __future__ import annotations

import asyncio
import os
import random

import pytest

from avatar_sdk import AvatarSession, SessionConfig
from avatar_sdk.media import ToneSource
from avatar_sdk.testing import StagingServer

from ..integration.conftest import sdk_tasks
from ..integration.test_media_session import open_peers

pytestmark = pytest.mark.slow

FAULTS = ("drop", "refuse", "stv", "asr", "stall")


async def test_seeded_chaos_tour_keeps_the_session_usable() -> None:
    seed = int(os.environ.get("AVATAR_SOAK_SEED", random.randrange(1 << 30)))
    print(f"chaos seed: {seed}")
    rng = random.Random(seed)
    rounds = int(os.environ.get("AVATAR_SOAK_ROUNDS", "40"))
    async with StagingServer() as staging:
        session = AvatarSession(
            staging.url,
            staging.token,
            genie_url=staging.genie_url,
            audio=ToneSource(),
            allow_insecure_transport=True,
            config=SessionConfig(media_recovery_timeout=5.0, reconnect_window=5.0),
        )
        await session.connect()
        answered = 0
        for index in range(rounds):
            fault = rng.choice(FAULTS)
            if fault == "drop":
                await staging.faults.drop_socket()
            elif fault == "refuse":
                await staging.faults.drop_socket(recovery=False)
            elif fault in ("stv", "asr"):
                await staging.faults.ice_failure(fault)
            else:
                await staging.faults.media_stall("stv", seconds=rng.uniform(0.5, 3.0))
            await asyncio.sleep(rng.uniform(0.0, 0.3))
            question = f"question {index}"
            answer = asyncio.ensure_future(
                session.wait_for(
                    "agent_turn_ended", 15, lambda e, q=question: q in str(e.data.get("speech_id"))
                )
            )
            await asyncio.wait_for(session.speak(question), 30)
            await answer  # the turn was delivered once, to a live server session, and answered
            assert session.state in ("connected", "recovering_media"), (seed, index, fault)
            answered += 1
        assert answered == rounds
        thread = session.thread_id
        await session.close()
        assert staging.completed_threads == [thread]
    await asyncio.sleep(0.2)
    assert sdk_tasks() == []
    assert open_peers() == []
