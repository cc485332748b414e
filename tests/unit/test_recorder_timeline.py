"""The recorder's timeline rule (pure): strictly increasing, the sender's spacing kept,
re-anchored on a jumping clock."""

from __future__ import annotations

from fractions import Fraction

from avatar_sdk.media.recorder import RESYNC, VIDEO_MIN_STEP, VIDEO_TIME_BASE, _Timeline

RTP = Fraction(1, 90_000)


def video() -> _Timeline:
    return _Timeline(VIDEO_TIME_BASE, VIDEO_MIN_STEP)


def test_the_first_frame_lands_at_its_arrival_and_the_spacing_is_the_senders() -> None:
    line = video()
    assert line.place(5_000_000, RTP, arrival=0.5) == 45_000
    # Arrival jitter does not move frames: the sender's 50 ms spacing is kept.
    assert line.place(5_004_500, RTP, arrival=0.58) == 49_500
    assert line.place(5_009_000, RTP, arrival=0.59) == 54_000


def test_a_frame_that_would_not_come_after_the_previous_goes_right_after_it() -> None:
    line = video()
    placed = [line.place(pts, RTP, arrival=0.0) for pts in (0, 4500, 4500, 4400, 9000)]
    assert placed == [0, 4500, 4500 + VIDEO_MIN_STEP, 4500 + 2 * VIDEO_MIN_STEP, 9000]


def test_a_clock_that_jumps_is_reanchored_on_arrival() -> None:
    line = video()
    assert line.place(900_000, RTP, arrival=0.0) == 0
    assert line.place(904_500, RTP, arrival=0.05) == 4500
    # A new RTP clock far behind (a re-subscribed downlink): placed at its arrival.
    assert line.place(10, RTP, arrival=2.0) == 180_000
    assert line.place(4510, RTP, arrival=2.05) == 184_500
    # A jump forward by more than RESYNC as well.
    ahead = 4510 + int((RESYNC + 5) * 90_000)
    assert line.place(ahead, RTP, arrival=2.1) == 189_000


def test_audio_never_overlaps_itself() -> None:
    line = _Timeline(Fraction(1, 48_000), 1)
    rate = Fraction(1, 48_000)
    placed = [line.place(p, rate, arrival=0.0, length=960) for p in (0, 960, 960, 1920)]
    assert placed == [0, 960, 1920, 2880]


def test_a_frame_without_a_timestamp_is_placed_at_its_arrival() -> None:
    line = video()
    assert line.place(None, None, arrival=1.0) == 90_000
    assert line.place(None, None, arrival=1.0) == 90_000 + VIDEO_MIN_STEP
