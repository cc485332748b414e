"""The connect sequence (PROTOCOL.md §2) over one control channel.

:class:`Handshake` collects the one-shot handshake events of one socket as they arrive, so
a step never misses an event that raced ahead of its wait. :func:`run_handshake` walks the
steps, each bounded by its own timeout and by the overall deadline, reporting progress
through ``advance`` so the session machine moves through its ``connecting_*`` states.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ..clock import Clock
from ..config import SessionConfig
from ..errors import AvatarError, ErrorCode
from ..transport.socketio.control import ControlChannel
from ..wire import (
    AskPermissions,
    ClientConfiguration,
    In,
    InboundEvent,
    Out,
    ServerConnected,
    StvNewSession,
    build_approved_permissions,
    build_check_availability,
    build_join,
    build_stv_new_session,
)
from .core.machine import Trigger, step_timeout


class Handshake:
    """Handshake events of one socket, available to waits that start before or after them."""

    def __init__(self) -> None:
        self._futures: dict[str, asyncio.Future[InboundEvent]] = {}
        self._failure: AvatarError | None = None
        self._failed = asyncio.Event()

    def _future(self, name: str) -> asyncio.Future[InboundEvent]:
        fut = self._futures.get(name)
        if fut is None:
            fut = asyncio.get_running_loop().create_future()
            self._futures[name] = fut
        return fut

    def offer(self, name: str, event: InboundEvent) -> None:
        """Record an arrived handshake event (the first one of each name wins)."""
        fut = self._future(name)
        if not fut.done():
            fut.set_result(event)

    def fail(self, error: AvatarError) -> None:
        """End every current and future wait with ``error`` (the first failure wins)."""
        if self._failure is None:
            self._failure = error
            self._failed.set()

    @property
    def failure(self) -> AvatarError | None:
        return self._failure

    async def wait(self, name: str, timeout: float, code: ErrorCode) -> InboundEvent:
        """The event ``name``, or ``AvatarError(code)`` after ``timeout`` seconds."""
        if self._failure is not None:
            raise self._failure
        fut = self._future(name)
        failed: asyncio.Future[Any] = asyncio.ensure_future(self._failed.wait())
        waits: set[asyncio.Future[Any]] = {fut, failed}
        try:
            await asyncio.wait(
                waits, timeout=max(timeout, 0.0), return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            failed.cancel()
        if fut.done() and not fut.cancelled():
            return fut.result()
        if self._failure is not None:
            raise self._failure
        raise AvatarError(code, f"no {name} within {timeout:.3g}s")

    def close(self) -> None:
        for fut in self._futures.values():
            if not fut.done():
                fut.cancel()


@dataclass
class HandshakeResult:
    """What the connect sequence learned."""

    room_id: str
    server: ServerConnected | None = None
    client_configuration: dict[str, Any] | None = None
    stv: StvNewSession | None = None
    permissions: AskPermissions | None = None


#: Reports progress through the connect steps (the machine's ``connecting_*`` triggers).
Advance = Callable[[Trigger], None]


class Deadline:
    """The overall connect deadline; every step's wait is clipped to it. On the session's
    clock, as the recovery tiers that start it and measure around it are."""

    def __init__(self, seconds: float, clock: Clock) -> None:
        self._clock = clock
        self.expires = clock.monotonic() + seconds

    def remaining(self) -> float:
        return max(0.0, self.expires - self._clock.monotonic())

    def clip(self, seconds: float, code: ErrorCode) -> tuple[float, ErrorCode]:
        """The wait to use, and its code on expiry (connect_timeout when the overall deadline)."""
        remaining = self.expires - self._clock.monotonic()
        if remaining < seconds:
            return max(remaining, 0.0), ErrorCode.CONNECT_TIMEOUT
        return seconds, code


async def wait_step(
    handshake: Handshake, config: SessionConfig, deadline: Deadline, name: str
) -> InboundEvent:
    """Wait for handshake event ``name`` within its step timeout and the overall deadline."""
    seconds, code = step_timeout(config, name)
    wait, wait_code = deadline.clip(seconds, code)
    return await handshake.wait(name, wait, wait_code)


async def run_handshake(
    channel: ControlChannel,
    handshake: Handshake,
    *,
    config: SessionConfig,
    deadline: Deadline,
    token: str,
    room_id: str,
    thread_id: str | None,
    media: bool,
    advance: Advance,
    media_steps: Callable[[HandshakeResult], Awaitable[None]] | None = None,
) -> HandshakeResult:
    """Run steps 1-11 on an open channel. Raises ``AvatarError`` with the step's code."""
    result = HandshakeResult(room_id=room_id)
    server = await wait_step(handshake, config, deadline, In.ON_SERVER_CONNECTED)
    result.server = server if isinstance(server, ServerConnected) else None
    advance(Trigger.SOCKET_OPEN)

    await channel.emit(Out.JOIN, build_join(room_id=room_id, token=token, thread_id=thread_id))
    cfg, _ = await asyncio.gather(
        wait_step(handshake, config, deadline, In.CLIENT_CONFIGURATION),
        wait_step(handshake, config, deadline, In.JOIN_COMPLETE),
    )
    if isinstance(cfg, ClientConfiguration):
        result.client_configuration = dict(cfg.config)
    advance(Trigger.JOINED)

    # stvNewSession first, availability in parallel (the reference order, PROTOCOL.md §4.7).
    await channel.emit(Out.STV_NEW_SESSION, build_stv_new_session(room_id))
    await channel.emit(Out.CHECK_AVAILABILITY, build_check_availability())
    stv = await wait_step(handshake, config, deadline, In.STV_NEW_SESSION)
    result.stv = stv if isinstance(stv, StvNewSession) else None
    advance(Trigger.STV_READY)

    await wait_step(handshake, config, deadline, In.SHOW_AGENT)
    advance(Trigger.AGENT_SHOWN)
    perms = await wait_step(handshake, config, deadline, In.ASK_PERMISSIONS)
    result.permissions = perms if isinstance(perms, AskPermissions) else None

    if media and media_steps is not None:
        advance(Trigger.PERMISSIONS_ASKED)
        await media_steps(result)
    else:
        advance(Trigger.MEDIA_SKIPPED)

    await channel.emit(Out.APPROVED_PERMISSIONS, build_approved_permissions(room_id))
    return result
