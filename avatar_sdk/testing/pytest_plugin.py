"""pytest plugin (auto-loaded when avatar-sdk is installed): fixtures to test bots with.

* ``staging``: a started :class:`~avatar_sdk.testing.StagingServer` on 127.0.0.1.
* ``staging_factory``: ``await staging_factory(audio_only=True, ...)`` for backends with
  options; every one is stopped after the test.
* ``avatar_session``: an :class:`~avatar_sdk.AvatarSession` connected to ``staging`` and
  greeted (``media=False`` unless ``@pytest.mark.avatar_session(media=True, config=...)``
  says otherwise), closed after the test, which fails if the session leaked a task (judged
  by its whole coroutine chain), an aiohttp session, a Socket.IO connection, a peer
  connection or a socket (UDP or TCP, counted in the process's file descriptors): see
  :mod:`avatar_sdk.testing.leaks`.
* ``avatar_session_factory``: ``await avatar_session_factory(config=..., staging=...)`` for
  several sessions (``connect=False``, ``greeted=False`` to stop earlier), each closed and
  leak-checked the same way.
* Sessions a test builds itself: when ``staging`` (or a ``staging_factory`` backend) is
  stopped after the test, every ``AvatarSession`` built for that backend must be closed
  (or never connected, or failed). One still open fails the test, named by its sticky id
  and repr (never the token), and is closed by the plugin, so the next test starts clean.
  A test that failed already is not failed twice: its sessions are closed all the same.
  Then the backend's resource ledger (``StagingServer.live_resources()``) must show nothing
  held for clients (WHEP resources, ASR peers, server sessions, genie calls): a close that
  left a resource open at the server fails the test. A test that leaves one on purpose (a
  fault that keeps its client's DELETE from arriving) says so with
  ``@pytest.mark.staging_leftovers("why")``.
* ``replayed_backend``: ``backend = await replayed_backend(cassette)``, a started
  :class:`~avatar_sdk.testing.replay.ReplayServer` scripted by a cassette (a path or a
  loaded one); ``result = await backend.replay()`` runs the SDK against it (``result.same``,
  or ``result.divergence``); stopped after the test (``docs/replay.md``).
* ``recorded_backend``: ``backend = await recorded_backend(cassette)``, the recorded
  backend for the application's own code (``ReplayServer(cassette, drive="user")``): open
  ``AvatarSession(backend.url, backend.token, **backend.session_options())`` and run the
  app; the server answers as recorded. After the test, the sessions left open on it are
  closed and its verdict read: a divergence fails the test, naming the record, what was
  expected and what the client did (a test that reads ``await backend.verdict()`` itself
  judges it itself).

The fixtures are async: they need pytest-asyncio (``pip install 'avatar-sdk[testing]'``),
and either ``asyncio_mode = "auto"`` or ``@pytest.mark.asyncio`` on each test; the plugin
says so in one line instead of letting a test fail obscurely. Importing this module costs
next to nothing: the staging backend and the session load when a fixture is first used.
"""

from __future__ import annotations

import asyncio
import inspect
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import pytest

from ..besteffort import best_effort
from ..logs import sdk_logger
from .leaks import LeakCheck, settle_server

if TYPE_CHECKING:
    from ..session.facade import AvatarSession
    from .replay import ReplayServer
    from .staging.server import StagingServer

try:
    import pytest_asyncio
except ImportError:  # the fixtures then fail with MISSING_ASYNCIO, never "fixture not found"
    pytest_asyncio = None  # type: ignore[assignment]

#: The fixtures that need an event loop (and so pytest-asyncio).
ASYNC_FIXTURES = frozenset(
    {
        "staging",
        "staging_factory",
        "avatar_session",
        "avatar_session_factory",
        "replayed_backend",
        "recorded_backend",
    }
)

MISSING_ASYNCIO = (
    "avatar-sdk's pytest fixtures are async and need pytest-asyncio, which is not installed: "
    "pip install 'avatar-sdk[testing]', then set asyncio_mode = \"auto\""
)
DISABLED_ASYNCIO = (
    "avatar-sdk's pytest fixtures are async and need pytest-asyncio, which is installed but "
    "disabled in this run (-p no:asyncio): enable it"
)
STRICT_MODE = (
    "{test} is an async test using avatar-sdk fixtures, but pytest-asyncio is in strict mode "
    'and the test is not marked: add @pytest.mark.asyncio, or set asyncio_mode = "auto" '
    "under [tool.pytest.ini_options]"
)

#: How long after close() the SDK's tasks, sockets and peers may take to wind down before
#: the leak check counts them (seconds); a clean close needs a few loop turns.
LEAK_GRACE = 1.5

#: How long the fixtures wait for the avatar's greeting after connecting (seconds).
GREETING_TIMEOUT = 10.0

SessionFactory = Callable[..., Awaitable["AvatarSession"]]
StagingFactory = Callable[..., Awaitable["StagingServer"]]

log = sdk_logger(__name__)

#: States in which a session holds nothing open (never connected, or ended either way).
CLOSED_STATES = frozenset({"idle", "ended", "failed"})

LEFT_OPEN = (
    "{count} AvatarSession left open by the test, never closed: {names} (closed by the plugin)"
)

DIVERGED = "the application diverged from the recording: {result}"

HELD_AT_SERVER = (
    "the staging backend still holds resources for closed clients: {held} (per client: "
    "{clients}); mark the test @pytest.mark.staging_leftovers(reason) if that is intended"
)

#: Host names under which a test may address a staging backend bound on loopback.
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})

#: Sessions the plugin's own session fixtures made and will close and check themselves.
#: Not the test's to close: skipped when a backend stops first (``avatar_session_factory(
#: staging=other)`` makes a session on a ``staging_factory`` backend that may be torn down
#: before the session fixture is).
_OWNED: weakref.WeakSet[AvatarSession] = weakref.WeakSet()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "staging: uses the embedded StagingServer")
    config.addinivalue_line(
        "markers",
        "avatar_session(**kwargs): AvatarSession keyword arguments for the avatar_session "
        "fixture (media, config, thread_id, audio, ...)",
    )
    config.addinivalue_line(
        "markers",
        "staging_leftovers(reason): the test leaves resources at the staging backend on "
        "purpose; its resource ledger is not checked when the backend stops",
    )


def _asyncio_mode(config: pytest.Config) -> str:
    try:
        mode = config.getoption("asyncio_mode", None) or config.getini("asyncio_mode")
    except ValueError:  # the option is not registered: pytest-asyncio is not active
        return "unknown"
    return str(mode or "strict")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before any fixture runs: one clear line when the async fixtures cannot work."""
    used = ASYNC_FIXTURES.intersection(getattr(item, "fixturenames", ()))
    if not used:
        return
    if pytest_asyncio is None:
        pytest.fail(MISSING_ASYNCIO, pytrace=False)
    if not item.config.pluginmanager.hasplugin("asyncio"):
        pytest.fail(DISABLED_ASYNCIO, pytrace=False)
    function = getattr(item, "function", None)
    if (
        function is not None
        and inspect.iscoroutinefunction(function)
        and item.get_closest_marker("asyncio") is None
        and _asyncio_mode(item.config) != "auto"
    ):
        pytest.fail(STRICT_MODE.format(test=item.nodeid), pytrace=False)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Remember whether the test itself failed (its fixtures' teardown reads it)."""
    report = yield
    if report.when == "call":
        item.stash[_CALL_FAILED] = report.failed
    return report


_CALL_FAILED = pytest.StashKey[bool]()


def _serves(server: StagingServer, backend: str) -> bool:
    """Whether a session built for ``backend`` talks to ``server``."""
    try:
        parts = urlsplit(backend)
        port = parts.port
    except ValueError:
        return False
    hosts = {server.host, server.advertise_host, *(_LOOPBACK if server.host in _LOOPBACK else ())}
    return port == server.port and parts.hostname in hosts


async def close_left_open(servers: Iterable[StagingServer]) -> str | None:
    """Close every session built for one of ``servers`` that is still open; the failure
    message naming them (None: there were none). Run before the servers stop, so that each
    close is the normal one (the backend sees the disconnect, the completion is sent)."""
    from ..lifecycle.registry import LIVE_SESSIONS  # noqa: PLC0415 - lazy: the plugin stays cheap

    servers = list(servers)
    left = [
        session
        for session, entry in LIVE_SESSIONS.sessions()
        if session.state not in CLOSED_STATES
        and session not in _OWNED
        and any(_serves(s, entry.backend) for s in servers)
    ]
    if not left:
        return None
    names = "; ".join(f"{session.sticky_id} {session!r}" for session in left)
    for session in left:
        # type(...).close: a test may have replaced the instance's close()
        # bounded: a session of another event loop (a CLI run on a worker thread) cannot be
        # closed from this one, and must not hang the teardown
        with best_effort(f"closing {session.sticky_id} left open by a test", log):
            async with asyncio.timeout(session.config.close_timeout + LEAK_GRACE):
                await type(session).close(session)
    return LEFT_OPEN.format(count=len(left), names=names)


def _in_use(server: StagingServer) -> bool:
    """Whether a session of the plugin's own fixtures, still open, talks to ``server`` (it
    is closed and checked later by its fixture: the server's ledger cannot be judged yet)."""
    from ..lifecycle.registry import LIVE_SESSIONS  # noqa: PLC0415 - lazy: the plugin stays cheap

    return any(
        session in _OWNED and session.state not in CLOSED_STATES and _serves(server, entry.backend)
        for session, entry in LIVE_SESSIONS.sessions()
    )


async def held_at_server(servers: Iterable[StagingServer]) -> str | None:
    """The failure message naming what ``servers`` still hold for clients once every
    session is closed (None: nothing), after a short grace for the last disconnects. A
    server a fixture's session still uses is not judged."""
    found: list[str] = []
    for server in servers:
        if _in_use(server):
            continue
        held = await settle_server(server, LEAK_GRACE)
        if held:
            clients = {
                client: kinds
                for client, kinds in server.resources_by_client().items()
                if any(kind in held for kind in kinds)
            }
            found.append(HELD_AT_SERVER.format(held=held, clients=clients))
    return "; ".join(found) or None


async def _stop_checked(request: pytest.FixtureRequest, servers: list[StagingServer]) -> None:
    """After the test: close what it left open on ``servers``, check their resource
    ledgers, stop them, then fail the test for what it left open (unless it failed on its
    own already)."""
    held = None
    try:
        left = await close_left_open(servers)
        if request.node.get_closest_marker("staging_leftovers") is None:
            held = await held_at_server(servers)
    finally:
        for server in reversed(servers):
            await server.stop()
    failures = [message for message in (left, held) if message is not None]
    if failures and not request.node.stash.get(_CALL_FAILED, False):
        pytest.fail("; ".join(failures), pytrace=False)


class _Sessions:
    """The sessions one test made: built against a staging backend, all closed at the end,
    then checked for leaks."""

    def __init__(self, staging: StagingServer) -> None:
        self.staging = staging
        self.made: list[AvatarSession] = []
        self.check = LeakCheck()

    async def make(
        self,
        *,
        staging: StagingServer | None = None,
        connect: bool = True,
        greeted: bool = True,
        **kwargs: Any,
    ) -> AvatarSession:
        """A session against ``staging`` (default: the ``staging`` fixture's), connected
        unless ``connect=False``, and past the avatar's greeting unless ``greeted=False``
        (so the test's first ``speak`` is answered by its own turn, never the greeting's
        end); ``kwargs`` go to ``AvatarSession`` (defaults: ``media=False``,
        ``allow_insecure_transport=True``, the backend's genie URL)."""
        from ..session.facade import AvatarSession  # noqa: PLC0415 - lazy: the plugin stays cheap

        backend = staging or self.staging
        kwargs.setdefault("media", False)
        kwargs.setdefault("allow_insecure_transport", True)
        kwargs.setdefault("genie_url", backend.genie_url)
        session = AvatarSession(backend.url, backend.token, **kwargs)
        self.made.append(session)
        _OWNED.add(session)
        if connect:
            # Registered before connecting: the greeting may end before connect() returns.
            greeting = session.expect("agent_turn_ended") if greeted else None
            await session.connect()
            if greeting is not None:
                async with asyncio.timeout(GREETING_TIMEOUT):
                    await greeting
        return session

    async def close(self) -> None:
        """Close every session, then fail the test if anything of theirs is still open."""
        for session in self.made:
            await session.close()
            _OWNED.discard(session)
        leaks = await self.check.settle(LEAK_GRACE)
        if leaks:
            # Reported, then released for real (a test may have replaced close()), so one
            # leaking test does not spill into the next.
            for session in self.made:
                await type(session).close(session)
            pytest.fail(leak_message(leaks), pytrace=False)


#: Leaked items a failure names before it says how many more: a leaked live session is about
#: a dozen (socket, HTTP session, TCP socket, the socket library's read and write loops, the
#: session's watchdogs), and every one of them is worth reading.
LEAKS_NAMED = 40


def leak_message(leaks: list[str]) -> str:
    """The failure of a test whose session left ``leaks``: every item, up to
    :data:`LEAKS_NAMED` (a cap of 10 once hid the socket's read loop, in no fixed order)."""
    named = "; ".join(leaks[:LEAKS_NAMED])
    more = len(leaks) - LEAKS_NAMED
    return f"the avatar session leaked after close(): {named}" + (
        f"; and {more} more" if more > 0 else ""
    )


if pytest_asyncio is not None:

    @pytest_asyncio.fixture
    async def staging(request: pytest.FixtureRequest) -> AsyncIterator[StagingServer]:
        """A running staging backend for one test. Stopped afterwards; a session built
        for it and still open by then fails the test (and is closed)."""
        from .staging.server import StagingServer  # noqa: PLC0415 - lazy: the plugin stays cheap

        server = StagingServer()
        await server.start()
        try:
            yield server
        finally:
            await _stop_checked(request, [server])

    @pytest_asyncio.fixture
    async def staging_factory(request: pytest.FixtureRequest) -> AsyncIterator[StagingFactory]:
        """``await staging_factory(**options)``: a started ``StagingServer(**options)``
        (``audio_only``, ``recovery_window``, ``ssl_context``...); all stopped afterwards,
        checked like ``staging``."""
        from .staging.server import StagingServer  # noqa: PLC0415 - lazy: the plugin stays cheap

        servers: list[StagingServer] = []

        async def make(**options: Any) -> StagingServer:
            server = StagingServer(**options)
            await server.start()
            servers.append(server)
            return server

        try:
            yield make
        finally:
            await _stop_checked(request, servers)

    @pytest_asyncio.fixture
    async def replayed_backend() -> AsyncIterator[Callable[..., Awaitable[ReplayServer]]]:
        """``await replayed_backend(cassette, answer_timeout=10.0, max_gap=0.25)``: a started
        ``ReplayServer`` scripted by ``cassette``; all stopped after the test."""
        from .replay import ReplayServer  # noqa: PLC0415 - lazy: the plugin stays cheap

        servers: list[ReplayServer] = []

        async def make(cassette: Any, **options: Any) -> ReplayServer:
            server = ReplayServer(cassette, **options)
            await server.start()
            servers.append(server)
            return server

        try:
            yield make
        finally:
            for server in reversed(servers):
                await server.stop()

    @pytest_asyncio.fixture
    async def recorded_backend(
        request: pytest.FixtureRequest,
    ) -> AsyncIterator[Callable[..., Awaitable[ReplayServer]]]:
        """``await recorded_backend(cassette, answer_timeout=10.0, max_gap=0.25)``: a
        started ``ReplayServer(cassette, drive="user")`` for the application's own session.
        After the test: what it left open on it is closed, then a verdict the test did not
        read is judged (a divergence fails the test); all stopped."""
        from .replay import ReplayServer  # noqa: PLC0415 - lazy: the plugin stays cheap

        servers: list[ReplayServer] = []

        async def make(cassette: Any, **options: Any) -> ReplayServer:
            server = ReplayServer(cassette, drive="user", **options)
            await server.start()
            servers.append(server)
            return server

        failures: list[str] = []
        try:
            yield make
        finally:
            try:
                left = await close_left_open(servers)
                failures += [left] if left is not None else []
                for server in servers:
                    if not server.verdict_read:
                        result = await server.verdict()
                        failures += [] if result.same else [DIVERGED.format(result=result)]
            finally:
                for server in reversed(servers):
                    await server.stop()
        if failures and not request.node.stash.get(_CALL_FAILED, False):
            pytest.fail("; ".join(failures), pytrace=False)

    @pytest_asyncio.fixture
    async def avatar_session_factory(staging: StagingServer) -> AsyncIterator[SessionFactory]:
        """``await avatar_session_factory(config=..., staging=..., connect=True, **kwargs)``:
        sessions against the ``staging`` fixture (or another backend); after the test every
        one is closed and the test fails if any leaked a task, socket or peer."""
        sessions = _Sessions(staging)
        try:
            yield sessions.make
        finally:
            await sessions.close()

    @pytest_asyncio.fixture
    async def avatar_session(
        request: pytest.FixtureRequest, staging: StagingServer
    ) -> AsyncIterator[AvatarSession]:
        """A session connected to ``staging``; options from ``@pytest.mark.avatar_session``.
        Closed after the test, which fails if it leaked a task, socket or peer."""
        marker = request.node.get_closest_marker("avatar_session")
        options = dict(marker.kwargs) if marker is not None else {}
        sessions = _Sessions(staging)
        try:
            yield await sessions.make(**options)
        finally:
            await sessions.close()

else:  # pragma: no cover - exercised only without pytest-asyncio installed

    def _missing() -> None:
        pytest.fail(MISSING_ASYNCIO, pytrace=False)

    @pytest.fixture(name="staging")
    def _staging_missing() -> None:
        _missing()

    @pytest.fixture(name="staging_factory")
    def _staging_factory_missing() -> None:
        _missing()

    @pytest.fixture(name="avatar_session")
    def _avatar_session_missing() -> None:
        _missing()

    @pytest.fixture(name="avatar_session_factory")
    def _avatar_session_factory_missing() -> None:
        _missing()

    @pytest.fixture(name="replayed_backend")
    def _replayed_backend_missing() -> None:
        _missing()

    @pytest.fixture(name="recorded_backend")
    def _recorded_backend_missing() -> None:
        _missing()
