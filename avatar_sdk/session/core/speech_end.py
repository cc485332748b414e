"""Where the user's speech ends, on the frames the SDK sends: an energy rule with hangover.

Pure: fed each uplink frame's RMS level and the time it was handed to the uplink; no clock
of its own. Voice-to-voice counts from the end this finds (``docs/latency.md``).

The rule, as voice apps without a model use it:

* a frame is **voiced** when its RMS is above :data:`VOICED_RMS` (full scale 1.0; a quiet
  room's microphone sits well below it, speech well above);
* speech **starts** after :data:`START_SPEECH` seconds of voiced frames in a row (a click
  or a cough is not speech);
* speech **ends** at the last voiced frame, once :data:`HANGOVER` seconds of unvoiced
  frames followed it (a pause between words is not the end). The end is reported then,
  ``HANGOVER`` late, but stamped with the last voiced frame's time: the figure does not
  include the hangover.

A model (webrtcvad, Silero) would tell speech from loud noise better; this rule needs no
native wheel or model download, and on the frames the SDK itself produces or forwards
(synthetic sources, files, a microphone in a quiet room) it finds the same end.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

__all__ = ["HANGOVER", "START_SPEECH", "VOICED_RMS", "SpeechEnd"]

#: A frame louder than this RMS is voiced (the avatar side's "audible" threshold, doubled:
#: a microphone's noise floor is higher than a decoder's silence).
VOICED_RMS: Final = 0.02
#: Voiced audio in a row that makes speech, seconds.
START_SPEECH: Final = 0.06
#: Unvoiced audio after the last voiced frame that ends speech, seconds.
HANGOVER: Final = 0.5


@dataclass(slots=True)
class SpeechEnd:
    """The energy rule with hangover (module docstring), one frame at a time."""

    threshold: float = VOICED_RMS
    start: float = START_SPEECH
    hangover: float = HANGOVER
    #: Whether the user is speaking (started, not yet ended).
    speaking: bool = False
    #: When the current speech began (its first voiced frame), and its last voiced frame.
    began_at: float | None = None
    last_voiced: float | None = None
    _run: float = 0.0  # voiced seconds in a row, before speech starts
    _run_from: float | None = None
    _quiet: float = 0.0  # unvoiced seconds since the last voiced frame

    def feed(self, level: float, at: float, duration: float) -> Literal["started", "ended"] | None:
        """One frame of ``duration`` seconds, handed to the uplink at ``at``: ``"started"``
        when speech starts with it, ``"ended"`` when it completes the hangover (then
        :attr:`last_voiced` is the end of speech), else None."""
        voiced = level > self.threshold
        if not self.speaking:
            if not voiced:
                self._run, self._run_from = 0.0, None
                return None
            if self._run_from is None:
                self._run_from = at
            self._run += duration
            self.last_voiced = at
            if self._run + 1e-9 >= self.start:
                self.speaking, self.began_at, self._quiet = True, self._run_from, 0.0
                self._run, self._run_from = 0.0, None
                return "started"
            return None
        if voiced:
            self.last_voiced, self._quiet = at, 0.0
            return None
        self._quiet += duration
        if self._quiet + 1e-9 >= self.hangover:
            self.speaking = False
            return "ended"
        return None

    @property
    def duration(self) -> float:
        """The last speech's length, first voiced frame to last (seconds)."""
        if self.began_at is None or self.last_voiced is None:
            return 0.0
        return max(0.0, self.last_voiced - self.began_at)
