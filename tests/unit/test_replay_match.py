"""The replay's matcher (pure): outbound events against recorded ones, and a redacted
cassette's placeholders bound to the user's own texts (issue 33, item 8: the user's code,
which sends its real text where the cassette holds ``user-text-1``)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from avatar_sdk import AvatarError, ErrorCode
from avatar_sdk.cassette.format import Cassette, Record
from avatar_sdk.testing.core.replay_match import UserTexts, find_match
from avatar_sdk.testing.replay import ReplayServer
from avatar_sdk.wire import Out


def turn(index: int, text: str, link: int = 0) -> Record:
    payload = {"text": text, "isFinal": True}
    return Record(
        index, 0.1 * index, "out", {"link": link, "name": Out.TEXT_ENTERED, "payload": payload}
    )


def sent(text: str) -> dict[str, Any]:
    return {"text": text, "isFinal": True}


def test_texts_of_a_cassette_with_content_are_compared_as_they_are() -> None:
    texts = UserTexts(redacted=False)
    assert texts.bindings("user-text-1", "hello") is None
    assert texts.bindings("hello", "hello") == {}
    assert texts.bindings(None, None) == {}


def test_a_placeholder_is_bound_to_the_first_text_sent_in_its_place() -> None:
    texts = UserTexts(redacted=True)
    assert texts.bindings("user-text-1", "What can you do?") == {"user-text-1": "What can you do?"}
    texts.bound.update(texts.bindings("user-text-1", "What can you do?") or {})
    assert texts.bindings("user-text-1", "What can you do?") == {}
    assert texts.bindings("user-text-1", "Something else") is None  # bound already
    # one placeholder per text: another placeholder cannot take a text bound already
    assert texts.bindings("user-text-2", "What can you do?") is None
    assert texts.bindings("user-text-2", "Thanks!") == {"user-text-2": "Thanks!"}
    # a placeholder inside a longer string, the literal parts compared as they are
    assert texts.bindings("You said: user-text-1", "You said: What can you do?") == {}
    assert texts.bindings("You said: user-text-1", "You asked: What can you do?") is None
    # a placeholder twice in one string is one text
    assert texts.bindings("user-text-3 / user-text-3", "a / a") == {"user-text-3": "a"}
    assert texts.bindings("user-text-3 / user-text-3", "a / b") is None


def test_the_server_answers_with_the_users_text_where_the_recording_had_its_placeholder() -> None:
    long = "x" * 70
    texts = UserTexts(redacted=True, bound={"user-text-1": "hi", "user-text-10": long})
    payload = {
        "text": "You said: user-text-1",
        "speechId": "SaFV-transcript-user-text-10",
        "chunks": ["user-text-10", "user-text-2"],  # user-text-2: not bound, left as it is
        "n": 3,
    }
    assert texts.restore(payload) == {
        "text": "You said: hi",
        "speechId": f"SaFV-transcript-{long[:60]}",  # a speechId carries 60 characters
        "chunks": [long, "user-text-2"],
        "n": 3,
    }
    assert UserTexts(redacted=True).restore(payload) is payload  # nothing bound: untouched


def test_a_match_names_its_record_and_the_bindings_it_would_make() -> None:
    texts = UserTexts(redacted=True)
    waiting = [turn(4, "user-text-1"), turn(5, "user-text-2", link=1)]
    found = find_match(waiting, Out.TEXT_ENTERED, sent("hello"), 0, texts)
    assert found is not None
    record, bindings = found
    assert record.index == 4 and bindings == {"user-text-1": "hello"}
    assert texts.bound == {}  # the caller takes the match, then the bindings
    # on another link, the record of that link
    found = find_match(waiting, Out.TEXT_ENTERED, sent("hello"), 1, texts)
    assert found is not None and found[0].index == 5
    # another event, or a marker where a turn was recorded: no match
    assert find_match(waiting, Out.JOIN, {}, 0, texts) is None
    marker = {"text": "", "isFinal": False, "isSpeechStart": True}
    assert find_match(waiting, Out.TEXT_ENTERED, marker, 0, texts) is None


def test_the_replay_server_is_driven_by_the_recorded_calls_or_by_the_users_code() -> None:
    header = {"kind": "cassette", "version": 1, "session": {"media": False, "video": False}}
    tape = Cassette(
        header, [turn(0, "user-text-1"), Record(1, 0.2, "call", {"name": "speak"})], True
    )
    with pytest.raises(AvatarError) as caught:
        ReplayServer(tape, drive="app")  # type: ignore[arg-type]
    assert caught.value.code == ErrorCode.INVALID_ARGUMENT
    server = ReplayServer(tape, drive="user")
    assert [r.kind for r in server.steps] == ["out"]  # no recorded call to make
    assert server.texts.redacted  # recorded without content (the default)
    assert [r.kind for r in ReplayServer(tape).steps] == ["out", "call"]
    options = server.session_options()
    assert (options["media"], options["video"], options["allow_insecure_transport"]) == (
        False, False, True,
    )  # fmt: skip
    assert options["config"].handle_signals is False
    with pytest.raises(AvatarError) as caught:
        asyncio.run(server.replay())
    assert caught.value.code == ErrorCode.INVALID_STATE
