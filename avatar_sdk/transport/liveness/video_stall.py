"""The downlink's video rule: video that stops while the voice goes on (pure).

The downlink's liveness rule (``MediaLanes.down_channels``: "no media for
``media_stall_timeout``") counts any frame, the voice included. After heavy loss the
network lab saw the video stop and stay frozen 6-21 s while the voice went on
(``docs/netlab.md``): the rule never fired, and nothing else asked for the picture back.

This rule watches the video alone, for a session that receives video:

1. No new video frame (assembled from RTP, decoded or not: :mod:`.video_demand`) for
   ``stall`` seconds while the voice still arrives: ask the sender for a keyframe (an RTCP
   PLI; a decoder stuck on a lost reference picture resumes at the next keyframe).
2. Still no video ``keyframe_wait`` seconds after that request: re-subscribe (the media
   tier's WHEP recovery, so the state machine decides, as for any dead channel).

It says nothing while the voice is dead too (``audio_stall`` without a voice frame: the
whole downlink is silent, which the existing rule judges), nor for an audio-only session,
nor when ``stall`` is 0 (disabled). Silence counts only from ``since`` (when the watchdog
began judging this link), never from before it. One rule per subscription: a new one
(after a re-subscribe) starts with no request made.

Times are passed in (the session's monotonic clock, read by the watchdog), so the rule is
tested under a fake clock without sleeping.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["VideoAction", "VideoStallRule"]


class VideoAction(Enum):
    """What the rule asks for at one look."""

    KEYFRAME = "keyframe"
    RESUBSCRIBE = "resubscribe"


def _age(now: float, *marks: float | None) -> float | None:
    known = [m for m in marks if m is not None]
    return now - max(known) if known else None


class VideoStallRule:
    """The video of one downlink subscription: when to ask for a keyframe, when to give up."""

    def __init__(self, *, stall: float, keyframe_wait: float, audio_stall: float) -> None:
        self.stall = max(0.0, stall)
        self.keyframe_wait = max(0.0, keyframe_wait)
        self.audio_stall = max(0.0, audio_stall)
        #: When the keyframe was asked for in the current stall (None: not asked).
        self.keyframe_at: float | None = None
        #: Whether the re-subscribe was asked for in the current stall (once per stall).
        self.resubscribe_asked = False
        #: Seconds without video at the last look (None: no verdict possible).
        self.silence: float | None = None
        self.keyframes = 0  # keyframe requests made on this subscription

    def _reset(self) -> None:
        self.keyframe_at = None
        self.resubscribe_asked = False

    def judge(
        self,
        now: float,
        *,
        video: bool,
        last_video: float | None,
        last_audio: float | None,
        since: float | None,
    ) -> VideoAction | None:
        """Look once at ``now``: ``last_video`` / ``last_audio`` are when the last video
        frame was assembled and the last voice frame decoded (None: none yet), ``since`` when
        the watchdog began judging this link. Returns what to do now, at most once per step
        of a stall (a keyframe request, then a re-subscribe)."""
        self.silence = None
        if not video or self.stall <= 0:
            self._reset()
            return None
        silent = _age(now, last_video, since)
        voice = _age(now, last_audio, since)
        if silent is None or voice is None:
            return None
        self.silence = silent
        if silent <= self.stall:
            self._reset()  # video flows: a later stall starts from the first step again
            return None
        if last_audio is None or voice > self.audio_stall:
            return None  # the voice is gone too: the downlink's own rule judges that
        if self.keyframe_at is None:
            self.keyframe_at = now
            self.keyframes += 1
            return VideoAction.KEYFRAME
        if not self.resubscribe_asked and now - self.keyframe_at > self.keyframe_wait:
            self.resubscribe_asked = True
            return VideoAction.RESUBSCRIBE
        return None

    def reason(self, now: float) -> str:
        """Why a re-subscribe was asked for (the ``media_recovering`` event's reason)."""
        asked = now - self.keyframe_at if self.keyframe_at is not None else 0.0
        return (
            f"no video for {self.silence or 0.0:.1f}s while the voice flows"
            f" (a keyframe asked for {asked:.1f}s ago)"
        )
