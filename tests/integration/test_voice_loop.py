"""Talking to the avatar from a laptop, over a real audio server (avatar_sdk.testing.audio_rig):
the speaker's output reaches the microphone through a PulseAudio loop (60 ms, -10 dB), the
staging backend's VAD listens to the uplink. Without the echo canceller the avatar's own
voice interrupts it; with it, a whole answer plays, and a user talking over it still does.

``AVATAR_SDK_AUDIO=off`` skips these (``make test`` installs PulseAudio as root)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from avatar_sdk import AvatarSession
from avatar_sdk.media import LocalVoice
from avatar_sdk.testing import StagingServer
from avatar_sdk.testing.audio_rig import AudioRig, audio_rig_missing, user_voice

from .conftest import FAST

_missing = audio_rig_missing()
pytestmark = [
    pytest.mark.skipif(_missing is not None, reason=f"no audio rig: {_missing}"),
    pytest.mark.xdist_group("audio_rig"),  # one PulseAudio server and its environment
    pytest.mark.realtime_audio,  # run alone by `make test`: a starved CPU underruns the loop
]

ANSWER = " ".join(f"word{i}" for i in range(60))  # several seconds of the avatar's voice
TURNS = 10
#: How long the user talks over the avatar. While AEC3 is still converging it can hold a
#: user's voice down for most of a second of double talk (measured on this rig, the first
#: answers after the greeting: the cleaned uplink at 0.0002-0.05 RMS from 0.12-0.15 raw);
#: a user who is not heard goes on talking, and the staging VAD needs 0.25 s of it.
USER_SECONDS = 1.5


@pytest.fixture
def rig() -> Iterator[AudioRig]:
    pytest.importorskip("livekit.rtc", reason="the voice extra (livekit) is not installed")
    with AudioRig(delay=0.06, gain=0.3) as running:
        yield running


async def _voice_session(
    staging: StagingServer, *, cancel: bool
) -> tuple[AvatarSession, LocalVoice]:
    voice = LocalVoice(input="pulse", output="pulse", echo_cancellation=cancel)
    session = AvatarSession(
        staging.url,
        staging.token,
        audio=voice.microphone,
        video=False,
        allow_insecure_transport=True,
        config=FAST.with_(overall_connect_timeout=10.0, asr_timeout=5.0),
    )
    await session.connect()
    await voice.start(session.avatar_audio)
    await session.wait_for("agent_talking", timeout=10, predicate=lambda e: not e.data["talking"])
    await session.wait_until_quiet(timeout=10)
    staging.brain.listen(min_speech=0.25, silence=0.6)  # the greeting is over: the VAD on
    return session, voice


@pytest.mark.timeout(120)
async def test_without_the_canceller_the_avatar_interrupts_itself(rig: AudioRig) -> None:
    """The loop is real: the avatar's voice through it makes the staging VAD fire."""
    async with StagingServer(speech_time_scale=0.5) as staging:
        session, voice = await _voice_session(staging, cancel=False)
        try:
            reply = await session.speak(ANSWER).wait_for_playout(timeout=30)
            assert reply.interrupted
        finally:
            await session.close()
            await voice.stop()


@pytest.mark.timeout(300)
async def test_with_the_canceller_answers_play_whole_and_the_user_still_barges_in(
    rig: AudioRig,
) -> None:
    async with StagingServer(speech_time_scale=0.5) as staging:
        session, voice = await _voice_session(staging, cancel=True)
        heard: list[object] = []
        session.on("user_started_talking", heard.append)  # the staging VAD's onsets
        ours = len(voice.microphone.onsets)  # the canceller has converged on the greeting
        try:
            for turn in range(TURNS):
                reply = await session.speak(ANSWER).wait_for_playout(timeout=30)
                assert not reply.interrupted, f"turn {turn}: the avatar interrupted itself"
            # The uplink is not gated (media/voice.py says why): what it carries while only
            # the avatar talks never reached the staging VAD as speech, nor ours.
            assert heard == [], f"the staging VAD heard the avatar {len(heard)} times"
            assert voice.microphone.onsets[ours:] == []
            for turn in range(TURNS):
                handle = session.speak(ANSWER)
                await session.wait_for(
                    "agent_talking", timeout=10, predicate=lambda e: e.data["talking"]
                )
                await asyncio.sleep(0.5)
                heard = session.expect("user_transcription", timeout=15)
                before = len(voice.microphone.onsets)
                player = rig.talk(user_voice(USER_SECONDS))
                reply = await handle.wait_for_playout(timeout=30)
                sdk_heard = len(voice.microphone.onsets) - before
                assert reply.interrupted, (
                    f"turn {turn}: the user did not interrupt (the SDK's own VAD heard them"
                    f" {sdk_heard} times: 0 means the canceller held their voice down)"
                )
                await asyncio.to_thread(player.wait, 10)
                await heard  # the barge-in became a voice turn: let its answer go by
                await session.wait_until_quiet(timeout=30)
                await asyncio.sleep(0.3)
            assert voice.speaker.played > 0 and voice.canceller is not None
        finally:
            await session.close()
            await voice.stop()
