"""The speaker across recovery, over the PulseAudio rig: one :class:`SpeakerSink` on a real
output device plays ``session.avatar_audio`` while the session goes through a socket drop,
a cold reconnect and a renewal past the server's time cap, each while the avatar talks.
Checked on the samples the device was handed (``on_played``): the device was never
released or reopened, and no click (a burst of jumps the staging voice never makes, see
avatar_sdk.testing.clicks) lasts longer than one frame (20 ms).

``AVATAR_SDK_AUDIO=off`` skips it (``make test`` installs PulseAudio as root)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from avatar_sdk import AvatarSession, RenewalPolicy
from avatar_sdk.media import SpeakerSink
from avatar_sdk.testing import StagingServer
from avatar_sdk.testing.audio_rig import AudioRig, audio_rig_missing
from avatar_sdk.testing.clicks import click_blocks, longest_click, tone_max_step

from .conftest import FAST

_missing = audio_rig_missing()
pytestmark = [
    pytest.mark.skipif(_missing is not None, reason=f"no audio rig: {_missing}"),
    pytest.mark.xdist_group("audio_rig"),
    pytest.mark.realtime_audio,  # run alone by `make test`: a starved CPU underruns the loop
]

ANSWER = " ".join(f"word{i}" for i in range(20))
#: The staging voice: a 440 Hz tone at 0.3 (avatar_sdk.testing.synthetic).
MAX_STEP = tone_max_step(440.0, 0.3)
FRAME = 0.02
CAP = 20.0
POLICY = RenewalPolicy(lead_time=3.5, boundary_wait=1.5, safety_margin=1.0)


@pytest.fixture
def rig() -> Iterator[AudioRig]:
    with AudioRig() as running:
        yield running


async def _talking_through(session: AvatarSession, fault: Any, settled: str) -> None:
    """Start an answer, inject ``fault`` a second into it, wait for ``settled``, then for
    the avatar to be quiet again."""
    waiter = session.expect(settled, timeout=20)
    session.speak(ANSWER)
    await session.wait_for("agent_talking", timeout=10, predicate=lambda e: e.data["talking"])
    await asyncio.sleep(1.0)
    await fault()
    await waiter
    await session.wait_until_quiet(timeout=30)


@pytest.mark.timeout(180)
async def test_the_speaker_plays_through_a_socket_drop_a_cold_reconnect_and_a_renewal(
    rig: AudioRig,
) -> None:
    played: list[np.ndarray] = []
    sink = SpeakerSink("pulse", on_played=lambda samples, _until: played.append(samples.copy()))
    async with StagingServer(speech_time_scale=1.0) as staging:
        staging.max_conversation_length = CAP
        staging.time_warning_before = 4.0
        session = AvatarSession(
            staging.url, staging.token, video=False, allow_insecure_transport=True,
            config=FAST.with_(overall_connect_timeout=10.0, renewal=POLICY,
                              reconnect_window=5.0),
        )  # fmt: skip
        try:
            renewed = session.expect("session_renewed", timeout=3 * CAP)
            await session.connect(wait_for_greeting=True)
            await sink.start(session.avatar_audio)
            await _talking_through(session, staging.faults.drop_socket, "reconnected")
            await _talking_through(
                session, lambda: staging.faults.drop_socket(recovery=False), "reconnected"
            )
            assert not renewed.done()  # the cold reconnect opened a new server session
            await session.speak(ANSWER).wait_for_playout(timeout=30)  # before the renewal
            assert (await renewed).data["renewals"] == 1  # swapped at a turn boundary
            await session.speak(ANSWER).wait_for_playout(timeout=30)  # after it
            await asyncio.sleep(0.5)  # its last words leave the buffer
            assert sink.running and not sink.released.is_set()  # one device all along
        finally:
            await session.close()
            await sink.stop()
    assert sink.failure is None
    samples = np.concatenate(played)
    assert len(samples) > 10 * 48000
    blocks = samples[: len(samples) // 480 * 480].reshape(-1, 480) / 32768.0
    rms = np.sqrt((blocks**2).mean(axis=1))
    assert (rms > 0.1).sum() > 500, (rms > 0.1).sum()  # over 5 s of the avatar's voice
    clicks = click_blocks(samples, MAX_STEP)
    longest = longest_click(samples, MAX_STEP)
    assert longest <= FRAME, (
        f"a click of {longest * 1000:.0f} ms; click blocks at "
        f"{[float(i) / 100 for i in np.flatnonzero(clicks)][:20]} s"
    )
