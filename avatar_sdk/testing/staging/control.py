"""The staging backend's HTTP control API: faults and brain scripts over plain HTTP.

What ``avatar-sdk staging serve`` mounts, so a test suite in any language (a JavaScript or
Go client's) can drive the backend the way a Python test calls ``staging.faults.*`` and
``staging.brain.*`` (``docs/testing.md`` has one runnable ``curl`` per fault):

* ``POST /_control/faults/<name>`` with a JSON object of keyword arguments (or no body)
  calls ``staging.faults.<name>(**body)``;
* ``POST /_control/brain/<name>`` does the same for a brain script (``reply``, ``stall``,
  ``tool_calls``, ``tool_spiral``, ``voice_turn``, ``listen``, ``stop_listening``,
  ``clear``);
* ``GET /_control/conversations`` lists what each client session did (turns taken,
  dropped, spoken) and ``GET /_control/received`` what the clients emitted, in order;
* ``GET /_control/resources``: what the backend still holds for clients (the resource
  ledger, :mod:`.ledger`): ``{"counts": {...}, "by_client": {...}}``;
* ``GET /_control/media``: the media the backend exchanged, counted on its side:
  ``{"video_frames_sent": n, "asr": {sid: {"frames": n, "peer_state": s}}}`` (a test in
  another process or language sees media flow, or stop, at the server).

Answers: ``200 {"ok": true, "result": <return value>}``; ``404`` for an unknown name;
``400 {"error": ...}`` for bad arguments. Bind it to loopback: it has no authentication.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol

from aiohttp import web

if TYPE_CHECKING:  # types only: the CLI and the fleet import this module for its constants
    from .brain import Brain
    from .conversation import Conversation, ReceivedEvent
    from .faults import Faults

__all__ = ["BRAIN_SCRIPTS", "CONTROL_PREFIX", "control_routes", "fault_names"]

CONTROL_PREFIX: Final = "/_control"
#: Brain scripts callable over HTTP.
BRAIN_SCRIPTS: Final = (
    "reply",
    "stall",
    "tool_calls",
    "tool_spiral",
    "voice_turn",
    "listen",
    "stop_listening",
    "clear",
)


class Controlled(Protocol):
    """What the control API drives and reports: the staging backend's faults and brain, its
    client sessions and what they emitted."""

    @property
    def faults(self) -> Faults: ...

    @property
    def brain(self) -> Brain: ...

    @property
    def conversations(self) -> Mapping[str, Conversation]: ...

    @property
    def received(self) -> Sequence[ReceivedEvent]: ...

    def live_resources(self) -> dict[str, int]: ...

    def resources_by_client(self) -> dict[str, dict[str, int]]: ...

    def media_counts(self) -> dict[str, Any]: ...


#: Public ``Faults`` callables that are helpers of the server, not faults.
_NOT_FAULTS: Final = frozenset({"take_admission_error", "take_genie_status", "take_refused_join"})


def fault_names(staging: Controlled) -> list[str]:
    """Every fault the control API accepts, sorted."""
    faults = staging.faults
    return sorted(
        name
        for name in dir(faults)
        if not name.startswith("_")
        and name not in _NOT_FAULTS
        and callable(getattr(faults, name, None))
    )


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)
    return value


async def _call(target: Callable[..., Any], request: web.Request) -> web.Response:
    try:
        kwargs = await request.json() if request.can_read_body else {}
        if not isinstance(kwargs, dict):
            raise TypeError("the body must be a JSON object of keyword arguments")
        result = target(**kwargs)
        if inspect.isawaitable(result):
            result = await result
    except (TypeError, ValueError) as exc:
        return web.json_response({"error": str(exc)}, status=400)
    return web.json_response({"ok": True, "result": _jsonable(result)})


def control_routes(staging: Controlled) -> Callable[[web.Application], None]:
    """A ``StagingServer.add_routes`` hook mounting the control API for ``staging``."""
    allowed_faults = frozenset(fault_names(staging))

    async def fault(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in allowed_faults:
            return web.json_response({"error": f"unknown fault {name}"}, status=404)
        return await _call(getattr(staging.faults, name), request)

    async def brain(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in BRAIN_SCRIPTS:
            return web.json_response({"error": f"unknown brain script {name}"}, status=404)
        return await _call(getattr(staging.brain, name), request)

    async def conversations(request: web.Request) -> web.Response:
        return web.json_response(
            [
                {
                    "sid": sid,
                    "joined": conv.joined,
                    "approved": conv.approved,
                    "ended": conv.ended,
                    "debug_mode": conv.debug_mode,
                    "user_turns": conv.user_turns,
                    "voice_turns": conv.voice_turns,
                    "dropped_turns": conv.dropped_turns,
                }
                for sid, conv in staging.conversations.items()
            ]
        )

    async def received(request: web.Request) -> web.Response:
        return web.json_response(
            [
                {"sid": r.sid, "event": r.event, "payload": _jsonable(r.payload)}
                for r in staging.received
            ]
        )

    async def resources(request: web.Request) -> web.Response:
        return web.json_response(
            {"counts": staging.live_resources(), "by_client": staging.resources_by_client()}
        )

    async def media(request: web.Request) -> web.Response:
        return web.json_response(staging.media_counts())

    def mount(app: web.Application) -> None:
        app.router.add_post(CONTROL_PREFIX + "/faults/{name}", fault)
        app.router.add_post(CONTROL_PREFIX + "/brain/{name}", brain)
        app.router.add_get(CONTROL_PREFIX + "/conversations", conversations)
        app.router.add_get(CONTROL_PREFIX + "/received", received)
        app.router.add_get(CONTROL_PREFIX + "/resources", resources)
        app.router.add_get(CONTROL_PREFIX + "/media", media)

    return mount
