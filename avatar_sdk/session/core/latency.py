"""The latency vocabulary: each figure of a turn defined once, and the playout rule.

Pure: no I/O, no clock of its own (every fact arrives with its time). The same names and
the same definitions are used by :class:`~avatar_sdk.session.core.reply_match.Reply`, the
``turn_latency`` event, the OpenTelemetry spans and metrics (``avatar.turn.<name>``), the
fleet report (``<name>_s`` without ``_latency``) and ``avatar-sdk talk --json`` (which prints
the event). ``docs/latency.md`` draws them on one timeline.

Every figure is seconds on the session's clock from the turn's **origin**:

* a typed turn (``speak()``, ``ask()``): the moment it was written to the socket;
* a spoken turn (the user talking into the uplink): the end of the user's speech as the SDK
  found it on the frames it sends (:mod:`avatar_sdk.transport.rtc.core.speech_end`).

From there:

``text_latency``
    the first spoken text of the answer (``agent_text`` with ``spoken``).
``audio_latency``
    the first audible avatar audio frame of the answer handed to the application (pushed
    onto ``session.avatar_audio``; media sessions). For a spoken turn this is
    **voice-to-voice**, also reported under that name (``voice_to_voice``).
``generated_latency``
    the avatar finished generating the answer (its ``agent_turn_ended``); it may still be
    talking, and its voice may still be on its way.
``played_latency``
    the avatar's voice finished playing: the last audible frame of the answer handed to the
    application, plus the playout delay of a :class:`PlayoutClock` when one is set (a
    speaker sink). None where no playout exists (``media=False``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Protocol, runtime_checkable

__all__ = [
    "AUDIO",
    "FIGURES",
    "GENERATED",
    "PLAYED",
    "TEXT",
    "VOICE_TO_VOICE",
    "PlayoutClock",
    "PlayoutEnd",
]

TEXT: Final = "text_latency"
AUDIO: Final = "audio_latency"
GENERATED: Final = "generated_latency"
PLAYED: Final = "played_latency"
#: A spoken turn's ``audio_latency``: the end of the user's speech to the avatar's voice.
VOICE_TO_VOICE: Final = "voice_to_voice"
#: The figures of every turn, in timeline order.
FIGURES: Final = (TEXT, AUDIO, GENERATED, PLAYED)


@runtime_checkable
class PlayoutClock(Protocol):
    """What plays the avatar's voice, when it is more than the application reading frames
    (a speaker sink with its own buffer): how late a frame handed to the application now is
    heard. ``played_latency`` adds it to the time of the answer's last audible frame."""

    def playout_delay(self) -> float:
        """Seconds from a frame handed to the application to it being heard (>= 0)."""
        ...


@dataclass(slots=True)
class PlayoutEnd:
    """When the answer's voice finished playing on this side.

    Fed every avatar audio frame's level while it listens, and told when the server said
    the avatar stopped talking (:meth:`said`). The media path lags the control channel, so
    the voice goes on here after that: the end is the last audible frame before ``quiet``
    quiet frames in a row *after* the server's end, and a pause between two sentences
    (quiet frames before it) is not the end. :meth:`give_up` closes it when frames stop
    coming (the end is the last audible frame heard, if any).
    """

    threshold: float
    quiet: int
    last_audible: float | None = None
    said_at: float | None = None
    at: float | None = None
    closed: bool = False
    _run: int = 0

    @property
    def done(self) -> bool:
        """The end is known (``at``: None when the voice was never heard)."""
        return self.closed

    def feed(self, level: float, at: float) -> bool:
        """One frame's RMS level at ``at``; True when this frame ends the playout."""
        if self.done:
            return False
        if level > self.threshold:
            self.last_audible, self._run = at, 0
            return False
        self._run += 1
        if self.said_at is not None and self._run >= self.quiet:
            self.at, self.closed = self.last_audible, True
            return True
        return False

    def said(self, at: float) -> None:
        """The server said the avatar stopped talking (or it had nothing to say)."""
        if self.said_at is None:
            self.said_at = at
            self._run = 0  # quiet frames before the server's end do not count

    def give_up(self) -> None:
        """No more frames will be read for it: the last audible frame is the end."""
        if not self.closed:
            self.at, self.closed = self.last_audible, True
