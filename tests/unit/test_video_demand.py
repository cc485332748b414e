"""transport/rtc/aiortc_patches/video_demand.py: the gate's logic, and the aiortc internals it
relies on.

The patch reaches into aiortc 1.16's ``RTCRtpReceiver``; these tests fail if the private
names move (a real receiver is inspected), and show the patch refuses, loudly, a receiver
that lacks them.
"""

from __future__ import annotations

import asyncio
import datetime
import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from aiortc import RTCPeerConnection
from aiortc.jitterbuffer import JitterFrame
from aiortc.rtcrtpreceiver import RTCRtpReceiver, RTCRtpSynchronizationSource

from avatar_sdk.transport.rtc.aiortc_patches import video_demand
from avatar_sdk.transport.rtc.aiortc_patches.video_demand import (
    PLI_EVERY,
    DemandQueue,
    decode_video_on_demand,
    is_keyframe,
)
from avatar_sdk.transport.rtc.stv import FanoutTrack

IDR = b"\x00\x00\x00\x01\x67\x42" + b"\x00\x00\x00\x01\x68\xce" + b"\x00\x00\x00\x01\x65\x88"
P_FRAME = b"\x00\x00\x00\x01\x41\x9a\x00\x10"


@dataclass
class _Codec:
    name: str


def test_keyframes_are_recognised() -> None:
    assert is_keyframe("H264", IDR)
    assert is_keyframe("H264", b"\x00\x00\x01\x65\x88")  # 3-byte start code, IDR alone
    assert not is_keyframe("H264", P_FRAME)
    assert not is_keyframe("H264", b"")
    assert not is_keyframe("H264", b"\x00\x00\x01")  # truncated
    assert is_keyframe("VP8", b"\x10\x02\x00")  # inverse key frame bit 0
    assert not is_keyframe("VP8", b"\x11\x02\x00")
    assert not is_keyframe("VP8", b"")
    assert is_keyframe("VP9", b"\x01")  # unknown codec: every frame passes


class _Gate:
    """A DemandQueue over a plain queue, as the decoder thread would see it."""

    def __init__(self) -> None:
        self.real: queue.Queue[Any] = queue.Queue()
        self.error = threading.Event()
        self.watching = False
        self.decoded = 0
        self.now = 0.0
        self.paused = 0
        self.queue = DemandQueue(
            object(),  # type: ignore[arg-type]
            self.real,
            self.error,
            demand=lambda: self.watching,
            first_decoded=lambda: self.decoded > 0,
            clock=lambda: self.now,
        )
        self.queue.on_pause = self._pause

    def _pause(self) -> None:
        self.paused += 1

    def feed(self, data: bytes) -> None:
        self.now += 0.05
        self.queue.put((_Codec("H264"), JitterFrame(data, 0)))

    def drained(self) -> Iterator[Any]:
        while not self.real.empty():
            yield self.real.get_nowait()


def test_only_the_first_frame_is_decoded_until_somebody_watches() -> None:
    g = _Gate()
    g.feed(P_FRAME)  # not decodable alone: waits for a keyframe, asks for one
    assert g.error.is_set() and g.queue.plis == 1
    g.error.clear()
    g.feed(IDR)
    g.feed(P_FRAME)  # still not decoded: nothing decoded yet, the gate waits for one
    assert len(list(g.drained())) == 2
    g.decoded = 1  # the thread decoded the first frame
    for _ in range(5):
        g.feed(P_FRAME)
    assert list(g.drained()) == []
    assert not g.queue.decoding and g.paused == 1
    assert g.queue.assembled == 8 and g.queue.skipped == 6 and g.queue.forwarded == 2
    assert g.queue.assembled_at == pytest.approx(0.4)  # stamped decoded or not


def test_a_consumer_resumes_decoding_at_the_next_keyframe_with_a_pli() -> None:
    g = _Gate()
    g.decoded = 1
    g.feed(P_FRAME)
    assert not g.queue.decoding
    g.watching = True
    for _ in range(PLI_EVERY + 1):  # no keyframe yet: dropped, a PLI now and one later
        g.feed(P_FRAME)
    assert list(g.drained()) == []
    assert g.queue.plis == 2 and g.queue.resumes == 1
    g.feed(IDR)
    g.feed(P_FRAME)
    assert len(list(g.drained())) == 2
    assert g.queue.plis == 2


def test_the_stop_marker_always_reaches_the_thread() -> None:
    g = _Gate()
    g.decoded = 1
    g.queue.put(None)
    assert list(g.drained()) == [None]
    assert g.queue.get is not None


def test_a_fanout_track_is_watched_while_read() -> None:
    track = FanoutTrack("video", max_queue=3)
    assert not track.watched  # nobody ever read it
    track.on_frame = lambda _f: None
    assert track.watched
    track.on_frame = None
    track._read_ever = True
    for _ in range(2):
        track.push(object())
    assert track.watched  # read fewer than max_queue frames ago
    track.push(object())
    assert not track.watched  # its whole buffer went unread: the reader is gone


async def test_a_paused_track_drops_its_stale_frames() -> None:
    track = FanoutTrack("video", max_queue=3)
    track.push("old")
    track.pause()
    asyncio.get_running_loop().call_soon(track.push, "fresh")
    assert await track.recv() == "fresh"
    track.stop()


async def test_aiortc_receiver_internals_are_the_ones_video_demand_expects() -> None:
    """Fails when aiortc changes the private names :mod:`video_demand` relies on."""
    pc = RTCPeerConnection()
    try:
        receiver = pc.addTransceiver("video", direction="recvonly").receiver
        assert isinstance(receiver._RTCRtpReceiver__decoder_queue, queue.Queue)  # type: ignore[attr-defined]
        assert isinstance(receiver._RTCRtpReceiver__decoder_error, threading.Event)  # type: ignore[attr-defined]
        assert receiver._RTCRtpReceiver__decoder_thread is None  # type: ignore[attr-defined]
        gate = decode_video_on_demand(
            receiver, demand=lambda: False, first_decoded=lambda: False, clock=lambda: 0.0
        )
        assert receiver._RTCRtpReceiver__decoder_queue is gate  # type: ignore[attr-defined]
    finally:
        await pc.close()


@pytest.mark.parametrize("missing", ["_QUEUE", "_ERROR", "_THREAD"])
async def test_the_patch_fails_loudly_when_the_internals_are_missing(missing: str) -> None:
    pc = RTCPeerConnection()
    try:
        receiver: RTCRtpReceiver = pc.addTransceiver("video", direction="recvonly").receiver
        name = getattr(video_demand, missing)
        if missing == "_THREAD":
            setattr(receiver, name, threading.Thread())  # started already: too late
        else:
            delattr(receiver, name)
        with pytest.raises(RuntimeError, match="internals changed"):
            decode_video_on_demand(
                receiver, demand=lambda: False, first_decoded=lambda: False, clock=lambda: 0.0
            )
    finally:
        await pc.close()


async def test_request_keyframe_sends_a_pli_per_recent_source_and_flags_the_decoder() -> None:
    """The video rule's PLI (video_demand.request_keyframe): aiortc's private
    ``_send_rtcp_pli`` for each source heard recently, plus the decoder-error flag (a PLI
    on the next packet). Fails if aiortc renames ``_send_rtcp_pli``."""
    pc = RTCPeerConnection()
    try:
        receiver = pc.addTransceiver("video", direction="recvonly").receiver
        assert callable(receiver._send_rtcp_pli)
        sent: list[int] = []

        async def send_pli(media_ssrc: int) -> None:
            sent.append(media_ssrc)

        heard = RTCRtpSynchronizationSource(timestamp=datetime.datetime.now(), source=1234)
        receiver._send_rtcp_pli = send_pli  # type: ignore[method-assign]
        receiver.getSynchronizationSources = lambda: [heard]  # type: ignore[method-assign]
        error = receiver._RTCRtpReceiver__decoder_error  # type: ignore[attr-defined]
        assert not error.is_set()
        assert await video_demand.request_keyframe(receiver) == 1
        assert sent == [1234] and error.is_set()
    finally:
        await pc.close()
