"""Fault injection for the staging backend: one method per fault, each one line in a test."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from engineio import packet as eio_packet

from ...wire.names import In
from .state import Blackout, LiveConversation

if TYPE_CHECKING:
    from .csr_server import RecoveringAsyncServer
    from .media import StagingMedia
    from .scripted import ScriptedBackend

#: A payload per event that no parser can accept (wrong type where an object is required).
_MALFORMED: dict[str, Any] = {
    In.AGENT_RAW_TEXT: {"speechId": 7, "turnId": None, "delta": 42},
    In.ASR_WEBRTC_ANSWER: {"answer": "not-an-object"},
}

#: Admission verdicts the service sends instead of an answer, with their payloads
#: (PROTOCOL.md §3.1); the server disconnects the socket right after each.
ADMISSION_EVENTS: dict[str, dict[str, Any]] = {
    In.THROW_TO_NO_AGENT: {},
    In.THROW_TO_EXCEEDED_TIER: {},
    In.THROW_TO_BAD_REQUEST: {},
    In.UNSUPPORTED_CLIENT: {"code": "USAGE_LIMIT_EXCEEDED"},
    In.REMOVE_PEER: {},
}
#: Where a verdict can answer: ``"stv"`` (instead of the ``stvNewSession`` answer, after
#: ``clientConfiguration`` and ``joinComplete``: what the service does, PROTOCOL.md §2 step 5
#: and §4.7) or ``"join"`` (instead of ``clientConfiguration``: an older variant).
ADMISSION_STEPS = ("stv", "join")


def _step(step: str) -> str:
    if step not in ADMISSION_STEPS:
        raise ValueError(f"step must be one of {ADMISSION_STEPS}, got {step!r}")
    return step


class _RawFrame(eio_packet.Packet):  # type: ignore[misc]
    """An Engine.IO "packet" whose encoding is exactly the text given: engineio's websocket
    writer sends ``pkt.encode()`` as one text frame, so nothing re-encodes it."""

    def __init__(self, text: str) -> None:
        super().__init__(eio_packet.MESSAGE, data=text)

    def encode(self, b64: bool = False) -> str:
        return str(self.data)


class Faults:
    """Control-plane and media faults. Names follow CONTRACT.md; extra keyword options are
    additive."""

    def __init__(
        self,
        *,
        sio: RecoveringAsyncServer,
        conversations: Mapping[str, LiveConversation],
        media: StagingMedia,
        scripted: ScriptedBackend,
        listener: Blackout,
    ) -> None:
        """The parts the faults act on: the Socket.IO server, the live client sessions, the
        media side, the avatar-session service and the listening socket (blackouts)."""
        self._sio = sio
        self._conversations = conversations
        self._media = media
        self._scripted = scripted
        self._listener = listener
        self.withheld: set[str] = set()
        self.capacity_full_until = 0.0
        self.capacity_step = "stv"
        #: Queued admission verdicts: (event, step, payload), the oldest answers first.
        self.admission: list[tuple[str, str, dict[str, Any]]] = []
        #: ``availabilityResult``: the scripted answer (None: the real capacity), its delay.
        self.availability_answer: bool | None = None
        self.availability_details: dict[str, Any] | None = None
        self.availability_delay = 0.0
        #: Seconds the ``stvNewSession`` answer takes (the service creating an STV session).
        self.stv_answer_delay = 0.0
        self.added_latency = 0.0
        #: Joins still to be refused (``refuse_joins``).
        self.joins_to_refuse = 0
        self.injected: list[str] = []
        #: genie HTTP faults: statuses the next genie POSTs answer, delay before answering.
        self.genie_statuses: list[int] = []
        self.genie_answer_delay = 0.0

    # -- socket -----------------------------------------------------------------------------
    async def drop_socket(self, *, recovery: bool = True) -> int:
        """Kill every client transport abruptly (recoverable unless ``recovery=False``)."""
        self.injected.append("drop_socket")
        sio = self._sio
        dropped = 0
        for sid in list(self._conversations):
            if await sio.drop_transport(sid, recoverable=recovery):
                dropped += 1
        return dropped

    async def blackout(self, seconds: float, *, recovery: bool = True) -> int:
        """An outage: for ``seconds`` the server refuses every new connection (its
        listening socket is closed, so a connect fails at once with "connection refused",
        WHEP and genie requests included), and it starts by dropping every control
        transport abruptly, as :meth:`drop_socket` does (recoverable unless
        ``recovery=False``: the server keeps each session for connection-state recovery,
        ``recovery_window``). Media peers (UDP) and connections accepted before are left
        alone. Returns at once with how many sockets were dropped; the server listens
        again on the same port ``seconds`` later, or at :meth:`clear`."""
        self.injected.append("blackout")
        await self._listener.refuse_connections(seconds)
        sio = self._sio
        dropped = 0
        for sid in list(self._conversations):
            if await sio.drop_transport(sid, recoverable=recovery):
                dropped += 1
        return dropped

    async def server_disconnect(self) -> None:
        """A Socket.IO-level disconnect from the server ("io server disconnect"): final."""
        self.injected.append("server_disconnect")
        for sid in list(self._conversations):
            await self._sio.disconnect(sid)

    def silent_socket(self, *, server_timeout: float | None = None) -> int:
        """Every control socket goes silently dead like a vanished peer: nothing read, nothing
        written (no ping, no close frame), no FIN, until :meth:`clear` or the server stops.
        Only a client-side probe can notice before Engine.IO's ping timeout. Returns how many
        sockets were silenced.

        ``server_timeout=S``: after ``S`` seconds the server treats the socket as gone (ping
        timeout, recoverable), so a client reconnecting after that recovers in place.
        ``None``: only the server's own heartbeat (25 + 20 s) ever notices, so a recovery
        offered before that is refused and the client takes the cold path.
        """
        self.injected.append("silent_socket")
        sio = self._sio
        return sum(
            1
            for sid in list(self._conversations)
            if sio.blackhole(sid, server_timeout=server_timeout)
        )

    def recovery_window(self, seconds: float) -> None:
        """Server-side connection-state-recovery window (default 20 s)."""
        self._sio.recovery_window = seconds

    # -- capacity and admission -------------------------------------------------------------
    def capacity_full(self, seconds: float, *, step: str = "stv") -> None:
        """For ``seconds``: every admission answers ``throwToNoAgent`` (then the server drops
        the socket) and ``availabilityResult`` says ``available: false``. ``step``: where the
        verdict answers, ``"stv"`` (the service: after ``stvNewSession``) or ``"join"``."""
        self.injected.append("capacity_full")
        self.capacity_step = _step(step)
        self.capacity_full_until = time.monotonic() + seconds

    @property
    def capacity_is_full(self) -> bool:
        return time.monotonic() < self.capacity_full_until

    def tier_exceeded(self, *, step: str = "stv") -> None:
        """The next admission answers ``throwToExceededTier`` (then the server drops the
        socket). ``step="stv"`` (default, what the service does): instead of the
        ``stvNewSession`` answer; ``step="join"``: instead of ``clientConfiguration``."""
        self.admission_error(In.THROW_TO_EXCEEDED_TIER, step=step)

    def admission_error(
        self,
        event: str = In.THROW_TO_EXCEEDED_TIER,
        *,
        step: str = "stv",
        payload: dict[str, Any] | None = None,
        times: int = 1,
    ) -> None:
        """The next ``times`` admissions answer ``event`` (``throwToNoAgent``,
        ``throwToExceededTier``, ``throwToBadRequest``, ``unsupportedClient`` or
        ``removePeer``) at ``step``, then the server drops the socket."""
        if event not in ADMISSION_EVENTS:
            raise ValueError(f"event must be one of {sorted(ADMISSION_EVENTS)}, got {event!r}")
        body = dict(ADMISSION_EVENTS[event] if payload is None else payload)
        self.injected.append(f"admission_error:{event}:{_step(step)}")
        self.admission.extend([(event, step, body)] * max(0, int(times)))

    def take_admission_error(self, step: str) -> tuple[str, dict[str, Any]] | None:
        """The verdict answering an admission at ``step`` now, if any (a queued one is
        consumed; a full capacity answers ``throwToNoAgent`` while it lasts)."""
        for index, (event, at, payload) in enumerate(self.admission):
            if at == step:
                del self.admission[index]
                return event, payload
        if self.capacity_is_full and self.capacity_step == step:
            return In.THROW_TO_NO_AGENT, {}
        return None

    @property
    def tier_exceeded_pending(self) -> bool:
        """A ``throwToExceededTier`` is queued."""
        return any(event == In.THROW_TO_EXCEEDED_TIER for event, _, _ in self.admission)

    def availability(
        self,
        available: bool | None = None,
        *,
        delay: float = 0.0,
        details: dict[str, Any] | None = None,
    ) -> None:
        """Every ``availabilityResult`` answers ``available`` (None: the real capacity)
        ``delay`` seconds after its ``checkAvailability``; ``details`` replaces the
        ``details`` object. A ``capacity_full`` still answers false."""
        self.injected.append("availability")
        self.availability_answer = None if available is None else bool(available)
        self.availability_delay = max(0.0, float(delay))
        self.availability_details = None if details is None else dict(details)

    def stv_session_delay(self, seconds: float) -> None:
        """The ``stvNewSession`` answer comes ``seconds`` late (the service creating an STV
        session), so an ``availabilityResult`` can arrive before it, as in production."""
        self.injected.append("stv_session_delay")
        self.stv_answer_delay = max(0.0, float(seconds))

    def refuse_joins(self, *, times: int = 1) -> None:
        """The next ``times`` joins are refused the way a backend that is restarting
        refuses them: the server drops the socket abruptly instead of answering (no
        ``clientConfiguration``), so that connect attempt fails with ``transport_closed``
        (retryable) and a later join is admitted as usual."""
        self.injected.append("refuse_joins")
        self.joins_to_refuse += max(0, int(times))

    def take_refused_join(self) -> bool:
        """True (and one fewer to refuse) when this join is to be refused."""
        if self.joins_to_refuse <= 0:
            return False
        self.joins_to_refuse -= 1
        return True

    def withhold(self, event_name: str) -> None:
        """Never send that event (any handshake event, or any other)."""
        self.withheld.add(event_name)

    # -- conversation -----------------------------------------------------------------------
    async def end_conversation(self, *, expired: bool = True) -> None:
        """``conversationTimeExpired`` then ``conversationEnded`` to every client (the cap
        reached); ``expired=False``: ``conversationEnded`` alone (ended on purpose)."""
        self.injected.append("end_conversation")
        for conv in list(self._conversations.values()):
            if expired:
                await conv.emit(In.CONVERSATION_TIME_EXPIRED, {})
            await conv.emit(In.CONVERSATION_ENDED, {})

    async def time_warning(self, remaining: float = 60.0) -> None:
        """``conversationTimeWarning`` with ``remainingTime`` seconds."""
        for conv in list(self._conversations.values()):
            await conv.emit(In.CONVERSATION_TIME_WARNING, {"remainingTime": remaining})

    async def agent_crash(self, *, recoverable: bool = True, restart_after: float = 0.3) -> None:
        """``session_error`` AGENT_CHILD_CRASHED_RESTARTED (recoverable) or AGENT_CHILD_CRASHED.

        A restarting agent ignores user turns (they are lost server-side) until it is back,
        ``restart_after`` seconds later, which it announces with ``showAgent``.
        """
        self.injected.append("agent_crash")
        code = "AGENT_CHILD_CRASHED_RESTARTED" if recoverable else "AGENT_CHILD_CRASHED"
        for conv in list(self._conversations.values()):
            conv.cancel_turn()
            conv.agent_down = True
            await conv.emit(In.SESSION_ERROR, {"code": code, "message": "agent process exited"})
            if recoverable:
                conv.schedule_agent_restart(restart_after)

    async def release_session(self, *, expired: bool = False) -> None:
        """While paused: the server releases the avatar's media and says so
        (``sessionReadyForResume``, or ``pauseSessionExpired`` with ``expired=True``)."""
        self.injected.append("release_session")
        for sid, conv in list(self._conversations.items()):
            await self._media.close_conversation(sid)
            event = In.PAUSE_SESSION_EXPIRED if expired else In.SESSION_READY_FOR_RESUME
            await conv.emit(event, {})

    async def malformed(self, event_name: str, payload: Any = None) -> None:
        """Send ``event_name`` with a payload of the wrong shape."""
        self.injected.append(f"malformed:{event_name}")
        bad = payload if payload is not None else _MALFORMED.get(event_name, "not-an-object")
        for conv in list(self._conversations.values()):
            await conv.emit(event_name, bad)

    async def raw_frame(self, text: str) -> int:
        """Write ``text`` verbatim as one websocket text frame to every client.

        ``text`` is a whole Engine.IO frame, its type digit included: ``'42["x",{}]'`` is a
        Socket.IO EVENT, ``'44{"message":"no"}'`` a CONNECT_ERROR. Nothing validates it, and
        it is not kept for connection-state recovery (no offset). Returns how many clients
        it was written to.
        """
        self.injected.append("raw_frame")
        sent = 0
        for socket in list(self._sio.eio.sockets.values()):
            if socket.closed or socket.closing or not socket.upgraded:
                continue
            await socket.send(_RawFrame(text))
            sent += 1
        return sent

    async def oversized(self, size: int, *, event_name: str = In.CONVERSATION_TIME_WARNING) -> None:
        """Send ``event_name`` with a payload padded to about ``size`` bytes, through the
        recovery buffer like any event (so a recovery replays it)."""
        self.injected.append(f"oversized:{event_name}")
        payload = {"remainingTime": 60, "pad": "x" * max(0, size)}
        for conv in list(self._conversations.values()):
            await conv.emit(event_name, payload)

    # -- media (real aiortc peers, see .media) ----------------------------------------------
    async def ice_failure(self, channel: str, *, mode: str = "close") -> int:
        """ICE fails on every open server peer of ``channel`` ("asr" | "stv"); returns how many.

        ``mode="close"`` (default): the server side dies at once (DTLS close alert, ICE
        torn down); an aiortc client's peer goes ``closed`` immediately. ``mode="blackhole"``:
        the path silently drops everything (consent checks included) while the server peer
        stays up, so the client only notices missing media/RTCP, and an ASR ICE restart
        (new ufrag, same DTLS) is accepted on the same server peer.
        """
        self.injected.append(f"ice_failure:{channel}")
        return await self._media.ice_failure(channel, mode=mode)

    async def media_stall(self, channel: str, *, seconds: float | None = None) -> None:
        """RTP stops on ``channel`` while ICE stays up, for ``seconds`` (None: until cleared).

        "stv": the avatar's tracks stop producing frames (RTCP goes on). "asr": the server
        drops SRTP/SRTCP both ways (no audio received, no RTCP receiver reports sent).
        """
        self.injected.append(f"media_stall:{channel}")
        self._media.media_stall(channel, seconds)

    def freeze_video(
        self, *, seconds: float | None = None, thaw_on_keyframe_request: bool = False
    ) -> int:
        """The avatar's video stops on every current WHEP subscription while its voice goes
        on (no video RTP at all), for ``seconds`` (None: until cleared, or with
        ``thaw_on_keyframe_request`` until the client asks for a keyframe with a PLI); a new
        subscription (a WHEP re-subscribe) gets video again. Returns how many froze."""
        self.injected.append("freeze_video")
        return self._media.freeze_video(seconds, thaw_on_keyframe_request=thaw_on_keyframe_request)

    def lose_video_packets(self, count: int = 1, *, resends_lost: int | None = None) -> int:
        """The avatar's video sender on every current WHEP subscription drops its next
        ``count`` RTP packets, and the first ``resends_lost`` retransmissions a NACK asks
        for (None: all of them, so the packets are lost for good). Returns how many
        subscriptions were armed."""
        self.injected.append("lose_video_packets")
        return self._media.lose_video_packets(count, resends_lost=resends_lost)

    def voice_loss(
        self, rate: float = 0.0, *, count: int = 0, seed: int = 0, sid: str | None = None
    ) -> int:
        """The avatar's voice on the WHEP subscriptions of the server session ``sid`` (None:
        every session) loses its next ``count`` RTP packets, and from then on each packet
        with probability ``rate`` (seeded: ``seed`` makes the same choices again); the rate
        holds for later subscriptions too, until :meth:`clear`. Returns how many current
        subscriptions were armed."""
        self.injected.append("voice_loss")
        return self._media.voice_loss(rate, count=count, seed=seed, sid=sid)

    def voice_reorder(
        self, rate: float = 0.0, *, count: int = 0, seed: int = 0, sid: str | None = None
    ) -> int:
        """The avatar's voice (``sid``'s subscriptions, None: every session) sends its next
        ``count`` packets, and from then on each with probability ``rate`` (seeded), right
        after the packet that follows it; until :meth:`clear`. Returns how many current
        subscriptions were armed."""
        self.injected.append("voice_reorder")
        return self._media.voice_reorder(rate, count=count, seed=seed, sid=sid)

    def voice_jitter(self, seconds: float, *, seed: int = 0, sid: str | None = None) -> int:
        """Each packet of the avatar's voice (``sid``'s subscriptions, None: every session)
        is sent after its own delay, drawn uniform in [0, ``seconds``] (seeded), so packets
        whose delays differ by more than a frame arrive out of order; 0 ends it, as does
        :meth:`clear`. Returns how many current subscriptions were armed."""
        self.injected.append("voice_jitter")
        return self._media.voice_jitter(seconds, seed=seed, sid=sid)

    def whep_404(self, *, times: int = 1) -> None:
        """The next ``times`` WHEP POSTs answer 404 ``NO_ACTIVE_SESSION``."""
        self.injected.append("whep_404")
        self._media.whep_404(times)

    def whep_delay(self, seconds: float) -> None:
        """Every WHEP POST is answered ``seconds`` late, its resource already created (0 =
        no delay): a client closing meanwhile must still DELETE what its POST made."""
        self.injected.append("whep_delay")
        self._media.whep_answer_delay = max(0.0, float(seconds))

    def unplayable_whep(self, *, times: int = 1) -> None:
        """The next ``times`` WHEP viewers get tracks that never send a frame (the POST is
        answered and ICE connects): a downlink that never passes the playable gate."""
        self.injected.append("unplayable_whep")
        self._media.unplayable_whep(times)

    # -- the avatar-session (scripted video) service ------------------------------------------
    def say_refused(self, status: int = 503, *, times: int = 1) -> None:
        """The next ``times`` ``say-audio`` calls answer ``status`` (a 5xx by default)."""
        if not 400 <= status < 600:
            raise ValueError("status must be an HTTP error status (4xx or 5xx)")
        self.injected.append("say_refused")
        self._scripted.refuse_says(status, times)

    async def reclaim_session(self, session_id: str | None = None) -> int:
        """The service reclaims an avatar session (every live one when ``session_id`` is
        None): its calls answer 404 from now on and its WHEP peers close. Returns how many.
        The WHEP peer alone is killed with ``ice_failure("stv")``."""
        self.injected.append("reclaim_session")
        return await self._scripted.reclaim(session_id)

    def stuck_ice(self, channel: str, *, mode: str = "no_answer") -> None:
        """ICE never gets going on new ``channel`` peers, until cleared.

        ``no_answer``: asr: ``asr-webrtc-answer`` is never sent; stv: the WHEP POST is held
        until the client gives up (at most 60 s, then 504). ``no_candidates``: the answer
        carries no ``a=candidate`` (nor end-of-candidates) line and the server peer ignores
        the client's checks, so the client stays in ``checking``.
        """
        self.injected.append(f"stuck_ice:{channel}:{mode}")
        self._media.stuck_ice(channel, mode)

    # -- genie HTTP (session_completed, tool_response) --------------------------------------
    def genie_status(self, code: int, *, times: int = 1) -> None:
        """The next ``times`` genie POSTs (``session_completed`` or ``tool_response``) answer
        HTTP ``code`` and are not recorded."""
        self.injected.append(f"genie_status:{code}")
        self.genie_statuses.extend([int(code)] * max(0, int(times)))

    def genie_delay(self, seconds: float) -> None:
        """Every genie POST is answered ``seconds`` late (0 = no delay)."""
        self.injected.append("genie_delay")
        self.genie_answer_delay = max(0.0, float(seconds))

    def take_genie_status(self) -> int | None:
        """The injected status for the genie POST being answered now, if any (consumed)."""
        return self.genie_statuses.pop(0) if self.genie_statuses else None

    def latency(self, seconds: float) -> None:
        """Added before every server emit."""
        self.added_latency = max(0.0, seconds)

    def clear(self) -> None:
        """Back to healthy."""
        self._scripted.say_refusals.clear()
        self.withheld.clear()
        self.capacity_full_until = 0.0
        self.admission.clear()
        self.availability_answer = None
        self.availability_details = None
        self.availability_delay = 0.0
        self.stv_answer_delay = 0.0
        self.added_latency = 0.0
        self.joins_to_refuse = 0
        self.genie_statuses.clear()
        self.genie_answer_delay = 0.0
        self._sio.recovery_enabled = True
        self._sio.release_blackholes()
        self._listener.end_blackout()
        self._media.clear_faults()
