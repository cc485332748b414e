"""The user's speech on the uplink: where it starts and ends, told to the replies.

The I/O glue around :mod:`avatar_sdk.session.core.speech_end`: the uplink track hands
each PCM frame's level to :meth:`UserSpeech.frame` as it sends it; the rule finds the end
of speech, stamped on the session's clock, and :class:`~.replies.Replies` makes it a spoken
turn whose figures count from there (``voice_to_voice``).
"""

from __future__ import annotations

from ..clock import Clock
from .core.speech_end import SpeechEnd
from .replies import Replies

__all__ = ["UserSpeech"]


class UserSpeech:
    """One session's end-of-speech detection on the frames it sends."""

    def __init__(self, *, clock: Clock, replies: Replies, rule: SpeechEnd | None = None) -> None:
        self._clock = clock
        self._replies = replies
        self.rule = rule if rule is not None else SpeechEnd()

    def frame(self, level: float, duration: float) -> None:
        """One frame handed to the uplink now (``UplinkTrack(on_level=...)``)."""
        change = self.rule.feed(level, self._clock.monotonic(), duration)
        if change == "started":
            self._replies.user_speech_started()
        elif change == "ended" and self.rule.last_voiced is not None:
            self._replies.user_speech_ended(self.rule.last_voiced, self.rule.duration)
