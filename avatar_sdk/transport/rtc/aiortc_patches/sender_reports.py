"""Hear a receiver's RTCP sender reports, and find a decoded frame's RTP timestamp.

Why: presentation times on one timeline for the avatar's voice and video
(:mod:`..core.av_sync`) need each track's sender reports (an NTP time paired with an RTP
timestamp) and each frame's RTP timestamp. aiortc 1.16 keeps neither: its receiver reads a
report's NTP time for its statistics and drops the RTP timestamp, and a decoded frame's
``pts`` is the RTP timestamp less the first one the receiver saw.

How: the receiver's ``_handle_rtcp_packet`` (called by the DTLS transport for each RTCP
packet routed to it) is wrapped on the instance, telling ``on_report`` of each
``RtcpSrPacket`` before aiortc handles it as before. A frame's RTP timestamp is its
``pts`` plus the origin of the receiver's private ``_RTCRtpReceiver__timestamp_mapper``
(``TimestampMapper._origin``, moved back 2^32 at each wrap: the sum modulo 2^32 is exact).

Private names used: ``RTCRtpReceiver._handle_rtcp_packet``,
``RTCRtpReceiver._RTCRtpReceiver__timestamp_mapper`` and ``TimestampMapper._origin``.
:func:`listen_sender_reports` raises ``RuntimeError`` on a receiver that does not look like
1.16's; ``tests/unit/test_sender_reports_patch.py`` fails if those names move.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiortc.rtcrtpreceiver import RTCRtpReceiver, TimestampMapper
from aiortc.rtp import RtcpSrPacket

from ....logs import sdk_logger

__all__ = ["RtpClockTap", "listen_sender_reports"]

log = sdk_logger(__name__)

_MAPPER = "_RTCRtpReceiver__timestamp_mapper"
_HANDLE = "_handle_rtcp_packet"


class RtpClockTap:
    """A receiver's sender reports (to ``on_report``) and its frames' RTP timestamps."""

    def __init__(self, receiver: RTCRtpReceiver, on_report: Callable[[int, int], None]) -> None:
        self._mapper: TimestampMapper = getattr(receiver, _MAPPER)
        self.on_report = on_report
        self.reports = 0

    def heard(self, packet: Any) -> None:
        if isinstance(packet, RtcpSrPacket):
            self.reports += 1
            info = packet.sender_info
            self.on_report(int(info.ntp_timestamp), int(info.rtp_timestamp))

    def rtp_timestamp(self, pts: int | None) -> int | None:
        """The RTP timestamp of a frame this receiver decoded with ``pts`` (None: unknown)."""
        origin = getattr(self._mapper, "_origin", None)
        if pts is None or origin is None:
            return None
        return (int(pts) + int(origin)) % (1 << 32)


def listen_sender_reports(
    receiver: RTCRtpReceiver, on_report: Callable[[int, int], None]
) -> RtpClockTap:
    """Tell ``on_report(ntp, rtp)`` of each sender report ``receiver`` gets (call before it
    receives); the tap also finds its frames' RTP timestamps.

    :raises RuntimeError: aiortc's internals are not the ones this was written for.
    """
    handle = getattr(receiver, _HANDLE, None)
    mapper = getattr(receiver, _MAPPER, None)
    if (
        not callable(handle)
        or not isinstance(mapper, TimestampMapper)
        or not hasattr(mapper, "_origin")
    ):
        raise RuntimeError("aiortc RTCRtpReceiver internals changed: cannot hear sender reports")
    tap = RtpClockTap(receiver, on_report)

    async def handle_rtcp(packet: Any) -> None:
        tap.heard(packet)
        await handle(packet)

    setattr(receiver, _HANDLE, handle_rtcp)
    return tap
