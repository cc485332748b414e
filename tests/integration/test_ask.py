"""``session.ask()``: the reply to *that* turn (issue 18, item 1), over real sockets.

First the defect it exists for: the obvious loop (``expect("agent_turn_ended")`` →
``speak()`` → await) takes the greeting's end for the first answer and cuts each real answer
with the next question. Then ``ask()``: each answer matches its own question, the greeting
and a reply still playing are waited out, a session ending under it raises a classified
error, a timeout is a timeout, and across a socket drop the resent turn's reply is the reply,
once. The staging brain answers an unscripted turn ``You said: <text>``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from avatar_sdk import AvatarError, AvatarSession, ErrorCode, Event, Reply, SpeechHandle
from avatar_sdk.testing import StagingServer
from avatar_sdk.testing.staging.conversation import Conversation

from .conftest import FAST, HANG_GUARD, SessionFactory, until

QUESTIONS = ["What can you do?", "Where are you?", "Thanks!"]
#: A greeting long enough to still be playing when ``connect()`` returns.
LONG_GREETING = " ".join(["Hello and welcome to the staging avatar, I am glad you came."] * 3)


def answers(questions: list[str]) -> list[str]:
    return [f"You said: {q}" for q in questions]


def record(session: AvatarSession, name: str) -> list[Event]:
    seen: list[Event] = []
    session.on(name, seen.append)
    return seen


async def test_the_naive_loop_takes_the_greeting_for_the_first_answer(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    """Why ``ask()`` exists: written the obvious way, the answers do not match the
    questions (the greeting's words come back as the first answer, each real answer is cut
    by the next question), and nothing says so."""
    staging.brain.greeting = LONG_GREETING
    session = make_session()
    got: list[str] = []
    words: list[str] = []
    session.on(
        "agent_text", lambda e: words.append(e.data["content"]) if e.data["spoken"] else None
    )
    interrupted = record(session, "agent_interrupted")
    async with session:
        for question in QUESTIONS:
            words.clear()
            answered = session.expect("agent_turn_ended", timeout=10)
            await session.speak(question)
            await answered
            got.append("".join(words).strip())
    assert got[0] == LONG_GREETING  # the greeting's end was taken for the first answer
    assert got != answers(QUESTIONS)
    assert interrupted  # and the avatar was cut short by the next question


async def test_three_questions_asked_get_three_answers_each_its_own(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    staging.brain.greeting = LONG_GREETING
    session = make_session()
    interrupted = record(session, "agent_interrupted")
    async with session:
        conv = staging.conversations[staging.live_sids[0]]
        replies = [await session.ask(q, timeout=10) for q in QUESTIONS]
    assert [r.text for r in replies] == answers(QUESTIONS)
    assert [r.question for r in replies] == QUESTIONS
    assert all(isinstance(r, Reply) and r.ended and not r.interrupted for r in replies)
    assert all(not r.resent for r in replies)
    assert all(r.speech_id and QUESTIONS[i] in r.speech_id for i, r in enumerate(replies))
    assert all(len(r.turn_ids) == 1 for r in replies)
    assert len({r.turn_ids for r in replies}) == 3
    for r in replies:
        assert r.text_latency is not None and r.generated_latency is not None
        assert 0 <= r.text_latency <= r.generated_latency
        assert r.audio_latency is None  # media=False
    assert replies[0].waited > 0  # it waited for the greeting
    assert interrupted == []  # no question cut an answer short
    assert conv.user_turns == QUESTIONS and conv.dropped_turns == []


async def test_ask_during_the_greeting_waits_for_it_to_be_said(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    staging.brain.greeting = LONG_GREETING
    session = make_session()
    talking = record(session, "agent_talking")
    await session.connect()
    assert not any(e.data["talking"] is False for e in talking)  # the greeting is not said yet
    reply = await session.ask("Are you done?", timeout=10)
    assert reply.text == "You said: Are you done?"
    greeting_said = next(e for e in talking if e.data["talking"] is False)
    assert greeting_said.at <= reply.sent_at
    assert reply.waited >= greeting_said.at - (reply.sent_at - reply.waited) - 1e-9


async def test_ask_while_a_reply_is_still_playing_waits_for_its_end(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = make_session(config=FAST.with_(wait_for_greeting=True))
    interrupted = record(session, "agent_interrupted")
    talking = record(session, "agent_talking")
    async with session:
        staging.brain.reply(LONG_GREETING)  # a reply that takes a while to say
        first = session.speak("Tell me a story")
        assert isinstance(first, SpeechHandle)
        story = await first.reply(timeout=10)
        assert story.ended and not story.played  # its turn ended; the avatar still talks
        reply = await session.ask("And then?", timeout=10)
        played = await first.wait_for_playout(timeout=HANG_GUARD)
    assert story.text == LONG_GREETING
    assert reply.text == "You said: And then?"
    assert reply.waited > 0
    # said to its end (wait_for_playout returned); media=False has no playout to time
    assert played.played_latency is None and not played.interrupted
    said = [e for e in talking if e.data["talking"] is False]
    assert said[-2].at <= reply.sent_at  # the story was said to its end before
    assert interrupted == []


async def test_a_plain_speak_after_ask_marks_the_reply_interrupted(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = make_session(config=FAST.with_(wait_for_greeting=True))
    async with session:
        staging.brain.reply(LONG_GREETING)
        first = session.speak("Tell me a story")
        await first.reply(timeout=10)
        await session.speak("Stop!")  # a barge-in on the story being said
        cut = await first.wait_for_playout(timeout=HANG_GUARD)
    assert cut.interrupted and cut.interrupted_by == "speak"


@pytest.mark.parametrize("end", ["close", "server_end", "agent_crash"])
async def test_a_session_ending_under_an_ask_raises_its_code_at_once(
    staging: StagingServer, make_session: SessionFactory, end: str
) -> None:
    session = make_session(config=FAST.with_(wait_for_greeting=True, brain_stall_timeout=0))
    await session.connect()
    staging.brain.stall(30)  # the question is taken, never answered in time
    asking = asyncio.ensure_future(session.ask("Anyone?", timeout=60))
    conv = staging.conversations[staging.live_sids[0]]
    assert await until(lambda: conv.user_turns == ["Anyone?"], HANG_GUARD)
    if end == "close":
        await session.close()
    elif end == "server_end":
        await staging.faults.end_conversation()
    else:
        await staging.faults.agent_crash(recoverable=False)
    with pytest.raises(AvatarError) as raised:
        await asyncio.wait_for(asking, HANG_GUARD)
    expected = {
        "close": ErrorCode.CLOSED,
        "server_end": ErrorCode.SERVER_ENDED,
        "agent_crash": ErrorCode.AGENT_CRASHED,
    }[end]
    assert raised.value.code is expected
    with pytest.raises(AvatarError) as again:
        await session.ask("Still?", timeout=1)  # and a new one is refused at once
    assert again.value.code is ErrorCode.INVALID_STATE


async def test_an_unanswered_ask_times_out(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = make_session(config=FAST.with_(wait_for_greeting=True, brain_stall_timeout=0))
    async with session:
        staging.brain.stall(30)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(session.ask("Hello?", timeout=0.3), HANG_GUARD)
        assert session.state == "connected"


async def test_ask_refuses_bad_input_at_once(make_session: SessionFactory) -> None:
    session = make_session()
    with pytest.raises(AvatarError) as not_yet:
        await session.ask("before connect")
    assert not_yet.value.code is ErrorCode.INVALID_STATE
    async with session:
        for text, timeout in (("", 1.0), ("ok", 0), ("ok", -1.0), ("ok", True)):
            with pytest.raises(AvatarError) as bad:
                await session.ask(text, timeout=timeout)  # type: ignore[arg-type]
            assert bad.value.code is ErrorCode.INVALID_ARGUMENT


@pytest.mark.parametrize("tier", ["socket", "cold"])
async def test_an_ask_across_a_socket_drop_returns_the_resent_turns_reply_once(
    staging: StagingServer, make_session: SessionFactory, tier: str
) -> None:
    session = make_session(config=FAST.with_(wait_for_greeting=True, turn_confirm_timeout=0.1))
    texts = record(session, "agent_text")
    async with session:
        old = staging.conversations[staging.live_sids[0]]
        old.agent_down = True  # the turn is taken in and never answered: unconfirmed
        resent = session.expect("turn_resent", timeout=10)
        asking = asyncio.ensure_future(session.ask("Did you get this?", timeout=20))
        assert await until(lambda: old.dropped_turns == ["Did you get this?"], HANG_GUARD)
        old.agent_down = False
        # socket: recovered in place; cold: a new server session, greeting first; then resent
        assert await staging.faults.drop_socket(recovery=tier == "socket") == 1
        assert (await resent).data == {"text": "Did you get this?", "tier": tier}
        reply = await asyncio.wait_for(asking, HANG_GUARD)
        conv = staging.conversations[staging.live_sids[0]]
    assert reply.text == "You said: Did you get this?"  # once, not twice
    assert reply.resent and reply.ended and not reply.interrupted
    assert (conv is old) is (tier == "socket")
    assert conv.user_turns == ["Did you get this?"]
    ours = [e for e in texts if e.data["speech_id"] == reply.speech_id and e.data["spoken"]]
    assert "".join(e.data["content"] for e in ours).strip() == reply.text


async def test_connect_can_return_after_the_greeting(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    staging.brain.greeting = LONG_GREETING
    session = make_session()
    talking = record(session, "agent_talking")
    await session.connect(wait_for_greeting=True)
    assert [e.data["talking"] for e in talking] == [True, False]  # said, to its end
    assert not staging.conversations[staging.live_sids[0]].uninterruptible


async def test_connect_waiting_for_a_greeting_that_never_comes_returns(
    staging: StagingServer, make_session: SessionFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent that does not greet: no greeting begins within ``agent_timeout`` (FAST:
    0.5 s) of the approval, and ``connect()`` returns; a first ask is answered at once."""
    original = Conversation.start_turn

    def no_greeting(self: Conversation, trigger: str, user_text: str, **kw: Any) -> None:
        if trigger != "approved-permissions":
            original(self, trigger, user_text, **kw)

    monkeypatch.setattr(Conversation, "start_turn", no_greeting)
    session = make_session(config=FAST.with_(wait_for_greeting=True, greeting_timeout=30))
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with session:
        assert loop.time() - started < HANG_GUARD
        reply = await session.ask("Hello?", timeout=5)
    assert reply.text == "You said: Hello?"


async def test_a_media_ask_times_the_avatars_voice(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = make_session(
        media=True, video=False, config=FAST.with_(wait_for_greeting=True, agent_timeout=5)
    )
    async with session:
        replies = [await session.ask(q, timeout=15) for q in QUESTIONS[:2]]
    assert [r.text for r in replies] == answers(QUESTIONS[:2])
    for r in replies:
        assert r.audio_latency is not None and r.text_latency is not None
        assert r.generated_latency is not None


async def test_awaiting_speak_works_as_it_always_did(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    """``await session.speak(x)`` returns once the turn was written and raises as before;
    what ``speak()`` returns is a handle, awaitable wherever a coroutine was."""
    session = make_session()
    with pytest.raises(AvatarError) as early:
        session.speak("before connect")  # refused at the call, as the await did before
    assert early.value.code is ErrorCode.INVALID_STATE
    async with session:
        conv = staging.conversations[staging.live_sids[0]]
        with pytest.raises(AvatarError) as empty:
            await session.speak("   ")
        assert empty.value.code is ErrorCode.INVALID_ARGUMENT
        handle = session.speak("held through the greeting")
        assert not handle.is_sent
        assert await handle is handle and handle.is_sent
        assert await until(lambda: conv.user_turns == ["held through the greeting"], HANG_GUARD)
        await asyncio.wait_for(session.speak("via wait_for"), HANG_GUARD)
        await asyncio.gather(session.speak("one"), session.speak("two"))
        await asyncio.ensure_future(session.speak("three"))
        assert await until(lambda: len(conv.user_turns) == 5, HANG_GUARD)
        assert conv.user_turns[1:] == ["via wait_for", "one", "two", "three"]  # call order


async def test_asks_at_once_take_turns(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = make_session(config=FAST.with_(wait_for_greeting=True))
    interrupted = record(session, "agent_interrupted")
    async with session:
        replies = await asyncio.gather(*(session.ask(q, timeout=15) for q in QUESTIONS))
    assert [r.text for r in replies] == answers(QUESTIONS)
    assert interrupted == []
    assert replies[1].sent_at >= replies[0].sent_at + replies[0].generated_latency  # one at a time
