"""Tier 2: each media channel recovers in place while the other keeps running."""

from __future__ import annotations

import asyncio
import time

import pytest

from avatar_sdk import AvatarSession
from avatar_sdk.clock import FakeClock
from avatar_sdk.media import ToneSource
from avatar_sdk.testing import StagingServer
from avatar_sdk.transport.liveness.channel_down import ChannelDown

from .conftest import FAST, spy_on_media_watchdog, until

MEDIA = FAST.with_(overall_connect_timeout=10.0, asr_timeout=5.0, media_recovery_timeout=5.0)


async def _connected(staging: StagingServer, **kwargs: object) -> AvatarSession:
    kwargs.setdefault("config", MEDIA)
    session = AvatarSession(
        staging.url,
        staging.token,
        audio=ToneSource(),
        allow_insecure_transport=True,
        **kwargs,  # type: ignore[arg-type]
    )
    await session.connect()
    return session


async def test_the_uplink_deadline_follows_the_observed_report_cadence(
    staging: StagingServer,
) -> None:
    """Regression (issue 8, defect 4): with ``media_stall_timeout=1.0`` a healthy uplink was
    renegotiated every ~2 s, its receiver reports coming every 0.5-1.5 s (aiortc)."""
    session = await _connected(staging, config=MEDIA.with_(media_stall_timeout=1.0))
    recovering: list[dict[str, object]] = []
    session.on("media_recovering", lambda e: recovering.append(dict(e.data)))
    try:
        lanes = session.media
        assert lanes is not None
        start = lanes.asr_reports
        # Four more reports take ~2-6 s at aiortc's cadence; stop early on a recovery.
        await until(lambda: lanes.asr_reports - start >= 4 or bool(recovering), 12.0)
        assert recovering == []
        assert lanes.asr_reports - start >= 4
        assert session.state == "connected"
        assert staging.media.asr_stats(staging.live_sids[0]).offers == 1
    finally:
        await session.close()


async def test_uplink_recovery_is_verified_by_transport_and_rtp_not_the_first_report(
    staging: StagingServer,
) -> None:
    """Issue 8, defect 5: the uplink counts as recovered once the new peer is connected and
    sending RTP, before the server's first receiver report (0.5-1.5 s after its receiver
    starts); reports stay the ongoing liveness signal."""
    session = await _connected(staging)
    order: list[tuple[str, object]] = []
    at_recovered: dict[str, object] = {}

    def on_recovered(event: object) -> None:
        lanes = session.media
        asr = lanes.asr if lanes is not None else None
        at_recovered.update(
            at=time.monotonic(),
            state=asr.pc.connectionState if asr is not None else None,
            report_at=lanes.asr_report_at if lanes is not None else "no lanes",
        )

    for name in ("media_recovering", "media_recovered", "reconnecting"):
        session.on(name, lambda e: order.append((e.name, e.data.get("channel"))))
    session.on("media_recovered", on_recovered)
    try:
        lanes = session.media
        assert lanes is not None
        old_peer = lanes.asr
        sid = staging.live_sids[0]
        await staging.faults.ice_failure("asr")
        ev = await session.wait_for("media_recovered", timeout=8)
        assert ev.data["channel"] == "asr" and ev.data["method"] == "renegotiate"
        assert order == [("media_recovering", "asr"), ("media_recovered", "asr")]
        assert lanes.asr is not None and lanes.asr is not old_peer
        # Verified on the transport, before any receiver report of the new peer.
        assert at_recovered["state"] == "connected"
        assert at_recovered["report_at"] is None
        assert 0 < ev.data["duration"] < MEDIA.media_recovery_timeout
        # Audio reaches the server on the new peer...
        frames = staging.media.asr_stats(sid).frames
        assert await until(lambda: staging.media.asr_stats(sid).frames > frames + 10, 5.0)
        # ... and its receiver reports, the ongoing liveness signal, come after the verdict.
        reports = lanes.asr_reports
        assert await until(lambda: lanes.asr_reports > reports, 5.0)
        assert lanes.asr_report_at is not None
        assert lanes.asr_report_at > at_recovered["at"]  # type: ignore[operator]
        assert order == [("media_recovering", "asr"), ("media_recovered", "asr")]
        assert session.state == "connected"
    finally:
        await session.close()


async def test_the_lanes_wake_a_watchdog_when_a_peer_fails(staging: StagingServer) -> None:
    """``wait_peer_down`` returns on aiortc's state change, not at the end of its tick."""
    session = await _connected(staging)
    try:
        lanes = session.media
        assert lanes is not None
        assert await lanes.wait_peer_down(0.05) is False  # healthy: the full wait
        waiter = asyncio.ensure_future(lanes.wait_peer_down(30.0))
        await staging.faults.ice_failure("asr")
        assert await asyncio.wait_for(waiter, 10.0) is True
        ev = await session.wait_for("media_recovered", timeout=8)
        assert ev.data["channel"] == "asr"
    finally:
        await session.close()


async def test_a_healthy_session_never_recovers_spuriously(staging: StagingServer) -> None:
    session = await _connected(staging)
    events: list[str] = []
    session.on("media_recovering", lambda e: events.append(e.data["channel"]))
    try:
        lanes = session.media
        assert lanes is not None
        verdicts = spy_on_media_watchdog(lanes)
        reports = lanes.asr_reports
        # Not a sleep: the watchdog has judged both channels for 5 s (2.5 stall windows)
        # while the uplink's receiver reports kept coming, and found nothing dead.
        assert await until(
            lambda: any(v.watched_for >= 5.0 for v in verdicts) and lanes.asr_reports > reports,
            15,
        )
        assert [v.down for v in verdicts if v.down] == []
        assert events == []
        assert session.state == "connected"
    finally:
        await session.close()


async def test_stv_ice_failure_resubscribes_without_touching_the_uplink(
    staging: StagingServer,
) -> None:
    session = await _connected(staging)
    try:
        lanes = session.media
        assert lanes is not None
        asr_peer = lanes.asr
        sid = staging.live_sids[0]
        started = time.monotonic()
        await staging.faults.ice_failure("stv")
        ev = await session.wait_for("media_recovered", timeout=8)
        assert ev.data["channel"] == "stv" and ev.data["method"] == "whep_resubscribe"
        assert time.monotonic() - started < 5
        assert session.state == "connected"
        assert lanes.asr is asr_peer  # the uplink kept running
        assert staging.media.asr_stats(sid).offers == 1
        assert len(staging.received_events("join")) == 1  # no re-join
        assert staging.media.whep_posts == 2 and staging.media.whep_deletes >= 1
        assert session.stats()["reconnects"]["media"] == 1
    finally:
        await session.close()


async def test_stv_media_stall_is_detected_and_recovered(staging: StagingServer) -> None:
    session = await _connected(staging)
    try:
        started = time.monotonic()
        await staging.faults.media_stall("stv", seconds=None)
        recovering = await session.wait_for("media_recovering", timeout=6)
        detected = time.monotonic() - started
        assert recovering.data["channel"] == "stv"
        assert detected < MEDIA.media_stall_timeout + 1.0
        staging.faults.clear()
        ev = await session.wait_for("media_recovered", timeout=8)
        assert ev.data["channel"] == "stv"
        assert session.state == "connected"
    finally:
        await session.close()


async def test_asr_failure_renegotiates_on_the_live_socket_keeping_mute(
    staging: StagingServer,
) -> None:
    session = await _connected(staging)
    try:
        session.mic_enabled = False
        sid = staging.live_sids[0]
        stv_link = session.media.stv if session.media else None
        await staging.faults.ice_failure("asr")
        ev = await session.wait_for("media_recovered", timeout=8)
        assert ev.data == {
            "channel": "asr",
            "method": "renegotiate",
            "duration": ev.data["duration"],
        }
        offers = [r.payload for r in staging.received_events("asr-webrtc-offer")]
        assert [o["is_reconnect"] for o in offers] == [False, True]
        assert session.media is not None and session.media.stv is stv_link  # downlink untouched
        frames = staging.media.asr_stats(sid).frames
        assert await until(lambda: staging.media.asr_stats(sid).frames > frames + 10, 5)
        stats = staging.media.asr_stats(sid)
        assert stats.last_rms == 0.0  # still muted after the new peer
        assert len(staging.received_events("join")) == 1
    finally:
        await session.close()


async def test_an_uplink_whose_reports_stop_while_its_path_answers_is_recovered(
    staging: StagingServer,
) -> None:
    """Receiver reports stay the ongoing liveness signal: the server drops the uplink's
    SRTP/SRTCP while its ICE path still answers consent, so only the missing reports (against
    their observed cadence) can tell. A path that stops answering altogether is found by ICE
    consent (``test_uplink_liveness.py``)."""
    session = await _connected(staging)
    try:
        lanes = session.media
        assert lanes is not None
        # A report verdict needs one observed gap: two reports on this peer.
        assert await until(lambda: lanes.asr_cadence.deadline() is not None, 5.0)
        started = time.monotonic()
        await staging.faults.media_stall("asr", seconds=None)
        deadline = lanes.asr_cadence.deadline()  # no report after the stall: final
        assert deadline is not None and deadline >= MEDIA.media_stall_timeout
        recovering = await session.wait_for("media_recovering", timeout=deadline + 3.0)
        assert recovering.data["channel"] == "asr"
        assert "receiver report" in recovering.data["reason"]
        assert time.monotonic() - started < deadline + 1.5
        staging.faults.clear()
        ev = await session.wait_for("media_recovered", timeout=8)
        assert ev.data["channel"] == "asr"
    finally:
        await session.close()


async def test_whep_404_on_resubscribe_asks_for_a_fresh_stv_session_once(
    staging: StagingServer,
) -> None:
    session = await _connected(staging)
    try:
        staging.faults.whep_404(times=1)
        await staging.faults.ice_failure("stv")
        ev = await session.wait_for("media_recovered", timeout=8)
        assert ev.data["channel"] == "stv"
        assert len(staging.received_events("stvNewSession")) == 2
        assert session.state == "connected"
    finally:
        await session.close()


async def test_stv_session_gone_twice_escalates_to_a_cold_reconnect(
    staging: StagingServer,
) -> None:
    session = await _connected(staging)
    try:
        thread = session.thread_id
        staging.faults.whep_404(times=2)
        await staging.faults.ice_failure("stv")
        ev = await session.wait_for("reconnected", timeout=10)
        assert ev.data["tier"] == "cold"
        assert session.state == "connected"
        joins = staging.received_events("join")
        assert len(joins) == 2
        if thread is not None:
            assert joins[-1].payload["kaltura"]["threadId"] == thread
    finally:
        await session.close()


async def test_both_channels_down_at_once_both_recover(staging: StagingServer) -> None:
    session = await _connected(staging)
    try:
        channels: list[str] = []
        session.on("media_recovered", lambda e: channels.append(e.data["channel"]))
        await staging.faults.ice_failure("stv")
        await staging.faults.ice_failure("asr")
        assert await until(lambda: sorted(channels) == ["asr", "stv"], 8)
        assert session.state == "connected"
    finally:
        await session.close()


async def test_resume_after_the_server_released_the_media_rebuilds_it(
    staging: StagingServer,
) -> None:
    session = await _connected(staging)
    try:
        await session.pause()
        released = session.expect("session_released", timeout=3)
        await staging.faults.release_session()
        assert (await released).data["reason"] == "ready"
        old = session.media
        assert old is not None and old.asr is not None and old.stv is not None
        released_pcs = (old.asr.pc, old.stv.pc)
        # The client sees the released peers go down before it resumes.
        assert await until(
            lambda: all(pc.connectionState in ("closed", "failed") for pc in released_pcs), 3
        )
        recovering: list[object] = []
        session.on("media_recovering", recovering.append)
        await session.resume()
        assert session.state == "connected"
        assert len(staging.received_events("stvNewSession")) == 2
        assert staging.media.whep_posts == 2
        video = session.avatar_video
        assert video is not None
        assert await asyncio.wait_for(video.recv(), 3) is not None
        sid = staging.live_sids[0]
        assert await until(lambda: staging.media.asr_stats(sid).frames > 0, 5)
        # A rebuild on resume, not a recovery: the watchdog judges the rebuilt media healthy.
        lanes = session.media
        assert lanes is not None
        verdicts = spy_on_media_watchdog(lanes)
        assert await until(lambda: any(v.watched_for >= 0.8 for v in verdicts), 5)
        assert [v.down for v in verdicts if v.down] == []
        assert recovering == []
        assert session.state == "connected"
        assert len(staging.received_events("join")) == 1
    finally:
        await session.close()


async def test_a_slow_gate_does_not_make_the_healthy_uplink_look_dead(
    staging: StagingServer,
) -> None:
    """Regression: uplink silence was counted from before 'connected'."""
    await staging.faults.media_stall("stv", seconds=2.5)  # only the downlink starts late
    session = await _connected(staging)
    channels: list[str] = []
    session.on("media_recovering", lambda e: channels.append(e.data["channel"]))
    try:
        lanes = session.media
        assert lanes is not None
        verdicts = spy_on_media_watchdog(lanes)
        # The watchdog has judged the uplink for 1.5 s since 'connected' (the downlink still
        # stalled) and never found it dead.
        assert await until(lambda: any(v.watched_for >= 1.5 for v in verdicts), 5)
        assert [v.down for v in verdicts if "asr" in v.down] == []
        assert "asr" not in channels
        assert staging.media.asr_stats(staging.live_sids[0]).offers == 1
    finally:
        await session.close()


async def test_a_downlink_that_never_delivers_a_frame_is_recovered(
    staging: StagingServer,
) -> None:
    """Regression: a subscription with no frame at all was never judged dead."""
    await staging.faults.media_stall("stv", seconds=None)
    session = await _connected(staging)  # the gate caps, then the session is connected
    try:
        assert session.media is not None and session.media.gate_capped
        recovering = await session.wait_for("media_recovering", timeout=5)
        assert recovering.data["channel"] == "stv"
        staging.faults.clear()
        ev = await session.wait_for("media_recovered", timeout=8)
        assert ev.data["channel"] == "stv"
    finally:
        await session.close()


async def test_mute_survives_the_socket_tier(staging: StagingServer) -> None:
    session = await _connected(staging)
    try:
        session.mic_enabled = False
        assert await until(lambda: staging.received_events("muteUser"), 3)
        waiter = session.expect("reconnected", timeout=5)
        await staging.faults.drop_socket()
        assert (await waiter).data["tier"] == "socket"
        sid = staging.live_sids[0]
        before = staging.media.asr_stats(sid).frames
        assert await until(lambda: staging.media.asr_stats(sid).frames > before + 10, 5)
        stats = staging.media.asr_stats(sid)
        assert stats.frames > before and stats.last_rms == 0.0
        assert session.mic_enabled is False
    finally:
        await session.close()


async def test_stuck_uplink_recovery_is_bounded_by_ice_stuck_timeout(
    staging: StagingServer,
) -> None:
    session = await _connected(staging, config=MEDIA.with_(ice_stuck_timeout=1.0))
    try:
        staging.faults.stuck_ice("asr", mode="no_candidates")
        first = session.expect("media_recovering", timeout=5)
        await staging.faults.ice_failure("asr")
        started = (await first).at
        cold = await session.wait_for("reconnecting", timeout=10)  # in-place attempts gave up
        assert cold.data["tier"] == "cold"
        # Two attempts, each stuck in checking for ice_stuck_timeout (1 s), not 5 s each.
        assert cold.at - started < 2 * 1.0 + 1.5
        staging.faults.clear()
        ev = await session.wait_for("reconnected", timeout=15)
        assert ev.data["tier"] == "cold"
    finally:
        staging.faults.clear()
        await session.close()


async def test_a_busy_uplink_recovery_never_delays_the_downlinks_escalation(
    staging: StagingServer,
) -> None:
    """Issue 8 defect 4: each channel is watched and recovered on its own. The uplink's
    recovery hangs (no answer) for up to 30 s; meanwhile the downlink dies and its WHEP
    re-subscribe answers 404 twice: the session goes cold at once, not after the uplink."""
    session = await _connected(
        staging, config=MEDIA.with_(media_recovery_timeout=30.0, ice_stuck_timeout=30.0)
    )
    try:
        uplink_recovering = session.expect(
            "media_recovering", predicate=lambda e: e.data["channel"] == "asr", timeout=5
        )
        staging.faults.stuck_ice("asr", mode="no_answer")
        await staging.faults.ice_failure("asr")
        await uplink_recovering
        going_cold = session.expect(
            "reconnecting", predicate=lambda e: e.data["tier"] == "cold", timeout=10
        )
        staging.faults.whep_404(times=2)  # the re-subscribe and its retry: session gone
        started = time.monotonic()
        await staging.faults.ice_failure("stv")
        event = await going_cold
        assert time.monotonic() - started < 10  # bounded by the downlink, not the uplink
        assert "session_gone" in event.data["reason"]
        staging.faults.clear()  # the rebuilt session's peers connect normally
        await session.wait_for(
            "reconnected", timeout=15, predicate=lambda e: e.data["tier"] == "cold"
        )
        assert session.state == "connected"
    finally:
        await session.close()


async def test_a_dying_watchdog_fails_the_session_loudly(
    staging: StagingServer, monkeypatch: object
) -> None:
    """Issue 8 defect 6: a supervised task that dies is never a silent zombie: the
    session fails with the classified ``internal`` code instead of staying 'connected'."""
    session = await _connected(staging)
    lanes = session.media
    assert lanes is not None

    def broken(*args: object, **kwargs: object) -> dict[str, ChannelDown]:
        raise RuntimeError("a bug in the watchdog's arithmetic")

    ended = session.expect("ended", timeout=5)
    lanes.down_channels = broken  # type: ignore[method-assign]
    event = await ended
    assert event.data["code"] == "internal"
    assert session.state == "failed"
    assert session.health().upstream == "failed"


@pytest.mark.parametrize("offset", [-3600.0, 3600.0], ids=["fake-behind-real", "fake-ahead"])
async def test_a_media_stall_and_its_recovery_run_on_the_session_clock(
    staging: StagingServer, offset: float
) -> None:
    """Issue 16 item 3 (one time line): the media watchdog's verdict "no downlink media for
    ``media_stall_timeout``" compares the downlink's frame stamps with the recovery side's
    times, so both must read the session's clock. Under a FakeClock set an hour away from
    the real monotonic clock, time moves only when the test advances it: healthy media is
    never judged dead however far the fake clock is from the real one, a stall is judged
    once the fake clock has moved one stall window past the last frame, and the media tier
    recovers it and records its duration on the same clock."""
    stall = 0.5
    clock = FakeClock(start=time.monotonic() + offset)
    session = await _connected(
        staging, config=MEDIA.with_(media_stall_timeout=stall), clock=clock, video=False
    )
    try:
        lanes = session.media
        assert lanes is not None and lanes.stv is not None
        downlink = lanes.stv
        sid = staging.live_sids[0]
        verdicts = spy_on_media_watchdog(lanes)

        async def step() -> None:
            # Fake time moves about as fast as real time: 20 ms per uplink frame the server
            # decodes (they keep coming while the downlink is stalled), so the uplink's
            # receiver reports keep their real cadence on the fake time line too.
            frames = staging.media.asr_stats(sid).frames
            await clock.advance(0.02)
            assert await until(lambda: staging.media.asr_stats(sid).frames > frames, 2)

        # Healthy: three stall windows of fake time with the avatar's voice flowing.
        healthy_from = clock.monotonic()
        while not any(v.watched_for >= 3 * stall for v in verdicts):
            await step()
            assert clock.monotonic() - healthy_from < 10 * stall, "the watchdog never looked"
        assert [v.down for v in verdicts if v.down] == []

        # Stalled: the verdict comes once the fake clock is a stall window past the last frame.
        recovering = session.expect(
            "media_recovering", predicate=lambda e: e.data["channel"] == "stv"
        )
        recovered = session.expect(
            "media_recovered", predicate=lambda e: e.data["channel"] == "stv", timeout=10
        )
        await staging.faults.media_stall("stv", seconds=None)
        stalled_at = clock.monotonic()
        while not recovering.done():
            await step()
            assert clock.monotonic() - stalled_at < 10 * stall, "no stall verdict"
        reason = (await recovering).data["reason"]
        silent = float(reason.removeprefix("no media for ").removesuffix("s"))
        assert stall < silent <= stall + 0.3, reason
        assert downlink.last_frame_at is not None
        assert stall < clock.monotonic() - downlink.last_frame_at <= stall + 0.3

        # Recovered in place; its duration is fake time (none passed while it ran).
        staging.faults.clear()
        event = await recovered
        assert event.data["duration"] == 0.0
        stats = session.stats()
        assert stats["reconnects"]["media"] == 1
        assert stats["recovery_durations"]["media"] == [0.0]
        assert lanes.stv is not None and lanes.stv is not downlink
        assert lanes.stv.subscribed_at == clock.monotonic()
    finally:
        await session.close()
