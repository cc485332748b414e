"""Found by the chaos tour (``make soak``, seed 11 with ``AVATAR_SOAK_SKIP_KNOWN=1``, round 38:
a ``silent_in_place`` fault "recovered" through the cold tier): a media recovery task of a
link that a cold reconnect replaced lives on, blind to the new link.

``MediaTier`` keeps one recovery task per channel (``_media_tasks``) and no tier cancels it
when the link changes. While the old link's task lives (up to ``media_recovery_timeout``
per attempt, ``max_media_recoveries`` attempts):

* the new link's same channel is not watched at all (``watchdog`` skips a channel that has
  a task), so a downlink that dies on the new link goes unnoticed;
* when the old task's next attempt fails with ``closed`` (its lanes were closed by the cold
  reconnect, ``MediaLanes._check_open``), ``_media_failed`` only checks that the machine is
  in ``recovering_media``; if the *new* link is recovering a channel just then, it fires
  ``session_lost`` and rebuilds a healthy session cold ("media recovery failed (closed)").
  That is what the tour saw: the old link's STV attempt timed out 5 s after it began, its
  second attempt failed ``closed`` while the new link renegotiated its uplink, and the
  session went cold, before the client's probe had even noticed the silenced socket.

Deterministic: the old link's STV recovery is pinned on a peer that can never connect
(``stuck_ice("stv", mode="no_candidates")`` when it re-subscribes) for ``media_recovery_timeout``
(its attempts also emit ``media_recovering`` on the new link, where nothing is recovering).
Fixed: a link's recoveries are tasks of that link's scope, cancelled and awaited when a
cold attempt retires it (``LinkSlot.retire``), and a failed recovery escalates only while
its lanes are still its link's. The second case (the replaced link's failed recovery) takes
about 10 s: it is a soak test, ``tests/soak/test_stale_media_recovery.py``.
"""

from __future__ import annotations

import asyncio

from avatar_sdk import AvatarSession, SessionConfig
from avatar_sdk.media import ToneSource
from avatar_sdk.testing import StagingServer

#: The old link's STV attempt stays pinned for ``media_recovery_timeout`` (its peer never
#: connects); every check below is over well before (or triggered by) its end.
PINNED = SessionConfig(media_recovery_timeout=8.0, ice_stuck_timeout=8.0, reconnect_window=5.0)


async def cold_reconnect_during_a_pinned_stv_recovery(staging: StagingServer) -> AvatarSession:
    """A connected session whose previous link's STV recovery is still running (pinned on a
    peer that can never connect), and a healthy new link built by a cold reconnect."""
    session = AvatarSession(
        staging.url, staging.token, audio=ToneSource(), allow_insecure_transport=True, config=PINNED
    )
    await session.connect()
    await session.wait_for("agent_turn_ended", timeout=5)
    staging.faults.stuck_ice("stv", mode="no_candidates")  # the re-subscription never connects
    answered = len(staging.media.whep_statuses)
    pinned = session.expect(
        "media_recovering", predicate=lambda e: e.data["channel"] == "stv", timeout=5
    )
    await staging.faults.ice_failure("stv")
    await pinned
    await _whep_answered(staging, answered)  # stuck for good: answered with no candidates
    staging.faults.clear()  # peers made from now on are healthy (the pinned one is not)
    rebuilt = session.expect(
        "reconnected", predicate=lambda e: e.data["tier"] == "cold", timeout=10
    )
    await staging.faults.drop_socket(recovery=False)  # the socket is lost for good: cold
    await rebuilt
    assert session.state == "connected"
    return session


async def _whep_answered(staging: StagingServer, before: int) -> None:
    """Until the server answered one more WHEP POST than ``before`` (2 s at most)."""
    for _ in range(200):
        if len(staging.media.whep_statuses) > before:
            return
        await asyncio.sleep(0.01)
    raise RuntimeError("the re-subscription was never answered")


async def test_after_a_cold_reconnect_the_new_downlink_is_watched(staging: StagingServer) -> None:
    session = await cold_reconnect_during_a_pinned_stv_recovery(staging)
    try:
        # The new link's downlink stops (ICE up, no frames): noticed after
        # media_stall_timeout (2 s), long before the old link's attempt ends (8 s).
        noticed = session.expect(
            "media_recovering",
            predicate=lambda e: e.data["channel"] == "stv",
            timeout=PINNED.media_stall_timeout + 1.5,
        )
        await staging.faults.media_stall("stv", seconds=30.0)
        await noticed  # today: never, while the old link's task holds the "stv" slot
    finally:
        await session.close()
