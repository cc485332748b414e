"""transport/rtc/aiortc_patches/video_repair.py: the retry and skip rules, over aiortc's own jitter
buffer and
NACK generator (real objects, a fake clock), and the aiortc internals the patch relies on
(a real receiver is inspected; the patch refuses, loudly, one that lacks them)."""

from __future__ import annotations

from typing import Any

import pytest
from aiortc import RTCPeerConnection
from aiortc.jitterbuffer import JitterBuffer
from aiortc.rtcrtpreceiver import NackGenerator, RTCRtpReceiver
from aiortc.rtp import RtpPacket

from avatar_sdk.transport.rtc.aiortc_patches import video_repair
from avatar_sdk.transport.rtc.aiortc_patches.video_repair import (
    HOLE_WAIT,
    NACK_RETRY_EVERY,
    HoleWatch,
    NackRetry,
    VideoRepair,
)

#: One packet per frame, 20 frames a second (a 90 kHz clock), as the avatar's video is
#: sent at low bitrates; ``PER_FRAME`` packets per frame in the multi-packet cases.
FRAME_TICKS = 4500


def _packet(seq: int, frame: int) -> RtpPacket:
    packet = RtpPacket(payload_type=96, sequence_number=seq % 65536, timestamp=frame * FRAME_TICKS)
    packet._data = bytes([frame % 256])  # type: ignore[attr-defined]  # what depayload sets
    return packet


class _Receiver:
    """Stands in for the receiver's attributes the patch replaces (aiortc's own objects)."""

    def __init__(self) -> None:
        self._RTCRtpReceiver__jitter_buffer = JitterBuffer(capacity=512, is_video=True)
        self._RTCRtpReceiver__nack_generator = NackGenerator()


class _Link:
    """What aiortc's receiver does with each packet, over the patched objects."""

    def __init__(self) -> None:
        self.now = 0.0
        self.receiver = _Receiver()
        self.skips = 0
        self.repair = VideoRepair(
            self.receiver,  # type: ignore[arg-type]
            clock=lambda: self.now,
            on_skip=self._skip,
        )
        self.nacks: list[list[int]] = []
        self.plis = 0
        self.frames: list[int] = []

    def _skip(self) -> None:
        self.skips += 1

    def receive(self, packet: RtpPacket) -> None:
        generator: Any = self.receiver._RTCRtpReceiver__nack_generator
        if generator.add(packet):
            self.nacks.append(sorted(generator.missing))
        buffer: Any = self.receiver._RTCRtpReceiver__jitter_buffer
        pli, frame = buffer.add(packet)
        self.plis += pli
        if frame is not None:
            self.frames.append(frame.timestamp // FRAME_TICKS)

    def run(self, frames: range, *, lose: set[int] = frozenset(), per_frame: int = 1) -> None:  # type: ignore[assignment]
        for frame in frames:
            self.now = frame * 0.05
            for part in range(per_frame):
                seq = frame * per_frame + part
                if seq not in lose:
                    self.receive(_packet(seq, frame))


def test_a_hole_filled_in_time_is_waited_for() -> None:
    link = _Link()
    link.run(range(0, 6), lose={3})
    assert link.nacks == [[3]]
    link.receive(_packet(3, 3))  # the resend
    link.run(range(6, 10))
    # Every frame, in order. aiortc hands on one frame per packet received, so the three
    # frames held up by the hole come out one packet late each (a backlog that drains on
    # the next multi-packet frame): frames 0-6 out of the 10 received.
    assert link.frames == list(range(0, 7))
    assert link.repair.holes_skipped == 0 and link.skips == 0 and link.plis == 0


def test_a_missing_packet_is_asked_for_again_until_it_is_given_up() -> None:
    link = _Link()
    link.run(range(0, 30), lose={3})
    asked = [n for n in link.nacks if n == [3]]
    # Once when the gap appeared, then about every NACK_RETRY_EVERY (on the next packet
    # received, every 50 ms here) until the hole is skipped HOLE_WAIT after it appeared.
    tries = round(HOLE_WAIT / NACK_RETRY_EVERY)
    assert tries - 1 <= len(asked) <= tries, link.nacks
    assert link.repair.nack_retries == len(asked) - 1
    assert link.repair.retry.given_up + link.repair.holes_skipped >= 1
    assert all(n == [3] for n in link.nacks)  # nothing else was ever missing


def test_a_packet_lost_for_good_is_skipped_to_the_next_frame_after_hole_wait() -> None:
    link = _Link()
    link.run(range(0, 40), lose={3})
    assert link.repair.holes_skipped == 1 and link.skips == 1
    assert link.plis == 1  # the skip asked for a keyframe at once
    assert link.frames[:2] == [0, 1]  # frame 2 is emitted once frame 3 starts: lost with it
    skipped_at = link.frames[2]
    # Frames came out again within HOLE_WAIT (10 frames) of the loss, plus two frames (the
    # one being received at the skip is dropped, its successor completes on the next).
    assert skipped_at * 0.05 - 3 * 0.05 <= HOLE_WAIT + 0.1 + 1e-9, link.frames
    assert link.frames[2:] == list(range(skipped_at, 39))
    generator: Any = link.receiver._RTCRtpReceiver__nack_generator
    assert generator.missing == set()  # nothing asked for any more


def test_a_hole_inside_a_multi_packet_frame_is_skipped_too() -> None:
    link = _Link()
    link.run(range(0, 40), lose={3 * 4 + 2}, per_frame=4)  # the third packet of frame 3
    assert link.repair.holes_skipped == 1
    assert link.frames[:3] == [0, 1, 2]
    assert link.frames[3] > 3
    assert link.frames[3:] == list(range(link.frames[3], 39))


def test_a_sender_that_pauses_is_not_a_hole() -> None:
    link = _Link()
    link.run(range(0, 5))
    link.run(range(100, 105))  # 4.75 s later, no packet lost (a frozen sender)
    # Sequence numbers go on where they stopped: frame 100 follows frame 4.
    assert link.repair.holes_skipped == 0
    assert link.plis == 0


def test_the_watch_and_the_retry_under_a_fake_clock() -> None:
    watch = HoleWatch(wait=0.5)
    assert not watch.look(0.0, frame_out=False, stuck=True)
    assert not watch.look(0.49, frame_out=False, stuck=True)
    assert watch.look(0.5, frame_out=False, stuck=True)
    assert not watch.look(0.6, frame_out=False, stuck=True)  # a new wait begins
    assert not watch.look(0.7, frame_out=True, stuck=False)
    assert not watch.look(1.5, frame_out=False, stuck=True)  # counted from 1.5, not 0.6

    retry = NackRetry(every=0.1, give_up=0.5)
    missing = {7}
    assert retry.on_packet(0.0, missing, new_gap=True)
    assert not retry.on_packet(0.05, missing, new_gap=False)
    assert retry.on_packet(0.1, missing, new_gap=False) and retry.retries == 1
    assert not retry.on_packet(0.15, set(), new_gap=False)  # arrived: nothing to ask
    missing = {7}
    assert not retry.on_packet(0.16, missing, new_gap=False)  # a new wait for 7 begins
    assert retry.on_packet(0.3, missing, new_gap=False)
    assert not retry.on_packet(0.7, missing, new_gap=False)  # given up at 0.66
    assert missing == set() and retry.given_up == 1


async def test_aiortc_receivers_have_what_the_patch_uses() -> None:
    pc = RTCPeerConnection()
    try:
        receiver = pc.addTransceiver("video", direction="recvonly").receiver
        repair = video_repair.repair_video_reception(receiver, clock=lambda: 0.0, on_skip=None)
        assert repair.holes_skipped == 0
        assert getattr(receiver, video_repair._JITTER).capacity == 512
        assert getattr(receiver, video_repair._NACKS).missing == set()
    finally:
        await pc.close()


def test_a_receiver_without_those_internals_is_refused() -> None:
    with pytest.raises(RuntimeError, match="internals changed"):
        VideoRepair(object(), clock=lambda: 0.0)  # type: ignore[arg-type]
    bare = RTCRtpReceiver.__new__(RTCRtpReceiver)
    with pytest.raises(RuntimeError, match="internals changed"):
        VideoRepair(bare, clock=lambda: 0.0)


def _marked(seq: int, frame: int, *, last: bool) -> RtpPacket:
    packet = _packet(seq, frame)
    packet.marker = int(last)
    return packet


def test_a_frame_goes_out_at_its_last_packet_not_at_the_next_frame_s_first() -> None:
    link = _Link()
    for frame in range(5):
        for part in range(3):
            link.receive(_marked(frame * 3 + part, frame, last=part == 2))
            # Out with the packet carrying the marker bit, all of it, nothing sooner.
            assert link.frames == list(range(frame + (part == 2))), (frame, part)
    assert link.plis == 0 and link.repair.holes_skipped == 0


def test_a_frame_whose_marker_came_before_a_missing_packet_waits_for_it() -> None:
    link = _Link()
    link.receive(_marked(0, 0, last=False))
    link.receive(_marked(2, 0, last=True))  # packet 1 reordered behind the frame's last
    assert link.frames == []
    link.receive(_marked(1, 0, last=False))
    assert link.frames == [0]
    buffer: Any = link.receiver._RTCRtpReceiver__jitter_buffer
    assert buffer._inner._packets[0] is None and buffer._inner._origin == 3  # taken out
    link.receive(_marked(3, 1, last=True))
    assert link.frames == [0, 1]
