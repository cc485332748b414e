"""Energy-based utterance detection on the decoded ASR uplink (``staging.brain.listen``).

The staging backend cannot recognise words, but it can tell a burst of sound from silence,
which is enough to drive the voice-turn path with real audio: a burst at least
``min_speech`` seconds long whose frames reach ``threshold`` (RMS, full scale 1.0) is the
user talking (the server's VAD onset, ``userStartedTalking``); ``silence`` seconds below
the threshold after it end the utterance, which the backend then "transcribes" with the
next scripted transcript. Shorter bursts (a click, a cough) are ignored. Pure: fed frame
levels and durations, no clock of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["ListenConfig", "UtteranceDetector"]

Verdict = Literal["onset", "utterance"]


@dataclass(frozen=True, slots=True)
class ListenConfig:
    """How a burst of uplink audio counts as an utterance (seconds, RMS full scale 1.0)."""

    threshold: float = 0.02
    min_speech: float = 0.25
    silence: float = 0.6

    def __post_init__(self) -> None:
        if not (0.0 < self.threshold < 1.0) or self.min_speech <= 0 or self.silence <= 0:
            raise ValueError("threshold must be in (0, 1); min_speech and silence positive")


class UtteranceDetector:
    """Onset and end of utterances in a stream of frame levels (see the module docstring)."""

    def __init__(self, config: ListenConfig) -> None:
        self.config = config
        self.speaking = False
        self._voiced = 0.0
        self._quiet = 0.0

    def feed(self, rms: float, seconds: float) -> Verdict | None:
        """One decoded frame of ``seconds`` at level ``rms``: ``"onset"`` when the user
        has been loud for ``min_speech``, ``"utterance"`` when they then stayed quiet for
        ``silence``, else None."""
        loud = rms >= self.config.threshold
        if not self.speaking:
            self._voiced = self._voiced + seconds if loud else 0.0
            if self._voiced >= self.config.min_speech:
                self.speaking, self._quiet = True, 0.0
                return "onset"
            return None
        self._quiet = 0.0 if loud else self._quiet + seconds
        if self._quiet >= self.config.silence:
            self.speaking, self._voiced = False, 0.0
            return "utterance"
        return None
