"""TLS over real sockets (issue 12, defect 6): an untrusted certificate is ``tls_failed``
(never a lost connection) at every place the SDK connects, before any token leaves; a
private CA is trusted with one argument that covers Socket.IO, WHEP and genie."""

from __future__ import annotations

import logging
import ssl
from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio
from aiohttp import web
from aiortc import RTCConfiguration

from avatar_sdk import AvatarError, AvatarSession, ChatSession, ErrorCode
from avatar_sdk.clock import SYSTEM_CLOCK
from avatar_sdk.testing import StagingServer
from avatar_sdk.testing.tls import TestCA
from avatar_sdk.transport.net.genie import GenieClient
from avatar_sdk.transport.rtc.stv import StvDownlink, whep_http_session

from .conftest import FAST


@pytest.fixture
def ca() -> Iterator[TestCA]:
    authority = TestCA()
    yield authority
    authority.cleanup()


@pytest_asyncio.fixture
async def tls_staging(ca: TestCA) -> AsyncIterator[StagingServer]:
    async with StagingServer(ssl_context=ca.server_context()) as server:
        yield server


def _session(staging: StagingServer, **kwargs: object) -> AvatarSession:
    kwargs.setdefault("media", False)
    kwargs.setdefault("config", FAST)
    return AvatarSession(
        staging.url,
        staging.token,
        genie_url=staging.genie_url,
        **kwargs,  # type: ignore[arg-type]
    )


async def test_an_untrusted_certificate_is_tls_failed_and_no_token_is_sent(
    tls_staging: StagingServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    session = _session(tls_staging)
    with pytest.raises(AvatarError) as info:
        await session.connect()
    error = info.value
    assert error.code is ErrorCode.TLS_FAILED
    assert not error.retryable
    assert "certificate verify failed" in str(error) or "unable to get local issuer" in str(error)
    assert "ca_file=" in str(error)
    assert session.state == "failed"
    # The handshake failed before any HTTP request: the server never saw a connect or a token.
    assert tls_staging.connections == 0 and tls_staging.refused_connections == 0
    assert tls_staging.received == []
    assert tls_staging.token not in str(error) + repr(error)
    assert tls_staging.token not in caplog.text
    await session.close()


async def test_a_host_name_mismatch_is_tls_failed(ca: TestCA) -> None:
    # A certificate for another name, from a CA the client trusts.
    async with StagingServer(ssl_context=ca.server_context("media.example.test")) as staging:
        session = _session(staging, ca_file=ca.ca_file)
        with pytest.raises(AvatarError) as info:
            await session.connect()
        assert info.value.code is ErrorCode.TLS_FAILED
        assert "mismatch" in str(info.value)
        assert staging.connections == 0
        await session.close()


@pytest.mark.parametrize("how", ["ca_file", "ssl"])
async def test_a_private_ca_is_trusted_for_socketio_and_genie(
    tls_staging: StagingServer, ca: TestCA, how: str
) -> None:
    trust = {"ca_file": ca.ca_file} if how == "ca_file" else {"ssl": ca.client_context()}
    session = _session(tls_staging, **trust)
    greeted = session.expect("agent_turn_ended", timeout=3)  # the thread id rides the greeting
    await session.connect()
    assert session.state == "connected" and tls_staging.connections == 1
    await greeted
    thread = session.thread_id
    assert thread is not None
    await session.close()
    # session_completed went to the genie API over the same TLS trust.
    assert tls_staging.completed_threads == [thread]


async def test_a_certificate_that_changes_mid_session_ends_it_with_tls_failed(
    ca: TestCA,
) -> None:
    """Reconnects connect too: after the server's certificate is replaced by one nobody
    trusts, the recovery ends in tls_failed (not a lost connection, not gave_up)."""
    server_context = ca.server_context()
    stranger = TestCA("an untrusted CA")
    async with StagingServer(ssl_context=server_context) as staging:
        session = _session(staging, ca_file=ca.ca_file)
        await session.connect()
        ended = session.expect("ended", timeout=15)
        server_context.load_cert_chain(str(stranger.issue()))
        await staging.faults.drop_socket(recovery=True)
        event = await ended
        assert event.data["code"] == "tls_failed"
        assert session.state == "failed" and session.health().reason == "tls_failed"
        assert staging.connections == 1  # no reconnect got past the handshake
        await session.close()
    stranger.cleanup()


async def test_a_full_media_session_over_tls(tls_staging: StagingServer, ca: TestCA) -> None:
    """WHEP too: the staging backend hands out an https loopback WHEP URL."""
    session = _session(
        tls_staging, media=True, video=False, ca_file=ca.ca_file, allow_insecure_transport=True
    )
    await session.connect()
    assert session.state == "connected"
    assert tls_staging.media.whep_posts == 1
    await session.close()


async def test_whep_with_an_untrusted_certificate_is_tls_failed(ca: TestCA) -> None:
    posts: list[str] = []

    async def whep(request: web.Request) -> web.Response:
        posts.append(request.path)
        return web.Response(status=404)

    app = web.Application()
    app.router.add_post("/rtc/v1/whep/", whep)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ca.server_context()).start()
    url = f"https://127.0.0.1:{runner.addresses[0][1]}/rtc/v1/whep/?app=app&stream=s"
    try:
        for context, code in ((None, ErrorCode.TLS_FAILED), (ca.client_context(), None)):
            http = whep_http_session(guard=None, ssl_context=context)
            link = StvDownlink(
                http=http,
                configuration=RTCConfiguration(),
                allow_private=True,
                video=False,
                outputs={},
                clock=SYSTEM_CLOCK,
            )
            with pytest.raises(AvatarError) as info:
                await link.subscribe(url, 2.0)
            await link.close()
            await http.close()
            # Trusted: TLS passes and the endpoint's own 404 comes back.
            assert info.value.code is (code or ErrorCode.SESSION_GONE)
    finally:
        await runner.cleanup()
    assert len(posts) == 1  # only the trusted attempt reached the endpoint


async def test_genie_with_an_untrusted_certificate_reports_tls_failed(
    tls_staging: StagingServer, ca: TestCA
) -> None:
    untrusted = GenieClient(tls_staging.genie_url, tls_staging.token)
    outcome = await untrusted.session_completed("thr-x", 2.0)
    await untrusted.close()
    assert (outcome.ok, outcome.reason) == (False, "tls_failed")
    trusted = GenieClient(tls_staging.genie_url, tls_staging.token, ssl_context=ca.client_context())
    outcome = await trusted.session_completed("thr-x", 2.0)
    await trusted.close()
    assert outcome.ok and tls_staging.completed_threads == ["thr-x"]


def test_a_context_that_does_not_verify_needs_the_insecure_flag() -> None:
    lax = ssl.create_default_context()
    lax.check_hostname = False
    lax.verify_mode = ssl.CERT_NONE
    with pytest.raises(AvatarError) as info:
        AvatarSession("https://backend.example", "tok", ssl=lax)
    assert info.value.code is ErrorCode.INSECURE_TRANSPORT
    AvatarSession("https://backend.example", "tok", ssl=lax, allow_insecure_transport=True)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"ssl": "not a context"},
        {"ca_file": "/nonexistent/ca.pem"},
        {"ssl": ssl.create_default_context(), "ca_file": "/x.pem"},
    ],
)
def test_bad_tls_arguments_are_invalid(kwargs: dict[str, object]) -> None:
    with pytest.raises(AvatarError) as info:
        AvatarSession("https://backend.example", "tok", **kwargs)  # type: ignore[arg-type]
    assert info.value.code is ErrorCode.INVALID_ARGUMENT


async def test_chat_session_trusts_a_private_ca_and_refuses_without_it(
    tls_staging: StagingServer, ca: TestCA
) -> None:
    """The HTTP text transport takes the same trust as AvatarSession (``ca_file=``/``ssl=``)
    for its converse stream and its genie calls, and says ``tls_failed`` without it."""
    async with ChatSession(tls_staging.genie_url, tls_staging.token, ca_file=ca.ca_file) as chat:
        reply = await chat.send("hello over TLS", timeout=10)
        assert reply.text
    async with ChatSession(tls_staging.genie_url, tls_staging.token) as untrusted:
        with pytest.raises(AvatarError) as refused:
            await untrusted.send("hello", timeout=10)
    assert refused.value.code is ErrorCode.TLS_FAILED
    assert tls_staging.token not in str(refused.value)
