"""Client-side tool handlers, and the dispatch of one call to them (PROTOCOL.md §3.6).

A call's arguments are checked against every handler's schema first (one failure: a
``tool_call_invalid`` event and no handler runs), then ``tool_call`` goes out and each
handler runs; an async handler runs as a task of the dispatcher's, cancelled by
:meth:`ToolDispatcher.aclose`. Which calls to dispatch is :class:`~.tracker.ToolTracker`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ..clock import SYSTEM_CLOCK, Clock
from ..errors import AvatarError, ErrorCode
from ..observe import NO_OBSERVERS, Observers, Point
from ..wire import ToolCall
from .core.pending import PendingAcks
from .core.schema import ArgsSchema

Emit = Callable[[str, dict[str, Any]], object]
ToolHandler = Callable[..., Any]


def call_payload(call: ToolCall, speech_id: str | None = None) -> dict[str, Any]:
    """A tool call as events carry it."""
    return {
        "name": call.name,
        "args": dict(call.args),
        "fused_args": [dict(a) for a in call.fused_args],
        "speech_id": speech_id,
        "call_id": call.call_id,
    }


class ToolDispatcher:
    """The registered tool handlers of one conversation, and the calls dispatched to them.

    A call that waits for a result is added to ``acks`` as it is dispatched, so
    ``respond_to_tool`` can answer it (:class:`~.acks.ToolResponder`)."""

    def __init__(
        self,
        emit: Emit,
        acks: PendingAcks,
        *,
        clock: Clock = SYSTEM_CLOCK,
        observers: Observers = NO_OBSERVERS,
    ) -> None:
        self._emit = emit
        self._acks = acks
        self._clock = clock
        self._observers = observers
        self._handlers: dict[str, list[tuple[ToolHandler, ArgsSchema | None]]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    def on_tool_call(
        self, name: str, handler: ToolHandler, schema: Mapping[str, Any] | None = None
    ) -> Callable[[], None]:
        """Run ``handler(args, call)`` for each call of tool ``name``; returns unregister.

        ``schema`` is checked and compiled here, once: an invalid one raises
        ``AvatarError(INVALID_ARGUMENT)`` now rather than failing every call later."""
        if not isinstance(name, str) or not name:
            raise AvatarError(ErrorCode.INVALID_ARGUMENT, "tool name must be a non-empty string")
        if not callable(handler):
            raise AvatarError(ErrorCode.INVALID_ARGUMENT, "handler must be callable")
        entry = (handler, None if schema is None else ArgsSchema(name, schema))
        self._handlers.setdefault(name, []).append(entry)

        def unregister() -> None:
            with contextlib.suppress(ValueError, KeyError):
                self._handlers[name].remove(entry)

        return unregister

    def dispatch(self, call: ToolCall, speech_id: str | None) -> None:
        """Hand one (new) call to its handlers, or report its invalid arguments."""
        payload = call_payload(call, speech_id)
        waits = bool(call.wait_for_response and call.call_id)
        if waits and call.call_id:
            self._acks.add(call.call_id, call.name, self._clock.monotonic())
        if self._observers:
            self._observers.point(
                Point.TOOL_DISPATCHED, {"name": call.name, "call_id": call.call_id, "waits": waits}
            )
        entries = self._handlers.get(call.name, [])
        for _, schema in entries:
            if schema is not None:
                errors = schema.errors(dict(call.args))
                if errors:
                    self._emit("tool_call_invalid", {"call": payload, "errors": errors})
                    return
        self._emit("tool_call", payload)
        for handler, _ in list(entries):
            self._run_handler(handler, call, payload)

    def _run_handler(self, handler: ToolHandler, call: ToolCall, payload: dict[str, Any]) -> None:
        try:
            result = handler(dict(call.args), payload)
        except Exception as exc:
            self._emit("tool_call_result", {"call": payload, "ok": False, "error": repr(exc)[:300]})
            return
        if inspect.isawaitable(result):
            task = asyncio.ensure_future(self._await_handler(result, payload))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        elif result is not None:
            self._emit("tool_call_result", {"call": payload, "ok": True, "value": result})

    async def _await_handler(self, awaitable: Awaitable[Any], payload: dict[str, Any]) -> None:
        try:
            value = await awaitable
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._emit("tool_call_result", {"call": payload, "ok": False, "error": repr(exc)[:300]})
            return
        if value is not None:
            self._emit("tool_call_result", {"call": payload, "ok": True, "value": value})

    async def aclose(self) -> None:
        """Cancel the async handlers still running, and wait for them."""
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
