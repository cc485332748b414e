"""The pytest plugin as a user meets it: run in a fresh pytest (``pytester``) with the
user's own settings, plus ``expect_events`` directly."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from avatar_sdk.testing import StagingServer, expect_events

from .conftest import SessionFactory

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]
AUTO_INI = "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"
STRICT_INI = "[pytest]\nasyncio_mode = strict\nasyncio_default_fixture_loop_scope = function\n"


def run(pytester: pytest.Pytester, source: str, *args: str) -> pytest.RunResult:
    pytester.makepyfile(test_user=textwrap.dedent(source))
    return pytester.runpytest("-p", "no:randomly", "-p", "no:cacheprovider", *args)


def test_avatar_session_is_connected_then_closed(pytester: pytest.Pytester) -> None:
    pytester.makeini(AUTO_INI)
    result = run(
        pytester,
        """
        from avatar_sdk.testing import expect_events

        SEEN = []

        async def test_talks(avatar_session, staging):
            SEEN.append(avatar_session)
            assert avatar_session.state == "connected"
            waiter = expect_events(avatar_session, ["agent_text", "agent_turn_ended"], timeout=5)
            await avatar_session.speak("hello")
            events = await waiter
            assert events[0].name == "agent_text"
            assert staging.received_events("onTextEntered")

        def test_it_was_closed():
            assert SEEN[0].state == "ended"
        """,
    )
    result.assert_outcomes(passed=2)


def test_a_leaked_session_fails_the_test(pytester: pytest.Pytester) -> None:
    pytester.makeini(AUTO_INI)
    result = run(
        pytester,
        """
        import asyncio
        from avatar_sdk.clock import SYSTEM_CLOCK

        async def test_socket_left_open(avatar_session):
            async def no_close():
                return None
            avatar_session.close = no_close      # the socket stays open

        async def test_task_left_running(avatar_session):
            asyncio.ensure_future(SYSTEM_CLOCK.sleep(60))   # an SDK task nobody awaits

        async def test_clean(avatar_session):
            assert avatar_session.state == "connected"
        """,
    )
    result.assert_outcomes(passed=3, errors=2)
    # One line per leaking test, its items in no fixed order: one pattern per item.
    result.stdout.fnmatch_lines(["*leaked after close():*socket to ws://127.0.0.1:*/socket.io/*"])
    result.stdout.fnmatch_lines(["*leaked after close():*TCP socket 127.0.0.1:*"])
    result.stdout.fnmatch_lines(["*leaked after close():*_read_loop_websocket*"])
    result.stdout.fnmatch_lines(["*leaked after close():*task *sleep*"])


#: Inner conftest for the leak tests: what a test plants on purpose is released after the
#: plugin has judged it (requested first, so torn down last), so a planted leak never spills
#: into the outer test run (pytester runs in this process).
JANITOR = """
import gc, inspect
import aiohttp, pytest
from aiortc import RTCPeerConnection

@pytest.fixture
async def janitor():
    planted = []
    yield planted
    for close in planted:
        done = close()
        if inspect.isawaitable(done):
            await done
    for obj in list(gc.get_objects()):
        if isinstance(obj, aiohttp.ClientSession) and not obj.closed:
            await obj.close()
        elif isinstance(obj, RTCPeerConnection) and obj.connectionState != "closed":
            await obj.close()
"""


def run_leak(pytester: pytest.Pytester, source: str) -> pytest.RunResult:
    """One planted leak: the test itself passes, its ``avatar_session`` teardown errors."""
    pytester.makeini(AUTO_INI)
    pytester.makeconftest(JANITOR)
    return run(pytester, source)


def test_a_task_with_library_code_on_top_fails_the_test(pytester: pytest.Pytester) -> None:
    """The task's top coroutine is tenacity's; the SDK's code runs below it."""
    result = run_leak(
        pytester,
        """
        import asyncio
        from tenacity import AsyncRetrying, stop_after_attempt
        from avatar_sdk.clock import SYSTEM_CLOCK

        async def test_retry_left_running(janitor, avatar_session):
            retried = AsyncRetrying(stop=stop_after_attempt(1)).wraps(SYSTEM_CLOCK.sleep)
            task = asyncio.ensure_future(retried(60))
            janitor.append(task.cancel)
        """,
    )
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*leaked after close(): task *sleep*"])


def test_an_unclosed_aiohttp_session_fails_the_test(pytester: pytest.Pytester) -> None:
    """The genie client's HTTP session (the completion POST) is never closed."""
    result = run_leak(
        pytester,
        """
        from avatar_sdk.transport.net.genie import GenieClient

        async def test_http_left_open(janitor, monkeypatch, avatar_session):
            async def no_close(self):
                return None
            monkeypatch.setattr(GenieClient, "close", no_close)
        """,
    )
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*leaked after close(): aiohttp ClientSession not closed*"])


def test_an_open_peer_connection_fails_the_test(pytester: pytest.Pytester) -> None:
    """A peer connection opened beside a media session and never closed. (Skipping the
    SDK's own uplink close is no leak: the backend closes its end, DTLS says so, and aiortc
    closes the client's peer within the grace.)"""
    result = run_leak(
        pytester,
        """
        import pytest
        from aiortc import RTCPeerConnection

        @pytest.mark.avatar_session(media=True)
        async def test_peer_left_open(janitor, avatar_session):
            pc = RTCPeerConnection()
            janitor.append(pc.close)  # kept reachable: an unreachable peer is collected
            pc.addTransceiver("audio", direction="sendonly")
            await pc.setLocalDescription(await pc.createOffer())
        """,
    )
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        ["*leaked after close(): *peer connection (RTCPeerConnection, new)*"]
    )


def test_an_ice_udp_socket_fails_the_test(pytester: pytest.Pytester) -> None:
    """An ICE connection that gathered (bound its UDP sockets) and was never closed."""
    result = run_leak(
        pytester,
        """
        import aioice

        async def test_udp_left_open(janitor, avatar_session):
            connection = aioice.Connection(ice_controlling=True)
            await connection.gather_candidates()
            janitor.append(connection.close)
        """,
    )
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*leaked after close(): UDP socket *"])


def test_a_tcp_connection_fails_the_test(pytester: pytest.Pytester) -> None:
    """A TCP connection to the backend left open (its server end does not count)."""
    result = run_leak(
        pytester,
        """
        import asyncio
        from urllib.parse import urlsplit

        async def test_tcp_left_open(janitor, avatar_session, staging):
            url = urlsplit(staging.url)
            _, writer = await asyncio.open_connection(url.hostname, url.port)
            janitor.append(writer.close)
        """,
    )
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*leaked after close(): TCP socket 127.0.0.1:* -> 127.0.0.1:*"])
    result.stdout.no_fnmatch_line("*; TCP socket*")  # one socket: the client's end only


def test_clean_sessions_pass_the_leak_check(pytester: pytest.Pytester) -> None:
    """A text session and an audio+video one, closed by the fixture: nothing reported,
    though the backend's own tasks, peers and sockets are alive at the check."""
    pytester.makeini(AUTO_INI)
    result = run(
        pytester,
        """
        import pytest

        async def test_text(avatar_session):
            await avatar_session.speak("hello")
            await avatar_session.wait_for("agent_turn_ended", timeout=10)

        @pytest.mark.avatar_session(media=True)
        async def test_media(avatar_session):
            await avatar_session.speak("hello")
            await avatar_session.wait_for("agent_turn_ended", timeout=10)
        """,
    )
    result.assert_outcomes(passed=2)


def test_factories_for_several_sessions_and_backends(pytester: pytest.Pytester) -> None:
    pytester.makeini(AUTO_INI)
    result = run(
        pytester,
        """
        import pytest
        from avatar_sdk import SessionConfig

        async def test_two_sessions(avatar_session_factory, staging_factory, staging):
            other = await staging_factory(audio_only=True, recovery_window=3.0)
            assert other.url != staging.url
            a = await avatar_session_factory(config=SessionConfig(close_timeout=1.0))
            b = await avatar_session_factory(staging=other, connect=False)
            assert a.config.close_timeout == 1.0 and b.state == "idle"
            await b.connect()
            assert {a.state, b.state} == {"connected"}
            assert len(staging.live_sids) == 1 and len(other.live_sids) == 1

        @pytest.mark.avatar_session(config=SessionConfig(idle_timeout=7.0))
        async def test_marker_options(avatar_session):
            assert avatar_session.config.idle_timeout == 7.0
        """,
    )
    result.assert_outcomes(passed=2)


def test_strict_mode_says_what_to_do(pytester: pytest.Pytester) -> None:
    pytester.makeini(STRICT_INI)
    result = run(
        pytester,
        """
        import pytest

        async def test_unmarked(avatar_session):
            pass

        @pytest.mark.asyncio
        async def test_marked(avatar_session):
            assert avatar_session.state == "connected"
        """,
    )
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        ["*test_unmarked is an async test*strict mode*@pytest.mark.asyncio*"]
    )


def test_without_pytest_asyncio_one_line_says_so(pytester: pytest.Pytester) -> None:
    result = run(
        pytester,
        """
        async def test_needs_loop(avatar_session):
            pass
        """,
        "-p",
        "no:asyncio",
    )
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*need pytest-asyncio, which is installed but disabled*"])


def test_importing_the_plugin_is_cheap() -> None:
    """An unrelated project's pytest run loads the plugin: no Socket.IO, WebRTC or staging."""
    code = (
        "import sys, avatar_sdk.testing.pytest_plugin\n"
        "heavy = [m for m in ('socketio', 'aiortc', 'aiohttp', 'numpy',"
        " 'avatar_sdk.session.facade', 'avatar_sdk.testing.staging.server') if m in sys.modules]\n"
        "print(heavy)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# -- expect_events -----------------------------------------------------------------------------
async def test_expect_events_in_order_with_others_between(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = make_session()
    await session.connect()
    waiter = expect_events(
        session,
        ["reconnecting", ("reconnected", {"tier": "socket", "recovered": True})],
        timeout=5,
    )
    await staging.faults.drop_socket()
    events = await waiter
    assert [e.name for e in events] == ["reconnecting", "reconnected"]
    assert await waiter is events  # awaiting again gives the same result


async def test_expect_events_says_what_came_instead(make_session: SessionFactory) -> None:
    session = make_session()
    await session.connect()
    waiter = expect_events(session, ["agent_text", "reconnected"], timeout=1.0)
    await session.speak("hi")
    with pytest.raises(AssertionError, match=r"'reconnected' not within 1s.*agent_turn_ended"):
        await waiter


async def test_expect_events_fails_when_the_session_ends_first(
    make_session: SessionFactory,
) -> None:
    session = make_session()
    await session.connect()
    waiter = expect_events(session, ["reconnected"], timeout=5)
    await session.close()
    with pytest.raises(AssertionError, match=r"the session ended first.*ended"):
        await waiter


def test_without_pytest_asyncio_installed_one_line_says_how(tmp_path: Path) -> None:
    (tmp_path / "test_user.py").write_text("async def test_it(avatar_session):\n    pass\n")
    code = (
        "import sys\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "class Hide:  # as if pytest-asyncio were not installed\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'pytest_asyncio':\n"
        "            raise ImportError(name)\n"
        "sys.meta_path.insert(0, Hide())\n"
        "import pytest\n"
        "sys.exit(pytest.main(['--assert=plain', '-p', 'no:asyncio', '-p', 'no:randomly', '-p',"
        " 'no:cacheprovider', 'test_user.py']))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 1, out.stdout + out.stderr
    assert "need pytest-asyncio, which is not installed: pip install 'avatar-sdk[testing]'" in (
        out.stdout
    )


def test_a_skipped_whep_delete_fails_the_server_side_check(pytester: pytest.Pytester) -> None:
    """A leak at the server: the session closes cleanly on its side but never DELETEs its
    WHEP resource, so the backend still holds a viewer for it. The plugin reads the
    backend's resource ledger when it stops; a test that means it is let through."""
    pytester.makeini(AUTO_INI)
    result = run(
        pytester,
        """
        import pytest
        from avatar_sdk.transport.rtc.stv import StvDownlink

        def skip_delete(monkeypatch):
            original = StvDownlink.close

            async def close_without_delete(self, timeout=1.0):
                self.location = None  # forget the resource: no DELETE is sent
                await original(self, timeout)

            monkeypatch.setattr(StvDownlink, "close", close_without_delete)

        @pytest.mark.avatar_session(media=True)
        async def test_delete_skipped(monkeypatch, avatar_session):
            skip_delete(monkeypatch)

        @pytest.mark.staging_leftovers("the DELETE is skipped on purpose")
        @pytest.mark.avatar_session(media=True)
        async def test_delete_skipped_on_purpose(monkeypatch, avatar_session):
            skip_delete(monkeypatch)

        @pytest.mark.avatar_session(media=True)
        async def test_deleted(avatar_session, staging):
            assert staging.live_resources()["whep"] == 1
        """,
    )
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_delete_skipped _*",
            "the staging backend still holds resources for closed clients: {'whep': 1}*",
        ]
    )
