"""The downlink's video rule (transport/liveness/video_stall.py) under the project's fake clock."""

from __future__ import annotations

from avatar_sdk.clock import FakeClock
from avatar_sdk.config import SessionConfig
from avatar_sdk.transport.liveness.video_stall import VideoAction, VideoStallRule

STALL = 3.0
WAIT = 2.0
AUDIO = 2.0
TICK = 0.1


class Feed:
    """A downlink's frame stamps on a fake clock, judged every watchdog tick."""

    def __init__(self, *, video: bool = True) -> None:
        self.clock = FakeClock()
        self.rule = VideoStallRule(stall=STALL, keyframe_wait=WAIT, audio_stall=AUDIO)
        self.video = video
        self.since = self.clock.monotonic()
        self.last_video: float | None = self.since
        self.last_audio: float | None = self.since
        self.actions: list[tuple[float, VideoAction]] = []

    async def run(self, seconds: float, *, video: bool, audio: bool) -> None:
        """``seconds`` of ticks; a frame of each kind that flows arrives every tick."""
        end = self.clock.monotonic() + seconds
        while self.clock.monotonic() < end - 1e-9:
            await self.clock.advance(TICK)
            now = self.clock.monotonic()
            if video:
                self.last_video = now
            if audio:
                self.last_audio = now
            action = self.rule.judge(
                now,
                video=self.video,
                last_video=self.last_video,
                last_audio=self.last_audio,
                since=self.since,
            )
            if action is not None:
                self.actions.append((now - self.since, action))


async def test_video_stops_while_the_voice_flows_keyframe_first_then_resubscribe() -> None:
    feed = Feed()
    await feed.run(5.0, video=True, audio=True)
    frozen = feed.clock.monotonic() - feed.since
    await feed.run(20.0, video=False, audio=True)
    assert [a for _, a in feed.actions] == [VideoAction.KEYFRAME, VideoAction.RESUBSCRIBE]
    (keyframe_at, _), (resubscribe_at, _) = feed.actions
    assert STALL < keyframe_at - frozen <= STALL + TICK + 1e-6
    assert WAIT < resubscribe_at - keyframe_at <= WAIT + TICK + 1e-6
    assert feed.rule.keyframes == 1
    assert "no video for" in feed.rule.reason(feed.clock.monotonic())


async def test_never_while_video_flows() -> None:
    feed = Feed()
    await feed.run(600.0, video=True, audio=True)
    assert feed.actions == []
    # Gaps shorter than the stall (a burst of loss) never ask for anything either.
    for _ in range(50):
        await feed.run(STALL - 0.5, video=False, audio=True)
        await feed.run(0.2, video=True, audio=True)
    assert feed.actions == []


async def test_never_for_an_audio_only_session() -> None:
    feed = Feed(video=False)
    feed.last_video = None  # no video track at all
    await feed.run(60.0, video=False, audio=True)
    assert feed.actions == []


async def test_never_while_the_voice_is_dead_too() -> None:
    """Both silent: the downlink's own rule ("no media for media_stall_timeout") judges."""
    feed = Feed()
    await feed.run(2.0, video=True, audio=True)
    await feed.run(60.0, video=False, audio=False)
    assert feed.actions == []


async def test_the_voice_dying_after_the_keyframe_request_stops_the_rule() -> None:
    feed = Feed()
    feed.rule = VideoStallRule(stall=STALL, keyframe_wait=AUDIO + 3.0, audio_stall=AUDIO)
    await feed.run(STALL + 0.5, video=False, audio=True)  # asked for a keyframe
    await feed.run(60.0, video=False, audio=False)
    assert [a for _, a in feed.actions] == [VideoAction.KEYFRAME]


async def test_a_keyframe_that_brings_the_video_back_resets_the_rule() -> None:
    feed = Feed()
    await feed.run(STALL + 0.5, video=False, audio=True)
    assert [a for _, a in feed.actions] == [VideoAction.KEYFRAME]
    await feed.run(1.0, video=True, audio=True)  # the keyframe came: video again
    assert feed.rule.keyframe_at is None and not feed.rule.resubscribe_asked
    feed.actions.clear()
    await feed.run(STALL + WAIT + 1.0, video=False, audio=True)  # a later stall: both steps
    assert [a for _, a in feed.actions] == [VideoAction.KEYFRAME, VideoAction.RESUBSCRIBE]


async def test_silence_counts_from_when_the_watchdog_began_watching() -> None:
    """A link's video from before it was judged (connecting, recovering) is no stall."""
    feed = Feed()
    feed.last_video = feed.since - 100.0
    await feed.run(STALL - 0.2, video=False, audio=True)
    assert feed.actions == []
    await feed.run(0.4, video=False, audio=True)
    assert [a for _, a in feed.actions] == [VideoAction.KEYFRAME]


async def test_the_resubscribe_is_asked_once_per_stall() -> None:
    feed = Feed()
    await feed.run(STALL + WAIT + 60.0, video=False, audio=True)
    assert [a for _, a in feed.actions] == [VideoAction.KEYFRAME, VideoAction.RESUBSCRIBE]


async def test_zero_disables_the_rule() -> None:
    feed = Feed()
    feed.rule = VideoStallRule(stall=0.0, keyframe_wait=WAIT, audio_stall=AUDIO)
    await feed.run(60.0, video=False, audio=True)
    assert feed.actions == []


def test_defaults_bound_a_freeze_to_a_few_seconds() -> None:
    config = SessionConfig()
    assert config.video_stall_timeout == 3.0 and config.video_keyframe_wait == 2.0
    # Above the downlink's own rule (a lossy burst is not a freeze), far below the 6-21 s
    # freezes the network lab measured.
    assert config.video_stall_timeout > config.media_stall_timeout
    assert config.video_stall_timeout + config.video_keyframe_wait < 6.0
