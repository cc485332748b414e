"""transport/rtc/aiortc_patches/sender_reports.py: a receiver's sender reports heard, and a
decoded frame's RTP timestamp found again. A real aiortc receiver is used (its own RTCP
handler and timestamp mapper); one without those internals is refused loudly."""

from __future__ import annotations

import pytest
from aiortc import RTCPeerConnection
from aiortc.rtcrtpreceiver import RTCRtpReceiver, TimestampMapper
from aiortc.rtp import RtcpByePacket, RtcpSenderInfo, RtcpSrPacket

from avatar_sdk.transport.rtc.aiortc_patches import sender_reports
from avatar_sdk.transport.rtc.aiortc_patches.sender_reports import listen_sender_reports


def _report(ntp: int, rtp: int) -> RtcpSrPacket:
    info = RtcpSenderInfo(ntp_timestamp=ntp, rtp_timestamp=rtp, packet_count=1, octet_count=1)
    return RtcpSrPacket(ssrc=1234, sender_info=info)


async def test_a_sender_report_is_told_and_still_handled_by_aiortc() -> None:
    pc = RTCPeerConnection()
    try:
        receiver = pc.addTransceiver("audio", direction="recvonly").receiver
        heard: list[tuple[int, int]] = []
        tap = listen_sender_reports(receiver, lambda ntp, rtp: heard.append((ntp, rtp)))
        ntp = 3_900_000_000 << 32 | 1 << 31
        await receiver._handle_rtcp_packet(_report(ntp, 777))
        await receiver._handle_rtcp_packet(RtcpByePacket(sources=[1234]))  # not a report
        assert heard == [(ntp, 777)] and tap.reports == 1
        # aiortc's own handling ran too: the report's middle bits kept for its receiver reports.
        assert receiver._RTCRtpReceiver__lsr[1234] == (ntp >> 16) & 0xFFFFFFFF  # type: ignore[attr-defined]
    finally:
        await pc.close()


async def test_a_frame_s_rtp_timestamp_is_its_pts_plus_the_mapper_s_origin() -> None:
    pc = RTCPeerConnection()
    try:
        receiver = pc.addTransceiver("video", direction="recvonly").receiver
        tap = listen_sender_reports(receiver, lambda ntp, rtp: None)
        assert tap.rtp_timestamp(0) is None  # nothing mapped yet
        mapper: TimestampMapper = getattr(receiver, sender_reports._MAPPER)
        first = (1 << 32) - 4500
        stamps = [first, first + 4500 - (1 << 32), 4500]  # the 32-bit clock wraps
        for stamp in stamps:
            assert tap.rtp_timestamp(mapper.map(stamp)) == stamp
        assert tap.rtp_timestamp(None) is None
    finally:
        await pc.close()


def test_a_receiver_without_those_internals_is_refused() -> None:
    with pytest.raises(RuntimeError, match="internals changed"):
        listen_sender_reports(object(), lambda ntp, rtp: None)  # type: ignore[arg-type]
    bare = RTCRtpReceiver.__new__(RTCRtpReceiver)
    with pytest.raises(RuntimeError, match="internals changed"):
        listen_sender_reports(bare, lambda ntp, rtp: None)
