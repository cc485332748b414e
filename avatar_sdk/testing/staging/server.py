"""StagingServer: a protocol-faithful conversation backend on 127.0.0.1.

One aiohttp application serves the Socket.IO control plane (python-socketio with
connection-state recovery, see :mod:`.csr_server`) and the "genie" HTTP API
(``/genie/thread/session_completed``). It answers the connect sequence of PROTOCOL.md §2
exactly like the real conversation manager, including its quirks: a ``join`` without
``kaltura.ks`` is accepted and never answered.

``staging.media`` (:mod:`.media`) is the media side: real aiortc peers for the ASR uplink
(signalled over the socket) and the WHEP downlink (``/rtc/v1/whep/``).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import ssl
import time
from collections import Counter
from typing import Any
from urllib.parse import parse_qs

import socketio
from aiohttp import web
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_fixed

from ...besteffort import best_effort
from ...logs import sdk_logger
from ...transport.net.genie import ADVERTISED_FIELD, SESSION_COMPLETED_PATH, TOOL_RESPONSE_PATH
from ...transport.rtc.ice import TurnConfig
from ...wire.names import In, Out
from .brain import Brain
from .control import control_routes
from .conversation import Conversation, ConversationContext, ReceivedEvent
from .converse import ConverseEndpoint, mount_converse
from .csr_server import RecoveringAsyncServer
from .faults import Faults
from .ledger import CallsInFlight, ResourceLedger, SessionHolds
from .media import StagingMedia
from .scripted import AGENTIC_PREFIX, DEFAULT_VISUAL_ID, ScriptedBackend
from .state import ThreadIds

#: Where this server serves the genie API (``genie_url`` is the base URL plus this path).
GENIE_PATH = "/genie"

log = sdk_logger(__name__)


class StagingServer:
    """The staging backend. Use as ``async with StagingServer() as staging: ...``."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        recovery_window: float = 20.0,
        event_spacing: float = 0.002,
        speech_time_scale: float = 0.25,
        audio_only: bool = False,
        ssl_context: ssl.SSLContext | None = None,
        advertise_host: str | None = None,
        media_host: str | None = None,
        control_api: bool = False,
        asr_report_interval: float | None = None,
        advertise_genie: bool = True,
        scripted_idle_timeout: float = 120.0,
        scripted_token_ttl: float = 24 * 3600.0,
        scripted_turn: TurnConfig | None = None,
        max_conversation_length: float | None = None,
        time_warning_before: float | None = None,
        concurrent_thread_sessions: bool = True,
    ) -> None:
        """``audio_only=True``: audio/phone mode, ``stvNewSession`` starts no STV session
        (PROTOCOL.md §1.5) and only the ASR uplink exists. ``ssl_context``: serve TLS
        (``url``, ``genie_url`` and the WHEP URLs become https; see
        :class:`avatar_sdk.testing.tls.TestCA` for a private CA). ``advertise_host``: the
        host name put in the URLs handed to clients (``webrtc_url``, ``finalUrl``,
        ``public_url``) instead of ``host``, for clients that refuse a loopback or private
        media host, or reach the server under another name. ``media_host``: the host name
        of the media URLs only (``webrtc_url``, a scripted session's ``whepUrl``; the socket
        stays on ``host``): a public-looking name the client resolves to this server (e.g.
        Chromium's ``--host-resolver-rules``), for a client that refuses a loopback or
        private WHEP host (the reference client's ``whep_private_ip``); the WHEP endpoint
        answers under any name. ``control_api=True``: serve the
        HTTP control API (:mod:`.control`) for clients in other languages.
        ``asr_report_interval``: how often the ASR peers send RTCP receiver reports (None:
        aiortc's 0.5-1.5 s; seconds; ``math.inf``: never), also ``staging.media.
        asr_report_interval`` at run time (see :class:`.media.StagingMedia`).
        ``advertise_genie``: name the genie API (``/genie`` on this server) in the join
        answer (``clientConfiguration.genieUrl``, which the SDK reads when no ``genie_url``
        was given); False answers like a backend that does not.

        ``scripted_idle_timeout`` / ``scripted_token_ttl``: the avatar-session service's
        idle reclaim and session-token lifetime (seconds; also ``staging.scripted.
        idle_timeout`` / ``token_ttl`` at run time, see :mod:`.scripted`).
        ``scripted_turn``: the TURN relay its ``init-client`` names, as the service does
        (None, the default: none; ``staging.scripted.turn`` at run time). The live
        conversation's service names none (the client is configured with one, PROTOCOL.md
        §1.4).

        ``max_conversation_length``: the agent's cap on one server session, seconds from
        its ``approvedPermissions`` (None: no cap, the default). Like the service, the
        server then sends ``conversationTimeWarning {remainingTime}`` ``time_warning_before``
        seconds ahead of the end (None: 60 s, or a quarter of the cap when that is
        shorter), and at the end ``conversationTimeExpired {}`` then ``conversationEnded
        {}``, after which that server session takes nothing more and its media is released.
        Each server session (socket) has its own count, also on the same thread.
        ``concurrent_thread_sessions=False``: a second server session on a thread that
        already has a live one is refused at admission with ``throwToNoAgent`` (a service
        that allows one session per thread; tests break-before-make renewal). All three
        are attributes, changeable at run time (new server sessions use the new values).
        The thread's memory (``thread_memory``: every user turn heard on a thread, across
        its server sessions) lets :data:`~avatar_sdk.testing.staging.brain.RECALL_PROMPT` be
        answered with what was said on an earlier server session of the thread."""
        self.host = host
        self.advertise_genie = advertise_genie
        self.advertise_host = advertise_host
        self.media_host = media_host
        self.control_api = control_api
        self.ssl_context = ssl_context
        self.port = port
        self.token = token or "stg-" + secrets.token_urlsafe(24)
        self.event_spacing = event_spacing
        #: Fraction of the captions' real duration the avatar "talks" for (1.0 = real time).
        self.speech_time_scale = speech_time_scale
        self.audio_only = audio_only
        if max_conversation_length is not None and not max_conversation_length > 0:
            raise ValueError("max_conversation_length must be > 0 seconds, or None")
        if time_warning_before is not None and not time_warning_before >= 0:
            raise ValueError("time_warning_before must be >= 0 seconds, or None")
        self.max_conversation_length = max_conversation_length
        self.time_warning_before = time_warning_before
        self.concurrent_thread_sessions = concurrent_thread_sessions
        #: User turns heard on each thread, in order, across its server sessions.
        self.thread_memory: dict[str, list[str]] = {}
        #: Server sessions that reached the cap (``conversationTimeExpired`` sent), by sid.
        self.expired_sids: list[str] = []
        #: Joins refused because the thread already had a live server session.
        self.refused_thread_joins = 0
        self.sio = RecoveringAsyncServer(
            recovery_window=recovery_window,
            cors_allowed_origins=[],
            ping_interval=25,
            ping_timeout=20,
        )
        # The parts, each handed only what it uses (see .state). Where that is a value the
        # server holds and a test changes at run time (token, pacing, cap), the server is
        # passed as that narrow protocol; no part imports this module.
        self.conversations: dict[str, Conversation] = {}
        self.emitted: Counter[str] = Counter()
        self.brain = Brain(self.conversations)
        self.media = self.make_media(asr_report_interval)
        #: The avatar-session (scripted video) service: ``agentic_url``, ``admin_token``.
        self.scripted = ScriptedBackend(
            streams=self.media,
            endpoint=self,
            idle_timeout=scripted_idle_timeout,
            token_ttl=scripted_token_ttl,
            turn=scripted_turn,
        )
        self.faults = Faults(
            sio=self.sio,
            conversations=self.conversations,
            media=self.media,
            scripted=self.scripted,
            listener=self,
        )
        self._thread_ids = ThreadIds()
        self._genie_calls = CallsInFlight("genie_calls")
        #: What the backend holds for its clients (:mod:`.ledger`): :meth:`live_resources`.
        self.ledger = ResourceLedger(
            [self.media, SessionHolds(self.conversations, self.sio), self._genie_calls]
        )
        self._context = ConversationContext(
            brain=self.brain,
            sio=self.sio,
            faults=self.faults,
            emitted=self.emitted,
            pacing=self,
            cap=self,
            thread_memory=self.thread_memory,
            expired_sids=self.expired_sids,
            media=self.media,
        )
        self.visual_id = DEFAULT_VISUAL_ID
        self.received: list[ReceivedEvent] = []
        self.completed_threads: list[str] = []
        self.completion_requests: list[dict[str, Any]] = []
        #: JSON bodies of ``POST /genie/assistant/tool_response``, in arrival order.
        self.tool_responses: list[dict[str, Any]] = []
        self.connections = 0
        self.refused_connections = 0
        self.disconnects: list[tuple[str, str]] = []
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        #: A blackout in progress (``faults.blackout``): it reopens the listening socket.
        self._blackout: asyncio.Task[None] | None = None
        self._blackout_over: asyncio.Event | None = None
        self._blackout_abandoned: asyncio.Event | None = None
        self._register_handlers()
        self.sio.recovered_handler = self._on_recovered
        self.sio.expired_handler = self._on_expired
        self.recovered_sids: list[str] = []

    def make_media(self, asr_report_interval: float | None) -> StagingMedia:
        """The media side (a hook: a subclass serves its own, e.g. the replay's)."""
        return StagingMedia(self.conversations, asr_report_interval=asr_report_interval)

    # -- lifecycle --------------------------------------------------------------------------
    async def start(self) -> StagingServer:
        app = web.Application()
        self.sio.attach(app, socketio_path="socket.io")
        app.router.add_post(GENIE_PATH + SESSION_COMPLETED_PATH, self._session_completed)
        app.router.add_post(GENIE_PATH + TOOL_RESPONSE_PATH, self._tool_response)
        app.router.add_get("/healthz", self._healthz)
        converse = ConverseEndpoint(
            brain=self.brain,
            endpoint=self,
            thread_ids=self._thread_ids,
            pacing=self,
            faults=self.faults,
        )
        self.converse_requests = mount_converse(converse, app)  # POST /genie/assistant/converse
        self.media.add_routes(app)
        self.scripted.add_routes(app)
        if self.control_api:
            control_routes(self)(app)
        self.add_routes(app)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        await self._listen()
        self.port = int(self._runner.addresses[0][1])
        return self

    async def _listen(self, tries: int = 1) -> None:
        """Open the listening socket (on ``self.port``: 0 picks a free one the first time).
        ``tries`` > 1 when reopening after a blackout: a client of another process may hold
        the port as its ephemeral source port for a moment."""
        assert self._runner is not None
        runner = self._runner
        async for attempt in AsyncRetrying(
            stop=stop_after_attempt(tries),
            wait=wait_fixed(0.05),
            retry=retry_if_exception_type(OSError),
            reraise=True,
        ):
            with attempt:
                site = web.TCPSite(
                    runner, self.host, self.port, ssl_context=self.ssl_context, reuse_address=True
                )
                try:
                    await site.start()
                except OSError:
                    await site.stop()  # a failed start leaves the site registered
                    raise
                self._site = site

    async def refuse_connections(self, seconds: float) -> None:
        """Close the listening socket for ``seconds``: every new connection is refused
        (ECONNREFUSED) until then; connections already accepted are left alone. A second
        call restarts the count. See ``faults.blackout``."""
        await self._cancel_blackout()
        if self._site is not None:
            await self._site.stop()
            self._site = None
        over = self._blackout_over = asyncio.Event()
        self._blackout_abandoned = abandoned = asyncio.Event()
        self._blackout = asyncio.ensure_future(
            self._reopen_after(max(0.0, seconds), over, abandoned)
        )

    async def _reopen_after(
        self, seconds: float, over: asyncio.Event, abandoned: asyncio.Event
    ) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(over.wait(), seconds)
        if abandoned.is_set() or self._runner is None or self._site is not None:
            return
        try:
            await self._listen(tries=20)
        except OSError as exc:  # the port was taken meanwhile: this server stays dark
            log.error("staging: cannot listen again on port %d after a blackout (%s: %s)",
                      self.port, type(exc).__name__, exc)  # fmt: skip

    @property
    def refusing_connections(self) -> bool:
        """True during a blackout (``faults.blackout``): the listening socket is closed."""
        return self._runner is not None and self._site is None

    def end_blackout(self) -> None:
        """Listen again now (``faults.clear``); the reopening task does it."""
        if self._blackout_over is not None:
            self._blackout_over.set()

    async def _cancel_blackout(self) -> None:
        """Forget the blackout in progress, without reopening (a new one, or the stop).

        Never by cancelling a reopening under way: asyncio's ``create_server`` cancelled after
        it made the listening socket (it yields once before returning) drops that socket
        unclosed, still listening. The task is told to stand down instead, and awaited: a
        reopening already under way finishes, and its site is the caller's to stop."""
        task, self._blackout = self._blackout, None
        if task is None:
            return
        if self._blackout_abandoned is not None:
            self._blackout_abandoned.set()
        if self._blackout_over is not None:
            self._blackout_over.set()
        await asyncio.gather(task, return_exceptions=True)

    def add_routes(self, app: web.Application) -> None:
        """Hook for extensions (media endpoints, control API)."""

    async def stop(self) -> None:
        await self._cancel_blackout()  # no reopening behind the shutdown's back
        # Silenced sockets first: their transports ignore the closes the shutdown asks for.
        self.sio.release_blackholes()
        for conv in self.conversations.values():
            conv.close()
        tasks = [t for c in self.conversations.values() for t in c.tasks]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        await self.scripted.stop()
        await self.media.stop()
        self.sio.close_all_sessions()
        with best_effort("socket.io shutdown", log):
            await asyncio.wait_for(self.sio.shutdown(), 1.0)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
            self._site = None

    async def __aenter__(self) -> StagingServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def url(self) -> str:
        return f"{self._scheme}://{self.host}:{self.port}"

    @property
    def public_url(self) -> str:
        """The base URL handed to clients: ``url`` under ``advertise_host``, if set."""
        return f"{self._scheme}://{self.advertise_host or self.host}:{self.port}"

    @property
    def media_url(self) -> str:
        """The base of the media URLs handed to clients: ``media_host`` if set, else as
        :attr:`public_url`."""
        host = self.media_host or self.advertise_host or self.host
        return f"{self._scheme}://{host}:{self.port}"

    @property
    def agentic_url(self) -> str:
        """Base URL of the avatar-session service (``ScriptedAvatarSession``'s first argument)."""
        return f"{self._scheme}://{self.host}:{self.port}{AGENTIC_PREFIX}"

    @property
    def admin_token(self) -> str:
        """The admin token ``avatar-session/create`` accepts (``staging.token`` is refused)."""
        return self.scripted.admin_token

    @property
    def genie_url(self) -> str:
        return f"{self._scheme}://{self.host}:{self.port}{GENIE_PATH}"

    @property
    def _scheme(self) -> str:
        return "https" if self.ssl_context is not None else "http"

    # -- assertions helpers -----------------------------------------------------------------
    def received_events(self, name: str, sid: str | None = None) -> list[ReceivedEvent]:
        """Client emits named ``name`` (optionally only from ``sid``), in arrival order."""
        return [r for r in self.received if r.event == name and (sid is None or r.sid == sid)]

    def live_resources(self) -> dict[str, int]:
        """What the backend still holds for clients, by kind (``whep``, ``asr_peers``,
        ``sessions``, ``genie_calls``, ``held_for_recovery``; :mod:`.ledger`): all zero but
        ``held_for_recovery`` once every client has closed. Per client:
        :meth:`resources_by_client`."""
        return self.ledger.counts()

    def resources_by_client(self) -> dict[str, dict[str, int]]:
        """:meth:`live_resources` per client id (a sid, a scripted session, a peer address)."""
        return self.ledger.by_client()

    def media_counts(self) -> dict[str, Any]:
        """The media exchanged, counted here: video frames produced for every WHEP viewer,
        and each client's ASR uplink (decoded frames, its peer's state)."""
        asr = {}
        for sid in self.conversations:
            stats = self.media.asr_stats(sid)
            asr[sid] = {"frames": stats.frames, "peer_state": stats.peer_state}
        return {"video_frames_sent": self.media.frames_sent, "asr": asr}

    @property
    def live_sids(self) -> list[str]:
        return [sid for sid, conv in self.conversations.items() if not conv.ended]

    # -- Socket.IO handlers -----------------------------------------------------------------
    def _register_handlers(self) -> None:
        sio = self.sio
        sio.on("connect", self._on_connect)
        sio.on("connected", self._on_connected)
        sio.on("disconnect", self._on_disconnect)
        sio.on("*", self._on_any)

    async def _on_connect(self, sid: str, environ: Any, auth: Any = None) -> bool:
        token = auth.get("token") if isinstance(auth, dict) else None
        if token != self.token:
            self.refused_connections += 1
            # What the real backend's auth middleware does: a CONNECT_ERROR, never a session.
            raise socketio.exceptions.ConnectionRefusedError("invalid token")
        self.connections += 1
        query = parse_qs(environ.get("QUERY_STRING", "") if isinstance(environ, dict) else "")
        debug = query.get("debugMode", ["false"])[-1].lower() == "true"
        self.conversations[sid] = Conversation(self._context, sid, debug_mode=debug)
        return True

    async def _on_connected(self, sid: str) -> None:
        conv = self.conversations.get(sid)
        if conv is not None:
            await conv.emit(
                In.ON_SERVER_CONNECTED,
                {
                    "finalUrl": self.public_url,
                    "agentName": "Staging Avatar",
                    "hostName": "staging-pod-1",
                },
            )

    async def _on_disconnect(self, sid: str, reason: Any = None) -> None:
        self.disconnects.append((sid, str(reason)))
        if self.sio.is_pending_recovery(sid):
            return  # keep the conversation: turns go on streaming into the recovery buffer
        conv = self.conversations.pop(sid, None)
        if conv is not None:
            conv.close()
            await self.media.close_conversation(sid)

    async def _on_recovered(self, sid: str, replayed: int) -> None:
        self.recovered_sids.append(sid)

    async def _on_expired(self, sid: str) -> None:
        conv = self.conversations.pop(sid, None)
        if conv is not None:
            conv.close()
            await self.media.close_conversation(sid)

    async def _on_any(self, event: str, sid: str, *args: Any) -> None:
        payload = args[0] if args else None
        self.received.append(ReceivedEvent(sid, event, payload))
        conv = self.conversations.get(sid)
        if conv is None:
            return
        handler = self._handlers().get(event)
        if handler is not None:
            await handler(conv, payload if isinstance(payload, dict) else {})

    def _handlers(self) -> dict[str, Any]:
        return {
            Out.JOIN: self._join,
            Out.STV_NEW_SESSION: self._stv_new_session,
            Out.CHECK_AVAILABILITY: self._check_availability,
            Out.APPROVED_PERMISSIONS: self._approved,
            Out.TEXT_ENTERED: self._text_entered,
            Out.MUTE_USER: self._mute,
            Out.UNMUTE_USER: self._unmute,
            Out.PAUSE_CONVERSATION: self._pause,
            Out.RESUME_CONVERSATION: self._resume,
            **self.media.handlers(),
        }

    async def _join(self, conv: Conversation, data: dict[str, Any]) -> None:
        kaltura = data.get("kaltura")
        if not isinstance(kaltura, dict) or kaltura.get("ks") != self.token:
            return  # the real CM accepts the socket but never answers such a join
        if conv.joined:
            return  # a re-join on a live socket is silently ignored by the real server
        if self.faults.take_refused_join():
            await self.sio.drop_transport(conv.sid, recoverable=False)
            return
        if await self._refuse_admission(conv, "join"):
            return  # the older join-time variant of the verdicts (faults step="join")
        thread = kaltura.get("threadId")
        conv.thread_id = thread if isinstance(thread, str) and thread else self._thread_ids.new()
        conv.room = str(data.get("channel") or data.get("room") or "")
        conv.joined = True
        await conv.emit(
            In.CLIENT_CONFIGURATION,
            {
                "clientConfiguration": {
                    "languageCode": "en",
                    "isTapToTalk": False,
                    "interruptionsEnabled": True,
                    "pauseConversationEnabled": True,
                    "agentPersonaName": "Staging Avatar",
                    # a path on this server: right under whatever name the client used
                    **({ADVERTISED_FIELD: GENIE_PATH} if self.advertise_genie else {}),
                }
            },
        )
        await conv.emit(In.JOIN_COMPLETE, {})

    async def _refuse_admission(self, conv: Conversation, step: str) -> bool:
        """Answer an admission verdict scripted for ``step``, then drop the socket as the
        service does (PROTOCOL.md §3.1); False when admitted."""
        verdict = self.faults.take_admission_error(step)
        if verdict is None:
            return False
        event, payload = verdict
        await conv.emit(event, payload)
        await self.sio.disconnect(conv.sid)
        return True

    async def _stv_new_session(self, conv: Conversation, data: dict[str, Any]) -> None:
        if not conv.joined:
            return
        # The service decides admission (capacity, tier) here, after the join was answered
        # (PROTOCOL.md §2 step 5, §4.7), then takes a while to create the STV session.
        if await self._refuse_admission(conv, "stv"):
            return
        if not self.concurrent_thread_sessions and self._thread_busy(conv):
            # One server session per thread: refused the way capacity is (PROTOCOL.md §3.1).
            self.refused_thread_joins += 1
            await conv.emit(In.THROW_TO_NO_AGENT, {})
            await self.sio.disconnect(conv.sid)
            return
        if self.faults.stv_answer_delay:
            await asyncio.sleep(self.faults.stv_answer_delay)
            if conv.ended:
                return
        payload = self.stv_session_payload(conv)
        session_id = payload.get("session_id")
        if isinstance(session_id, str) and session_id:
            self.media.register_stream(conv, session_id)
        await conv.emit(In.STV_NEW_SESSION, payload)
        await conv.emit(In.SHOW_AGENT, {})
        await conv.emit(In.ASK_PERMISSIONS, {"constraints": {"audio": True, "video": False}})

    def _thread_busy(self, conv: Conversation) -> bool:
        """Whether another live server session is joined on ``conv``'s thread."""
        return any(
            other is not conv and other.joined and not other.ended
            and other.thread_id == conv.thread_id
            for other in self.conversations.values()
        )  # fmt: skip

    def conversation_cap(self) -> tuple[float, float] | None:
        """(cap, warning lead) for a server session starting now, or None (no cap)."""
        cap = self.max_conversation_length
        if cap is None:
            return None
        lead = self.time_warning_before
        if lead is None:
            lead = min(60.0, cap / 4)
        return float(cap), min(float(lead), float(cap))

    def remember(self, conv: Conversation, text: str) -> None:
        """A user turn heard on ``conv``: kept in its thread's memory."""
        conv.remember(text)

    def stv_session_payload(self, conv: Conversation) -> dict[str, Any]:
        """What ``stvNewSession`` answers: a WHEP URL served by ``self.media``, or the
        audio/phone-mode status (no session id, no URL) when ``audio_only``."""
        if self.audio_only:
            return {"status": "audio/phone mode - no STV session"}
        session_id = f"stv-{conv.sid[:8]}"
        return {
            "session_id": session_id,
            "status": "session started",
            "webrtc_url": f"{self.media_url}/rtc/v1/whep/?app=app&stream={session_id}",
        }

    async def _check_availability(self, conv: Conversation, data: dict[str, Any]) -> None:
        faults = self.faults
        if faults.availability_delay:
            await asyncio.sleep(faults.availability_delay)
        available = not faults.capacity_is_full
        if faults.availability_answer is not None:
            available = available and faults.availability_answer
        details: dict[str, Any] = {
            "stvAvailable": available,
            "whisperAvailable": True,
            "activeCalls": len(self.live_sids),
            "maxCalls": 12,
            "capacityAvailable": available,
        }
        details.update(faults.availability_details or {})
        await conv.emit(In.AVAILABILITY_RESULT, {"available": available, "details": details})

    async def _approved(self, conv: Conversation, data: dict[str, Any]) -> None:
        if conv.approved or not conv.joined:
            return
        conv.approved = True
        conv.start_cap()
        conv.start_turn("approved-permissions", "")

    async def _text_entered(self, conv: Conversation, data: dict[str, Any]) -> None:
        if not conv.approved:
            return
        if data.get("isSpeechStart") is True:
            await conv.barge_in()
            return
        text = data.get("text")
        if data.get("isFinal") is True and isinstance(text, str) and text.strip():
            if conv.agent_down:
                conv.dropped_turns.append(text)  # nobody is there to answer it
                return
            if conv.uninterruptible:
                # The service drops a typed turn sent during an uninterruptible turn (the
                # opening greeting): a client holds it until that turn's closing events.
                conv.dropped_turns.append(text)
                return
            conv.user_turns.append(text)
            conv.remember(text)
            conv.start_turn("transcript", text)

    async def _mute(self, conv: Conversation, data: dict[str, Any]) -> None:
        conv.muted = True

    async def _unmute(self, conv: Conversation, data: dict[str, Any]) -> None:
        conv.muted = False

    async def _pause(self, conv: Conversation, data: dict[str, Any]) -> None:
        conv.paused = True

    async def _resume(self, conv: Conversation, data: dict[str, Any]) -> None:
        conv.paused = False
        await conv.emit(In.CONVERSATION_RESUMED, {})

    # -- genie HTTP ---------------------------------------------------------------------------
    async def _genie_fault(self, request: web.Request) -> web.Response | None:
        """Auth check, then the injected genie delay and status (``faults.genie_*``)."""
        if request.headers.get("Authorization") != f"KS {self.token}":
            return web.json_response({"error": "unauthorized"}, status=401)
        if self.faults.genie_answer_delay:
            await asyncio.sleep(self.faults.genie_answer_delay)
        status = self.faults.take_genie_status()
        if status is not None:
            return web.json_response({"error": "injected"}, status=status)
        return None

    async def _genie_body(self, request: web.Request) -> web.Response | dict[str, Any]:
        """The JSON object a genie POST carries, or the error response to answer instead
        (the call is in the resource ledger while it is answered)."""

        def waiting() -> bool:
            transport = request.transport
            return transport is not None and not transport.is_closing()

        ticket = self._genie_calls.begin(request.remote or "?", waiting)
        try:
            return await self._genie_call(request)
        finally:
            self._genie_calls.end(ticket)

    async def _genie_call(self, request: web.Request) -> web.Response | dict[str, Any]:
        fault = await self._genie_fault(request)
        if fault is not None:
            return fault
        try:
            body = await request.json()
        except ValueError:
            return web.json_response({"error": "bad json"}, status=400)
        if not isinstance(body, dict):
            return web.json_response({"error": "expected an object"}, status=400)
        return body

    async def _tool_response(self, request: web.Request) -> web.Response:
        body = await self._genie_body(request)
        if isinstance(body, web.Response):
            return body
        self.tool_responses.append(body)
        return web.json_response({})

    async def _session_completed(self, request: web.Request) -> web.Response:
        body = await self._genie_body(request)
        if isinstance(body, web.Response):
            return body
        thread = body.get("id")
        if not isinstance(thread, str) or not thread:
            return web.json_response({"error": "missing id"}, status=400)
        self.completion_requests.append({"id": thread, "at": time.monotonic()})
        self.completed_threads.append(thread)
        return web.json_response({})

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"ok": True, "conversations": len(self.conversations)})
