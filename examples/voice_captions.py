"""A voice client: speak a WAV file into the conversation and print the live captions.

The file is the user's voice on the uplink (any format FFmpeg reads); ``caption`` events
are the avatar's words as it says them, ``user_transcription`` what the backend heard.
Run it as is against the embedded staging backend (it makes a short WAV if you give none;
the staging backend has no speech recognizer, so it reports how much audio it received)::

    .venv/bin/python examples/voice_captions.py [speech.wav]

Against a real backend set AVATAR_URL and AVATAR_TOKEN: the avatar answers your speech.
"""

from __future__ import annotations

import asyncio
import math
import os
import sys
import tempfile
import wave
from array import array
from pathlib import Path

from avatar_sdk import AvatarSession, Event
from avatar_sdk.media import file_source
from avatar_sdk.testing import StagingServer


def print_captions(session: AvatarSession) -> None:
    def caption(event: Event) -> None:
        print(f"[caption] {event.data['text']}", flush=True)

    def heard(event: Event) -> None:
        if event.data["final"]:
            print(f"[you said] {event.data['text']}", flush=True)

    session.on("caption", caption)
    session.on("user_transcription", heard)


def wav_seconds(path: Path) -> float:
    with wave.open(str(path), "rb") as wav:
        return wav.getnframes() / wav.getframerate()


def make_wav(path: Path, seconds: float = 1.0, rate: int = 16_000) -> Path:
    """A short rising tone, standing in for a recording of someone speaking."""
    samples = array("h", (int(8000 * math.sin(2 * math.pi * (220 + 200 * i / rate) * i / rate))
                          for i in range(int(seconds * rate))))  # fmt: skip
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(samples.tobytes())
    return path


async def speak_file(session: AvatarSession, speech: Path) -> None:
    """Connect with ``speech`` as the microphone; return once it has been heard out."""
    greeting = session.expect("agent_turn_ended", timeout=30)  # before connecting
    await session.connect()
    await greeting
    print(f"[speaking {speech.name}: {wav_seconds(speech):.1f} s]", flush=True)
    await asyncio.sleep(wav_seconds(speech) + 0.5)  # the file plays in real time


async def main(speech: Path) -> None:
    url, token = os.environ.get("AVATAR_URL"), os.environ.get("AVATAR_TOKEN")
    if url and token:
        session = AvatarSession(url, token, audio=file_source(speech), video=False)
        print_captions(session)
        answer = session.expect("agent_turn_ended", timeout=60)
        try:
            await speak_file(session, speech)
            await answer  # the avatar's answer to what it heard
        finally:
            await session.close()
        return
    async with StagingServer() as staging:
        session = AvatarSession(
            staging.url, staging.token, audio=file_source(speech), video=False,
            allow_insecure_transport=True,
        )  # fmt: skip
        print_captions(session)
        try:
            await speak_file(session, speech)
            received = staging.media.asr_stats(staging.live_sids[0])
        finally:
            await session.close()
        print(f"[the backend's uplink received {received.frames * 20} ms of audio]")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        asyncio.run(main(Path(sys.argv[1])))
    else:
        with tempfile.TemporaryDirectory() as tmp:
            asyncio.run(main(make_wav(Path(tmp) / "speech.wav")))
