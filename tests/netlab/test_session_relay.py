"""Media through a real TURN relay (coturn in the lab's server namespace), in the short set
(``make test``): with every UDP packet between client and server dropped but the relay's
port, a session connects, talks, and survives a control-socket drop and an ICE failure of
each media channel, media flowing again both ways each time (counted at the SDK and at the
staging). The TCP-to-the-relay case (all UDP blocked) is in the matrix
(``test_session_matrix.py``, ``make netlab``). Figures: ``NETLAB-RELAY {...}`` lines."""

from __future__ import annotations

import asyncio

import pytest

from avatar_sdk import ScriptedAvatarSession
from avatar_sdk.scripted import pcm_tone
from avatar_sdk.testing import NetworkLab
from avatar_sdk.testing.leaks import LeakCheck
from avatar_sdk.testing.netlab.relay import TURN_PORT
from benchmarks.netlab_relay_scenario import run_relay

from .conftest import relay_survived, show_relay

pytestmark = pytest.mark.timeout(120)


async def test_a_session_over_the_relay_only_connects_talks_and_survives_faults() -> None:
    """Without the relay the same run fails to connect (``asr_failed``: the uplink finds no
    path), so media went through coturn: it granted an allocation per peer, one more per
    peer each ICE failure rebuilt."""
    f = show_relay(await run_relay("relay-udp"))
    relay_survived(f)
    assert f.allocations >= 2


async def test_a_scripted_session_uses_the_relay_the_staging_names() -> None:
    """The avatar-session service names the TURN relay in its ``init-client`` answer; with
    every UDP packet but the relay's dropped, the scripted session subscribes through that
    relay (relay-only, as the service's client does) and hears what it had said."""
    async with NetworkLab() as lab:
        relay = lab.turn_relay()
        async with lab.staging(scripted_turn=relay.config()) as staging, relay:
            await lab.blackhole(protocol="udp", except_port=TURN_PORT)
            with lab.client():
                check = LeakCheck()
                session = ScriptedAvatarSession(
                    staging.agentic_url,
                    staging.admin_token,
                    staging.visual_id,
                    allow_insecure_transport=True,
                )
                async with session, session.frames("audio") as frames:
                    handle = await session.say(pcm_tone(440, 0.6), sample_rate=48_000)
                    heard = 0
                    async with asyncio.timeout(15):
                        async for frame in frames:
                            heard += frame.samples
                            if heard >= 48_000 // 2:
                                break
                    result = await handle
                assert result.reason == "played"
                assert await check.settle(5.0) == []
            assert relay.allocations >= 1
