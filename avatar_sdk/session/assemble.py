"""The assembly of one live session: every part built once, in one place, with what it needs.

``AvatarSession`` checks its arguments into a :class:`~.spec.SessionSpec` and calls
:func:`assemble`; tests build parts the same way. Each part gets its collaborators at
construction, and nothing is patched onto it afterwards. Where two parts need each other
(a link reports to the inbound handler, which drives the recovery, which builds links; a
failed task or the idle timer ends the session through the endings, which stop them), the
circle is broken by a :class:`~.ports.Late` built first and bound once its part exists. A
genie host learned at connect lives in the :class:`~.genie_host.GenieHost`, which every
user of the genie client reads. ``docs/architecture.md`` draws who owns what.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..cassette.recorder import CassetteRecorder
from ..clock import Clock
from ..config import SessionConfig
from ..errors import AvatarError, ErrorCode
from ..events.bus import EventBus
from ..events.journal import Journal
from ..guards.brain import ConversationGuards
from ..lifecycle.completion import CompletionSignal, IdleTimer
from ..logs import sdk_logger
from ..observe import Observers
from ..transport.rtc.asr import UplinkTrack
from ..transport.rtc.core.av_sync import PresentationTimeline
from ..transport.rtc.core.voice_buffer import VoiceBufferCounts
from ..transport.rtc.stv import FanoutTrack
from ..wire import new_sticky_id
from .connecting import Connecting
from .conversation import ConversationView
from .core.machine import SessionMachine
from .core.stats import SessionStats
from .endings import Endings
from .genie_host import GenieHost
from .greeting import GreetingGate
from .inbound import InboundHandler
from .link import LinkBuilder, LinkListener, MediaSpec, ServerLink
from .link_slot import LinkSlot
from .ports import Late
from .recovery import RecoveryController
from .renewal import RenewalController
from .renewal_parts import RenewalParts
from .replies import Replies
from .spec import SessionSpec
from .supervisor import Supervisor
from .turn_desk import TurnDesk
from .user_speech import UserSpeech
from .user_state import UserState
from .user_turns import UserTurns
from .watches import Watches

log = sdk_logger("avatar_sdk.session")

__all__ = ["SessionParts", "assemble", "describe"]


@dataclass(frozen=True, slots=True, eq=False)
class SessionParts:
    """Every part of one live session, built by :func:`assemble`."""

    config: SessionConfig
    clock: Clock
    media: bool
    sticky_id: str
    observers: Observers
    machine: SessionMachine
    supervisor: Supervisor
    slot: LinkSlot
    view: ConversationView
    stats: SessionStats
    #: What the voice's receive buffers count, over every link (``stats()["voice_buffer"]``).
    voice_counts: VoiceBufferCounts
    uplink_track: UplinkTrack
    outputs: dict[str, FanoutTrack]
    builder: LinkBuilder
    guards: ConversationGuards
    user: UserState
    genie: GenieHost
    completion: CompletionSignal
    idle: IdleTimer
    journal: Journal | None
    desk: TurnDesk
    replies: Replies
    endings: Endings
    recovery: RecoveryController
    renewal: RenewalController
    inbound: InboundHandler
    watches: Watches
    connecting: Connecting
    turns: UserTurns
    greeting: GreetingGate


def assemble(spec: SessionSpec, bus: EventBus, *, owner: object | None = None) -> SessionParts:
    """Build every part of one live session around ``bus`` (the session's event bus);
    ``owner``: the facade, which its tasks keep alive while they run (:class:`Supervisor`).

    :raises AvatarError: ``invalid_argument`` for a ``record`` path that cannot be written
        or a bad ``genie_url``, ``insecure_transport`` for an http one without the opt-in.
    """
    cfg, clock, media = spec.config, spec.clock, spec.media
    emit = bus.emit
    # The circles: built first, bound below once their part exists.
    endings_late: Late[Endings] = Late("the endings")
    renewal_late: Late[RenewalController] = Late("the renewal controller")
    listener_late: Late[LinkListener] = Late("the inbound handler")

    bus.configure(queue_size=cfg.event_queue_size)  # events() buffers: their default bound
    machine = SessionMachine(on_change=StateAnnouncer(bus).changed)
    supervisor = Supervisor(
        on_failure=lambda name, exc: endings_late().on_task_failure(name, exc), owner=owner
    )
    slot = LinkSlot(supervisor)
    view = ConversationView(thread_id=spec.thread_id)
    stats = SessionStats()
    # The avatar's voice and video on one presentation timeline, across subscriptions.
    timeline = PresentationTimeline()
    outputs: dict[str, FanoutTrack] = {"audio": FanoutTrack("audio", timeline=timeline)}
    if spec.video:
        outputs["video"] = FanoutTrack("video", timeline=timeline)
    # Each turn's reply and its figures; the user's speech on the uplink makes spoken turns.
    replies = Replies(clock=clock, on=bus.on, audio=outputs["audio"] if media else None, emit=emit)
    speech = UserSpeech(clock=clock, replies=replies)
    uplink_track = UplinkTrack(
        spec.audio, on_error=SourceErrors(bus).failed, on_level=speech.frame if media else None
    )
    cassette = _cassette(spec)
    # The one fan-out every part and channel reports to (telemetry adds itself to it).
    info = describe(spec.url, media=media, video=spec.video)
    observers = Observers([cassette, spec.observer], info=info)
    sticky_id = new_sticky_id()
    voice_counts = VoiceBufferCounts()
    lanes = MediaSpec(
        uplink_track,
        outputs,
        spec.video,
        spec.allow_insecure,
        spec.turn,
        spec.audio_codec,
        voice_counts=voice_counts,
    )
    builder = LinkBuilder(
        spec.url,
        spec.token,
        config=cfg,
        sticky_id=sticky_id,
        partner_id=spec.partner_id,
        media=lanes if media else None,
        counters=stats,
        clock=clock,
        listener=listener_late,
        ssl_context=spec.ssl_context,
        observer=observers,
    )
    guards = ConversationGuards(cfg, emit, clock=clock, observers=observers)
    user = UserState(machine=machine, slot=slot, spawn=supervisor.spawn)
    genie = GenieHost(
        spec.url,
        spec.genie_url,
        token=spec.token,
        ssl_context=spec.ssl_context,
        allow_insecure=spec.allow_insecure,
        observer=observers,
    )
    completion = CompletionSignal(
        None, timeout=cfg.session_complete_timeout, thread_id=spec.thread_id, source=genie
    )
    idle = IdleTimer(cfg.idle_timeout, lambda: endings_late().on_idle(), clock=clock)
    journal = Journal(spec.journal, session_label=sticky_id, clock=clock) if spec.journal else None
    if journal is not None:
        bus.on("*", journal.record)
    # Fed synchronously by every event: whether the avatar is still answering or talking.
    desk = TurnDesk(
        config=cfg,
        machine=machine,
        clock=clock,
        outbox=slot.outbox,
        guards=guards,
        idle=idle,
        emit=emit,
        stats=stats,
        observers=observers,
    )
    endings = endings_late.bind(
        Endings(
            config=cfg,
            machine=machine,
            bus=bus,
            slot=slot,
            supervisor=supervisor,
            guards=guards,
            genie=genie,
            completion=completion,
            idle=idle,
            journal=journal,
            outputs=outputs,
            uplink_track=uplink_track,
            desk=desk,
            replies=replies,
            after_end=[cassette.aclose] if cassette is not None else [],
        )
    )
    recovery = RecoveryController(
        machine=machine,
        config=cfg,
        clock=clock,
        slot=slot,
        builder=builder,
        view=view,
        restore=NewServerSession(renewal_late, user).restore,
        reassert=user.on_same_session,
        emit=emit,
        spawn=supervisor.spawn,
        on_outcome=endings.settle,
        stats=stats,
    )
    parts = RenewalParts(
        machine=machine,
        clock=clock,
        desk=desk,
        replies=replies,
        guards=guards,
        user=user,
        view=view,
        recovery=recovery,
        endings=endings,
        outputs=outputs,
        uplink=uplink_track,
    )
    renewal = renewal_late.bind(
        RenewalController(
            machine=machine,
            config=cfg,
            clock=clock,
            slot=slot,
            builder=builder,
            parts=parts,
            emit=emit,
            spawn=supervisor.spawn,
            stats=stats,
            media=media,
        )
    )
    bus.on("time_warning", lambda e: renewal.warned(e.data.get("remaining")))
    inbound = InboundHandler(
        config=cfg,
        machine=machine,
        slot=slot,
        spawn=supervisor.spawn,
        endings=endings,
        recovery=recovery,
        desk=desk,
        user=user,
        view=view,
        guards=guards,
        completion=completion,
        idle=idle,
        emit=emit,
        stats=stats,
        renewal=renewal,
    )
    listener_late.bind(
        LinkListener(inbound.on_inbound, inbound.on_protocol_error, inbound.on_disconnect)
    )
    watches = Watches(
        config=cfg,
        clock=clock,
        media=media,
        machine=machine,
        supervisor=supervisor,
        slot=slot,
        recovery=recovery,
        renewal=renewal,
        completion=completion,
        endings=endings,
        idle=idle,
        guards=guards,
        observers=observers,
        uplink_track=uplink_track,
    )
    turns = UserTurns(clock=clock, desk=desk, replies=replies, supervisor=supervisor, media=media)
    return SessionParts(
        config=cfg,
        clock=clock,
        media=media,
        sticky_id=sticky_id,
        observers=observers,
        machine=machine,
        supervisor=supervisor,
        slot=slot,
        view=view,
        stats=stats,
        voice_counts=voice_counts,
        uplink_track=uplink_track,
        outputs=outputs,
        builder=builder,
        guards=guards,
        user=user,
        genie=genie,
        completion=completion,
        idle=idle,
        journal=journal,
        desk=desk,
        replies=replies,
        endings=endings,
        recovery=recovery,
        renewal=renewal,
        inbound=inbound,
        watches=watches,
        connecting=Connecting(
            config=cfg,
            clock=clock,
            machine=machine,
            slot=slot,
            recovery=recovery,
            genie=genie,
            endings=endings,
            stats=stats,
        ),
        turns=turns,
        greeting=GreetingGate(config=cfg, clock=clock, bus=bus, view=view, turns=turns),
    )


class NewServerSession:
    """What a new current server session (connect, cold reconnect) restores: its time
    cap's own count, and the user's mute and pause there."""

    def __init__(self, renewal: Late[RenewalController], user: UserState) -> None:
        self._renewal = renewal
        self._user = user

    async def restore(self, link: ServerLink) -> None:
        self._renewal().started(link)
        await self._user.on_new_session(link)


class StateAnnouncer:
    """Every transition of the machine, as a ``state_changed`` event."""

    def __init__(self, bus: EventBus) -> None:
        self._bus = bus

    def changed(self, state: str, previous: str, trigger: str) -> None:
        self._bus.emit("state_changed", {"state": state, "previous": previous, "trigger": trigger})


class SourceErrors:
    """An audio source that fails: one ``error`` event; the uplink goes on with silence."""

    def __init__(self, bus: EventBus) -> None:
        self._bus = bus

    def failed(self, code: ErrorCode, exc: BaseException) -> None:
        log.warning(
            "audio source failed (%s: %s); the uplink continues with silence",
            code,
            type(exc).__name__,
        )
        self._bus.emit("error", AvatarError(code, type(exc).__name__).as_event())


def _cassette(spec: SessionSpec) -> CassetteRecorder | None:
    """The cassette ``record`` asks for (the file is created now: a bad path fails here)."""
    if spec.record is None:
        return None
    try:
        return CassetteRecorder(
            Path(spec.record),
            clock=spec.clock,
            url=spec.url,
            config=spec.config,
            media=spec.media,
            video=spec.video,
            thread_id=spec.thread_id,
            record_content=spec.record_content,
        )
    except OSError as exc:
        raise AvatarError(
            ErrorCode.INVALID_ARGUMENT, f"record: cannot write {spec.record} ({exc.strerror})"
        ) from None


def describe(url: str, *, media: bool, video: bool) -> dict[str, Any]:
    """What an observer may say about the session: host, port and media mode (never the
    path, query or credentials of the URL)."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme in ("https", "wss") else 80)
    mode = "control" if not media else "audio_video" if video else "audio"
    return {"server_address": parts.hostname or "", "server_port": port, "media": mode}
