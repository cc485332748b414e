"""Ending well by default (issue 18, item 4): a session built without ``genie_url`` still
sends ``session_completed`` on close when the genie host can be found (the backend names it
in its join answer, as the staging backend does; or the conversation host is a known one);
when it cannot, the session says so once, at connect, at INFO, naming the option.
Real sockets against the staging backend; ``talk`` through its console entry point."""

from __future__ import annotations

import asyncio
import logging

import pytest
from click.testing import CliRunner

from avatar_sdk import AvatarSession
from avatar_sdk._cli.main import main
from avatar_sdk.testing import StagingServer
from avatar_sdk.testing.pytest_plugin import StagingFactory

from .conftest import FAST, HANG_GUARD, until


def _session(staging: StagingServer, **kwargs: object) -> AvatarSession:
    return AvatarSession(
        staging.url,
        staging.token,
        media=False,
        config=FAST,
        allow_insecure_transport=True,
        **kwargs,  # type: ignore[arg-type]
    )


async def _converse(session: AvatarSession) -> None:
    """Connect, hear the greeting (the thread id comes with the brain's first output),
    close."""
    greeting = session.expect("agent_turn_ended", timeout=HANG_GUARD * 2)
    async with session:
        await greeting


def _genie_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if "genie_url" in r.getMessage()]


async def test_the_quick_start_completes_its_thread_without_a_genie_url(
    staging: StagingServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    completed = []
    session = _session(staging)
    session.on("session_completed", completed.append)
    await _converse(session)
    assert staging.completed_threads == [session.thread_id]
    assert [e.data["delivered"] for e in completed] == [True]
    assert [e.data["outcome"] for e in completed] == ["sent"]
    assert _genie_lines(caplog) == []  # found: nothing to say


async def test_without_a_genie_host_it_says_so_once_at_connect(
    staging_factory: StagingFactory, caplog: pytest.LogCaptureFixture
) -> None:
    backend = await staging_factory(advertise_genie=False)
    caplog.set_level(logging.DEBUG)
    completed = []
    first, second = _session(backend), _session(backend)
    first.on("session_completed", completed.append)
    first.on("connected", lambda _: said.extend(_genie_lines(caplog)))
    said: list[logging.LogRecord] = []
    await _converse(first)
    # said by the time connect() returned
    assert [(r.levelno, r.name) for r in said] == [(logging.INFO, "avatar_sdk.session.genie_host")]
    assert "genie_url=" in said[0].getMessage()  # names the option
    assert backend.token not in caplog.text
    # once per session: not again at close, nor when the socket recovers
    recovered = second.expect("reconnected", timeout=HANG_GUARD * 2)
    await second.connect()
    await backend.faults.drop_socket(recovery=False)  # a cold reconnect: a new join
    assert (await recovered).data["tier"] == "cold"
    await second.close()
    assert len(_genie_lines(caplog)) == 2
    assert [e.data["outcome"] for e in completed] == ["no_genie"]
    assert backend.completed_threads == []


async def test_an_explicit_genie_url_wins(
    staging_factory: StagingFactory, staging: StagingServer
) -> None:
    other = await staging_factory(token=staging.token)  # the same token: one deployment
    session = _session(staging, genie_url=other.genie_url)
    await _converse(session)
    assert other.completed_threads == [session.thread_id]
    assert staging.completed_threads == []


async def test_talk_against_staging_completes_without_genie_url(staging: StagingServer) -> None:
    args = ["talk", staging.url, "--insecure", "--no-media", "--say", "Hi"]
    args += ["--set", "close_timeout=1", "--reply-timeout", "10"]
    result = await asyncio.to_thread(
        CliRunner().invoke, main, args, env={"AVATAR_TOKEN": staging.token}, catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    assert await until(lambda: len(staging.completed_threads) == 1, HANG_GUARD)
