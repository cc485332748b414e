"""The media verdicts carry their kind (issue 29: the watchdog decided on a verdict's words),
and the downlink's silence rule is one function both sessions use."""

from __future__ import annotations

from avatar_sdk.transport.liveness.channel_down import (
    ChannelDown,
    DownKind,
    downlink_down,
    peer_down,
)


def test_a_dead_peer_is_its_own_kind() -> None:
    for state in ("failed", "closed"):
        verdict = peer_down("asr", state)
        assert verdict == ChannelDown(DownKind.PEER, f"asr peer {state}")
    assert peer_down("asr", "connected") is None
    verdict = downlink_down(
        "closed", 10.0, 2.0, last_media_at=9.9, subscribed_at=1.0, watching_since=1.0
    )
    assert verdict is not None and verdict.kind is DownKind.PEER
    assert str(verdict) == "stv peer closed"


def test_downlink_silence_counts_from_the_latest_mark() -> None:
    def judge(now: float, media: float | None, sub: float | None, since: float | None) -> object:
        return downlink_down(
            "connected", now, 2.0, last_media_at=media, subscribed_at=sub, watching_since=since
        )

    assert judge(5.0, 3.5, 1.0, 1.0) is None  # media 1.5 s ago
    verdict = judge(5.0, 2.5, 1.0, 1.0)
    assert isinstance(verdict, ChannelDown)
    assert verdict.kind is DownKind.NO_MEDIA and verdict.reason == "no media for 2.5s"
    assert judge(5.0, None, 2.5, None) is not None  # no frame yet: from the subscription
    assert judge(5.0, 1.0, 1.0, 4.0) is None  # not from before the session was usable
    assert judge(5.0, None, None, None) is None  # nothing to count from
