"""Found by the chaos tour (``make soak``): a client emit that a dying socket swallows is
never re-applied by an in-place (socket-tier) recovery.

Socket.IO's connection-state recovery replays the server's missed events, never the
client's: whatever the client wrote into a transport the server had stopped reading is gone.
User turns are covered (the turn ledger resends an unconfirmed one), but the other client
emits are not: the socket tier restores the *same* server session and re-sends nothing,
while a cold reconnect re-runs the handshake and re-applies mute and pause
(``AvatarSession._restore_user_state``, called only as the ``after_join`` of a new link).

* ``approvedPermissions`` (the last handshake step, queued by ``connect()`` just before it
  returns) lost: the server session stays joined but unapproved, so it ignores every user
  turn from then on and the client never hears why (seed 549801047 of the soak, round 0:
  a ``drop_socket`` right after ``connect()``).
* ``pauseConversation`` / ``resumeConversation`` / ``muteUser`` lost: the session reports
  ``paused`` (or connected, or muted) while the server session holds the opposite.

Each test is deterministic: the fault is injected before the event loop gets a chance to let
the server read the emit (the precondition is asserted). Fixed: after a socket-tier recovery
the SDK re-asserts them (``UserState.on_same_session``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio

from avatar_sdk import AvatarSession
from avatar_sdk.testing import StagingServer

from .conftest import FAST, until

#: Silent-socket detection in about a second; a timed-out silent socket is recovered in place.
PROBING = FAST.with_(socket_probe_interval=0.5, socket_probe_timeout=0.6, turn_confirm_timeout=0.5)
#: After this the staging server treats a silenced socket as gone (so recovery is in place).
SERVER_TIMEOUT = 0.2


@pytest_asyncio.fixture
async def session(staging: StagingServer) -> AsyncIterator[AvatarSession]:
    # A known thread: connect() returns right after the approval is queued (it waits for the
    # greeting's first delta only to learn a thread it does not have).
    made = AvatarSession(
        staging.url,
        staging.token,
        media=False,
        allow_insecure_transport=True,
        config=PROBING,
        thread_id="thread-lost-client",
    )
    try:
        yield made
    finally:
        await made.close()


async def test_approval_swallowed_by_a_dropped_socket_is_applied_after_in_place_recovery(
    staging: StagingServer, session: AvatarSession
) -> None:
    recovered = session.expect("reconnected", timeout=10)
    await session.connect()
    # connect() returned with approvedPermissions still queued in the client: not read yet.
    assert staging.received_events("approvedPermissions") == []
    await staging.faults.drop_socket()
    assert (await recovered).data["tier"] == "socket"
    sid = staging.live_sids[0]
    answered = session.expect(
        "agent_speech_started",
        predicate=lambda e: "anyone there" in str(e.data["speech_id"]),
        timeout=5,
    )
    await session.speak("anyone there")
    await answered  # never: the server session, never approved, drops every turn
    assert staging.conversations[sid].approved


async def test_pause_written_into_a_silent_socket_holds_on_the_server_after_in_place_recovery(
    staging: StagingServer, session: AvatarSession
) -> None:
    await session.connect()
    await session.wait_for(
        "agent_turn_ended", timeout=3
    )  # greeting done: the server read the approval
    sid = staging.live_sids[0]
    recovered = session.expect("reconnected", timeout=10)
    assert staging.faults.silent_socket(server_timeout=SERVER_TIMEOUT) == 1
    await session.pause()  # the client has not noticed: the pause goes into the dead socket
    assert (await recovered).data["tier"] == "socket"
    assert session.state == "paused"
    assert staging.live_sids == [sid]
    assert await until(lambda: staging.conversations[sid].paused, 2)  # re-sent by the recovery


async def test_resume_written_into_a_silent_socket_holds_on_the_server_after_in_place_recovery(
    staging: StagingServer, session: AvatarSession
) -> None:
    await session.connect()
    await session.wait_for("agent_turn_ended", timeout=3)
    sid = staging.live_sids[0]
    await session.pause()
    read = session.expect("capacity_changed", timeout=3)
    session.notify_network_change(media=False)  # a probe now: its answer shows the pause was read
    await read
    assert staging.conversations[sid].paused
    recovered = session.expect("reconnected", timeout=10)
    assert staging.faults.silent_socket(server_timeout=SERVER_TIMEOUT) == 1
    await session.resume()  # into the dead socket
    assert (await recovered).data["tier"] == "socket"
    assert session.state == "connected"
    assert await until(lambda: not staging.conversations[sid].paused, 2)  # re-sent


async def test_mute_written_into_a_silent_socket_holds_on_the_server_after_in_place_recovery(
    staging: StagingServer, session: AvatarSession
) -> None:
    await session.connect()
    await session.wait_for("agent_turn_ended", timeout=3)
    sid = staging.live_sids[0]
    recovered = session.expect("reconnected", timeout=10)
    assert staging.faults.silent_socket(server_timeout=SERVER_TIMEOUT) == 1
    session.mic_enabled = False  # sent by a task, into the dead socket
    assert (await recovered).data["tier"] == "socket"
    assert not session.mic_enabled
    assert staging.received_events("muteUser") == []
    assert await until(lambda: staging.conversations[sid].muted, 2)  # re-sent by the recovery
