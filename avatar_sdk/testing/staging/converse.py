"""The staging genie's chat endpoint: ``POST /genie/assistant/converse`` (PROTOCOL.md §5.6).

One request is one user turn. The answer is an NDJSON stream (``application/x-ndjson``):
one JSON object per line, and each object **is** a brain delta (``{"role": "assistant",
"type": ..., "content": ..., "segmentNumber": ..., "et": ...}``), as the real genie sends
it and the reference client parses it; there is no ``{"delta": "<json string>"}``
envelope here (that wrapping belongs to the socket's ``agent_raw_text``). With
``"sse": true`` in the body the same objects are framed as ``data: <json>`` events.

The turn comes from the server's scripted :class:`~avatar_sdk.testing.Brain`: a first
``think`` carrying ``threadId`` and ``messageId``, then (after ``brain.stall`` seconds, if
scripted) the tool segments of ``brain.tool_calls``/``brain.tool_spiral`` each followed by
its ``tool_response``, the reply text in a few ``text`` chunks, and a final ``think``.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any, Final

from aiohttp import web

from ...transport.net.genie import CONVERSE_PATH
from .brain import Brain, tool_segment
from .state import EmitFaults, Endpoint, Pacing, ThreadIds

__all__ = ["CONVERSE_ROUTE", "ConverseEndpoint", "ConverseRequest", "mount_converse"]

CONVERSE_ROUTE: Final = "/genie" + CONVERSE_PATH
#: How often a stalled turn checks whether its client went away.
_POLL: Final = 0.02


@dataclass
class ConverseRequest:
    """One ``POST /genie/assistant/converse`` as the server saw it."""

    status: int
    body: dict[str, Any] | None = None
    thread_id: str | None = None
    segments_sent: int = 0
    #: The client went away (closed the response) before the stream ended.
    aborted: bool = False
    #: The whole stream was written.
    completed: bool = False
    #: ``time.monotonic()`` at arrival, and when the stream ended (written or aborted).
    at: float = field(default_factory=time.monotonic)
    ended_at: float | None = None

    @property
    def user_message(self) -> str | None:
        value = (self.body or {}).get("userMessage")
        return value if isinstance(value, str) else None


class _ClientGone(Exception):
    """The client closed the connection mid-stream."""


class ConverseEndpoint:
    """Serves converse turns from ``brain``; ``requests`` records every request."""

    def __init__(
        self,
        *,
        brain: Brain,
        endpoint: Endpoint,
        thread_ids: ThreadIds,
        pacing: Pacing,
        faults: EmitFaults,
    ) -> None:
        """``endpoint``: the token a request must carry; ``thread_ids``: a turn naming no
        thread starts one; ``pacing`` spaces the deltas; ``faults``: the added latency."""
        self.brain = brain
        self.endpoint = endpoint
        self.thread_ids = thread_ids
        self.pacing = pacing
        self.faults = faults
        self.requests: list[ConverseRequest] = []

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post(CONVERSE_ROUTE, self.handle)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("Authorization") != f"KS {self.endpoint.token}":
            self.requests.append(ConverseRequest(status=401))
            return web.json_response({"error": "unauthorized"}, status=401)
        try:
            body = await request.json()
        except ValueError:
            self.requests.append(ConverseRequest(status=400))
            return web.json_response({"error": "bad json"}, status=400)
        if not isinstance(body, dict):
            self.requests.append(ConverseRequest(status=400))
            return web.json_response({"error": "body must be an object"}, status=400)
        message = body.get("userMessage")
        if not isinstance(message, str) or not message.strip():
            self.requests.append(ConverseRequest(status=400, body=body))
            return web.json_response({"error": "userMessage is required"}, status=400)
        thread = body.get("threadId")
        thread_id = thread if isinstance(thread, str) and thread else self.thread_ids.new()
        record = ConverseRequest(status=200, body=body, thread_id=thread_id)
        self.requests.append(record)
        if self.faults.added_latency:
            await asyncio.sleep(self.faults.added_latency)
        response = web.StreamResponse(
            status=200,
            headers={"Content-Type": "application/x-ndjson", "Cache-Control": "no-cache"},
        )
        await response.prepare(request)
        try:
            await self._stream(request, response, record, message, sse=body.get("sse") is True)
            await response.write_eof()
            record.completed = True
        except (_ClientGone, ConnectionError):
            record.aborted = True
        except asyncio.CancelledError:
            record.aborted = True
            raise
        finally:
            record.ended_at = time.monotonic()
        return response

    async def _stream(
        self,
        request: web.Request,
        response: web.StreamResponse,
        record: ConverseRequest,
        message: str,
        *,
        sse: bool,
    ) -> None:
        brain = self.brain
        plan = brain.next_plan(message)
        brain.turns_started += 1
        number = 0

        async def send(delta: dict[str, Any]) -> None:
            nonlocal number
            if _gone(request):
                raise _ClientGone
            number += 1
            line = json.dumps(
                {"role": "assistant", "segmentNumber": number, "et": round(0.05 * number, 3)}
                | delta
            )
            await response.write((f"data: {line}\n\n" if sse else line + "\n").encode())
            record.segments_sent += 1
            await asyncio.sleep(self.pacing.event_spacing)

        await send(
            {
                "type": "think",
                "content": "",
                "threadId": record.thread_id,
                "messageId": "msg-" + secrets.token_hex(6),
            }
        )
        if plan.stall:
            await _sleep_unless_gone(request, plan.stall)
        for call in plan.tool_calls:
            segment = tool_segment(call)  # a fused segment echoes every name, in call order
            await send({"type": "tool", "content": segment.content})
            for name in segment.responses:
                await send({"type": "tool_response", "content": f"{name} responded with size 2"})
        text = plan.text or ""
        words = text.split()
        step = max(1, brain.chunk_words)
        for i in range(0, len(words), step):
            chunk = " ".join(words[i : i + step])
            await send({"type": "text", "content": chunk if i == 0 else " " + chunk})
        await send({"type": "think", "content": "", "isFinal": True})


def _gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


async def _sleep_unless_gone(request: web.Request, seconds: float) -> None:
    """A brain stall that ends early when the client hangs up (as a real one is aborted)."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        if _gone(request):
            raise _ClientGone
        await asyncio.sleep(min(_POLL, left))


def mount_converse(endpoint: ConverseEndpoint, app: web.Application) -> list[ConverseRequest]:
    """Serve ``endpoint`` on ``app``; returns the list that records its requests (the
    server keeps it as ``staging.converse_requests``)."""
    endpoint.add_routes(app)
    return endpoint.requests
