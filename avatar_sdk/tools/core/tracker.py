"""Which tool calls a turn dispatches (PROTOCOL.md §3.6), pure: per-turn de-duplication and
the recovery of fused calls. The session does the dispatching."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

from ...wire import ToolCall, canonical_json


class ToolTracker:
    """What a turn has already dispatched, and argument blobs waiting for their names.

    When a brain calls several tools at once, one ``tool`` segment may carry every call's
    arguments back to back but name only the last tool; the following ``tool_response``
    segments echo every name in call order, which is how the unnamed blobs are attributed.
    """

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self._fused: deque[Mapping[str, Any]] = deque(maxlen=64)
        self._names: set[str] = set()

    def on_speech_start(self, is_new_turn: bool) -> None:
        # The fused queue belongs to one sub-turn; de-duplication to a whole user turn.
        self._fused.clear()
        self._names.clear()
        if is_new_turn:
            self._seen.clear()

    def on_tool(self, call: ToolCall) -> ToolCall | None:
        """The call to dispatch, or None for a repeat within the turn."""
        self._fused.extend(call.fused_args)
        key = call.dedup_key
        if key in self._seen:
            return None
        self._seen.add(key)
        self._names.add(call.name)
        return call

    def on_tool_response(self, name: str) -> ToolCall | None:
        """A recovered fused call for ``name``, if a blob is waiting and ``name`` is new."""
        if not self._fused or name in self._names:
            return None
        args = self._fused.popleft()
        self._names.add(name)
        call = ToolCall(
            name=name,
            args=args,
            fused_args=(),
            raw=f"{name} {canonical_json(args)}",
            call_id=None,
            wait_for_response=False,
            tool_type=None,
        )
        self._seen.add(call.dedup_key)
        return call
