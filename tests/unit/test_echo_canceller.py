"""The echo canceller on a synthetic room (avatar_sdk.testing.echo_room): echo return loss
enhancement of at least 25 dB after one second, the user's voice during double talk kept
within 8 dB, on frames of any length, through delays, reverberation and noise."""

from __future__ import annotations

import av
import numpy as np
import pytest

from avatar_sdk.errors import AvatarError, ErrorCode
from avatar_sdk.testing.echo_room import EchoRoom, run_room

pytest.importorskip("livekit.rtc", reason="the voice extra (livekit) is not installed")

from avatar_sdk.media import EchoCanceller


@pytest.mark.parametrize(
    "room",
    [
        EchoRoom(seed=1),
        EchoRoom(seed=2),
        EchoRoom(seed=3, noise_dbfs=-50.0),
        EchoRoom(seed=1, delay=0.02, echo_gain=1.0, noise_dbfs=-45.0),
    ],
    ids=["laptop", "laptop-2", "laptop-3-noisier", "close-loud-noisy"],
)
def test_the_echo_is_cancelled_and_the_user_is_kept(room: EchoRoom) -> None:
    canceller = EchoCanceller(sample_rate=48000)
    result = run_room(room, canceller.far, canceller.near)
    assert result.erle_db >= 25.0, result
    assert abs(result.near_kept_db) <= 8.0, result


@pytest.mark.parametrize("frame_seconds", [0.007, 0.025, 0.01])
def test_frames_of_any_length(frame_seconds: float) -> None:
    canceller = EchoCanceller()
    result = run_room(EchoRoom(), canceller.far, canceller.near, frame_seconds=frame_seconds)
    assert result.erle_db >= 25.0, result
    assert abs(result.near_kept_db) <= 8.0, result


def test_without_its_far_end_nothing_is_cancelled() -> None:
    """The check can fail: a canceller never told what the speaker plays removes little."""
    canceller = EchoCanceller(noise_suppression=False)
    result = run_room(EchoRoom(), lambda frame: None, canceller.near)
    assert result.erle_db < 25.0, result


def test_a_frame_keeps_its_length_pts_and_rate() -> None:
    canceller = EchoCanceller()
    pcm = np.zeros((1, 700), dtype=np.int16)
    frame = av.AudioFrame.from_ndarray(pcm, format="s16", layout="mono")
    frame.sample_rate, frame.pts = 48000, 1234
    out = canceller.near(frame)
    assert (out.samples, out.pts, out.sample_rate, out.format.name) == (700, 1234, 48000, "s16")
    stereo = av.AudioFrame.from_ndarray(
        np.zeros((1, 2 * 441), dtype=np.int16), format="s16", layout="stereo"
    )
    stereo.sample_rate = 44100
    assert canceller.near(stereo).sample_rate == 48000
    assert canceller.stats().near_chunks >= 1


def test_an_unsupported_rate_is_refused() -> None:
    with pytest.raises(AvatarError) as caught:
        EchoCanceller(sample_rate=44100)
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
