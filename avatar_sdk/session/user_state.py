"""UserState: what the user asked the server to hold (mute, pause, the approval), kept true
on every server session and across every recovery.

Socket.IO's connection-state recovery replays the server's missed events, never the
client's: a ``muteUser``, ``pauseConversation``, ``resumeConversation`` or the connect
sequence's ``approvedPermissions`` written into a socket that was already dying is simply
gone, and the server session the socket tier restores never saw it. So after every
recovery this part re-asserts the user's state:

* on a new server session (cold reconnect): mute and pause, as the user left them;
* on the same server session (socket tier): mute (idempotent) and pause (idempotent) as the
  user left them; a resume only while the server has not confirmed it
  (``conversationResumed``); the approval only while the server has shown no sign of
  having read it (no agent speech yet on that link).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from ..logs import sdk_logger
from ..wire import (
    AgentStartSpeech,
    ConversationResumed,
    InboundEvent,
    Out,
    build_approved_permissions,
    build_empty,
)
from .core.machine import SessionMachine
from .link import ServerLink
from .link_slot import LinkSlot

log = sdk_logger("avatar_sdk.session")

Spawn = Callable[[Coroutine[Any, Any, Any], str], "asyncio.Task[Any]"]


class UserState:
    """Mute, pause and approval, re-asserted on every server session (module docstring)."""

    def __init__(self, *, machine: SessionMachine, slot: LinkSlot, spawn: Spawn) -> None:
        self._machine = machine
        self._slot = slot
        self._spawn = spawn
        self.mic_enabled = True
        self._mute_toggled = False
        self._resume_unconfirmed = False
        self._approval_seen: ServerLink | None = None

    # -- the user's verbs -------------------------------------------------------------------
    def set_mic(self, enabled: bool) -> None:
        """Mute or unmute; sent now when a socket is up (in call order), else by the next
        recovery."""
        if enabled == self.mic_enabled:
            return
        self.mic_enabled = enabled
        self._mute_toggled = True
        link = self._slot.current
        if link is not None and link.connected and not self._machine.terminal:
            event = Out.UNMUTE_USER if enabled else Out.MUTE_USER
            # Posted, not awaited (a property setter): its place in the send order is taken
            # now; a refusal is harmless, every recovery tier re-applies the mute state.
            self._slot.outbox.post(event, build_empty(), self._spawn, "mute")

    def resume_sent(self) -> None:
        self._resume_unconfirmed = True

    def observe(self, link: ServerLink, event: InboundEvent) -> None:
        """Evidence from the server: it resumed, or it talks (so it read the approval)."""
        if isinstance(event, ConversationResumed):
            self._resume_unconfirmed = False
        elif isinstance(event, AgentStartSpeech):
            self._approval_seen = link

    # -- recoveries -------------------------------------------------------------------------
    async def on_new_session(self, link: ServerLink) -> None:
        """A new server session (first connect or cold reconnect) has just been approved: the
        machine's per-session facts start afresh, and the user's mute and pause hold there."""
        if link.lanes is not None and link.lanes.stv is not None:
            self._machine.set(subscribed=True)
        self._machine.set(media_released=False, agent_restarting=False)
        self._resume_unconfirmed = False
        if not self.mic_enabled:
            await self._slot.outbox.send(Out.MUTE_USER, build_empty(), link=link)
        if self._machine.data.user_paused:
            await self._slot.outbox.send(Out.PAUSE_CONVERSATION, build_empty(), link=link)

    async def on_same_session(self, link: ServerLink) -> None:
        """The socket tier restored ``link``'s server session: re-send what a dying socket
        may have swallowed (idempotent, or only while unconfirmed)."""
        if self._approval_seen is not link:
            await self._slot.outbox.send(
                Out.APPROVED_PERMISSIONS, build_approved_permissions(link.room_id), link=link
            )
        if not self.mic_enabled:
            await self._slot.outbox.send(Out.MUTE_USER, build_empty(), link=link)
        elif self._mute_toggled:
            await self._slot.outbox.send(Out.UNMUTE_USER, build_empty(), link=link)
        if self._machine.data.user_paused:
            await self._slot.outbox.send(Out.PAUSE_CONVERSATION, build_empty(), link=link)
        elif self._resume_unconfirmed:
            await self._slot.outbox.send(Out.RESUME_CONVERSATION, build_empty(), link=link)
