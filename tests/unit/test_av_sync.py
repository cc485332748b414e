"""The A/V timeline rule (transport/rtc/core/av_sync.py), fed sender reports by hand."""

from __future__ import annotations

import itertools

import pytest

from avatar_sdk.transport.rtc.core.av_sync import (
    MAX_HOLD,
    PresentationTimeline,
    SenderClock,
    ntp_seconds,
)

#: The sender's wall clock at its first frame (NTP seconds), and its RTP origins.
T0 = 3_900_000_000.25
AUDIO_ORIGIN = 1_234_567
VIDEO_ORIGIN = (1 << 32) - 100_000  # wraps 1.1 s in


def ntp(seconds: float) -> int:
    whole = int(seconds)
    return whole << 32 | round((seconds - whole) * (1 << 32))


def audio_rtp(t: float) -> int:
    return (AUDIO_ORIGIN + round(t * 48_000)) % (1 << 32)


def video_rtp(t: float) -> int:
    return (VIDEO_ORIGIN + round(t * 90_000)) % (1 << 32)


def test_ntp_seconds_reads_the_fixed_point() -> None:
    assert ntp_seconds(ntp(T0)) == pytest.approx(T0, abs=1e-6)


def test_a_sender_clock_maps_rtp_to_sender_time_across_the_wrap() -> None:
    clock = SenderClock(rate=90_000)
    assert clock.sender_time(video_rtp(0.0)) is None  # no report yet
    clock.report(ntp(T0 + 0.5), video_rtp(0.5))
    assert clock.sender_time(video_rtp(0.5)) == pytest.approx(T0 + 0.5, abs=1e-6)
    # 1 s later: the 32-bit timestamp has wrapped (origin + 90000 > 2**32).
    assert video_rtp(1.5) < video_rtp(0.5)
    assert clock.sender_time(video_rtp(1.5)) == pytest.approx(T0 + 1.5, abs=1e-6)
    assert clock.sender_time(video_rtp(0.2)) == pytest.approx(T0 + 0.2, abs=1e-6)


def test_a_report_sent_late_does_not_move_the_mapping_an_earlier_one_does() -> None:
    clock = SenderClock(rate=48_000)
    clock.report(ntp(T0 + 1.004), audio_rtp(1.0))  # sent 4 ms after its instant
    assert clock.sender_time(audio_rtp(1.0)) == pytest.approx(T0 + 1.004, abs=1e-6)
    clock.report(ntp(T0 + 2.030), audio_rtp(2.0))  # 30 ms late: the sender was busy
    assert clock.sender_time(audio_rtp(2.0)) == pytest.approx(T0 + 2.004, abs=1e-6)
    clock.report(ntp(T0 + 3.001), audio_rtp(3.0))  # 1 ms: the floor of the send delays
    assert clock.sender_time(audio_rtp(3.0)) == pytest.approx(T0 + 3.001, abs=1e-6)


def test_a_report_of_nothing_sent_is_ignored_and_a_new_clock_restarts() -> None:
    clock = SenderClock(rate=48_000)
    clock.report(0, 0)  # aiortc's report before its first packet
    assert not clock.known
    clock.report(ntp(T0 + 1.0), audio_rtp(1.0))
    # Another sender clock (a new stream): 10 s away from the mapping, taken as it is.
    clock.report(ntp(T0 + 50.0), audio_rtp(40.0))
    assert clock.restarts == 1
    assert clock.sender_time(audio_rtp(40.0)) == pytest.approx(T0 + 50.0, abs=1e-6)


def test_both_tracks_are_mapped_onto_one_timeline_by_their_reports() -> None:
    """Voice and video of one sender instant get one presentation time, however long each
    took to arrive (the voice 30 ms, the video 70 ms) and whatever their RTP origins."""
    audio, video = SenderClock(rate=48_000), SenderClock(rate=90_000)
    audio.report(ntp(T0 + 1.0), audio_rtp(1.0))
    video.report(ntp(T0 + 1.0), video_rtp(1.0))
    timeline = PresentationTimeline()
    local = 500.0  # the receiver's monotonic clock at the sender's T0
    placed: dict[str, list[float]] = {"audio": [], "video": []}
    for step in range(40):
        t = 1.0 + step * 0.05
        sent_v = video.sender_time(video_rtp(t))
        placed["video"].append(timeline.place("video", sent_v, local + t + 0.070))
        for sub in range(0, 50, 20):
            ta = t + sub / 1000
            sent_a = audio.sender_time(audio_rtp(ta))
            placed["audio"].append(timeline.place("audio", sent_a, local + ta + 0.030))
    # The same instant, t, on both: the audio frame at t and the video frame at t.
    audio_at = placed["audio"][::3]
    for a, v in zip(audio_at, placed["video"], strict=True):
        assert a == pytest.approx(v, abs=1e-6)
    for times in placed.values():
        assert all(b > a for a, b in itertools.pairwise(times))


def test_presentation_times_only_grow_per_track() -> None:
    timeline = PresentationTimeline()
    first = timeline.place("audio", T0 + 1.0, 10.0)
    # A later frame mapped earlier (a report moved the mapping back): still after the last.
    second = timeline.place("audio", T0 + 0.990, 10.02)
    assert second > first
    assert second - first < 0.001


def test_before_its_reports_a_track_is_placed_by_arrival_less_the_others_extra_transit() -> None:
    timeline = PresentationTimeline()
    # The voice has reports: its transit (30 ms) sets the offset.
    assert timeline.place("audio", T0 + 1.0, 101.03) == 0.0
    # The video has none yet: by its arrival, no transit taken off beyond the offset.
    assert timeline.place("video", None, 101.10) == pytest.approx(0.07, abs=1e-6)
    # With its report, the video of T0 + 1.1 arriving at 101.17 sits at 0.1.
    assert timeline.place("video", T0 + 1.1, 101.17) == pytest.approx(0.1, abs=1e-6)


def test_a_video_frame_is_held_until_its_voice_is_handed_on_and_no_longer() -> None:
    timeline = PresentationTimeline()
    timeline.place("audio", T0 + 1.0, 101.080)  # the voice: 80 ms on the way (jitter)
    # A video frame of T0 + 1.0 ready after 20 ms: held until the voice of its instant.
    assert timeline.video_release(T0 + 1.0, 101.020) == pytest.approx(101.080)
    # One ready after the voice of its instant: at once (the voice is never held).
    assert timeline.video_release(T0 + 1.0, 101.200) == 101.200
    # Without a report, or without recent voice: at once.
    assert timeline.video_release(None, 101.020) == 101.020
    assert timeline.video_release(T0 + 10.0, 110.0) == 110.0
    # A voice far behind: held at most MAX_HOLD.
    timeline.place("audio", T0 + 2.0, 104.0)
    assert timeline.video_release(T0 + 2.0, 102.010) == pytest.approx(102.010 + MAX_HOLD)


def test_before_its_reports_a_track_is_spaced_by_its_rtp_clock_not_its_arrivals() -> None:
    """Frames handed on with arrival jitter (a loaded loop) keep their media spacing: a
    reader sees consecutive voice frames 960 samples apart before the first report too."""
    timeline = PresentationTimeline()
    arrivals = [50.0, 50.031, 50.045, 50.072, 50.080]  # 20 ms frames, handed on unevenly
    placed = [
        timeline.place("audio", None, at, rtp=1_000 + 960 * i) for i, at in enumerate(arrivals)
    ]
    samples = [round(p * 48_000) for p in placed]
    assert all(b - a == 960 for a, b in itertools.pairwise(samples)), samples


def test_the_first_report_does_not_move_the_voice_and_a_new_origin_re_anchors() -> None:
    """The voice stays sample-continuous when its first report arrives (the video is what
    moves onto it), and a new RTP origin (a re-subscribe) anchors afresh at its arrival."""
    timeline = PresentationTimeline()
    samples = []
    for i in range(10):
        sent = T0 + 1.0 + 0.02 * i if i >= 5 else None  # the first report after 5 frames
        placed = timeline.place(
            "audio", sent, 50.0 + 0.02 * i + (0.013 if i == 5 else 0), rtp=960 * i
        )
        samples.append(round(placed * 48_000))
    assert all(b - a == 960 for a, b in itertools.pairwise(samples)), samples
    # The video of the voice's tenth frame's instant sits at its time.
    assert timeline.place("video", T0 + 1.0 + 0.18, 50.25) == pytest.approx(samples[9] / 48_000)
    # Another sender (random RTP origin): placed by its arrival, then counted from there.
    fresh = timeline.place("audio", None, 60.0, rtp=123_456_789)
    again = timeline.place("audio", None, 60.02, rtp=123_456_789 + 960)
    assert fresh == pytest.approx(10.0, abs=0.001) and round((again - fresh) * 48_000) == 960
