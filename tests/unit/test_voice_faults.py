"""The staging's voice faults (testing/staging/voice_faults.py) on a fake audio sender:
seeded, deterministic, and only the voice's SSRC is touched."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import pytest

from avatar_sdk.testing.staging.voice_faults import VoiceFaults, VoiceFaultSettings

SSRC = 1234


class _Transport:
    def __init__(self) -> None:
        self.sent: list[bytes] = []

    async def _send_rtp(self, data: bytes) -> None:
        self.sent.append(data)


class _Sender:
    def __init__(self) -> None:
        self.transport = _Transport()
        self._ssrc = SSRC


def _packet(seq: int, ssrc: int = SSRC) -> bytes:
    return struct.pack("!BBHII", 0x80, 111, seq, seq * 960, ssrc) + b"\x00"


def _seqs(sent: list[bytes]) -> list[int]:
    return [struct.unpack_from("!H", p, 2)[0] for p in sent]


async def _run(arm: Any, count: int = 200) -> tuple[VoiceFaults, list[int]]:
    sender = _Sender()
    sent = sender.transport.sent
    faults = VoiceFaults(sender)
    arm(faults)
    for seq in range(count):
        await sender.transport._send_rtp(_packet(seq))
    for _ in range(100):  # the jitter's delayed packets (50 ms at most) go out
        if not faults.pending:
            break
        await asyncio.sleep(0.005)
    return faults, _seqs(sent)


async def test_the_same_seed_loses_the_same_packets() -> None:
    a, _ = await _run(lambda f: f.lose(rate=0.1, seed=5))
    b, _ = await _run(lambda f: f.lose(rate=0.1, seed=5))
    c, _ = await _run(lambda f: f.lose(rate=0.1, seed=6))
    assert a.lost == b.lost and a.lost != c.lost
    assert 5 <= len(a.lost) <= 40


async def test_count_loses_the_next_packets_then_the_rate_goes_on() -> None:
    faults, sent = await _run(lambda f: f.lose(3), count=10)
    assert faults.lost == [0, 1, 2] and sent == list(range(3, 10))


async def test_reorder_sends_a_packet_after_its_successor() -> None:
    faults, sent = await _run(lambda f: f.reorder(2), count=6)
    assert faults.swapped == [0, 2] and sent == [1, 0, 3, 2, 4, 5]


async def test_jitter_delays_each_packet_by_its_own_seeded_draw() -> None:
    a, sent = await _run(lambda f: f.jitter(0.05, seed=1), count=30)
    b, _ = await _run(lambda f: f.jitter(0.05, seed=1), count=30)
    assert a.delays == b.delays and len(a.delays) == 30
    assert all(0.0 <= d <= 0.05 for d in a.delays)
    assert sorted(sent) == list(range(30))  # every packet goes out, perhaps out of order


async def test_other_streams_pass_untouched() -> None:
    sender = _Sender()
    faults = VoiceFaults(sender)
    faults.lose(5)
    await sender.transport._send_rtp(_packet(1, ssrc=999))
    await sender.transport._send_rtp(b"\x80\xc8short")  # RTCP-sized, no voice SSRC
    assert len(sender.transport.sent) == 2 and faults.lost == []


async def test_lasting_settings_are_given_to_a_new_sender() -> None:
    settings = VoiceFaultSettings(loss_rate=0.2, loss_seed=9)
    a, _ = await _run(settings.apply)
    b, _ = await _run(lambda f: f.lose(rate=0.2, seed=9))
    assert a.lost == b.lost


def test_bad_arguments_are_refused() -> None:
    faults = VoiceFaults(_Sender())
    with pytest.raises(ValueError):
        faults.lose(rate=1.5)
    with pytest.raises(ValueError):
        faults.jitter(-0.1)
