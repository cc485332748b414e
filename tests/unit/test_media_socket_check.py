"""A peer closed by the far end is recovered only once the socket is confirmed alive: the
pure decision, the probe that a drop cuts short, and the controller's socket check (no
network: a fake control channel)."""

from __future__ import annotations

import asyncio

import pytest

from avatar_sdk import SessionConfig
from avatar_sdk.clock import FakeClock
from avatar_sdk.events.bus import EventBus
from avatar_sdk.session.assemble import assemble
from avatar_sdk.session.core.decisions import decide_media_down
from avatar_sdk.session.link import ServerLink
from avatar_sdk.session.recovery import RecoveryController
from avatar_sdk.session.spec import SessionSpec
from avatar_sdk.wire import AvailabilityResult, In, Out


@pytest.mark.parametrize(
    ("peer_state", "decision"),
    [
        ("closed", "check_socket"),  # the far end tore it down: maybe its whole session
        ("failed", "recover"),  # ICE failed on the path
        ("connected", "recover"),  # a stall (no frames, no receiver reports)
        (None, "recover"),
    ],
)
def test_only_a_peer_closed_by_the_far_end_checks_the_socket_first(
    peer_state: str | None, decision: str
) -> None:
    assert decide_media_down(peer_state) == decision


class _Channel:
    """A control channel that records what is sent and dropped; nothing answers."""

    def __init__(self) -> None:
        self.connected = True
        self.sent: list[str] = []
        self.drops: list[str] = []
        self.last_activity = 0.0
        self.probed = asyncio.Event()

    async def emit(self, event: str, payload: object) -> None:
        self.sent.append(event)
        self.probed.set()

    async def drop(self, reason: str = "ping timeout") -> None:
        self.drops.append(reason)


def _link() -> tuple[ServerLink, _Channel]:
    channel = _Channel()
    return ServerLink(channel=channel, config=SessionConfig()), channel  # type: ignore[arg-type]


def _controller(link: ServerLink, probe_timeout: float) -> RecoveryController:
    """The recovery controller of a session built by the session's own assembly, with
    ``link`` as its current link."""
    config = SessionConfig(socket_probe_timeout=probe_timeout)
    spec = SessionSpec("http://127.0.0.1:9", "tok", config, FakeClock(), media=False)
    parts = assemble(spec, EventBus())
    parts.slot.current = link
    return parts.recovery


async def _probed(channel: _Channel) -> None:
    await asyncio.wait_for(channel.probed.wait(), 1.0)
    assert channel.sent == [Out.CHECK_AVAILABILITY]


async def test_a_probe_ends_false_the_moment_its_socket_drops() -> None:
    link, channel = _link()
    probe = asyncio.ensure_future(link.probe(30.0))
    await _probed(channel)
    assert not probe.done()
    link.socket_dropped()
    assert await asyncio.wait_for(probe, 1.0) is False  # not after the 30 s timeout


async def test_an_answered_probe_confirms_the_socket() -> None:
    link, channel = _link()
    controller = _controller(link, probe_timeout=30.0)
    alive = asyncio.ensure_future(controller.socket_alive(link))
    await _probed(channel)
    link.receive(_Listener(), In.AVAILABILITY_RESULT, [{"available": True}])
    assert await asyncio.wait_for(alive, 1.0) is True
    assert channel.drops == []


async def test_a_socket_that_drops_during_the_check_is_not_dropped_again() -> None:
    link, channel = _link()
    controller = _controller(link, probe_timeout=30.0)
    alive = asyncio.ensure_future(controller.socket_alive(link))
    await _probed(channel)
    channel.connected = False
    link.socket_dropped()  # the disconnect is being handled by the socket tier
    assert await asyncio.wait_for(alive, 1.0) is False
    assert channel.drops == []


async def test_an_unanswered_probe_on_an_open_socket_drops_it() -> None:
    link, channel = _link()
    controller = _controller(link, probe_timeout=0.05)
    assert await asyncio.wait_for(controller.socket_alive(link), 1.0) is False
    assert channel.drops == ["ping timeout"]  # silently dead: handed to the socket tier


class _Listener:
    def on_inbound(self, link: ServerLink, name: str, event: object) -> None:
        assert isinstance(event, AvailabilityResult)

    def on_protocol_error(self, link: ServerLink, name: str, detail: str) -> None:
        raise AssertionError(detail)

    def on_disconnect(self, link: ServerLink, reason: str) -> None:
        raise AssertionError(reason)
