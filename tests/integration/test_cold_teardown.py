"""Found while reproducing the tour's stale media recovery: ``close()`` as a cold reconnect
starts leaves the replaced link half closed (its aiohttp sessions are never closed).

``RecoveryController._cold_attempt`` takes the old link out of the slot
(``old, self._slot.current = self._slot.current, None``) and then awaits
``old.close(...)``. ``close()`` cancels every supervised task (``Supervisor.aclose``),
this recovery included, inside that await, and the endings close only ``slot.current``
(None, or the new link): the rest of the old link's teardown never runs. Its control
channel's and its WHEP client's ``aiohttp.ClientSession`` stay open ("Unclosed client
session" at garbage collection, a ``ResourceWarning``); ``close()`` itself returns in a
millisecond, well inside ``close_timeout``, so nothing else shows it.

Deterministic: ``close()`` is called in the iteration after ``reconnecting {tier: cold}``,
when the cold attempt is inside ``old.close``. Fixed: a link closes as its own task
(``ServerLink.close`` is shielded and shared by every caller) and a link being closed stays
in ``LinkSlot.retiring`` until it is, where the endings find and await it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
import pytest_asyncio

from avatar_sdk import AvatarSession
from avatar_sdk.media import ToneSource
from avatar_sdk.testing import StagingServer


@pytest_asyncio.fixture
async def http_sessions(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[list[object]]:
    """Every ``aiohttp.ClientSession`` made during the test (kept, then closed after it)."""
    made: list[aiohttp.ClientSession] = []
    original = aiohttp.ClientSession.__init__

    def init(self: aiohttp.ClientSession, *args: object, **kwargs: object) -> None:
        original(self, *args, **kwargs)  # type: ignore[arg-type]
        made.append(self)

    monkeypatch.setattr(aiohttp.ClientSession, "__init__", init)
    yield made  # type: ignore[misc]
    for http in made:
        if not http.closed:
            await http.close()


async def test_close_as_a_cold_reconnect_starts_releases_the_replaced_link(
    staging: StagingServer, http_sessions: list[aiohttp.ClientSession]
) -> None:
    session = AvatarSession(
        staging.url, staging.token, audio=ToneSource(), allow_insecure_transport=True
    )
    try:
        await session.connect()
        await session.wait_for("agent_turn_ended", timeout=5)
        assert http_sessions  # the link's own HTTP clients (socket, WHEP)
        cold = session.expect(
            "reconnecting", predicate=lambda e: e.data["tier"] == "cold", timeout=5
        )
        await staging.faults.drop_socket(recovery=False)
        await cold  # the cold attempt is closing the replaced link right now
    finally:
        await session.close()
    assert session.state == "ended"
    assert [http for http in http_sessions if not http.closed] == []
