"""The pytest plugin's leak check covers the sessions a test builds itself: an
``AvatarSession`` connected to the plugin's staging backend and never closed fails its test,
named (sticky id and repr, never the token), and is closed by the plugin so the next test
starts clean. Run in a fresh pytest (``pytester``), as a user meets it."""

from __future__ import annotations

import pytest

from .test_pytest_plugin import AUTO_INI, run

pytest_plugins = ["pytester"]

_BUILD = """
from avatar_sdk import AvatarSession

def build(backend, **kwargs):
    return AvatarSession(
        backend.url, backend.token, media=False, allow_insecure_transport=True, **kwargs
    )
"""


def test_a_session_the_test_never_closes_fails_it_named(pytester: pytest.Pytester) -> None:
    pytester.makeini(AUTO_INI)
    pytester.makepyfile(helpers=_BUILD)
    result = run(
        pytester,
        """
        from helpers import build

        SEEN = []

        async def test_forgets_to_close(staging):
            session = build(staging)
            SEEN.append((session, staging.token))
            await session.connect()
            assert session.state == "connected"

        def test_the_plugin_closed_it():
            session, _ = SEEN[0]
            assert session.state == "ended"
            with open("sticky.txt", "w") as out:
                out.write(session.sticky_id)
        """,
    )
    result.assert_outcomes(passed=2, errors=1)
    sticky = (pytester.path / "sticky.txt").read_text()
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_forgets_to_close*",
            "1 AvatarSession left open by the test, never closed: "
            f"{sticky} <AvatarSession state=connected thread=* url='http://127.0.0.1:*'*>"
            " (closed by the plugin)",
        ]
    )


def test_closed_or_never_connected_sessions_pass(pytester: pytest.Pytester) -> None:
    pytester.makeini(AUTO_INI)
    pytester.makepyfile(helpers=_BUILD)
    result = run(
        pytester,
        """
        from helpers import build

        async def test_closes(staging):
            session = build(staging)
            await session.connect()
            await session.close()

        async def test_context_manager(staging):
            async with build(staging) as session:
                assert session.state == "connected"

        async def test_never_connected(staging):
            build(staging)  # nothing opened: nothing to close

        async def test_a_failed_connect_needs_no_close(staging):
            from avatar_sdk import AvatarError
            session = build(staging)
            staging.faults.tier_exceeded()
            try:
                await session.connect()
            except AvatarError:
                pass
            assert session.state == "failed"
        """,
    )
    result.assert_outcomes(passed=4)


def test_a_test_that_failed_is_not_failed_twice(pytester: pytest.Pytester) -> None:
    """Its own failure is the news (an assert before its close): the plugin still closes
    the session, without a second error for the same test."""
    pytester.makeini(AUTO_INI)
    pytester.makepyfile(helpers=_BUILD)
    result = run(
        pytester,
        """
        from helpers import build

        SEEN = []

        async def test_fails_before_its_close(staging):
            session = build(staging)
            SEEN.append(session)
            await session.connect()
            assert session.state == "not this"
            await session.close()

        def test_the_plugin_closed_it():
            assert SEEN[0].state == "ended"
        """,
    )
    result.assert_outcomes(passed=1, failed=1)
    assert "never closed" not in result.stdout.str()


def test_a_session_on_a_factory_backend_is_checked_too(pytester: pytest.Pytester) -> None:
    pytester.makeini(AUTO_INI)
    pytester.makepyfile(helpers=_BUILD)
    result = run(
        pytester,
        """
        from helpers import build

        async def test_forgets_to_close(staging_factory):
            backend = await staging_factory()
            await build(backend).connect()
        """,
    )
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*1 AvatarSession left open by the test, never closed: *"])


def test_the_failure_never_shows_the_token(pytester: pytest.Pytester) -> None:
    pytester.makeini(AUTO_INI)
    pytester.makepyfile(helpers=_BUILD)
    result = run(
        pytester,
        """
        from helpers import build

        async def test_forgets_to_close(staging):
            print("TOKEN-IS", staging.token)  # captured: shown with the failure, once
            await build(staging).connect()
        """,
    )
    result.assert_outcomes(passed=1, errors=1)
    out = result.stdout.str()
    token = out.split("TOKEN-IS ", 1)[1].split()[0]
    failure = [line for line in out.splitlines() if "never closed" in line]
    assert failure and all(token not in line for line in failure)
