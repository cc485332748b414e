"""A field failure as a failing test of your own code: record the session where it happened
(``AvatarSession(..., record=path)``), then run your application's own code against a
backend that answers as the field one did: the ``recorded_backend`` fixture. The backend
answers your session event by event as recorded; if your code does something the recording
does not (another question, a turn fewer, one more), the session is ended at that point and
the test fails, naming the cassette record, what was expected and what your code did.

Run: ``pip install 'avatar-sdk[testing]'`` then ``pytest examples/test_replay_my_app.py``.
So that this file runs as is, the "field" session is recorded against the embedded staging
backend first; with a cassette from the field, check it in and hand its path to the fixture.
Here the bot is ``qa_bot.converse``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import pytest_asyncio
from qa_bot import converse

from avatar_sdk import AvatarSession
from avatar_sdk.testing import ReplayServer, StagingServer

pytestmark = pytest.mark.asyncio

QUESTIONS = ["What can you do?", "Thanks!"]
RecordedBackend = Callable[..., Awaitable[ReplayServer]]


@pytest_asyncio.fixture
async def cassette(staging: StagingServer, tmp_path: Path) -> Path:
    """The field session: the bot's conversation, recorded (the user's text is kept out of
    the file by default: each becomes a placeholder, which the replay binds to the texts
    your code sends)."""
    path = tmp_path / "session-42.jsonl"
    session = AvatarSession(
        staging.url, staging.token, genie_url=staging.genie_url, media=False,
        allow_insecure_transport=True,  # the staging backend is plain http on loopback
        record=path,
    )  # fmt: skip
    async with session:
        await converse(session, QUESTIONS)
    return path


async def test_the_bot_does_what_it_did_in_the_field(
    recorded_backend: RecordedBackend, cassette: Path
) -> None:
    backend = await recorded_backend(cassette)
    # your own session, built as recorded (media, video, configuration) against the backend
    async with AvatarSession(backend.url, backend.token, **backend.session_options()) as session:
        answers = await converse(session, QUESTIONS)
    assert answers == ["You said: What can you do?", "You said: Thanks!"]
    # after the test, the fixture fails it if the bot did anything the recording did not


async def test_a_bot_that_stops_early_is_caught(
    recorded_backend: RecordedBackend, cassette: Path
) -> None:
    backend = await recorded_backend(cassette, answer_timeout=3)
    async with AvatarSession(backend.url, backend.token, **backend.session_options()) as session:
        await converse(session, QUESTIONS[:1])  # the second question is never asked
    result = await backend.verdict()  # read here: this test expects the divergence
    assert not result.same
    print(result)  # first divergence at record N (t=...): expected -> onTextEntered ...
    assert result.divergence is not None and result.divergence.got.startswith("socket closed")
