"""Replay where the user's code drives (issue 33, item 8): the recorded backend answers the
session the application opens itself, event by event as recorded, and reports the first
point where the application did something the recording did not. Over real sockets: a
session recorded against the staging backend (user text redacted, as in the field), then
the application's own code against ``ReplayServer(cassette, drive="user")``."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path
from typing import Any

import pytest

from avatar_sdk import AvatarError, AvatarSession, ErrorCode
from avatar_sdk.cassette import load
from avatar_sdk.testing import ReplayResult, ReplayServer, StagingServer
from avatar_sdk.wire import Out

from .conftest import FAST

pytest_plugins = ["pytester"]

#: Each recorded client step is waited for this long before the replay reports it missing.
ANSWER = 4.0
CONFIG = FAST.with_(overall_connect_timeout=10.0, turn_confirm_timeout=0.1)
QUESTIONS = ["What can you do?", "Thanks!"]
TURN = f"-> {Out.TEXT_ENTERED}"


async def qa_app(session: AvatarSession, questions: list[str]) -> list[str]:
    """The application under test: asks each question, keeps each spoken answer."""
    return [(await session.ask(question, timeout=15)).text for question in questions]


async def record(staging: StagingServer, path: Path, *, content: bool = False) -> list[str]:
    session = AvatarSession(
        staging.url, staging.token, genie_url=staging.genie_url, media=False,
        allow_insecure_transport=True, config=CONFIG, record=path, record_content=content,
    )  # fmt: skip
    async with session:
        return await qa_app(session, QUESTIONS)


@pytest.fixture
async def field(staging: StagingServer, tmp_path: Path) -> tuple[Path, list[str]]:
    path = tmp_path / "field.jsonl"
    answers = await record(staging, path)
    assert answers == [f"You said: {q}" for q in QUESTIONS]
    assert '"user-text-1"' in path.read_text()  # redacted, as recorded in the field
    return path, answers


@pytest.fixture
async def field_with_content(staging: StagingServer, tmp_path: Path) -> Path:
    path = tmp_path / "field-content.jsonl"
    await record(staging, path, content=True)
    return path


def turn_records(path: Path) -> list[Any]:
    """The recorded typed turns (not the barge-in markers)."""
    return [
        r
        for r in load(path).records
        if r.kind == "out" and r.name == Out.TEXT_ENTERED and r.data["payload"].get("text")
    ]


async def replay_app(
    path: Path, questions: list[str]
) -> tuple[list[str] | AvatarError, list[dict[str, Any]], ReplayResult]:
    """The application's own session against the replay of ``path``: its answers (or the
    error it got), the ``session_error`` events it saw, and the verdict. Bounded: a
    divergence must not leave the application waiting."""
    async with ReplayServer(path, drive="user", answer_timeout=ANSWER) as backend:
        session = AvatarSession(backend.url, backend.token, **backend.session_options())
        errors: list[dict[str, Any]] = []
        session.on("session_error", lambda e: errors.append(e.data))
        outcome: list[str] | AvatarError
        try:
            async with asyncio.timeout(ANSWER + 10), session:
                outcome = await qa_app(session, questions)
        except AvatarError as exc:
            outcome = exc
        result = await backend.verdict()
        assert backend.calls.empty()  # no recorded call is handed to a runner in this mode
    return outcome, errors, result


def assert_divergence(result: ReplayResult, index: int, expected: str, got: str) -> None:
    assert result.divergence is not None, "the replay was the same"
    assert (result.divergence.index, result.divergence.expected, result.divergence.got) == (
        index, expected, got,
    )  # fmt: skip


def assert_ended_by_the_divergence(
    outcome: list[str] | AvatarError, errors: list[dict[str, Any]], result: ReplayResult
) -> None:
    """The client is told, and its pending call fails with a classified error."""
    assert isinstance(outcome, AvatarError) and outcome.code == ErrorCode.SERVER_ENDED
    assert [e["code"] for e in errors] == ["REPLAY_DIVERGED"]
    assert str(result.divergence) in errors[0]["message"]


async def test_the_same_application_code_replays_the_same(
    field: tuple[Path, list[str]],
) -> None:
    path, answers = field
    outcome, errors, result = await replay_app(path, QUESTIONS)
    assert result.same, str(result)
    assert result.matched == result.steps > 10
    # the server answers as it did, with the user's own text where the cassette has its
    # placeholder (the reply is matched to its question by the text its speechId carries)
    assert outcome == answers
    assert errors == []


async def test_a_different_question_diverges_at_that_turn_and_ends_the_session(
    field_with_content: Path,
) -> None:
    path = field_with_content
    second = turn_records(path)[1]
    outcome, errors, result = await replay_app(path, [QUESTIONS[0], "Something else"])
    expected, got = f"{TURN} text='Thanks!'", f"{TURN} text='Something else'"
    assert_divergence(result, second.index, expected, got)
    assert f"record {second.index}" in str(result)
    assert_ended_by_the_divergence(outcome, errors, result)


async def test_in_a_redacted_cassette_a_question_asked_again_diverges(
    field: tuple[Path, list[str]],
) -> None:
    """Without content, each placeholder is bound to the first text sent in its place: a
    new question is not told from the recorded one, the first one asked again is."""
    path, _ = field
    second = turn_records(path)[1]
    outcome, errors, result = await replay_app(path, [QUESTIONS[0], QUESTIONS[0]])
    expected, got = f"{TURN} text='user-text-2'", f"{TURN} text={QUESTIONS[0]!r}"
    assert_divergence(result, second.index, expected, got)
    assert_ended_by_the_divergence(outcome, errors, result)


async def test_a_turn_missing_when_the_client_closed_is_the_divergence(
    field: tuple[Path, list[str]],
) -> None:
    path, _ = field
    marker = turn_records(path)[1].index - 1  # the second turn's barge-in marker, first
    outcome, _, result = await replay_app(path, QUESTIONS[:1])
    assert outcome == [f"You said: {QUESTIONS[0]}"]
    assert_divergence(result, marker, f"{TURN} text=''", "socket closed (client disconnect)")


async def test_a_question_more_than_recorded_is_a_divergence_at_the_close(
    field: tuple[Path, list[str]],
) -> None:
    path, _ = field
    close = [r for r in load(path).records if r.kind == "drop"][-1]
    outcome, errors, result = await replay_app(path, [*QUESTIONS, "One more thing"])
    # ask() waits for the avatar to finish saying the last answer, which the recording,
    # closed first, does not have: nothing came instead of the close
    expected, got = "socket closed (io client disconnect)", f"no close within {ANSWER:g} s"
    assert_divergence(result, close.index, expected, got)
    assert_ended_by_the_divergence(outcome, errors, result)


async def test_what_the_app_does_past_the_end_of_a_cut_cassette_is_a_divergence(
    field: tuple[Path, list[str]], tmp_path: Path
) -> None:
    """A cassette cut short (the process died after the first answer): the app's second
    question is past the end of the recording."""
    path, _ = field
    marker = turn_records(path)[1].index - 1
    cut = tmp_path / "cut.jsonl"
    cut.write_text("".join(path.read_text().splitlines(keepends=True)[: marker + 1]))
    assert not load(cut).complete and len(load(cut).records) == marker
    outcome, errors, result = await replay_app(cut, QUESTIONS)
    assert_divergence(result, marker, "the end of the recording", f"{TURN} text=''")
    assert_ended_by_the_divergence(outcome, errors, result)


async def test_no_application_at_all_is_a_divergence_within_the_answer_timeout(
    field: tuple[Path, list[str]],
) -> None:
    path, _ = field
    async with ReplayServer(path, drive="user", answer_timeout=0.5) as backend:
        result = await backend.verdict()
    assert result.divergence is not None
    assert result.divergence.expected.startswith("socket opened (new")
    assert result.divergence.got == "no connection within 0.5 s"


INI = "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"


def test_the_recorded_backend_fixture_fails_a_diverging_app(
    pytester: pytest.Pytester, field_file: Path
) -> None:
    pytester.makeini(INI)
    pytester.makepyfile(
        test_user=textwrap.dedent(
            f"""
            from avatar_sdk import AvatarSession

            CASSETTE = {str(field_file)!r}

            async def app(backend, questions):
                session = AvatarSession(backend.url, backend.token, **backend.session_options())
                async with session:
                    for question in questions:
                        await session.ask(question, timeout=15)

            async def test_same(recorded_backend):
                await app(await recorded_backend(CASSETTE, answer_timeout=4), {QUESTIONS!r})

            async def test_diverges(recorded_backend):
                backend = await recorded_backend(CASSETTE, answer_timeout=4)
                await app(backend, {QUESTIONS[:1]!r})

            async def test_reads_its_own_verdict(recorded_backend):
                backend = await recorded_backend(CASSETTE, answer_timeout=4)
                await app(backend, {QUESTIONS[:1]!r})
                assert not (await backend.verdict()).same
            """
        )
    )
    result = pytester.runpytest("-p", "no:randomly", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, errors=1)  # the call passed, its teardown failed
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_diverges*",
            "*the application diverged from the recording: first divergence at record *"
            "expected -> onTextEntered text=''; got socket closed (client disconnect)*",
        ]
    )  # fmt: skip


@pytest.fixture
def field_file(tmp_path: Path) -> Path:
    """The field session recorded in a loop of its own (the pytester run starts its own)."""
    path = tmp_path / "field-for-pytester.jsonl"

    async def main() -> None:
        async with StagingServer() as staging:
            await record(staging, path)

    asyncio.run(main())
    return path
