"""A person talking to the avatar from a laptop: :class:`LocalVoice` (the ``voice`` extra).

It holds the three parts that must agree: the microphone (:class:`~.sources.MicrophoneSource`),
the speaker (:class:`~.speaker.SpeakerSink`) and, between them, one
:class:`~.echo.EchoCanceller` the speaker feeds with what it plays and the microphone's
frames go through (:class:`CleanedSource`). The canceller is on by default because both
devices belong to one session; ``echo_cancellation=False`` turns it off (headphones).
:class:`CleanedSource` also makes a voice-activity decision on the cleaned signal
(:attr:`CleanedSource.user_speaking`, :attr:`CleanedSource.onsets`): the user, not the
avatar's voice coming back through the room.

The uplink is not gated by that decision: it carries the cleaned signal as it is, quiet
residue included. A gate (silence until the VAD says "user") would cut the first
``min_speech`` (200 ms) of every utterance from the service's speech recognition, or
delay the whole uplink by that much to keep them, and the cleaned signal already stays
below the service's VAD while only the avatar talks (``tests/integration/test_voice_loop.py``:
no ``user_started_talking`` in ten whole answers). The decision is what times the user's
turn (voice-to-voice latency) and what an app shows as "you are talking".

The two devices go together: when the session closes (the avatar's track ends), the speaker
releases its device and the microphone is stopped with it.
"""

from __future__ import annotations

import time

import av
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from .echo import EchoCanceller
from .levels import frame_rms
from .sources import MicrophoneSource
from .speaker import SpeakerSink

__all__ = ["CleanedSource", "LocalVoice"]


class CleanedSource(MediaStreamTrack):
    """A microphone track with the speaker's echo cancelled (and a VAD on the result).

    ``threshold`` (RMS, full scale 1) for ``min_speech`` seconds is the user talking:
    :attr:`user_speaking` turns true and the monotonic time joins :attr:`onsets`.
    """

    kind = "audio"

    def __init__(
        self,
        source: MediaStreamTrack,
        canceller: EchoCanceller | None,
        *,
        threshold: float = 0.02,
        min_speech: float = 0.2,
        hangover: float = 0.5,
    ) -> None:
        super().__init__()
        self.source = source
        self.canceller = canceller
        self.threshold = threshold
        self.min_speech = min_speech
        self.hangover = hangover
        self.user_speaking = False
        self.onsets: list[float] = []
        self._loud = 0.0
        self._quiet = 0.0

    async def recv(self) -> av.AudioFrame:
        frame = await self.source.recv()
        if not isinstance(frame, av.AudioFrame):  # a pre-encoded source: nothing to clean
            raise MediaStreamError("CleanedSource needs a PCM source")
        if self.canceller is not None:
            frame = self.canceller.near(frame)
        self._decide(frame_rms(frame), frame.samples / (frame.sample_rate or 48000))
        return frame

    def _decide(self, rms: float, seconds: float) -> None:
        loud = rms >= self.threshold
        if not self.user_speaking:
            self._loud = self._loud + seconds if loud else 0.0
            if self._loud >= self.min_speech:
                self.user_speaking, self._quiet = True, 0.0
                self.onsets.append(time.monotonic())
            return
        self._quiet = 0.0 if loud else self._quiet + seconds
        if self._quiet >= self.hangover:
            self.user_speaking, self._loud = False, 0.0

    def stop(self) -> None:
        self.source.stop()
        super().stop()


class LocalVoice:
    """Microphone in, speaker out, the echo cancelled between them.

    ``session = AvatarSession(url, token, audio=voice.microphone)``, then, once connected,
    ``await voice.start(session.avatar_audio)``; ``await voice.stop()`` (or ``async with``)
    releases both devices. ``microphone``: an audio track to use instead of the default
    input device (a test's source). Device failures carry the public device codes.
    """

    def __init__(
        self,
        *,
        input: int | str | None = None,
        output: int | str | None = None,
        echo_cancellation: bool = True,
        microphone: MediaStreamTrack | None = None,
    ) -> None:
        self.canceller = EchoCanceller() if echo_cancellation else None
        self.speaker = SpeakerSink(output, canceller=self.canceller)
        source = microphone if microphone is not None else MicrophoneSource(input)
        self.microphone = CleanedSource(source, self.canceller)
        self.speaker.on_released = self.microphone.stop

    async def start(self, avatar_audio: MediaStreamTrack | None) -> None:
        """Open the speaker and play ``avatar_audio`` (``session.avatar_audio``) on it."""
        await self.speaker.start(avatar_audio)

    async def stop(self) -> None:
        await self.speaker.stop()
        self.microphone.stop()

    async def __aenter__(self) -> LocalVoice:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
