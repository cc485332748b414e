"""What the staging backend's parts share, as narrow protocols: each part sees only these.

A leaf module (it imports no other part): :class:`~.server.StagingServer` assembles the
parts and hands each one the few objects it uses, typed by the protocols below, so no part
reaches for the whole server and no part imports :mod:`.server`. The server satisfies
:class:`Endpoint`, :class:`Pacing`, :class:`CapPolicy` and :class:`Blackout` itself: those
values change at run time (a test rotates the token, slows the speech down), so a part
reads them through the server at each use rather than a copy taken at construction.
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Iterable
from typing import Any, Protocol


class Endpoint(Protocol):
    """Where clients reach the backend, and the token it accepts (both read live)."""

    @property
    def token(self) -> str: ...

    @property
    def public_url(self) -> str: ...

    @property
    def media_url(self) -> str: ...


class Pacing(Protocol):
    """The backend's timing knobs, read at every use (a test may change them mid-run)."""

    @property
    def event_spacing(self) -> float: ...

    @property
    def speech_time_scale(self) -> float: ...


class CapPolicy(Protocol):
    """The conversation cap a server session starting now gets."""

    def conversation_cap(self) -> tuple[float, float] | None: ...


class Blackout(Protocol):
    """The listening socket, closed for an outage and reopened (``faults.blackout``)."""

    async def refuse_connections(self, seconds: float) -> None: ...

    def end_blackout(self) -> None: ...


class EmitFaults(Protocol):
    """The injected faults every server emit honours (held by ``Faults``)."""

    @property
    def withheld(self) -> set[str]: ...

    @property
    def added_latency(self) -> float: ...


class Emitter(Protocol):
    """The Socket.IO server's emit through the connection-state-recovery buffer."""

    async def emit_recoverable(self, sid: str, event: str, *args: Any) -> bool: ...


class MediaRelease(Protocol):
    """The media side's release of a conversation's peers when it ends."""

    async def close_conversation(self, sid: str) -> None: ...


class UplinkHost(Protocol):
    """What an ASR peer asks of the media side: its settings and faults, the answer to
    send, and where a decoded frame's level goes."""

    @property
    def ice_restart_grace(self) -> float | None: ...

    @property
    def asr_report_interval(self) -> float | None: ...

    def asr_stalled(self) -> bool: ...

    def finish_answer(self, channel: str, pc: Any) -> str: ...

    def on_uplink_frame(self, sid: str, rms: float, seconds: float) -> None: ...


class LiveConversation(Protocol):
    """One client's server session as the faults and the brain drive it."""

    agent_down: bool

    @property
    def sid(self) -> str: ...

    @property
    def approved(self) -> bool: ...

    @property
    def ended(self) -> bool: ...

    async def emit(self, event: str, payload: Any) -> None: ...

    def cancel_turn(self) -> None: ...

    def schedule_agent_restart(self, delay: float) -> None: ...

    async def voice_turn(self, text: str, *, onset: bool = True) -> bool: ...


class ResourceHolder(Protocol):
    """A part that holds server-side resources for clients (read by ``.ledger``)."""

    def held_resources(self) -> Iterable[tuple[str, str]]:
        """Every resource held now, as (kind, client id)."""
        ...


class ThreadIds:
    """New thread ids, for a join or a converse turn that names none (one count for both)."""

    def __init__(self) -> None:
        self._count = itertools.count(1)

    def new(self) -> str:
        return f"thr-{next(self._count):04d}-{secrets.token_hex(4)}"
