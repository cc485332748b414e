"""ReplayServer: the staging backend scripted by a cassette, and the replay of a session.

The staging server's own pieces do the work: its Socket.IO server (with connection-state
recovery, so a recorded in-place recovery recovers again), its conversations (the recovery
buffer), its real media (the ASR peer answers the uplink's offers, the WHEP endpoint
answers with a real SDP) and its genie routes. What its brain and handshake would say is
replaced by the cassette:

* the recorded inbound events are sent in recorded order, each once the client's recorded
  outbound events before it have arrived (matched by event name, and text for a typed
  turn, in order; outbound events the recording shows back to back may arrive in any order
  among themselves); the recorded gaps between inbound events are kept, up to ``max_gap``;
* a recorded drop is re-enacted (a transport drop, recoverable when the recording then
  recovered in place; an ``io server disconnect``; a silent socket for a ``ping timeout``),
  and a recorded client close or reconnect is waited for;
* the application's recorded calls (``speak``, ``respond_to_tool``, ``close``...) are
  handed to the runner that drives the SDK under test (:func:`replay_cassette`), each once
  the client has received what came before it; or, with ``drive="user"``, the user's own
  code drives its own session and no recorded call is made (what it sends is matched as
  above, a redacted cassette's placeholders bound to its texts: :mod:`.core.replay_match`);
* WHEP POSTs answer the recorded status (a 2xx with the staging's real answer SDP), genie
  POSTs the recorded status and body, in order per path.

Live, not scripted (their content depends on the peers of the moment): the ASR signalling
(``asr-webrtc-*``, ``asr-ice-candidate``) and the ``checkAvailability`` probes (answered
with the recorded ``availabilityResult``). The verdict is :class:`ReplayResult`: ``same``,
or the first :class:`Divergence` (the record expected, what came instead, its offset).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

import socketio
from aiohttp import web

from ..cassette.format import Cassette, Record, load
from ..errors import AvatarError, ErrorCode
from ..logs import sdk_logger
from ..observe import Observer
from ..session.facade import AvatarSession
from ..wire.names import In, Out
from .core.replay_match import UserTexts, find_match, out_key, shape_mismatch
from .staging.conversation import Conversation, ReceivedEvent
from .staging.media import StagingMedia
from .staging.server import StagingServer

log = sdk_logger(__name__)

#: Client events answered live by the staging's real peers / probe handler, never scripted.
LIVE_OUT: Final = frozenset(
    {
        Out.ASR_WEBRTC_INIT,
        Out.ASR_WEBRTC_OFFER,
        Out.ASR_WEBRTC_ICE_CANDIDATE,
        Out.CHECK_AVAILABILITY,
    }
)
LIVE_IN: Final = frozenset(
    {In.ASR_WEBRTC_READY, In.ASR_WEBRTC_ANSWER, In.ASR_ICE_CANDIDATE, In.AVAILABILITY_RESULT}
)
#: Drop reasons the client causes itself (waited for, not re-enacted).
CLIENT_REASONS: Final = frozenset({"io client disconnect"})
#: Record kinds that are steps of the script (the rest is information).
STEP_KINDS: Final = frozenset({"open", "refused", "out", "in", "drop", "call"})
#: Connect failures a replay re-enacts (the server refuses the CONNECT); others are noted.
REENACTED_REFUSALS: Final = frozenset({"auth_failed"})
#: The ``session_error`` code a user-driven replay ends its clients with once diverged.
DIVERGED_CODE: Final = "REPLAY_DIVERGED"


@dataclass(frozen=True)
class Divergence:
    """Where the replay first differed from the recording."""

    index: int  # the record's position in the cassette
    offset: float  # its time offset in the recording (s)
    expected: str
    got: str

    def __str__(self) -> str:
        return (
            f"first divergence at record {self.index} (t={self.offset:.3f} s):"
            f" expected {self.expected}; got {self.got}"
        )


@dataclass
class ReplayResult:
    """The verdict of a replay. ``same``: every scripted step happened as recorded."""

    divergence: Divergence | None
    steps: int
    matched: int
    call_errors: list[str] = field(default_factory=list)

    @property
    def same(self) -> bool:
        return self.divergence is None

    def __str__(self) -> str:
        if self.divergence is None:
            return f"same: {self.matched} of {self.steps} steps replayed as recorded"
        return str(self.divergence)


@dataclass(frozen=True)
class _Action:
    """What the client did, as the server saw it."""

    kind: str  # "open" | "out" | "drop"
    sid: str
    name: str = ""
    payload: Any = None
    recovered: bool = False

    def describe(self) -> str:
        if self.kind == "out":
            text = self.payload.get("text") if isinstance(self.payload, dict) else None
            hint = f" text={text[:40]!r}" if isinstance(text, str) else ""
            return f"-> {self.name}{hint}"
        if self.kind == "open":
            return "socket opened (recovered)" if self.recovered else "socket opened (new)"
        if self.kind == "refused":
            return "a connection attempt"
        return f"socket closed ({self.name})"


def script_of(cassette: Cassette) -> list[Record]:
    """The records a replay enacts or waits for, in recorded order."""
    steps: list[Record] = []
    for record in cassette.records:
        if record.kind not in STEP_KINDS:
            continue
        if record.kind == "out" and record.name in LIVE_OUT:
            continue
        if record.kind == "in" and record.name in LIVE_IN:
            continue
        if record.kind == "call" and record.name not in CALLS:
            continue
        if record.kind == "refused" and record.data.get("code") not in REENACTED_REFUSALS:
            continue
        steps.append(record)
    return steps


class _ReplayMedia(StagingMedia):
    """The staging's real media; WHEP POSTs answer the recorded statuses in order."""

    def __init__(
        self,
        conversations: Mapping[str, Conversation],
        statuses: list[tuple[int, str]],
        *,
        asr_report_interval: float | None = None,
    ) -> None:
        super().__init__(conversations, asr_report_interval=asr_report_interval)
        self._recorded = deque(statuses)

    async def _whep_post(self, request: web.Request) -> web.Response:
        if self._recorded:
            status, body = self._recorded.popleft()
            if not 200 <= status < 300:
                self.whep_posts += 1
                self.whep_statuses.append(status)
                return web.Response(status=status, text=body or "", content_type="text/plain")
        return await super()._whep_post(request)


class ReplayServer(StagingServer):
    """The staging backend scripted by ``cassette`` (a :class:`Cassette` or a path).

    ``drive``: who makes the application's calls. ``"replay"`` (the default): the recorded
    calls, made by :meth:`replay` on a session it builds. ``"user"``: the application's own
    code, on a session it opens itself (``AvatarSession(server.url, server.token,
    **server.session_options())``); no recorded call is made, the server answers what the
    client sends as recorded, and :meth:`verdict` says whether the client did what the
    recording did. Once diverged, the server stops scripting and ends every client's
    session (a ``session_error`` ``REPLAY_DIVERGED`` naming the divergence, then ``io server
    disconnect``: the application's pending calls fail with ``server_ended``), so the code
    under test is never left waiting for an answer that will not come.

    ``answer_timeout``: how long a step waits for the client (its next recorded event, a
    reconnect, a close) before the replay reports the divergence. ``max_gap``: the longest
    pause kept between two recorded inbound events (s)."""

    def __init__(
        self,
        cassette: Cassette | str | Path,
        *,
        drive: Literal["replay", "user"] = "replay",
        answer_timeout: float = 10.0,
        max_gap: float = 0.25,
        **staging: Any,
    ) -> None:
        if drive not in ("replay", "user"):
            raise AvatarError(
                ErrorCode.INVALID_ARGUMENT, f"drive must be 'replay' or 'user', not {drive!r}"
            )
        self.drive = drive
        self.cassette = cassette if isinstance(cassette, Cassette) else load(cassette)
        staging.setdefault("audio_only", False)
        staging.setdefault("token", "replay-dummy-token")
        super().__init__(**staging)
        http = self.cassette.of_kind("http")
        self._genie: dict[str, deque[tuple[int, str]]] = {}
        for r in http:
            if r.data.get("service") == "genie" and r.data.get("status") is not None:
                path = "/" + str(r.data.get("url", "")).split("/genie/", 1)[-1]
                answer = (int(r.data["status"]), str(r.data.get("response") or "{}"))
                self._genie.setdefault(path, deque()).append(answer)
        self.answer_timeout = answer_timeout
        self.max_gap = max_gap
        self.steps = [r for r in script_of(self.cassette) if drive == "replay" or r.kind != "call"]
        #: The user's texts bound to the cassette's placeholders as the client sends them.
        self.texts = UserTexts(redacted=not self.cassette.header.get("record_content", False))
        #: Whether the test read the verdict itself (the fixture then leaves it to the test).
        self.verdict_read = False
        self.matched = 0
        self.divergence: Divergence | None = None
        self.finished = asyncio.Event()
        #: The application's calls, handed to the runner in order.
        self.calls: asyncio.Queue[Record] = asyncio.Queue()
        self.links: dict[int, str] = {}  # link -> its current sid
        self._actions: deque[_Action] = deque()
        self._arrived = asyncio.Event()
        self._server_dropped: set[str] = set()
        self._availability: dict[int, list[Any]] = {}
        for r in self.cassette.records:
            if r.kind == "in" and r.name == In.AVAILABILITY_RESULT:
                self._availability.setdefault(r.link, []).append(r.data.get("args"))
        #: Each new (not recovered) connection attempt's recorded fate, in order.
        self._attempts = deque(
            r.kind == "refused" for r in self.steps
            if r.kind == "refused" or (r.kind == "open" and not r.data.get("recovered"))
        )  # fmt: skip
        self.sent_in = 0  # scripted inbound events sent
        self._driver: asyncio.Task[None] | None = None
        self._enders: set[asyncio.Task[None]] = set()

    def make_media(self, asr_report_interval: float | None) -> StagingMedia:
        """The staging's media, answering WHEP POSTs with the cassette's statuses first."""
        whep = [
            (int(r.data.get("status") or 0), str(r.data.get("response") or ""))
            for r in self.cassette.of_kind("http")
            if r.data.get("service") == "whep" and r.data.get("method") == "POST"
            and r.data.get("status") is not None
        ]  # fmt: skip
        return _ReplayMedia(self.conversations, whep, asr_report_interval=asr_report_interval)

    # -- lifecycle ----------------------------------------------------------------------------
    async def start(self) -> ReplayServer:
        await super().start()
        self._driver = asyncio.ensure_future(self._drive())
        return self

    async def stop(self) -> None:
        if self._driver is not None:
            self._driver.cancel()
            await asyncio.gather(self._driver, return_exceptions=True)
            self._driver = None
        for ender in self._enders:
            ender.cancel()
        await asyncio.gather(*self._enders, return_exceptions=True)
        await super().stop()

    async def __aenter__(self) -> ReplayServer:
        return await self.start()

    def result(self) -> ReplayResult:
        """The verdict so far (final once :attr:`finished` is set)."""
        return ReplayResult(self.divergence, len(self.steps), self.matched)

    async def verdict(self, timeout: float | None = None) -> ReplayResult:
        """The verdict, once the script is over: read it after the application's session is
        closed (a recorded close is a step; a session still open is waited for up to the
        answer timeout, then reported). Bounded by ``timeout`` (default: the answer
        timeout, plus every recorded gap, plus 5 s)."""
        self.verdict_read = True
        limit = timeout if timeout is not None else (
            self.answer_timeout + self.max_gap * len(self.steps) + 5.0
        )  # fmt: skip
        await self._until_finished(limit)
        return self.result()

    async def _until_finished(self, limit: float) -> None:
        """Until the script is over; past ``limit`` the replay is reported unfinished (and,
        the user's code driving, its clients are ended)."""
        try:
            async with asyncio.timeout(limit):
                await self.finished.wait()
        except TimeoutError:
            if self.divergence is None:
                self.divergence = Divergence(
                    -1, 0.0, "the replay to finish", f"not finished in {limit:g} s"
                )
                if self.drive == "user":
                    self._end_clients()

    def session_options(self) -> dict[str, Any]:
        """``AvatarSession`` keyword arguments for a session against this server, as
        recorded: the genie URL, thread, media, video and the recorded configuration
        (signal handlers off), over plain http on loopback."""
        tape = self.cassette
        return {
            "genie_url": self.genie_url,
            "thread_id": tape.session.get("thread_id") or None,
            "media": tape.media,
            "video": tape.video,
            "config": tape.config().with_(handle_signals=False),
            "allow_insecure_transport": True,
        }

    # -- what the client does -------------------------------------------------------------------
    def _saw(self, action: _Action) -> None:
        if self.drive == "user" and self.finished.is_set():
            self._after_script(action)
            return
        self._actions.append(action)
        self._arrived.set()

    def _after_script(self, action: _Action) -> None:
        """The user's client did something once the script was over: anything but a close
        is something the recording does not have."""
        if self.divergence is not None or action.kind == "drop":
            return
        last = self.cassette.records[-1].t if self.cassette.records else 0.0
        self.divergence = Divergence(
            len(self.cassette.records), last, "the end of the recording", action.describe()
        )
        log.info("replay: %s", self.divergence)
        self._end_clients()

    def _end_clients(self) -> None:
        """Diverged, the user's code driving: end every client's session (never left
        waiting for an answer the script will not send)."""
        for sid in self.live_sids:
            self._spawn_ender(sid)

    def _spawn_ender(self, sid: str) -> None:
        task = asyncio.ensure_future(self._end_client(sid))
        self._enders.add(task)
        task.add_done_callback(self._enders.discard)

    async def _end_client(self, sid: str) -> None:
        conv = self.conversations.get(sid)
        if conv is None:
            return
        self._server_dropped.add(sid)
        message = f"replay diverged: {self.divergence}"
        await conv.emit(In.SESSION_ERROR, {"code": DIVERGED_CODE, "message": message})
        await self.sio.disconnect(sid)

    async def _on_connect(self, sid: str, environ: Any, auth: Any = None) -> bool:
        if self._attempts and self._attempts[0]:
            self._attempts.popleft()
            self.refused_connections += 1
            self._saw(_Action("refused", sid))
            raise socketio.exceptions.ConnectionRefusedError("invalid token (as recorded)")
        ok = await super()._on_connect(sid, environ, auth)
        if self._attempts:
            self._attempts.popleft()
        self._saw(_Action("open", sid))
        return ok

    async def _on_connected(self, sid: str) -> None:
        if self.drive == "user" and self.divergence is not None:
            self._spawn_ender(sid)  # a reconnect after the divergence: ended at once
        # otherwise nothing: onServerConnected is in the script

    async def _on_recovered(self, sid: str, replayed: int) -> None:
        await super()._on_recovered(sid, replayed)
        if self.drive == "user" and self.divergence is not None:
            self._spawn_ender(sid)
            return
        self._saw(_Action("open", sid, recovered=True))

    async def _on_disconnect(self, sid: str, reason: Any = None) -> None:
        await super()._on_disconnect(sid, reason)
        if sid in self._server_dropped:
            self._server_dropped.discard(sid)
            return
        self._saw(_Action("drop", sid, name=str(reason)))

    async def _on_any(self, event: str, sid: str, *args: Any) -> None:
        if event in LIVE_OUT:
            await super()._on_any(event, sid, *args)  # the real peers; the probe answer below
            return
        payload = args[0] if args else None
        self.received.append(ReceivedEvent(sid, event, payload))
        self._saw(_Action("out", sid, name=event, payload=payload))

    async def _check_availability(self, conv: Conversation, data: dict[str, Any]) -> None:
        link = next((k for k, v in self.links.items() if v == conv.sid), 0)
        answers = self._availability.get(link) or self._availability.get(0) or []
        args = answers[0] if answers else [{"available": True, "details": {}}]
        if len(answers) > 1:
            answers.pop(0)
        await conv.emit(In.AVAILABILITY_RESULT, args[0] if args else {})

    def _handlers(self) -> dict[str, Any]:
        return {Out.CHECK_AVAILABILITY: self._check_availability, **self.media.handlers()}

    # -- genie: as recorded ---------------------------------------------------------------------
    async def _genie_answer(self, request: web.Request, path: str) -> web.Response:
        body: Any = None
        with contextlib.suppress(ValueError):
            body = await request.json()
        if path == "/assistant/tool_response" and isinstance(body, dict):
            self.tool_responses.append(body)
        if path == "/thread/session_completed" and isinstance(body, dict):
            self.completed_threads.append(str(body.get("id")))
        queue = self._genie.get(path)
        status, text = queue.popleft() if queue else (200, "{}")
        return web.Response(status=status, text=text, content_type="application/json")

    async def _tool_response(self, request: web.Request) -> web.Response:
        return await self._genie_answer(request, "/assistant/tool_response")

    async def _session_completed(self, request: web.Request) -> web.Response:
        return await self._genie_answer(request, "/thread/session_completed")

    async def replay(
        self, session_factory: SessionFactory | None = None, *, overall_timeout: float = 300.0
    ) -> ReplayResult:
        """Run the SDK under test against this replay (once) and return the verdict.

        The session is built as recorded (the header's non-secret configuration, media,
        video and thread) with this server's dummy token: ``session_factory(url, token,
        **kwargs)`` builds it (default: :class:`~avatar_sdk.AvatarSession`), so a test can
        hand in a patched SDK; it must accept ``observer=``. The recorded application calls
        are made on it in order; bounded by ``overall_timeout``."""
        if self.drive != "replay":
            raise AvatarError(
                ErrorCode.INVALID_STATE,
                "replay() makes the recorded calls: this server is driven by the user's code"
                " (drive='user'); read its verdict() instead",
            )
        factory = session_factory or AvatarSession
        server, answer_timeout = self, self.answer_timeout
        receipts = _Receipts()
        session = factory(server.url, server.token, **server.session_options(), observer=receipts)
        errors: list[str] = []
        tasks: set[asyncio.Task[Any]] = set()

        async def guarded(name: str, work: Awaitable[Any]) -> None:
            try:
                await work
            except Exception as exc:
                errors.append(f"{name}: {type(exc).__name__}")

        async def caught_up() -> None:
            """Wait (bounded) until the client received every inbound event sent so far."""
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(2.0, answer_timeout)):
                    while receipts.count < server.sent_in:
                        receipts.changed.clear()
                        await receipts.changed.wait()

        async def perform(call: Record) -> None:
            args = call.data.get("args") if isinstance(call.data.get("args"), dict) else {}
            assert isinstance(args, dict)
            await caught_up()
            name = call.name
            if name == "set_mic":
                session.mic_enabled = bool(args.get("enabled", True))
                return
            work: Awaitable[Any]
            if name == "connect":
                work = session.connect()
            elif name == "close":
                work = session.close()
            elif name == "speak":
                work = session.speak(str(args.get("text", "")))
            elif name == "respond_to_tool":
                work = session.respond_to_tool(str(args.get("call_id")), args.get("result") or {})
            else:
                work = getattr(session, name)()
            task = asyncio.ensure_future(guarded(name, work))
            tasks.add(task)

        async def run_calls() -> None:
            while True:
                await perform(await server.calls.get())

        caller = asyncio.ensure_future(run_calls())
        try:
            await server._until_finished(overall_timeout)
        finally:
            # The calls in flight (a close under way) finish; only the call loop stops.
            caller.cancel()
            await asyncio.gather(caller, return_exceptions=True)
            await session.close()
            if tasks:
                _, late = await asyncio.wait(tasks, timeout=answer_timeout)
                for task in late:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
        result = server.result()
        result.call_errors = errors
        return result

    # -- the script -----------------------------------------------------------------------------
    async def _drive(self) -> None:
        try:
            await self._play()
        except Exception as exc:  # a bug of the replay itself: reported as a divergence
            log.error("replay driver failed: %s: %s", type(exc).__name__, exc)
            self.divergence = Divergence(-1, 0.0, "the replay to run", f"{type(exc).__name__}")
            if self.drive == "user":
                self._end_clients()
        finally:
            self.finished.set()
            if self.drive == "user":
                while self._actions:  # what came after the script's last step
                    self._after_script(self._actions.popleft())

    async def _play(self) -> None:
        steps = self.steps
        i = 0
        last_in: float | None = None
        while i < len(steps):
            step = steps[i]
            if step.kind == "out":
                group = [step]
                while i + len(group) < len(steps) and steps[i + len(group)].kind == "out":
                    group.append(steps[i + len(group)])
                if not await self._expect_outs(group):
                    return
                i += len(group)
                continue
            if step.kind == "in":
                if last_in is not None:
                    await asyncio.sleep(max(0.0, min(step.t - last_in, self.max_gap)))
                last_in = step.t
                await self._send(step)
            elif step.kind == "call":
                await self.calls.put(step)
            elif step.kind in ("open", "refused", "drop"):
                done = (
                    await self._expect_open(step)
                    if step.kind in ("open", "refused")
                    else await self._drop(step, steps[i + 1 :])
                )
                if not done:
                    return
            self.matched += 1
            i += 1

    def _diverged(self, step: Record, got: str) -> bool:
        self.divergence = Divergence(step.index, step.t, step.describe(), got)
        log.info("replay: %s", self.divergence)
        if self.drive == "user":
            self._end_clients()
        return False

    async def _next_action(self) -> _Action | None:
        try:
            async with asyncio.timeout(self.answer_timeout):
                while not self._actions:
                    self._arrived.clear()
                    await self._arrived.wait()
        except TimeoutError:
            return None
        return self._actions.popleft()

    def _link_of(self, sid: str) -> int | None:
        return next((k for k, v in self.links.items() if v == sid), None)

    async def _expect_outs(self, group: list[Record]) -> bool:
        waiting = list(group)
        while waiting:
            action = await self._next_action()
            if action is None:
                return self._diverged(waiting[0], f"nothing within {self.answer_timeout:g} s")
            if action.kind != "out":
                return self._diverged(waiting[0], action.describe())
            link = self._link_of(action.sid)
            found = find_match(waiting, action.name, action.payload, link, self.texts)
            if found is None:
                return self._diverged(waiting[0], action.describe())
            match, bindings = found
            wrong = shape_mismatch(action.payload, match.data.get("shape"))
            if wrong is not None:
                return self._diverged(match, f"{action.describe()} whose {wrong}")
            self.texts.bound.update(bindings)
            waiting.remove(match)
            self.matched += 1
        return True

    async def _expect_open(self, step: Record) -> bool:
        """A recorded connection (``open``) or refused attempt (``refused``)."""
        recovered = bool(step.data.get("recovered"))
        action = await self._next_action()
        if action is None:
            return self._diverged(step, f"no connection within {self.answer_timeout:g} s")
        if action.kind != step.kind or action.recovered != recovered:
            return self._diverged(step, action.describe())
        if step.kind == "open":
            self.links[step.link] = action.sid
        return True

    async def _drop(self, step: Record, rest: list[Record]) -> bool:
        reason = str(step.data.get("reason", ""))
        sid = self.links.get(step.link)
        if reason in CLIENT_REASONS:
            action = await self._next_action()
            if action is None:
                return self._diverged(step, f"no close within {self.answer_timeout:g} s")
            if action.kind != "drop":
                return self._diverged(step, action.describe())
            return True
        if sid is None:
            return True
        self._server_dropped.add(sid)
        reopen = next((r for r in rest if r.kind == "open" and r.link == step.link), None)
        recoverable = reopen is not None and bool(reopen.data.get("recovered"))
        if reason == "io server disconnect":
            await self.sio.disconnect(sid)
        elif reason == "ping timeout":
            self.sio.blackhole(sid, server_timeout=0.2 if recoverable else None)
        else:
            await self.sio.drop_transport(sid, recoverable=recoverable)
        return True

    async def _send(self, step: Record) -> None:
        sid = self.links.get(step.link)
        conv = self.conversations.get(sid) if sid is not None else None
        if conv is None:
            return
        args = step.data.get("args")
        payload = self.texts.restore(args[0] if isinstance(args, list) and args else {})
        if step.name == In.STV_NEW_SESSION and isinstance(payload, dict):
            session_id = payload.get("session_id")
            if isinstance(session_id, str) and session_id and payload.get("webrtc_url"):
                self.media.register_stream(conv, session_id)
                payload = {
                    **payload,
                    "webrtc_url": f"{self.public_url}/rtc/v1/whep/?app=app&stream={session_id}",
                }
        elif step.name == In.ON_SERVER_CONNECTED and isinstance(payload, dict):
            payload = {**payload, "finalUrl": self.public_url}
        self.sent_in += 1
        await conv.emit(step.name, payload)


# -- the runner: the SDK under test against the replay -------------------------------------------
#: Application calls a replay performs (the rest of a cassette's ``call`` records is noted).
CALLS: Final = frozenset(
    {"connect", "speak", "interrupt", "pause", "resume", "set_mic", "respond_to_tool", "close"}
)


class _Receipts(Observer):
    """Counts the scripted inbound events the SDK under test has received."""

    def __init__(self) -> None:
        self.count = 0
        self.changed = asyncio.Event()

    def event_in(self, link: int, name: str, args: list[Any]) -> None:
        if name not in LIVE_IN:
            self.count += 1
            self.changed.set()


SessionFactory = Callable[..., Any]


async def replay_cassette(
    cassette: Cassette | str | Path,
    *,
    session_factory: SessionFactory | None = None,
    answer_timeout: float = 10.0,
    max_gap: float = 0.25,
    overall_timeout: float = 300.0,
) -> ReplayResult:
    """Run the SDK under test against the cassette's replay and return the verdict (a
    :class:`ReplayServer` started and stopped around :meth:`ReplayServer.replay`)."""
    async with ReplayServer(cassette, answer_timeout=answer_timeout, max_gap=max_gap) as server:
        return await server.replay(session_factory, overall_timeout=overall_timeout)


def dumps_result(result: ReplayResult) -> str:
    """The verdict as one JSON object (the CLI's ``--json``)."""
    d = result.divergence
    return json.dumps(
        {
            "same": result.same,
            "steps": result.steps,
            "matched": result.matched,
            "divergence": None
            if d is None
            else {"index": d.index, "offset": d.offset, "expected": d.expected, "got": d.got},
            "call_errors": result.call_errors,
        }
    )


__all__ = [
    "DIVERGED_CODE",
    "Divergence",
    "ReplayResult",
    "ReplayServer",
    "dumps_result",
    "out_key",
    "replay_cassette",
    "script_of",
    "shape_mismatch",
]
