"""ChatSession: the HTTP text transport to the same brain and thread (PROTOCOL.md §5.6).

Each :meth:`ChatSession.send` is one ``POST {genie_url}/assistant/converse`` whose answer is
an NDJSON stream of brain segments, parsed while it arrives so a tool handler can act (and
acknowledge) within the same turn. No socket, no media: nothing to connect, nothing to
reconnect. The guards are the avatar session's
(:class:`~avatar_sdk.guards.brain.ConversationGuards`) minus the hard spiral tier, which needs
a socket to rebuild: a stuck chat turn is bounded by the caller's ``timeout`` (or
cancellation) instead.

The converse wire (NDJSON framing, request bodies) is in :mod:`avatar_sdk.chat.wire`.
"""

from __future__ import annotations

import asyncio
import math
import ssl as ssl_module
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import aiohttp

from ..clock import SYSTEM_CLOCK, Clock
from ..config import SessionConfig
from ..errors import AvatarError, ErrorCode
from ..events.bus import EventSource
from ..guards.brain import SPIRAL_RECOVERY_PREFIX, ConversationGuards
from ..lifecycle.completion import CompletionSignal, default_hooks
from ..logs import sdk_logger
from ..redact import register_secret
from ..tools.dispatch import ToolHandler
from ..transport.net.genie import CONVERSE_PATH, GenieClient
from ..transport.net.tls import client_context, connector, tls_error, unreachable_error
from ..urls import check_url
from ..wire import AgentEndTurn, AgentRawText, AgentStartSpeech, BrainSegment
from ..wire.errors import ProtocolError
from .wire import (
    KEEPALIVE,
    MAX_LINE_BYTES,
    LineSplitter,
    build_converse_body,
    check_request_vars,
    http_error,
    limit,
    parse_converse_line,
)

__all__ = [
    "MAX_LINE_BYTES",
    "SPIRAL_RECOVERY_PREFIX",
    "ChatReply",
    "ChatSession",
    "ConverseResult",
    "LineSplitter",
    "build_converse_body",
    "check_request_vars",
    "converse_once",
    "parse_converse_line",
]

log = sdk_logger(__name__)


@dataclass(frozen=True, slots=True)
class ChatReply:
    """One chat turn.

    ``text``: the spoken segments, concatenated (stripped). ``tool_calls``: the calls
    dispatched this turn, de-duplicated, as ``tool_call`` events carry them; calls whose
    arguments failed their schema are in ``invalid_tool_calls`` (``{call, errors}``).
    ``spiral_detected``: the soft spiral limit was reached (``tool_spiral_detected``).
    ``spiral_stopped``: reading stopped at ``max_tool_calls`` raw tool segments;
    ``truncated``: reading stopped at ``max_segments``.
    """

    text: str
    segments: tuple[BrainSegment, ...]
    tool_calls: tuple[dict[str, Any], ...]
    spiral_stopped: bool
    thread_id: str | None
    spiral_detected: bool = False
    truncated: bool = False
    invalid_tool_calls: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True, slots=True)
class ConverseResult:
    """What :func:`converse_once` collected (PROTOCOL.md §5.6).

    ``tool_calls`` holds at most ``max_per_tool`` calls per name. After a spiral recovery
    (``first_attempt`` is set) this is the follow-up turn; ``spiral_recovered`` says whether
    that follow-up got out of the spiral (it did not stop again with empty text).
    """

    text: str
    thread_id: str | None
    segments: tuple[BrainSegment, ...]
    tool_calls: tuple[dict[str, Any], ...]
    tool_calls_invalid: tuple[dict[str, Any], ...]
    spiral_stopped: bool
    truncated: bool
    spiral_recovered: bool = False
    first_attempt: ConverseResult | None = None


@dataclass
class _Turn:
    turn_id: str
    max_tool_calls: int | None
    max_segments: int | None
    text: list[str] = field(default_factory=list)
    segments: list[BrainSegment] = field(default_factory=list)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    invalid: list[dict[str, Any]] = field(default_factory=list)
    raw_tools: int = 0
    spiral_detected: bool = False
    spiral_stopped: bool = False
    truncated: bool = False

    def reply(self, thread_id: str | None) -> ChatReply:
        return ChatReply(
            text="".join(self.text).strip(),
            segments=tuple(self.segments),
            tool_calls=tuple(self.tool_calls),
            spiral_stopped=self.spiral_stopped,
            thread_id=thread_id,
            spiral_detected=self.spiral_detected,
            truncated=self.truncated,
            invalid_tool_calls=tuple(self.invalid),
        )


# -- the session -------------------------------------------------------------------------------
class ChatSession(EventSource):
    """A text conversation over HTTP with the agent of ``token`` (a conversation KS).

    ``genie_url``: the genie API base (``https://...``; plain http needs
    ``allow_insecure_transport``). ``thread_id``: continue that conversation (for example
    an :class:`~avatar_sdk.AvatarSession`'s ``thread_id``). ``request_vars``: scalar
    ``{{var}}`` values sent with every turn. ``config``: the guards read
    ``brain_stall_timeout``, ``tool_spiral_limit``, ``server_connect_timeout``,
    ``session_complete_timeout`` and ``close_timeout``.
    """

    def __init__(
        self,
        genie_url: str,
        token: str,
        *,
        thread_id: str | None = None,
        config: SessionConfig | None = None,
        allow_insecure_transport: bool = False,
        request_vars: Mapping[str, Any] | None = None,
        clock: Clock | None = None,
        ssl: ssl_module.SSLContext | None = None,
        ca_file: str | None = None,
    ) -> None:
        if not isinstance(token, str) or not token.strip():
            raise AvatarError(ErrorCode.INVALID_ARGUMENT, "token must be a non-empty string")
        register_secret(token)
        self.__token = token
        self._genie_url = check_url(
            genie_url, allow_insecure=allow_insecure_transport, what="genie_url"
        )
        if thread_id is not None and (not isinstance(thread_id, str) or not thread_id):
            raise AvatarError(ErrorCode.INVALID_ARGUMENT, "thread_id must be a non-empty string")
        self._request_vars = check_request_vars(request_vars)
        # One TLS trust for the converse stream and the genie calls (a private CA: ca_file).
        self._tls = client_context(ssl, ca_file, allow_insecure=allow_insecure_transport)
        if config is not None and not isinstance(config, SessionConfig):
            raise AvatarError(
                ErrorCode.INVALID_ARGUMENT,
                f"config must be a SessionConfig, not {type(config).__name__}"
                " (build one: SessionConfig(**fields))",
            )
        self.config = config or SessionConfig()
        self._thread_id = thread_id
        clock = clock or SYSTEM_CLOCK
        super().__init__(clock=clock)
        self._guards = ConversationGuards(
            self.config, self._on_guard_event, hard_tier=False, clock=clock
        )
        self._genie = GenieClient(self._genie_url, token)
        self._completion = CompletionSignal(
            self._genie, timeout=self.config.session_complete_timeout, thread_id=thread_id
        )
        self._live = False
        self._http: aiohttp.ClientSession | None = None
        self._lock = asyncio.Lock()
        self._turn: _Turn | None = None
        self._turn_task: asyncio.Task[Any] | None = None
        self._turn_done = asyncio.Event()
        self._turn_done.set()
        self._watchdog_task: asyncio.Task[None] | None = None
        self._turns = 0
        self._closing = False
        self._closed = asyncio.Event()
        self._protocol_errors = 0

    def __repr__(self) -> str:
        state = "closed" if self._closing else ("busy" if self._turn is not None else "open")
        return (
            f"<ChatSession {state} thread={self._thread_id!r} genie_url={self._genie_url!r}"
            f" turns={self._turns}>"
        )

    @property
    def thread_id(self) -> str | None:
        """The conversation thread: given at construction or learned from the first turn."""
        return self._thread_id

    @property
    def closed(self) -> bool:
        return self._closing

    # -- events ----------------------------------------------------------------------------
    def _emit(self, name: str, data: dict[str, Any]) -> None:
        self._bus.emit(name, data)

    def _on_guard_event(self, name: str, data: dict[str, Any]) -> None:
        turn = self._turn
        if turn is not None:
            if name == "tool_call":
                turn.tool_calls.append(data)
            elif name == "tool_call_invalid":
                turn.invalid.append(data)
            elif name == "tool_spiral_detected":
                turn.spiral_detected = True
        self._emit(name, data)

    # -- tools -----------------------------------------------------------------------------
    def on_tool_call(
        self, name: str, handler: ToolHandler, schema: Mapping[str, Any] | None = None
    ) -> Callable[[], None]:
        """Run ``handler(args, call)`` (sync or async) for each call of the client-side tool
        ``name``; with a ``schema`` (JSON Schema, checked here: an invalid one raises
        ``invalid_argument``), invalid arguments emit ``tool_call_invalid`` instead. A
        non-None return value is reported as ``tool_call_result``; a raising handler as
        ``tool_call_result`` with ``ok: False``.
        Calls are de-duplicated per turn (each ``send`` is a new turn). Returns unregister."""
        return self._guards.on_tool_call(name, handler, schema)

    async def respond_to_tool(self, call_id: str, result: dict[str, Any]) -> dict[str, Any]:
        """Acknowledge a tool call that waits for a response (``call_id`` from its
        ``tool_call`` event). Called from a handler it unblocks the brain within the same
        turn. Returns ``{ok, reason}`` as :meth:`AvatarSession.respond_to_tool` does."""
        if self._closing:
            raise AvatarError(ErrorCode.CLOSED, "respond_to_tool() after close()")
        self._http_session()
        return await self._guards.respond_to_tool(self._genie, call_id, result)

    # -- turns -----------------------------------------------------------------------------
    async def send(
        self,
        text: str,
        *,
        timeout: float | None = None,
        max_tool_calls: int | None = None,
        max_segments: int | None = None,
    ) -> ChatReply:
        """Send one user turn and collect the answer.

        Turns are serialized: a second ``send`` waits for the first. ``timeout`` (seconds,
        default none) bounds the whole call, the wait for an earlier turn included; on
        expiry the request is closed and ``TimeoutError`` raised. Cancelling the call
        closes the request too. ``max_tool_calls`` stops reading after that many raw tool
        segments (``spiral_stopped``), ``max_segments`` after that many segments
        (``truncated``); both default to no limit.

        Raises ``AvatarError``: ``auth_failed`` (HTTP 401/403), ``bad_request`` (other
        4xx), ``capacity_unavailable`` (429), ``transport_closed`` (5xx, network trouble,
        a broken stream), ``connect_timeout``, ``closed``, ``invalid_argument``.
        """
        if not isinstance(text, str) or not text.strip():
            raise AvatarError(ErrorCode.INVALID_ARGUMENT, "text must be a non-empty string")
        limits = (limit(max_tool_calls, "max_tool_calls"), limit(max_segments, "max_segments"))
        if timeout is not None and not (
            isinstance(timeout, int | float) and math.isfinite(timeout) and timeout > 0
        ):
            raise AvatarError(ErrorCode.INVALID_ARGUMENT, "timeout must be a number > 0")
        self._check_open("send")
        async with asyncio.timeout(timeout), self._lock:
            self._check_open("send")
            return await self._run_turn(text, *limits)

    def _check_open(self, what: str) -> None:
        if self._closing:
            raise AvatarError(ErrorCode.CLOSED, f"{what}() after close()")

    async def _run_turn(
        self, text: str, max_tool_calls: int | None, max_segments: int | None
    ) -> ChatReply:
        self._turns += 1
        turn = _Turn(f"chat-{self._turns}", max_tool_calls, max_segments)
        task = asyncio.current_task()
        if not self._live:
            # The conversation starts with its first turn: from now on this session holds
            # the thread (other holders defer to it) and process exit completes it.
            self._live = True
            self._completion.hold()
            default_hooks().track(self._completion)
        self._start_watchdog()
        self._turn, self._turn_task = turn, task
        self._turn_done.clear()
        # A new turn: de-duplication, fused blobs and the soft spiral count start again.
        self._guards.observe(AgentStartSpeech(None, turn.turn_id, True))
        self._guards.on_user_turn(text)
        body = build_converse_body(text, thread_id=self._thread_id, request_vars=self._request_vars)
        try:
            await self._converse(body, turn)
        except asyncio.CancelledError:
            if self._closing and task is not None and task.cancelling() <= 1:
                task.uncancel()
                raise AvatarError(ErrorCode.CLOSED, "close() was called during send()") from None
            raise
        except AvatarError as error:
            self._emit("error", error.as_event())
            raise
        finally:
            self._guards.watchdog.clear()
            self._guards.observe(AgentEndTurn(None, turn.turn_id))  # settles response_pending
            self._turn, self._turn_task = None, None
            self._turn_done.set()
        return turn.reply(self._thread_id)

    async def _converse(self, body: dict[str, Any], turn: _Turn) -> None:
        headers = {
            "Authorization": f"KS {self.__token}",
            "Content-Type": "application/json",
            "Accept": "application/x-ndjson",
        }
        url = self._genie_url + CONVERSE_PATH
        try:
            async with self._http_session().post(url, json=body, headers=headers) as resp:
                if not 200 <= resp.status < 300:
                    raise http_error(resp.status)
                await self._read(resp, turn)
        except (aiohttp.ServerTimeoutError, aiohttp.ConnectionTimeoutError) as exc:
            raise AvatarError(ErrorCode.CONNECT_TIMEOUT, "converse request") from exc
        except (aiohttp.ClientError, OSError) as exc:
            log.info("converse failed: %s", type(exc).__name__)
            raise (
                tls_error(exc, "converse")
                or unreachable_error(exc, "converse")
                or AvatarError(ErrorCode.TRANSPORT_CLOSED, f"converse: {type(exc).__name__}")
            ) from exc

    async def _read(self, resp: aiohttp.ClientResponse, turn: _Turn) -> None:
        splitter = LineSplitter()
        finished = False
        try:
            async for chunk in resp.content.iter_any():
                for line in splitter.feed(chunk):
                    if self._on_line(line, turn):
                        return  # a limit was reached: stop reading (the response is closed)
            tail = splitter.flush()
            if tail is not None:
                self._on_line(tail, turn)
            finished = True
        finally:
            if splitter.dropped:
                self._protocol_error(f"{splitter.dropped} line(s) over {MAX_LINE_BYTES} bytes")
            if not finished:
                # Closing (not releasing) drops the connection: its unread rest is garbage.
                resp.close()

    def _on_line(self, line: bytes, turn: _Turn) -> bool:
        """Handle one line; True when reading must stop."""
        try:
            seg = parse_converse_line(line)
        except ProtocolError as exc:
            self._protocol_error(exc.detail)
            return False
        if seg is None:
            return False
        if turn.max_segments is not None and len(turn.segments) >= turn.max_segments:
            turn.truncated = True
            return True
        turn.segments.append(seg)
        if seg.thread_id and self._thread_id is None:
            self._thread_id = seg.thread_id
            self._completion.hold(seg.thread_id)
        self._emit(
            "agent_text",
            {
                "speech_id": seg.speech_id,
                "turn_id": turn.turn_id,
                "type": seg.type,
                "content": seg.content,
                "is_final": seg.is_final,
                "spoken": seg.is_spoken,
            },
        )
        if seg.type != KEEPALIVE:
            self._guards.observe(AgentRawText(seg.speech_id, turn.turn_id, seg))
        if seg.type == "unisphere-tool":
            self._guards.watchdog.clear()  # a widget on screen, whatever its runtime
        if seg.is_spoken and seg.content:
            turn.text.append(seg.content)
        if seg.is_tool:
            turn.raw_tools += 1
            if turn.max_tool_calls is not None and turn.raw_tools >= turn.max_tool_calls:
                turn.spiral_stopped = True
                return True
        return False

    def _protocol_error(self, detail: str) -> None:
        self._protocol_errors += 1
        self._emit("protocol_error", {"event": "converse", "detail": detail})

    def _http_session(self) -> aiohttp.ClientSession:
        if self._http is None or self._http.closed:
            # No total deadline: a stream may legitimately stay quiet while the brain works
            # (brain_stalled reports it); the caller's timeout bounds the turn.
            timeout = aiohttp.ClientTimeout(
                total=None, connect=self.config.server_connect_timeout or None
            )
            self._http = aiohttp.ClientSession(timeout=timeout, connector=connector(self._tls))
            self._genie = GenieClient(self._genie_url, self.__token, http=self._http)
            self._completion.genie = self._genie
        return self._http

    def _start_watchdog(self) -> None:
        if self._watchdog_task is None or self._watchdog_task.done():
            task = asyncio.ensure_future(self._guards.run_watchdog(lambda: self._turn is not None))
            task.set_name("avatar-sdk:chat-brain-watchdog")
            self._watchdog_task = task

    # -- lifecycle ---------------------------------------------------------------------------
    async def __aenter__(self) -> ChatSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """End the conversation: abort a running turn, send ``session_completed`` for the
        thread (once; event ``session_completed`` {thread_id, delivered, reason, outcome}),
        release every task and connection. Idempotent; never raises."""
        if self._closing:
            await self._closed.wait()
            return
        self._closing = True
        try:
            await self._shutdown()
        except Exception as exc:  # close() never raises: the session is gone either way
            log.warning("chat close failed: %r", exc)
        finally:
            self._closed.set()

    async def _shutdown(self) -> None:
        grace = self.config.close_timeout
        task = self._turn_task
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()
            try:
                async with asyncio.timeout(grace):
                    await self._turn_done.wait()
            except TimeoutError:
                log.warning("a chat turn did not stop within %.1fs of close()", grace)
        if self._thread_id is not None:
            self._http_session()  # the completion POST shares the session's connections
        payload = await self._completion.complete(self._thread_id, "close")
        default_hooks().untrack(self._completion)
        self._completion.lease.close()
        self._emit("session_completed", payload)
        watchdog, self._watchdog_task = self._watchdog_task, None
        if watchdog is not None:
            watchdog.cancel()
            await asyncio.gather(watchdog, return_exceptions=True)
        await self._guards.aclose()
        http, self._http = self._http, None
        if http is not None:
            await http.close()
        await self._bus.aclose(timeout=min(0.5, grace))


# -- headless ----------------------------------------------------------------------------------
def _collect(reply: ChatReply, max_per_tool: int) -> ConverseResult:
    per_tool: dict[str, int] = {}
    kept: list[dict[str, Any]] = []
    for call in reply.tool_calls:
        name = str(call.get("name"))
        if per_tool.get(name, 0) < max_per_tool:
            per_tool[name] = per_tool.get(name, 0) + 1
            kept.append(call)
    return ConverseResult(
        text=reply.text,
        thread_id=reply.thread_id,
        segments=reply.segments,
        tool_calls=tuple(kept),
        tool_calls_invalid=reply.invalid_tool_calls,
        spiral_stopped=reply.spiral_stopped,
        truncated=reply.truncated,
    )


async def converse_once(
    chat: ChatSession,
    text: str,
    *,
    max_tool_calls: int | None = 8,
    max_per_tool: int = 3,
    max_segments: int | None = 2000,
    recover_from_spiral: bool = True,
    timeout: float | None = None,
) -> ConverseResult:
    """One headless turn with the spiral backstop of PROTOCOL.md §5.6.

    Reading stops after ``max_tool_calls`` raw tool segments (valid, invalid and duplicate
    alike: ``spiral_stopped``) or ``max_segments`` segments (``truncated``); ``None``
    disables a cap. ``tool_calls`` keeps at most ``max_per_tool`` calls per tool name (the
    session still dispatches every new call to its handlers). If the turn stopped in a
    spiral with no text and ``recover_from_spiral``, ONE follow-up is sent on the same
    thread: :data:`SPIRAL_RECOVERY_PREFIX` + ``text``; its result is returned with
    ``first_attempt`` and ``spiral_recovered``. ``timeout`` applies to each request.
    """
    if isinstance(max_per_tool, bool) or not isinstance(max_per_tool, int) or max_per_tool < 1:
        raise AvatarError(ErrorCode.INVALID_ARGUMENT, "max_per_tool must be an int >= 1")

    async def attempt(message: str) -> ConverseResult:
        reply = await chat.send(
            message, timeout=timeout, max_tool_calls=max_tool_calls, max_segments=max_segments
        )
        return _collect(reply, max_per_tool)

    first = await attempt(text)
    if not (recover_from_spiral and first.spiral_stopped and not first.text):
        return first
    retry = await attempt(SPIRAL_RECOVERY_PREFIX + text)
    recovered = not (retry.spiral_stopped and not retry.text)
    return replace(retry, spiral_recovered=recovered, first_attempt=first)
