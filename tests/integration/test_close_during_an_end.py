"""``close()`` while the session is already ending (the server ended the conversation, or
an idle end) returns once it has ended, not at once with the session still
``disconnecting``: found by the plugin's check of sessions left open (issue 18, item 6)."""

from __future__ import annotations

from avatar_sdk.testing import StagingServer

from .conftest import SessionFactory


async def test_close_during_a_server_end_returns_once_the_session_has_ended(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = make_session()
    await session.connect()
    disconnecting = session.expect(
        "state_changed", predicate=lambda e: e.data["state"] == "disconnecting", timeout=5
    )
    await staging.faults.end_conversation()
    await disconnecting
    await session.close()
    assert session.state == "ended"
