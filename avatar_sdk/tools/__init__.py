"""Client-side tools (PROTOCOL.md §3.6), shared by both transports.

Pure rules: ``tracker`` (which calls a turn dispatches: de-duplication, fused-call
recovery), ``schema`` (argument schemas, JSON Schema) and ``pending`` (which calls wait for
an acknowledgement); with I/O: ``dispatch`` (the handlers, run on the event loop) and
``acks`` (``respond_to_tool`` through the session's genie client). The brain guards
(:class:`~avatar_sdk.guards.brain.ConversationGuards`) feed them one conversation's calls.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from .acks import TOOL_ACK_TIMEOUT, ToolAckSender, ToolResponder
    from .core.pending import PendingAck, PendingAcks
    from .core.schema import ArgsSchema
    from .core.tracker import ToolTracker
    from .dispatch import ToolDispatcher, ToolHandler, call_payload

#: Public name -> the submodule that defines it (loaded on first use).
_EXPORTS: dict[str, str] = {
    "ArgsSchema": ".core.schema",
    "PendingAck": ".core.pending",
    "PendingAcks": ".core.pending",
    "TOOL_ACK_TIMEOUT": ".acks",
    "ToolAckSender": ".acks",
    "ToolDispatcher": ".dispatch",
    "ToolHandler": ".dispatch",
    "ToolResponder": ".acks",
    "ToolTracker": ".core.tracker",
    "call_payload": ".dispatch",
}

__all__ = [
    "TOOL_ACK_TIMEOUT",
    "ArgsSchema",
    "PendingAck",
    "PendingAcks",
    "ToolAckSender",
    "ToolDispatcher",
    "ToolHandler",
    "ToolResponder",
    "ToolTracker",
    "call_payload",
]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
