"""The media tier never starts a recovery that the cold tier will throw away.

After ``drop_socket(recovery=False)`` the staging server ends its conversation: it aborts
the socket, closes both WebRTC peers (DTLS close alerts), and only then closes the
websocket, so the client sees its peers ``closed`` ~1-7 ms before the socket drop. The
media tier used to take the closed peers for a media failure and start a WebRTC
renegotiation and a WHEP re-subscribe that the cold tier then cancelled (one wasted WHEP
subscribe per cold drop, "subscribes=4 deletes=3" in ``make demo``). A peer closed by the
far end is now recovered in place only once a socket probe confirms that the server
session is alive; a socket that drops meanwhile leaves the decision to the socket tier.
"""

from __future__ import annotations

from avatar_sdk import AvatarSession
from avatar_sdk.media import ToneSource
from avatar_sdk.testing import StagingServer

from .conftest import FAST

MEDIA = FAST.with_(overall_connect_timeout=10.0, asr_timeout=5.0, media_recovery_timeout=5.0)


async def _in_conversation(staging: StagingServer) -> AvatarSession:
    """A connected A/V session that has had the greeting and one answered turn (what the
    demo does before its faults: the ordering above is reliable from there on)."""
    session = AvatarSession(
        staging.url, staging.token, audio=ToneSource(), allow_insecure_transport=True, config=MEDIA
    )
    greeting = session.expect("agent_turn_ended", timeout=10)
    await session.connect()
    await greeting
    answered = session.expect("agent_turn_ended", timeout=10)
    await session.speak("What can you do?")
    await answered
    return session


async def test_a_refused_socket_recovery_starts_no_media_recovery(
    staging: StagingServer,
) -> None:
    session = await _in_conversation(staging)
    recovering: list[dict[str, object]] = []
    states: list[str] = []
    session.on("media_recovering", lambda e: recovering.append(dict(e.data)))
    session.on("state_changed", lambda e: states.append(e.data["state"]))
    try:
        posts, deletes = staging.media.whep_posts, staging.media.whep_deletes
        rebuilt = session.expect(
            "reconnected", predicate=lambda e: e.data["tier"] == "cold", timeout=10
        )
        await staging.faults.drop_socket(recovery=False)
        await rebuilt
        # Any media recovery would have started before the drop was noticed, which is
        # before the cold tier could even begin: by now it would be on record.
        assert recovering == []
        assert "recovering_media" not in states
        assert states[:2] == ["reconnecting", "cold_reconnecting"]
        assert staging.media.whep_posts - posts == 1  # the cold rebuild's subscribe only
        assert staging.media.whep_deletes - deletes == 1  # the old downlink's resource
        assert session.state == "connected"
    finally:
        await session.close()


async def test_a_closed_peer_on_a_healthy_socket_still_recovers_in_place(
    staging: StagingServer,
) -> None:
    """The far end closes one peer while the socket is fine: the probe answers at once and
    the channel recovers at the media tier, the other channel untouched."""
    session = await _in_conversation(staging)
    order: list[tuple[str, object]] = []
    for name in ("media_recovering", "media_recovered", "reconnecting"):
        session.on(name, lambda e: order.append((e.name, e.data.get("channel"))))
    try:
        probes = len(staging.received_events("checkAvailability"))
        recovered = session.expect("media_recovered", timeout=8)
        await staging.faults.ice_failure("stv")
        ev = await recovered
        assert ev.data["channel"] == "stv" and ev.data["method"] == "whep_resubscribe"
        assert order == [("media_recovering", "stv"), ("media_recovered", "stv")]
        assert len(staging.received_events("checkAvailability")) > probes  # it asked first
        assert session.state == "connected"
    finally:
        await session.close()
