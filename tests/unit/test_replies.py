"""Reply matching (pure, :mod:`avatar_sdk.session.core.reply_match`) and the speech handles built on
it (:mod:`avatar_sdk.session.replies`, under a fake clock and a fake event bus): which agent
turn answers which user turn, and when the avatar has the floor."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from avatar_sdk.clock import FakeClock
from avatar_sdk.errors import AvatarError, ErrorCode
from avatar_sdk.events.bus import Event
from avatar_sdk.session.core.reply_match import TALK_START_GRACE, Floor, Onset, ReplyMatch
from avatar_sdk.session.core.turns import TRUNCATED_PAYLOAD, speech_id_answers
from avatar_sdk.session.replies import Replies
from avatar_sdk.wire import make_speech_id

GREETING = make_speech_id("approved-permissions", nonce="aB3d")
HELLO = make_speech_id("transcript", "Hello?", nonce="xY9z")
HELLO_AGAIN = make_speech_id("transcript", "Hello?", nonce="Qw12")
OTHER = make_speech_id("transcript", "Something else", nonce="zz99")


def turn(
    speech_id: str | None, turn_id: str, words: list[str], *, at: float
) -> list[tuple[str, dict[str, Any], float]]:
    """The public events of one spoken agent turn, from ``at``, 0.1 s apart."""
    ids = {"speech_id": speech_id, "turn_id": turn_id}

    def text(kind: str, content: str, spoken: bool) -> tuple[str, dict[str, Any]]:
        return ("agent_text", {**ids, "type": kind, "content": content, "spoken": spoken})

    events: list[tuple[str, dict[str, Any]]] = [
        ("agent_speech_started", {**ids, "is_new_turn": True}),
        text("think", "", False),
        text("tool", "x {}", False),
        *[text("avatar", w, True) for w in words],
        ("agent_talking", {"talking": True}),
        ("agent_turn_ended", ids),
        ("agent_talking", {"talking": False}),
    ]
    return [(name, data, at + 0.1 * i) for i, (name, data) in enumerate(events)]


def feed(target: ReplyMatch | Floor, events: list[tuple[str, dict[str, Any], float]]) -> None:
    for name, data, at in events:
        target.feed(name, data, at)


# -- the ids ----------------------------------------------------------------------------------
def test_a_speech_id_answers_the_turn_whose_text_it_carries() -> None:
    assert speech_id_answers(HELLO, "Hello?") is True
    assert speech_id_answers(HELLO, "  hello? ") is True  # normalised as the ledger does
    assert speech_id_answers(OTHER, "Hello?") is False
    assert speech_id_answers(GREETING, "Hello?") is False
    assert speech_id_answers(None, "Hello?") is None
    assert speech_id_answers("no known form", "Hello?") is None
    long = "word " * 40
    cut = make_speech_id("transcript", long[:TRUNCATED_PAYLOAD], nonce="Cut1")
    assert speech_id_answers(cut, long) is True  # cut short by the server
    short = make_speech_id("transcript", "word", nonce="Cut2")
    assert speech_id_answers(short, long) is False  # too short to be a cut


# -- ReplyMatch ------------------------------------------------------------------------------
def test_the_reply_is_the_turn_that_carries_its_speech_id_not_the_greeting() -> None:
    match = ReplyMatch()
    feed(match, turn(GREETING, "t1", ["Hi ", "there"], at=0.0))  # before the send: ignored
    match.sent("Hello?", at=1.0)
    feed(match, turn(GREETING, "t1b", ["Greeting ", "again"], at=1.1))  # not ours either
    feed(match, turn(HELLO, "t2", ["You ", "said: ", "Hello?"], at=2.0))
    reply = match.snapshot(waited=0.5)
    assert reply.text == "You said: Hello?"  # spoken segments only
    assert reply.speech_id == HELLO and reply.turn_ids == ("t2",)
    assert reply.sent_at == 1.0 and reply.waited == 0.5
    assert reply.text_latency == pytest.approx(1.3)
    assert reply.generated_latency == pytest.approx(1.7)
    assert match.said_at == pytest.approx(2.8)  # the server's end of saying it: not a figure
    assert reply.played_latency is None  # no playout here (the session's frames decide it)
    assert reply.ended and match.said and not reply.interrupted and not reply.resent


def test_a_late_answer_to_an_earlier_turn_with_the_same_words_is_not_the_reply() -> None:
    match = ReplyMatch(stale={HELLO})  # seen before this turn was registered
    match.sent("Hello?", at=1.0)
    feed(match, turn(HELLO, "t1", ["old"], at=1.1))
    assert not match.adopted
    feed(match, turn(HELLO_AGAIN, "t2", ["new"], at=2.0))
    assert match.snapshot().text == "new"


def test_another_users_turn_is_not_the_reply_and_a_backend_without_ids_is_matched() -> None:
    match = ReplyMatch()
    match.sent("Hello?", at=0.0)
    feed(match, turn(OTHER, "t1", ["no"], at=0.1))
    assert not match.adopted
    bare = ReplyMatch()
    bare.sent("Hello?", at=0.0)
    feed(bare, turn(None, "t9", ["yes"], at=0.1))  # no speech ids at all: nothing else
    assert bare.snapshot().text == "yes" and bare.snapshot().turn_ids == ("t9",)


def test_an_interruption_is_reported_with_its_cause() -> None:
    match = ReplyMatch()
    match.sent("Hello?", at=0.0)
    feed(match, turn(HELLO, "t1", ["You said"], at=0.1)[:5])  # talking, not ended
    match.note_user("speak")
    match.feed("agent_interrupted", {}, 1.0)
    match.feed("agent_talking", {"talking": False}, 1.1)
    reply = match.snapshot()
    assert reply.interrupted and reply.interrupted_by == "speak"
    assert match.said and not reply.ended
    quiet = ReplyMatch()
    quiet.sent("Hello?", at=0.0)
    feed(quiet, turn(HELLO, "t1", ["You said"], at=0.1)[:5])
    quiet.feed("agent_interrupted", {}, 1.0)
    assert quiet.snapshot().interrupted_by == "server"
    superseded = ReplyMatch()
    superseded.sent("Hello?", at=0.0)
    feed(superseded, turn(HELLO, "t1", ["You said"], at=0.1)[:5])
    superseded.feed("agent_speech_started", {"speech_id": GREETING, "is_new_turn": True}, 1.0)
    assert superseded.snapshot().interrupted_by == "superseded"


def test_a_renewal_cut_ends_the_saying_of_a_generated_reply_and_only_that() -> None:
    """A renewal's swap retires the server session still saying the reply: no event will
    end its saying, so the cut does (at its time, by ``"renewal"``)."""
    match = ReplyMatch()
    match.sent("Hello?", at=0.0)
    feed(match, turn(HELLO, "t1", ["You said"], at=0.1)[:6])  # ended, still being said
    assert not match.said
    match.cut("renewal", 2.0)
    reply = match.snapshot()
    assert match.said_at == 2.0 and reply.interrupted_by == "renewal"
    match.feed("agent_talking", {"talking": False}, 3.0)  # a late event changes nothing
    assert match.said_at == 2.0
    whole = ReplyMatch()
    whole.sent("Hello?", at=0.0)
    feed(whole, turn(HELLO, "t1", ["You said"], at=0.1))  # said to its end before the cut
    whole.cut("renewal", 2.0)
    assert whole.snapshot().interrupted_by is None and whole.said_at == pytest.approx(0.7)
    unanswered = ReplyMatch()
    unanswered.sent("Hello?", at=0.0)
    unanswered.cut("renewal", 2.0)  # nothing began: it is resent, not cut
    assert not unanswered.said


def test_a_resent_turns_reply_replaces_what_began_before() -> None:
    match = ReplyMatch()
    match.sent("Hello?", at=0.0)
    feed(match, turn(HELLO, "t1", ["partial"], at=0.1)[:4])
    match.restart()
    match.sent("Hello?", at=5.0)
    feed(match, turn(HELLO, "t1", ["partial"], at=5.1))  # the old speech again: stale now
    assert not match.adopted
    feed(match, turn(HELLO_AGAIN, "t2", ["whole"], at=6.0))
    reply = match.snapshot()
    assert reply.text == "whole" and reply.resent and reply.turn_ids == ("t2",)
    assert reply.text_latency == pytest.approx(1.3)  # from the resend


def test_a_continuation_adds_its_turn_id() -> None:
    match = ReplyMatch()
    match.sent("Hello?", at=0.0)
    feed(match, turn(HELLO, "t1", ["a"], at=0.1)[:4])
    match.feed(
        "agent_speech_started", {"speech_id": HELLO, "turn_id": "t1x", "is_new_turn": False}, 1
    )
    assert match.turn_ids == ["t1", "t1x"]


def test_onset_needs_quiet_before_audible() -> None:
    onset = Onset(0.01)
    assert onset.feed(0.5, 1.0) is False  # audible at once: the voice before, still playing
    assert onset.feed(0.0, 1.1) is False
    assert onset.feed(0.5, 1.2) is True and onset.at == 1.2
    assert onset.feed(0.5, 1.3) is False


# -- Floor -----------------------------------------------------------------------------------
def test_the_floor_is_held_until_the_turn_is_said() -> None:
    floor = Floor()
    assert not floor.busy(0.0)
    events = turn(GREETING, "t1", ["Hi"], at=0.0)
    for name, data, at in events[:-1]:
        floor.feed(name, data, at)
        assert floor.busy(at), name
    floor.feed(*events[-1])
    assert not floor.busy(events[-1][2])


def test_a_said_turn_that_never_reports_talking_frees_the_floor_after_a_grace() -> None:
    floor = Floor()
    feed(floor, [e for e in turn(HELLO, "t1", ["Hi"], at=0.0) if e[0] != "agent_talking"])
    ended = floor.ended_at
    assert ended is not None
    assert floor.busy(ended) and floor.recheck_in(ended) == pytest.approx(TALK_START_GRACE)
    assert not floor.busy(ended + TALK_START_GRACE)
    silent = Floor()  # a turn with nothing to say frees it at its end
    silent.feed("agent_speech_started", {"speech_id": HELLO, "is_new_turn": True}, 0.0)
    silent.feed("agent_turn_ended", {"speech_id": HELLO}, 0.1)
    assert not silent.busy(0.1)


# -- handles under a fake clock --------------------------------------------------------------
class FakeBus:
    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.callbacks: dict[str, list[Callable[[Event], None]]] = {}

    def on(self, name: str, callback: Callable[[Event], None]) -> None:
        self.callbacks.setdefault(name, []).append(callback)

    def emit(self, name: str, data: dict[str, Any]) -> None:
        event = Event(name, data, self.clock.monotonic())
        for callback in self.callbacks.get(name, []):
            callback(event)

    def play(self, events: list[tuple[str, dict[str, Any], float]]) -> None:
        for name, data, _ in events:
            self.emit(name, data)


async def test_a_handles_reply_and_playout_resolve_on_its_own_events() -> None:
    clock = FakeClock()
    bus = FakeBus(clock)
    replies = Replies(clock=clock, on=bus.on)
    bus.play(turn(GREETING, "t0", ["Hi"], at=0))
    handle = replies.register("Hello?", media=False)
    waiting = asyncio.ensure_future(handle.reply(timeout=5))
    handle._on_sent("Hello?")
    handle._resolve_sent(None)
    await clock.advance(0.5)
    events = turn(HELLO, "t1", ["You said"], at=0)
    bus.play(events[:-1])
    reply = await asyncio.wait_for(waiting, 1)
    assert reply.text == "You said" and reply.generated_latency == pytest.approx(0.5)
    assert handle.turn_id == "t1" and not handle.done()
    playing = asyncio.ensure_future(handle.wait_for_playout(timeout=5))
    await clock.advance(0.2)
    bus.play(events[-1:])
    played = await asyncio.wait_for(playing, 1)
    # media=False: said to its end (0.7 s), and no playout to time
    assert played.played_latency is None and handle.done()
    assert handle._match.said_at == pytest.approx(clock.monotonic())


async def test_a_handle_times_out_on_the_session_clock_and_fails_with_the_end() -> None:
    clock = FakeClock()
    bus = FakeBus(clock)
    replies = Replies(clock=clock, on=bus.on)
    handle = replies.register("Hello?", media=False)
    handle._on_sent("Hello?")
    handle._resolve_sent(None)
    waiting = asyncio.ensure_future(handle.reply(timeout=2))
    await clock.advance(1.9)
    assert not waiting.done()
    await clock.advance(0.2)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(waiting, 1)
    ending = asyncio.ensure_future(handle.reply(timeout=None))
    floor = asyncio.ensure_future(replies.until_free(clock.monotonic() + 60, lambda: False))
    await asyncio.sleep(0)
    replies.fail_all(AvatarError(ErrorCode.SERVER_ENDED, "conversation_ended"))
    for waiter in (ending, floor):
        with pytest.raises(AvatarError) as raised:
            await asyncio.wait_for(waiter, 1)
        assert raised.value.code is ErrorCode.SERVER_ENDED


async def test_the_floor_wait_ends_with_the_talking_grace_on_the_fake_clock() -> None:
    clock = FakeClock()
    bus = FakeBus(clock)
    replies = Replies(clock=clock, on=bus.on)
    bus.play([e for e in turn(HELLO, "t1", ["Hi"], at=0) if e[0] != "agent_talking"])
    waiting = asyncio.ensure_future(replies.until_free(clock.monotonic() + 60, lambda: True))
    await clock.advance(TALK_START_GRACE / 2)
    assert not waiting.done()
    await clock.advance(TALK_START_GRACE)
    await asyncio.wait_for(waiting, 1)
    late = asyncio.ensure_future(replies.until_free(clock.monotonic() + 1, lambda: False))
    await clock.advance(1.1)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(late, 1)
