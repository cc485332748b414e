"""A quiet library: a normal session (connect, greeting, close) logs nothing above DEBUG,
from any logger, with the root logger capturing everything at DEBUG and nothing else
configured. Python-engineio's "Server sent close packet data None, aborting" warning, which
every normal close used to print, is one of the records this catches."""

from __future__ import annotations

import logging

import pytest

from avatar_sdk import AvatarSession
from avatar_sdk.testing import StagingServer

from .conftest import FAST, HANG_GUARD, until


def _loud(records: list[logging.LogRecord], *, besides: tuple[str, ...] = ()) -> list[str]:
    return [
        f"{r.levelname} {r.name}: {r.getMessage()}"
        for r in records
        if r.levelno > logging.DEBUG and not r.name.startswith(besides)
    ]


async def _connect_and_close(
    staging: StagingServer, caplog: pytest.LogCaptureFixture, *, media: bool
) -> tuple[list[logging.LogRecord], list[logging.LogRecord]]:
    """Records of a whole session: (connect and greeting, close)."""
    caplog.set_level(logging.DEBUG)  # the root logger: every logger's records reach caplog
    session = AvatarSession(
        staging.url,
        staging.token,
        genie_url=staging.genie_url,
        media=media,
        config=FAST,
        allow_insecure_transport=True,
    )
    greeting = session.expect("agent_turn_ended", timeout=HANG_GUARD * 2)
    try:
        await session.connect()
        await greeting
        connect = list(caplog.records)
        caplog.clear()
        await session.close()
    finally:
        await session.close()
    assert session.state == "ended"
    # the server saw the client's own disconnect: the close was the normal one
    assert await until(lambda: staging.completed_threads == [session.thread_id], HANG_GUARD)
    return connect, list(caplog.records)


async def test_a_text_session_logs_nothing_above_debug(
    staging: StagingServer, caplog: pytest.LogCaptureFixture
) -> None:
    connect, close = await _connect_and_close(staging, caplog, media=False)
    assert _loud(connect) == []
    assert _loud(close) == []
    # DEBUG is where the detail went, not nowhere: the engine.io close is still told there
    assert any(r.name.startswith("avatar_sdk") for r in close)


async def test_a_media_session_closes_quietly(
    staging: StagingServer, caplog: pytest.LogCaptureFixture
) -> None:
    connect, close = await _connect_and_close(staging, caplog, media=True)
    assert _loud(close) == []
    # aioice logs its candidate-pair checks at INFO for every peer in the process (the
    # staging backend's as well as the SDK's, so the SDK cannot tell them apart: it leaves
    # that logger alone, docs/logging.md); nothing else speaks above DEBUG
    assert _loud(connect, besides=("aioice",)) == []


async def test_a_recovered_drop_is_told_and_nothing_warns(
    staging: StagingServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A drop the SDK recovers from is told once in its own words and by its events, at
    INFO: nothing reaches a user's stderr (issue 33: engine.io's "Server sent close packet
    data 1000, aborting" showed in the quick start); engine.io's own line is INFO detail
    under the SDK's logger name."""
    caplog.set_level(logging.DEBUG)
    async with AvatarSession(
        staging.url,
        staging.token,
        genie_url=staging.genie_url,
        media=False,
        config=FAST,
        allow_insecure_transport=True,
    ) as session:
        recovered = session.expect("reconnected", timeout=HANG_GUARD * 2)
        caplog.clear()
        await staging.faults.drop_socket()
        await recovered
        warnings = [
            (r.name, r.getMessage()) for r in caplog.records if r.levelno >= logging.WARNING
        ]
        drop = "Server sent close packet data 1000, aborting"
        assert warnings == []
        said = [
            r.getMessage()
            for r in caplog.records
            if r.name == "avatar_sdk.session" and r.getMessage().startswith("control socket")
        ]
        assert len(said) == 1 and "recover_socket" in said[0], said
        detail = [(r.name, r.levelno) for r in caplog.records if r.getMessage() == drop]
        assert detail == [("avatar_sdk.transport.engineio", logging.INFO)], detail
