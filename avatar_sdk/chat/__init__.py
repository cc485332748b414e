"""Chat: the HTTP text transport (``ChatSession``, ``converse_once``) and its NDJSON wire."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from .session import ChatReply, ChatSession, ConverseResult, converse_once

#: Public name -> the submodule that defines it (loaded on first use).
_EXPORTS: dict[str, str] = {
    "ChatReply": ".session",
    "ChatSession": ".session",
    "ConverseResult": ".session",
    "converse_once": ".session",
}

__all__ = ["ChatReply", "ChatSession", "ConverseResult", "converse_once"]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
