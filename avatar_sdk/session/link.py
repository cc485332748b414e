"""ServerLink: everything that lives and dies with ONE server session.

A link owns the control channel of that server session, the handshake it ran, its media
lanes and its room, and has a single :meth:`ServerLink.close`. The connect sequence builds a
link (:class:`LinkBuilder`); a cold reconnect replaces it whole. The link parses what its
socket says and keeps what belongs to it (handshake answers, media signalling, probe
answers) before handing the event up to its session; a late event from a replaced link is
recognisable by its link and ignored.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ..clock import Clock
from ..config import DEFAULT_AUDIO_CODEC, AudioCodec, SessionConfig
from ..errors import AvatarError, ErrorCode
from ..logs import sdk_logger
from ..observe import Observer
from ..release_once import ReleaseOnce
from ..transport.rtc.asr import UplinkTrack
from ..transport.rtc.core.voice_buffer import VoiceBufferCounts
from ..transport.rtc.ice import TurnConfig
from ..transport.rtc.media import MediaLanes
from ..transport.rtc.stv import FanoutTrack
from ..transport.socketio.control import ControlChannel, WireCounters
from ..wire import (
    AvailabilityResult,
    In,
    InboundEvent,
    Out,
    ProtocolError,
    StvNewSession,
    build_approved_permissions,
    build_check_availability,
    build_stv_new_session,
    new_room_id,
    parse_event,
)
from .core.machine import Trigger
from .core.router import FATAL_EVENTS, HANDSHAKE_EVENTS
from .handshake import (
    Advance,
    Deadline,
    Handshake,
    HandshakeResult,
    run_handshake,
    wait_step,
)
from .ports import Late

log = sdk_logger(__name__)

#: Events whose meaning is their name alone (a server verdict, the conversation's end): one
#: whose payload could not be decoded still takes effect, with an empty payload.
NAME_ONLY_EVENTS: frozenset[str] = frozenset({*FATAL_EVENTS, In.CONVERSATION_ENDED})


#: Sends one event on the live link, in order with every other send (the slot's outbox).
Send = Callable[[str, Any], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class LinkListener:
    """Where a link reports what its socket said (the session's handlers)."""

    on_inbound: Callable[[ServerLink, str, InboundEvent], None]
    on_protocol_error: Callable[[ServerLink, str, str], None]
    on_disconnect: Callable[[ServerLink, str], None]


@dataclass(frozen=True, slots=True)
class MediaSpec:
    """What the media lanes of every link of a session are built with."""

    uplink_track: UplinkTrack
    outputs: dict[str, FanoutTrack]
    video: bool
    allow_private: bool
    turn: TurnConfig | None = None
    audio_codec: AudioCodec = DEFAULT_AUDIO_CODEC
    #: What the voice's receive buffers count, over every link (``stats()["voice_buffer"]``).
    voice_counts: VoiceBufferCounts | None = None


@dataclass(eq=False)
class ServerLink:
    """One server session: control channel, handshake, media lanes, room; one close."""

    channel: ControlChannel
    config: SessionConfig
    room_id: str = field(default_factory=new_room_id)
    handshake: Handshake = field(default_factory=Handshake)
    lanes: MediaLanes | None = None
    result: HandshakeResult | None = None
    _probes: list[asyncio.Future[None]] = field(default_factory=list)
    #: Where this link reports what its socket says: the session's handlers, or a
    #: renewal's while the link is being prepared unseen (switched in one step at the swap).
    listener: LinkListener | None = None
    #: When the server session was approved (session clock): its cap counts from here.
    approved_at: float | None = None
    _release_once: ReleaseOnce = field(default_factory=ReleaseOnce)

    def __repr__(self) -> str:
        return f"<ServerLink room={self.room_id} channel={self.channel!r}>"

    @property
    def connected(self) -> bool:
        return not self._release_once.started and self.channel.connected

    # -- inbound ----------------------------------------------------------------------------
    def receive(self, listener: LinkListener, name: str, args: list[Any]) -> None:
        """Parse one inbound event, keep what belongs to this link, hand it up."""
        try:
            event = parse_event(name, args)
        except ProtocolError as exc:
            listener.on_protocol_error(self, exc.event, exc.detail)
            return
        if name in HANDSHAKE_EVENTS:
            self.handshake.offer(name, event)
        code = FATAL_EVENTS.get(name)
        if code is not None:
            self.handshake.fail(AvatarError(code, name))
        if isinstance(event, AvailabilityResult):
            for waiter in self._probes:
                if not waiter.done():
                    waiter.set_result(None)
            self._probes.clear()
        if self.lanes is not None:
            self.lanes.on_event(event)
        listener.on_inbound(self, name, event)

    def refused(self, listener: LinkListener, name: str, detail: str, name_only: bool) -> None:
        """A frame the socket refused: a protocol error. If only the payload of an event
        whose name is its whole meaning was lost, the event still happens (a server that
        ended the conversation must not leave the session waiting forever)."""
        listener.on_protocol_error(self, name, detail)
        if name_only and name in NAME_ONLY_EVENTS:
            self.receive(listener, name, [])

    # -- verbs ------------------------------------------------------------------------------
    async def emit(self, event: str, payload: object) -> None:
        await self.channel.emit(event, payload)

    async def probe(self, timeout: float) -> bool:
        """One ``checkAvailability`` round trip: is the server really reading this socket?
        False at once when the socket drops meanwhile (:meth:`socket_dropped`)."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._probes.append(waiter)
        try:
            await self.channel.emit(Out.CHECK_AVAILABILITY, build_check_availability())
            # asyncio.wait, not wait_for: on Python 3.11 wait_for swallows a cancellation
            # that arrives as the answer does, and the watchdog would outlive its session.
            await asyncio.wait({waiter}, timeout=timeout)
        except AvatarError:
            return False
        finally:
            if waiter in self._probes:
                self._probes.remove(waiter)
        return waiter.done() and not waiter.cancelled()

    def socket_dropped(self) -> None:
        """The socket dropped: probes still waiting will get no answer on it, say so now."""
        for waiter in self._probes:
            waiter.cancel()
        self._probes.clear()

    async def close(self, timeout: float) -> None:
        """Release the socket, the peers and every waiter of this server session (bounded).

        The release runs as the link's own task: a caller cancelled meanwhile (``close()``
        of the session during a cold rebuild) does not leave it half done, and every later
        caller awaits the same release."""
        await self._release_once.run(lambda: self._release(timeout))

    async def _release(self, timeout: float) -> None:
        self.handshake.fail(AvatarError(ErrorCode.CLOSED, "link closed"))
        self.handshake.close()
        for waiter in self._probes:
            waiter.cancel()
        lanes, self.lanes = self.lanes, None
        await asyncio.gather(
            self.channel.close(timeout),
            lanes.close(timeout) if lanes is not None else asyncio.sleep(0),
        )

    async def close_media(self, timeout: float) -> None:
        lanes, self.lanes = self.lanes, None
        if lanes is not None:
            await lanes.close(timeout)


class LinkBuilder:
    """Builds links for one session: open the socket, run the connect sequence, media."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        config: SessionConfig,
        sticky_id: str,
        partner_id: str | None,
        media: MediaSpec | None,
        counters: WireCounters,
        clock: Clock,
        listener: Late[LinkListener],
        ssl_context: ssl.SSLContext | None = None,
        observer: Observer | None = None,
    ) -> None:
        self._url = url
        #: Told what every link's channels say and hear (``avatar_sdk.observe``); links are
        #: numbered in the order they are created.
        self._observer = observer
        self._links_made = 0
        self.__token = token
        self._config = config
        self._sticky_id = sticky_id
        self._partner_id = partner_id
        self._media = media
        self._counters = counters
        #: TLS trust of every connection (socket and WHEP); None: the system CAs.
        self._ssl = ssl_context
        self._clock = clock
        #: Where links report (the session's inbound handler, which exists only later).
        self._listener = listener

    @property
    def listener(self) -> LinkListener:
        """Where the session's links report."""
        return self._listener()

    def create(self, listener: LinkListener | None = None) -> ServerLink:
        """A new, unopened link (no I/O): the session adopts it before any event arrives.
        ``listener``: where it reports (default: the session's, :attr:`listener`); a
        renewal prepares its link with its own and hands it over at the swap."""
        listener = listener or self.listener
        link: ServerLink

        def heard() -> LinkListener:
            return link.listener or listener

        def on_event(name: str, args: list[Any]) -> None:
            link.receive(heard(), name, args)

        def on_disconnect(_: ControlChannel, reason: str) -> None:
            link.socket_dropped()
            heard().on_disconnect(link, reason)

        def on_protocol_error(name: str, detail: str, name_only: bool) -> None:
            link.refused(heard(), name, detail, name_only)

        channel = ControlChannel(
            self._url,
            self.__token,
            sticky_id=self._sticky_id,
            partner_id=self._partner_id,
            on_event=on_event,
            on_disconnect=on_disconnect,
            on_protocol_error=on_protocol_error,
            max_message_size=self._config.max_message_size,
            counters=self._counters,
            ssl_context=self._ssl,
            now=self._clock.monotonic,
            observer=self._observer,
            link=self._links_made,
        )
        self._links_made += 1
        link = ServerLink(channel=channel, config=self._config, listener=listener)
        return link

    async def join(
        self,
        link: ServerLink,
        deadline: Deadline,
        *,
        thread_id: str | None,
        advance: Advance,
        after_join: Callable[[ServerLink], Awaitable[None]] | None = None,
        hidden: UplinkTrack | None = None,
    ) -> HandshakeResult:
        """Open the link's socket and run the connect sequence (PROTOCOL.md §2) on it.

        ``hidden``: a silent uplink track for a link prepared unseen (a renewal's): its
        uplink sends that, and its downlink's frames go nowhere until
        :meth:`~avatar_sdk.transport.rtc.media.MediaLanes.reveal`."""
        cfg = self._config
        timeout, _ = deadline.clip(cfg.server_connect_timeout, ErrorCode.CONNECT_TIMEOUT)
        await link.channel.open(timeout)

        async def media_steps(result: HandshakeResult) -> None:
            await self.start_media(link, deadline, result.stv, advance, hidden=hidden)

        link.result = await run_handshake(
            link.channel,
            link.handshake,
            config=cfg,
            deadline=deadline,
            token=self.__token,
            room_id=link.room_id,
            thread_id=thread_id,
            media=self._media is not None,
            advance=advance,
            media_steps=media_steps,
        )
        link.approved_at = self._clock.monotonic()
        if after_join is not None:
            await after_join(link)
        return link.result

    async def start_media(
        self,
        link: ServerLink,
        deadline: Deadline,
        stv: StvNewSession | None,
        advance: Advance,
        *,
        hidden: UplinkTrack | None = None,
    ) -> None:
        """Steps 9-10: the ASR uplink, then the STV downlink and its playable gate.
        ``hidden``: prepared unseen (see :meth:`join`)."""
        spec = self._media
        if spec is None:
            return
        lanes = MediaLanes(
            config=self._config,
            uplink_track=hidden or spec.uplink_track,
            # Each link's own view of the outputs: a swap clears one and fills the other.
            outputs={} if hidden is not None else dict(spec.outputs),
            video=spec.video,
            allow_private=spec.allow_private,
            clock=self._clock,
            turn=spec.turn,
            ssl_context=self._ssl,
            audio_codec=spec.audio_codec,
            observer=self._observer,
            voice_counts=spec.voice_counts,
        )
        link.lanes = lanes
        lanes.room_id = link.room_id
        await lanes.start_asr(
            emit=link.emit,
            wait=lambda name: wait_step(link.handshake, self._config, deadline, name),
            socket_id=link.channel.sid or "",
        )
        advance(Trigger.ASR_READY)
        await lanes.start_stv(stv, deadline.remaining)
        advance(Trigger.VIDEO_READY)

    async def rebuild_media(self, link: ServerLink, send: Send) -> None:
        """After the server released a paused session's media: a new STV session, both
        peers again, approved again (``resume()``). ``send``: the slot's outbox, so these
        go out in order with the user's own sends on the live link."""
        cfg = self._config
        link.handshake.close()
        link.handshake = Handshake()
        deadline = Deadline(cfg.overall_connect_timeout, self._clock)
        await link.close_media(cfg.close_timeout / 2)
        await send(Out.STV_NEW_SESSION, build_stv_new_session(link.room_id))
        await send(Out.CHECK_AVAILABILITY, build_check_availability())
        stv = await wait_step(link.handshake, cfg, deadline, In.STV_NEW_SESSION)

        def stay(_: str) -> None:
            return None

        await self.start_media(
            link, deadline, stv if isinstance(stv, StvNewSession) else None, stay
        )
        await send(Out.APPROVED_PERMISSIONS, build_approved_permissions(link.room_id))
