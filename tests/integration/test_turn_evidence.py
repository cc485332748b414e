"""Found while making the chaos tour's turn texts unique: one answer's speechId can confirm
a second, later turn whose text starts with the first one's, so that turn, lost in a dead
socket, is never resent.

``TurnLedger.observe_speech_id`` confirms the first unconfirmed turn whose normalised text
*starts with* the speechId's payload (the server cuts the payload at 60 characters), and it
does so for every event carrying that speechId. An answer is a dozen events with one
speechId: the first confirms its own turn (which then leaves the ledger), the next one
confirms the following turn if that turn's text extends the first ("tell me" then
"tell me more"), identical texts included. If that following turn went into a socket the
server no longer read, the recovery finds nothing unconfirmed and never resends it: the
user's turn is lost without a trace.

Deterministic: the server holds the first turn's answer (a brain stall) until after the
second turn went into the silenced socket, so the answer's events always reach the client
after both turns were sent. Fixed: a speech confirms exactly one turn (an exact payload
match unless the payload was cut, and each speechId counted once); the control case (an
unrelated second text) passed before the fix too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio

from avatar_sdk import AvatarSession
from avatar_sdk.testing import StagingServer

from .conftest import FAST

#: Silence noticed in ~1 s; the server times it out first (recovery in place); the evidence
#: wait after the recovery outlasts the brain's stall.
CONFIG = FAST.with_(socket_probe_interval=0.5, socket_probe_timeout=0.6, turn_confirm_timeout=3.0)
STALL = 1.0


@pytest_asyncio.fixture
async def session(staging: StagingServer) -> AsyncIterator[AvatarSession]:
    made = AvatarSession(
        staging.url, staging.token, media=False, allow_insecure_transport=True, config=CONFIG
    )
    try:
        yield made
    finally:
        await made.close()


async def _second_turn_into_a_dead_socket(
    staging: StagingServer, session: AvatarSession, first: str, second: str
) -> None:
    """``first`` reaches the server, whose answer is held; ``second`` goes into a socket
    the server stopped reading; the socket is recovered in place; ``second`` must be
    answered (resent once, as the server never read it)."""
    await session.connect()
    await session.wait_for("agent_turn_ended", timeout=3)  # the greeting
    staging.brain.stall(STALL)
    await session.speak(first)
    read = session.expect("capacity_changed", timeout=3)
    session.notify_network_change(media=False)  # a probe answered: the server has read ``first``
    await read
    assert [e.payload["text"] for e in staging.received_events("onTextEntered")][-1] == first
    recovered = session.expect("reconnected", timeout=10)
    answered = session.expect(
        "agent_speech_started",
        predicate=lambda e: str(e.data["speech_id"]).endswith(second),
        timeout=10,
    )
    assert staging.faults.silent_socket(server_timeout=0.2) == 1
    await session.speak(second)  # the client has not noticed: into the dead socket
    assert (await recovered).data["tier"] == "socket"
    await answered
    texts = [e.payload.get("text") for e in staging.received_events("onTextEntered")]
    assert texts.count(first) == 1
    assert texts.count(second) == 1


async def test_a_turn_extending_the_previous_one_is_resent_when_lost(
    staging: StagingServer, session: AvatarSession
) -> None:
    await _second_turn_into_a_dead_socket(staging, session, "tell me", "tell me more")


async def test_an_unrelated_turn_lost_after_the_previous_one_is_resent(
    staging: StagingServer, session: AvatarSession
) -> None:
    await _second_turn_into_a_dead_socket(staging, session, "tell me", "what else")
