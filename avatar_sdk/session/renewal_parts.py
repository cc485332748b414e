"""RenewalParts: what a renewal reads and drives in its session, as the parts themselves.

A renewal needs to know whether the conversation is at a turn boundary, to hand the turns
waiting over to the new server session, to forget tool calls it abandons, and, when it
cannot go on, to go cold or end. Each of these is a few lines over the session's own parts
(the turn desk, the replies, the guards, the recovery, the endings), gathered here rather
than handed down as closures of the facade; none of them calls back into the renewal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..clock import Clock
from ..errors import ErrorCode
from ..guards.brain import ConversationGuards
from ..transport.rtc.asr import UplinkTrack
from ..transport.rtc.stv import FanoutTrack
from .conversation import ConversationView
from .core.machine import SessionMachine
from .core.renewal_plan import Boundary
from .endings import Endings
from .link import ServerLink
from .recovery import RecoveryController
from .replies import Replies
from .turn_desk import TurnDesk
from .user_state import UserState

__all__ = ["RenewalParts"]


@dataclass(frozen=True, slots=True)
class RenewalParts:
    """The session parts a :class:`~.renewal.RenewalController` works with."""

    machine: SessionMachine
    clock: Clock
    desk: TurnDesk
    replies: Replies
    guards: ConversationGuards
    user: UserState
    view: ConversationView
    recovery: RecoveryController
    endings: Endings
    outputs: dict[str, FanoutTrack]
    uplink: UplinkTrack

    def boundary(self) -> Boundary:
        """Where the conversation stands now: a swap waits for a turn boundary."""
        desk = self.desk
        return Boundary(
            usable=self.machine.connected,
            floor_busy=self.replies.floor.busy(self.clock.monotonic()),
            gate_open=desk.gate.phase == "open",
            unconfirmed_turns=len(desk.ledger.unconfirmed()),
            held_turns=desk.held,
            awaiting_replies=self.replies.awaiting(),
            pending_tool_calls=len(self.guards.acks),
        )

    async def restore(self, link: ServerLink) -> None:
        """The user's mute and pause on the new server session."""
        await self.user.on_new_session(link)

    async def deliver(self, cut: bool) -> None:
        """After the swap: turns held or unconfirmed go out on the new server session;
        with a cut turn, the turns whose answer had not ended are asked again."""
        deliver = self.desk.after_recovery("renewal")  # its cut-off is taken now
        if cut:
            texts = self.replies.cut()
            self.desk.reset_gate()
            await self.desk.resend_cut(texts)
        await deliver

    def abandon_tool_calls(self) -> list[str]:
        """A forced swap: the old server session's pending tool calls can no longer be
        answered; their ids are reported (``session_renewed``) and forgotten."""
        ids = self.guards.acks.ids()
        self.guards.on_rebuilt()
        return ids

    def thread_id(self) -> str | None:
        return self.view.thread_id

    async def recover_cold(self, reason: str) -> Any:
        """A break-before-make that cannot join: the cold tier takes over."""
        return await self.recovery.recover_cold(reason)

    async def end(self) -> None:
        """End the session as the server ended it (a capped server session nothing
        replaced)."""
        await self.endings.end("conversation_ended", ErrorCode.SERVER_ENDED)
