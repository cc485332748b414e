"""Why a media channel is dead: the verdict's kind beside its words, and the downlink's
silence rule (pure).

A verdict is acted on by its :class:`DownKind`, never by its text: the media watchdog
re-reads the uplink's receiver reports before acting on a :attr:`DownKind.NO_RECEIVER_REPORT`
verdict (a stale reading must not start a recovery), and the words stay free to change. The
downlink rule is shared by both sessions that watch a WHEP downlink: the live session's
media lanes (``MediaLanes.down_channels``) and the scripted session's downlink watch.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final

__all__ = [
    "DEAD_PEER_STATES",
    "WATCH_TICK",
    "ChannelDown",
    "DownKind",
    "downlink_down",
    "peer_down",
    "silence",
]

#: Peer connection states after which the channel carries nothing any more.
DEAD_PEER_STATES: Final = ("failed", "closed")
#: How often a media watchdog looks at its channels, seconds (both sessions' watchdogs).
WATCH_TICK: Final = 0.1


class DownKind(StrEnum):
    """What was found dead."""

    #: The peer connection is ``failed`` or ``closed``.
    PEER = "peer"
    #: The uplink's path stopped answering ICE consent.
    NO_CONSENT = "no_consent"
    #: The uplink's path answers, but the server's RTCP receiver reports are overdue.
    NO_RECEIVER_REPORT = "no_receiver_report"
    #: No downlink media (voice or video) for the stall window.
    NO_MEDIA = "no_media"
    #: There is no downlink at all (between a failed re-subscribe and the next one).
    NO_DOWNLINK = "no_downlink"


@dataclass(frozen=True, slots=True)
class ChannelDown:
    """A dead channel's verdict: the kind decides, the reason is for people (logs, the
    ``media_recovering`` event's ``reason``)."""

    kind: DownKind
    reason: str

    def __str__(self) -> str:
        return self.reason


def peer_down(channel: str, state: str) -> ChannelDown | None:
    """A peer in a dead state (``"stv peer failed"``), or None."""
    if state in DEAD_PEER_STATES:
        return ChannelDown(DownKind.PEER, f"{channel} peer {state}")
    return None


def silence(
    now: float,
    last_media_at: float | None,
    subscribed_at: float | None,
    watching_since: float | None,
) -> float | None:
    """Seconds the downlink has been silent: since its last media (or, before any, its
    subscription), never counting from before ``watching_since`` (when the session last
    became usable: time spent connecting or recovering is not a stall). None: no mark."""
    known = [m for m in (last_media_at or subscribed_at, watching_since) if m is not None]
    return now - max(known) if known else None


def downlink_down(
    state: str,
    now: float,
    stall_timeout: float,
    *,
    last_media_at: float | None,
    subscribed_at: float | None,
    watching_since: float | None,
) -> ChannelDown | None:
    """The downlink's liveness rule: its peer dead, or no media for ``stall_timeout``."""
    dead = peer_down("stv", state)
    if dead is not None:
        return dead
    silent = silence(now, last_media_at, subscribed_at, watching_since)
    if silent is not None and silent > stall_timeout:
        # To 10 ms: a verdict 20 ms past the bound must not read as the bound itself.
        return ChannelDown(DownKind.NO_MEDIA, f"no media for {round(silent, 2):g}s")
    return None
