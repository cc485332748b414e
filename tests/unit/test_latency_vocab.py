"""The latency vocabulary (issue 30): the playout rule and the end-of-speech rule (pure,
fed by hand), and the figures a session's replies report, under a fake clock, on a reply's
frames: ``played_latency`` from the last audible frame handed to the application, a spoken
turn's ``voice_to_voice``, and the ``turn_latency`` event carrying the ``Reply``'s values."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import av
import numpy as np
import pytest

from avatar_sdk.clock import FakeClock
from avatar_sdk.events.bus import Event
from avatar_sdk.events.names import PAYLOADS, EventName
from avatar_sdk.fleet.measure import LATENCIES
from avatar_sdk.session.core import latency
from avatar_sdk.session.core.latency import PlayoutEnd
from avatar_sdk.session.core.speech_end import HANGOVER, SpeechEnd
from avatar_sdk.session.replies import QUIET_FRAMES, Replies
from avatar_sdk.session.user_speech import UserSpeech
from avatar_sdk.telemetry import names as n
from avatar_sdk.wire import make_speech_id

HELLO = make_speech_id("transcript", "Hello?", nonce="xY9z")
VOICE = make_speech_id("transcript", "what I said", nonce="Vo1c")
FRAME = 0.02


# -- the rules ---------------------------------------------------------------------------------
def test_the_names_are_one_vocabulary_everywhere() -> None:
    keys = PAYLOADS[EventName.TURN_LATENCY].__required_keys__
    assert {*latency.FIGURES, latency.VOICE_TO_VOICE} <= keys
    assert set(n.TURN_FIGURES) == {*latency.FIGURES, latency.VOICE_TO_VOICE}
    assert all(n.TURN_FIGURES[f] == f"avatar.turn.{f}" for f in n.TURN_FIGURES)
    assert all(n.TURN_FIGURES[f] in n.HISTOGRAMS for f in n.TURN_FIGURES)
    fleet = {f.removesuffix("_latency") for f in (*latency.FIGURES, latency.VOICE_TO_VOICE)}
    assert fleet <= set(LATENCIES)


def test_the_playout_ends_at_the_last_audible_frame_after_the_servers_end() -> None:
    rule = PlayoutEnd(threshold=0.01, quiet=3)
    levels = [0.2, 0.2, 0.0, 0.0, 0.0, 0.0, 0.2, 0.2]  # a pause between two sentences
    for i, level in enumerate(levels):
        assert not rule.feed(level, i * FRAME)
    assert not rule.done  # the server has not said it stopped: a pause is not the end
    rule.said(8 * FRAME)
    assert not rule.feed(0.2, 8 * FRAME)  # the media path lags: its voice goes on here
    assert not rule.feed(0.0, 9 * FRAME)
    assert not rule.feed(0.0, 10 * FRAME)
    assert rule.feed(0.0, 11 * FRAME)
    assert rule.done and rule.at == pytest.approx(8 * FRAME)


def test_a_playout_given_up_keeps_the_last_audible_frame_or_none() -> None:
    heard = PlayoutEnd(threshold=0.01, quiet=3)
    heard.feed(0.3, 1.0)
    heard.give_up()
    assert heard.done and heard.at == 1.0
    never = PlayoutEnd(threshold=0.01, quiet=3)
    never.give_up()
    assert never.done and never.at is None


def test_speech_ends_at_its_last_voiced_frame_after_the_hangover() -> None:
    rule = SpeechEnd()
    t = 0.0
    changes: list[tuple[str, float]] = []

    def run(level: float, seconds: float) -> None:
        nonlocal t
        for _ in range(round(seconds / FRAME)):
            change = rule.feed(level, t, FRAME)
            if change is not None:
                changes.append((change, t))
            t += FRAME

    run(0.3, 0.04)  # a click: too short to be speech
    run(0.0, 0.2)
    assert changes == []
    run(0.3, 0.5)  # speech from 0.24 s
    run(0.0, 0.3)  # a pause between words, shorter than the hangover
    run(0.3, 0.4)  # more words; the last voiced frame is handed over at 1.42 s
    run(0.0, 1.0)
    assert [c for c, _ in changes] == ["started", "ended"]
    assert rule.last_voiced == pytest.approx(1.42)
    assert changes[1][1] == pytest.approx(1.42 + HANGOVER, abs=FRAME)  # found a hangover late
    assert rule.duration == pytest.approx(1.42 - 0.24)


def test_the_rule_fails_when_the_hangover_is_ignored() -> None:
    """The check above has teeth: without a hangover, a pause between words ends speech."""
    rule = SpeechEnd(hangover=FRAME)
    ends = 0
    for i, level in enumerate([0.3] * 10 + [0.0] * 5 + [0.3] * 10 + [0.0] * 50):
        ends += rule.feed(level, i * FRAME, FRAME) == "ended"
    assert ends == 2


# -- replies under a fake clock ----------------------------------------------------------------
class FakeBus:
    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.callbacks: dict[str, list[Callable[[Event], None]]] = {}
        self.emitted: list[Event] = []

    def on(self, name: str, callback: Callable[[Event], None]) -> None:
        self.callbacks.setdefault(name, []).append(callback)

    def emit(self, name: str, data: dict[str, Any]) -> None:
        event = Event(name, data, self.clock.monotonic())
        self.emitted.append(event)
        for callback in self.callbacks.get(name, []):
            callback(event)

    def named(self, name: str) -> list[dict[str, Any]]:
        return [e.data for e in self.emitted if e.name == name]


class FakeAudio:
    """What ``Replies`` reads the avatar's voice from (``FanoutTrack``'s tap)."""

    on_frame: Callable[[Any], None] | None = None
    tap_wants: Callable[[], bool] | None = None


def frame(level: float) -> av.AudioFrame:
    samples = np.full((1, 960), round(level * 32767), dtype=np.int16)
    out = av.AudioFrame.from_ndarray(samples, format="s16", layout="mono")
    out.sample_rate = 48000
    return out


async def frames(clock: FakeClock, audio: FakeAudio, level: float, count: int) -> None:
    for _ in range(count):
        assert audio.on_frame is not None
        audio.on_frame(frame(level))
        await clock.advance(FRAME)


def answer(bus: FakeBus, speech_id: str, turn_id: str, words: str) -> None:
    ids = {"speech_id": speech_id, "turn_id": turn_id}
    bus.emit("agent_speech_started", {**ids, "is_new_turn": True})
    bus.emit("agent_text", {**ids, "type": "avatar", "content": words, "spoken": True})
    bus.emit("agent_talking", {"talking": True})


async def test_a_played_reply_reports_one_set_of_figures_on_the_reply_and_the_event() -> None:
    clock = FakeClock()
    bus = FakeBus(clock)
    audio = FakeAudio()
    replies = Replies(clock=clock, on=bus.on, audio=audio, emit=bus.emit)
    handle = replies.register("Hello?", media=True)
    handle._on_sent("Hello?")
    handle._resolve_sent(None)
    playing = asyncio.ensure_future(handle.wait_for_playout(timeout=5))
    await frames(clock, audio, 0.0, 2)  # quiet: t = 0.04
    answer(bus, HELLO, "t1", "You said")  # text at 0.04
    await frames(clock, audio, 0.0, 3)  # the voice lags the control channel
    await frames(clock, audio, 0.3, 5)  # heard from 0.10, handed over until 0.18
    bus.emit("agent_turn_ended", {"speech_id": HELLO, "turn_id": "t1"})  # 0.20
    await frames(clock, audio, 0.3, 5)  # its voice goes on here: last audible at 0.28
    bus.emit("agent_talking", {"talking": False})  # 0.30: the server said it all
    assert not playing.done()
    await frames(clock, audio, 0.3, 2)  # still arriving: last audible at 0.32
    await frames(clock, audio, 0.0, QUIET_FRAMES)
    reply = await asyncio.wait_for(playing, 1)
    assert reply.text_latency == pytest.approx(0.04)
    assert reply.audio_latency == pytest.approx(0.10)
    assert reply.generated_latency == pytest.approx(0.20)
    assert reply.played_latency == pytest.approx(0.32)
    assert reply.played and handle.done()
    [event] = bus.named("turn_latency")
    assert event == {
        "source": "speak",
        "speech_id": HELLO,
        "text_latency": reply.text_latency,
        "audio_latency": reply.audio_latency,
        "generated_latency": reply.generated_latency,
        "played_latency": reply.played_latency,
        "voice_to_voice": None,
        "interrupted": False,
    }
    with pytest.warns(DeprecationWarning, match="generated_latency"):
        assert reply.end_latency == reply.generated_latency  # the old name, deprecated


async def test_a_playout_clock_adds_its_delay_to_played() -> None:
    class Sink:
        def playout_delay(self) -> float:
            return 0.15

    clock = FakeClock()
    bus = FakeBus(clock)
    audio = FakeAudio()
    replies = Replies(clock=clock, on=bus.on, audio=audio, emit=bus.emit)
    replies.playout_clock = Sink()
    handle = replies.register("Hello?", media=True)
    handle._on_sent("Hello?")
    handle._resolve_sent(None)
    await frames(clock, audio, 0.0, 1)
    answer(bus, HELLO, "t1", "Hi")
    await frames(clock, audio, 0.3, 3)  # last audible at 0.06
    bus.emit("agent_turn_ended", {"speech_id": HELLO, "turn_id": "t1"})
    bus.emit("agent_talking", {"talking": False})
    await frames(clock, audio, 0.0, QUIET_FRAMES)
    reply = await asyncio.wait_for(handle.wait_for_playout(timeout=1), 1)
    assert reply.played_latency == pytest.approx(0.06 + 0.15)


async def test_a_spoken_turn_reports_voice_to_voice_from_the_end_of_speech() -> None:
    clock = FakeClock()
    bus = FakeBus(clock)
    audio = FakeAudio()
    replies = Replies(clock=clock, on=bus.on, audio=audio, emit=bus.emit)
    speech = UserSpeech(clock=clock, replies=replies)
    for _ in range(25):  # half a second of speech, then silence
        speech.frame(0.3, FRAME)
        await clock.advance(FRAME)
    ended_at = clock.monotonic() - FRAME  # the last voiced frame's hand-off
    for _ in range(round(HANGOVER / FRAME)):
        speech.frame(0.0, FRAME)
        audio.on_frame(frame(0.0))  # type: ignore[misc]
        await clock.advance(FRAME)
    [found] = bus.named("user_speech_ended")
    assert found["duration"] == pytest.approx(0.48)
    assert found["detected_after"] == pytest.approx(HANGOVER, abs=FRAME)
    answer(bus, VOICE, "v1", "I heard you")
    await frames(clock, audio, 0.0, 2)
    heard_at = clock.monotonic()
    await frames(clock, audio, 0.3, 4)
    bus.emit("agent_turn_ended", {"speech_id": VOICE, "turn_id": "v1"})
    bus.emit("agent_talking", {"talking": False})
    await frames(clock, audio, 0.0, QUIET_FRAMES)
    [event] = bus.named("turn_latency")
    assert event["source"] == "voice" and event["speech_id"] == VOICE
    assert event["voice_to_voice"] == pytest.approx(heard_at - ended_at)
    assert event["audio_latency"] == event["voice_to_voice"]
    assert event["played_latency"] == pytest.approx(heard_at + 3 * FRAME - ended_at)


async def test_a_pause_in_the_users_speech_is_not_a_spoken_turn() -> None:
    clock = FakeClock()
    bus = FakeBus(clock)
    audio = FakeAudio()
    replies = Replies(clock=clock, on=bus.on, audio=audio, emit=bus.emit)
    replies.user_speech_ended(0.0, 1.0)
    replies.user_speech_started()  # they went on talking before any answer began
    answer(bus, VOICE, "v1", "I heard you")
    await frames(clock, audio, 0.0, 2)
    await frames(clock, audio, 0.3, 2)
    bus.emit("agent_turn_ended", {"speech_id": VOICE, "turn_id": "v1"})
    bus.emit("agent_talking", {"talking": False})
    await frames(clock, audio, 0.0, QUIET_FRAMES)
    assert bus.named("turn_latency") == []


async def test_a_reply_with_nothing_to_say_is_played_once_said_and_stops_listening() -> None:
    clock = FakeClock()
    bus = FakeBus(clock)
    audio = FakeAudio()
    replies = Replies(clock=clock, on=bus.on, audio=audio, emit=bus.emit)
    handle = replies.register("Hello?", media=True)
    handle._on_sent("Hello?")
    handle._resolve_sent(None)
    await clock.advance(0.1)
    ids = {"speech_id": HELLO, "turn_id": "t1"}
    bus.emit("agent_speech_started", {**ids, "is_new_turn": True})
    bus.emit("agent_text", {**ids, "type": "tool", "content": "x {}", "spoken": False})
    bus.emit("agent_turn_ended", ids)
    [event] = bus.named("turn_latency")
    assert event["generated_latency"] == event["played_latency"] == pytest.approx(0.1)
    assert handle.done() and not handle._listening()
    assert audio.tap_wants is not None and not audio.tap_wants()  # the voice is not decoded
