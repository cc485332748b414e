"""The picklable description of a fleet run: how each session is built, how many sessions
start at what rate, and which worker runs which session.

Pure (no I/O, no event loop): a plan crosses process and machine boundaries (the local
engine's ``spawn`` children, Ray actors), so it holds only plain data and a scenario
*reference*; every worker rebuilds its sessions from :class:`SessionSpec`.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import AUDIO_CODECS, DEFAULT_AUDIO_CODEC, AudioCodec
from ..errors import AvatarError, ErrorCode
from ..urls import UrlKind, check_url

if TYPE_CHECKING:
    from ..config import SessionConfig
    from ..session.facade import AvatarSession

__all__ = [
    "AUDIO_SOURCES",
    "FleetPlan",
    "FleetTelemetry",
    "SessionSpec",
    "WorkerAssignment",
    "assign",
    "audio_source",
    "start_time",
]

#: The named uplink sources ``SessionSpec.audio`` accepts besides a file path.
AUDIO_SOURCES: tuple[str, ...] = ("silence", "tone", "opus-silence", "opus-tone")


def _invalid(owner: str, name: str, rule: str, value: object) -> AvatarError:
    shown = "<callable>" if callable(value) else repr(value)
    return AvatarError(ErrorCode.INVALID_ARGUMENT, f"{owner}.{name} {rule} (got {shown})")


def audio_source(name: str) -> Any:
    """The uplink track for ``SessionSpec.audio``: ``"silence"``, ``"tone"`` (PCM, encoded
    per frame), ``"opus-silence"``, ``"opus-tone"`` (pre-encoded Opus: no encoding at all,
    the cheapest uplink), or a file path (looped; a local Ogg/Opus file is sent without
    decoding). The one place a name becomes a source: new named sources are added here."""
    from ..media import (  # noqa: PLC0415 - aiortc loads only in the worker
        EncodedSilenceSource,
        EncodedToneSource,
        SilenceSource,
        ToneSource,
        file_source,
    )

    named = {
        "silence": SilenceSource,
        "tone": ToneSource,
        "opus-silence": EncodedSilenceSource,
        "opus-tone": EncodedToneSource,
    }
    make = named.get(name)
    return make() if make is not None else file_source(name, loop=True)


@dataclass(frozen=True, slots=True)
class SessionSpec:
    """How every worker builds its ``AvatarSession``: plain, picklable data, no callables.

    ``token`` is left out of the repr and never written to measurements; ``control_url`` is
    the staging backend's control API base (``StagingServer.public_url``), needed only by
    scenarios that inject faults. ``config``: ``SessionConfig`` keyword arguments.
    ``cassette_dir``: a directory (made if missing) where each session records a cassette,
    ``session-<index>.jsonl`` (``AvatarSession(record=...)``, ``docs/replay.md``).
    """

    url: str
    token: str = field(repr=False)
    _: KW_ONLY  # the rest by keyword: flags and URLs read the same by position
    genie_url: str | None = None
    media: bool = False
    video: bool = False
    audio: str = "silence"
    allow_insecure_transport: bool = False
    config: Mapping[str, Any] = field(default_factory=dict, hash=False)
    control_url: str | None = None
    audio_codec: AudioCodec = DEFAULT_AUDIO_CODEC
    cassette_dir: str | None = None
    #: Renew each session before the server's time cap ends it: ``RenewalPolicy`` keyword
    #: arguments (``{}``: its defaults); None (default): no renewal (``docs/lifecycle.md``).
    renewal: Mapping[str, Any] | None = field(default=None, hash=False)

    def __post_init__(self) -> None:
        for name in ("url", "token", "audio"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                shown = "<hidden>" if name == "token" else value
                raise _invalid("SessionSpec", name, "must be a non-empty string", shown)
        if not isinstance(self.config, Mapping):
            raise _invalid("SessionSpec", "config", "must be a mapping", self.config)
        if self.renewal is not None and not isinstance(self.renewal, Mapping):
            raise _invalid("SessionSpec", "renewal", "must be a mapping or None", self.renewal)
        if self.video and not self.media:
            raise _invalid("SessionSpec", "video", "needs media=True", self.video)
        if self.audio_codec not in AUDIO_CODECS:
            rule = f"must be one of {', '.join(AUDIO_CODECS)}"
            raise _invalid("SessionSpec", "audio_codec", rule, self.audio_codec)
        if self.media and not _is_audio_source(self.audio):
            rule = (
                f"must be one of {', '.join(AUDIO_SOURCES)}, a URL or an existing file "
                "(on a cluster, a file path must exist on the driver too)"
            )
            raise _invalid("SessionSpec", "audio", rule, self.audio)
        # a bad field fails here, in the driver, not once per session in N workers
        self.session_config()
        insecure = self.allow_insecure_transport
        for name in ("url", "genie_url", "control_url"):
            value = getattr(self, name)
            if value is not None:  # the URL is never echoed: it may carry a credential
                kind: UrlKind = "socket" if name == "url" else "http"
                check_url(value, allow_insecure=insecure, what=f"SessionSpec.{name}", kind=kind)

    def session_config(self) -> SessionConfig | None:
        """The ``SessionConfig`` these keyword arguments make (None: the defaults), with
        the ``renewal`` policy when one is asked for."""
        if not self.config and self.renewal is None:
            return None
        from ..config import RenewalPolicy, SessionConfig  # noqa: PLC0415

        try:
            config = SessionConfig(**dict(self.config))
        except TypeError as exc:
            raise _invalid("SessionSpec", "config", f"has an unknown field: {exc}", "") from None
        if self.renewal is None:
            return config
        try:
            return config.with_(renewal=RenewalPolicy(**dict(self.renewal)))
        except TypeError as exc:
            raise _invalid("SessionSpec", "renewal", f"has an unknown field: {exc}", "") from None

    def cassette_path(self, index: int) -> Path | None:
        """Where session ``index`` records its cassette (None: ``cassette_dir`` unset)."""
        if self.cassette_dir is None:
            return None
        folder = Path(self.cassette_dir)
        folder.mkdir(parents=True, exist_ok=True)
        return folder / f"session-{index}.jsonl"

    def build(self, index: int = 0) -> AvatarSession:
        """A new, unconnected session (in the worker), number ``index`` of the fleet. The
        token is registered as a secret by ``AvatarSession`` itself, so no log record of
        this process shows it."""
        from ..session.facade import AvatarSession  # noqa: PLC0415 - the session stack loads here

        return AvatarSession(
            self.url,
            self.token,
            genie_url=self.genie_url,
            media=self.media,
            video=self.video,
            audio=audio_source(self.audio) if self.media else None,
            audio_codec=self.audio_codec,
            config=self.session_config(),
            allow_insecure_transport=self.allow_insecure_transport,
            record=self.cassette_path(index),
        )


@dataclass(frozen=True, slots=True)
class FleetTelemetry:
    """OpenTelemetry for a fleet run (the ``otel`` extra): a run is one trace, with a span per
    worker and per session, each session's own spans beneath (``docs/observability.md``).

    ``setup``: a reference (``"pkg.module:function"`` or ``"file.py:function"``) called
    once in every worker process the run starts (local processes, Ray actors) with
    ``options``, before its sessions, to set that process's providers and exporter (the
    driver's providers do not cross a process boundary); None: the worker uses whatever
    its process has. The inline engine runs in the driver and never calls it.
    ``capture_content``: as ``Telemetry(capture_content=...)``. ``carrier``: the W3C trace
    context (``traceparent``, ``tracestate``) of the run's span, filled in by ``run_fleet``.
    """

    setup: str | None = None
    options: Mapping[str, str] = field(default_factory=dict, hash=False)
    capture_content: bool = False
    carrier: Mapping[str, str] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if self.setup is not None and not (isinstance(self.setup, str) and self.setup.strip()):
            raise _invalid("FleetTelemetry", "setup", "must be None or a reference", self.setup)
        for name in ("options", "carrier"):
            value = getattr(self, name)
            if not isinstance(value, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in value.items()
            ):
                raise _invalid("FleetTelemetry", name, "must map strings to strings", value)


@dataclass(frozen=True, slots=True)
class FleetPlan:
    """A fleet run: ``sessions`` sessions started at ``rate`` per second, each running the
    scenario ``iterations`` times (0: until ``duration`` seconds have passed).

    ``scenario``: ``"pkg.module:function"``, ``"path/to/file.py:function"``, a ``.py``
    file (its ``scenario`` function) or a ``.yaml``/``.yml``/``.json`` script; a callable
    works too where the engine can carry it (inline always; local and Ray pickle it by
    reference). ``workers`` 0: one per CPU (the inline engine always uses one).
    ``base_dir``: where a worker looks for a relative scenario path its own cwd lacks
    (``run_fleet`` sets it to the driver's cwd; the reference itself is sent as given, so
    a cluster node resolves it in its ``working_dir`` first). ``telemetry``: a
    :class:`FleetTelemetry` to trace the run (None: no telemetry).
    """

    scenario: str | Callable[..., Any]
    session: SessionSpec
    sessions: int = 1
    rate: float = 10.0
    iterations: int = 1
    duration: float | None = None
    workers: int = 0
    turn_timeout: float = 30.0
    greeting_timeout: float = 30.0
    base_dir: str | None = None
    telemetry: FleetTelemetry | None = None
    #: Once a worker's sessions are connected, freeze them out of the garbage collector's
    #: full collections (:mod:`avatar_sdk.fleet.collector`), which otherwise pause every session
    #: of the process at once; False: the collector as the application left it.
    freeze_gc: bool = True

    def __post_init__(self) -> None:
        owner = "FleetPlan"
        if not (callable(self.scenario) or (isinstance(self.scenario, str) and self.scenario)):
            raise _invalid(owner, "scenario", "must be a reference string or a callable", "")
        if not isinstance(self.session, SessionSpec):
            raise _invalid(owner, "session", "must be a SessionSpec", type(self.session))
        if not _is_int(self.sessions) or self.sessions < 1:
            raise _invalid(owner, "sessions", "must be an int >= 1", self.sessions)
        if not _is_positive(self.rate):
            raise _invalid(owner, "rate", "must be a finite number > 0", self.rate)
        if not _is_int(self.iterations) or self.iterations < 0:
            raise _invalid(owner, "iterations", "must be an int >= 0", self.iterations)
        if self.duration is not None and not _is_positive(self.duration):
            raise _invalid(owner, "duration", "must be None or a finite number > 0", self.duration)
        if self.iterations == 0 and self.duration is None:
            raise _invalid(owner, "iterations", "0 (until duration) needs a duration", 0)
        if not _is_int(self.workers) or self.workers < 0:
            raise _invalid(owner, "workers", "must be an int >= 0", self.workers)
        for name in ("turn_timeout", "greeting_timeout"):
            if not _is_positive(getattr(self, name)):
                raise _invalid(owner, name, "must be a finite number > 0", getattr(self, name))
        if self.base_dir is not None and not (isinstance(self.base_dir, str) and self.base_dir):
            raise _invalid(owner, "base_dir", "must be None or a directory path", self.base_dir)
        if self.telemetry is not None and not isinstance(self.telemetry, FleetTelemetry):
            rule = "must be None or a FleetTelemetry"
            raise _invalid(owner, "telemetry", rule, type(self.telemetry))

    def with_(self, **changes: Any) -> FleetPlan:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    @property
    def worker_count(self) -> int:
        """Workers actually used: ``workers`` (0: CPUs), never more than sessions."""
        wanted = self.workers or os.cpu_count() or 1
        return max(1, min(wanted, self.sessions))


@dataclass(frozen=True, slots=True)
class WorkerAssignment:
    """What one worker runs: global session indices (round-robin over the workers) and the
    run's start, a wall-clock epoch (``time.time()``), shared by every worker so the ramp
    is one ramp across processes and machines."""

    worker: int
    plan: FleetPlan
    sessions: tuple[int, ...]
    t0: float

    def start_of(self, index: int) -> float:
        """Epoch at which session ``index`` starts."""
        return start_time(self.plan, self.t0, index)

    def with_t0(self, t0: float) -> WorkerAssignment:
        """The same assignment with the run's start moved (an engine whose workers took time
        to start re-bases the ramp on the moment they are all ready)."""
        return dataclasses.replace(self, t0=t0)


def start_time(plan: FleetPlan, t0: float, index: int) -> float:
    """Session ``index`` starts at ``t0 + index / rate`` (index 0 at once)."""
    return t0 + index / plan.rate


def assign(plan: FleetPlan, t0: float) -> list[WorkerAssignment]:
    """Split the plan's sessions round-robin over ``plan.worker_count`` workers, so every
    worker's share of the ramp is spread over the whole ramp."""
    count = plan.worker_count
    return [
        WorkerAssignment(worker=w, plan=plan, sessions=tuple(range(w, plan.sessions, count)), t0=t0)
        for w in range(count)
    ]


def _is_audio_source(audio: str) -> bool:
    """A named source, a URL (``scheme://``, as ``file_source`` tells one: FFmpeg opens
    it in the worker) or a file that exists."""
    return audio in AUDIO_SOURCES or "://" in audio or os.path.isfile(audio)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_positive(value: object) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )
