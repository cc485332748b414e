"""What a scenario gets besides its session: :class:`ScenarioContext`, whose ``turn()``
asks and measures, and :class:`AudioProbe`, which lets a voice still playing end.

``turn()`` is ``session.ask()`` (the one implementation of reply matching,
:mod:`avatar_sdk.session.core.reply_match`): it waits out the greeting and any reply still being
said,
speaks, and takes the reply matched by the turn's own ids (a late reply to a timed-out turn
is never taken for the next one's). A turn that times out is recorded (``ok=False,
error="timeout"``) and the scenario goes on, while a session that ended under it raises,
failing that session. Its latencies count from the moment the turn was sent.
"""

from __future__ import annotations

import asyncio
import time
import warnings
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import AvatarError, ErrorCode
from ..logs import sdk_logger
from ..wire.segments import SPOKEN_TYPES
from .measure import Measurement, measurement

if TYPE_CHECKING:
    from ..events.bus import Event, Expectation
    from ..session.core.reply_match import Reply
    from ..session.facade import AvatarSession
    from .plan import SessionSpec

__all__ = [
    "AudioProbe",
    "Scenario",
    "ScenarioContext",
    "TurnResult",
    "is_spoken",
]

log = sdk_logger(__name__)

Emit = Callable[[Measurement], None]

#: An avatar audio frame louder than this RMS (full scale 1.0) is speech: the staging
#: backend sends digital silence between turns, a real backend near-silence (Opus comfort
#: noise stays far below it).
AUDIBLE_RMS = 0.01
#: After ``agent_turn_ended``, how long a turn still waits for its first audible frame
#: (the media path lags the control channel by a jitter buffer or so).
AUDIO_GRACE = 1.0
#: Quiet frames in a row that end a voice (100 ms of 20 ms frames): a pause between two
#: sentences is not its end.
QUIET_END_FRAMES = 5
#: The control API's own deadline for one fault request (seconds).
FAULT_TIMEOUT = 10.0


async def sleep_unless(stop: asyncio.Event, seconds: float) -> None:
    """Sleep ``seconds``, or less if ``stop`` is set meanwhile."""
    try:
        async with asyncio.timeout(max(0.0, seconds)):
            await stop.wait()
    except TimeoutError:
        return


def is_spoken(data: Mapping[str, Any]) -> bool:
    """Whether an ``agent_text`` segment is said out loud (the ``spoken`` flag, else its
    type), not a tool call, a tool response or the agent's thinking."""
    flag = data.get("spoken")
    return flag if isinstance(flag, bool) else data.get("type") in SPOKEN_TYPES


@dataclass(frozen=True, slots=True)
class TurnResult:
    """One measured turn; latencies in seconds from the moment the turn was sent (the wait
    for the greeting or a reply still playing excluded; None: not seen), named as in
    :mod:`avatar_sdk.session.core.latency` (``text_latency`` is ``text_s``...)."""

    text: str  # what the avatar said (its spoken segments, joined)
    text_s: float | None
    audio_s: float | None
    generated_s: float | None
    played_s: float | None
    ok: bool
    error: str | None = None
    #: The session's :class:`~avatar_sdk.Reply` (ids, the wait before sending, interrupted,
    #: resent); None when the turn timed out or the session ended.
    reply: Reply | None = None

    @property
    def ended_s(self) -> float | None:
        """Deprecated: ``generated_s`` (the answer generated, not heard)."""
        warnings.warn(
            "TurnResult.ended_s is deprecated: it is TurnResult.generated_s",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.generated_s


class AudioProbe:
    """Reads the avatar's audio track on its own task and stamps, after each :meth:`arm`,
    the first audible frame that follows a quiet one: a reply's voice begins after silence
    (a barge-in silences the avatar), while a frame audible right after ``arm`` may be the
    previous utterance still playing (``agent_turn_ended`` comes while its voice goes on,
    and the media path lags the control channel). :meth:`arm_end` is the converse: the
    first :data:`QUIET_END_FRAMES` quiet frames after an audible one, the end of a voice
    (the greeting's, armed by the runner at connect, then each reply's): :meth:`settle`
    waits for it, so a turn never speaks over a voice still playing and its reply is never
    heard as one with that voice (a backend may answer a barge-in faster than the media
    path carries the silence it makes). Reading every frame also keeps the track's
    bounded buffer from holding stale frames; the level is computed only while armed."""

    def __init__(self, track: Any, threshold: float = AUDIBLE_RMS) -> None:
        self.track = track
        self.threshold = threshold
        self._waiter: asyncio.Future[float] | None = None
        self._want_audible = True  # what resolves the waiter: an onset, or an end
        self._primed = False  # the opposite level seen since arming
        self._quiet_run = 0
        self._began = asyncio.Event()  # the voice an end waiter tracks was heard
        self.frames = 0

    def arm(self) -> asyncio.Future[float]:
        """A future for the monotonic time of the first audible frame after a quiet one."""
        return self._arm(audible=True)

    def arm_end(self) -> asyncio.Future[float]:
        """A future for the monotonic time a voice heard since now ended."""
        return self._arm(audible=False)

    def _arm(self, *, audible: bool) -> asyncio.Future[float]:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.cancel()
        self._want_audible, self._primed, self._quiet_run = audible, False, 0
        self._began.clear()
        self._waiter = asyncio.get_running_loop().create_future()
        return self._waiter

    async def settle(self, limit: float) -> None:
        """Wait until the voice :meth:`arm_end` tracks is over: at most ``limit`` seconds,
        and :data:`AUDIO_GRACE` for it to begin (the media path lags the control channel;
        an utterance may also have no voice at all). At once when nothing is tracked."""
        waiter = self._waiter
        if waiter is None or waiter.done() or self._want_audible:
            return
        deadline = time.monotonic() + limit
        if not self._primed:
            try:
                async with asyncio.timeout(min(AUDIO_GRACE, limit)):
                    await self._began.wait()
            except TimeoutError:
                return
        await asyncio.wait([waiter], timeout=max(0.0, deadline - time.monotonic()))

    async def run(self) -> None:
        from aiortc.mediastreams import MediaStreamError  # noqa: PLC0415

        from ..media import frame_rms  # noqa: PLC0415

        try:
            while True:
                frame = await self.track.recv()
                self.frames += 1
                waiter = self._waiter
                if waiter is None or waiter.done():
                    continue
                loud = frame_rms(frame) > self.threshold
                if self._want_audible:  # an onset: audible after quiet
                    if not loud:
                        self._primed = True
                    elif self._primed:
                        waiter.set_result(time.monotonic())
                elif loud:  # an end: quiet for a while after audible
                    self._primed, self._quiet_run = True, 0
                    self._began.set()
                elif self._primed:
                    self._quiet_run += 1
                    if self._quiet_run >= QUIET_END_FRAMES:
                        waiter.set_result(time.monotonic())
        except MediaStreamError:
            return  # the session closed its track


class ScenarioContext:
    """Passed to ``async def scenario(session, ctx)``: the session's place in the run and
    the measured verbs (``turn``, ``pause``, ``fault``, ``record``)."""

    def __init__(
        self,
        *,
        session: AvatarSession,
        spec: SessionSpec,
        index: int,
        worker: int,
        iteration: int,
        emit: Emit,
        turn_timeout: float,
        stop: asyncio.Event,
        probe: AudioProbe | None = None,
        deadline: float | None = None,
    ) -> None:
        self.session = session
        self.spec = spec
        self.index = index
        self.worker = worker
        self.iteration = iteration
        self.turn_timeout = turn_timeout
        self._emit = emit
        self._stop = stop
        self._probe = probe
        self._deadline = deadline
        self._turns = 0

    @property
    def stopping(self) -> bool:
        """True once the run is stopping (Ctrl-C) or its ``duration`` is over: a long
        scenario may end early."""
        if self._stop.is_set():
            return True
        return self._deadline is not None and time.time() >= self._deadline

    def measure(self, kind: str, **fields: Any) -> None:
        """Send one measurement of this session to the runner (``record`` for a figure).
        Its fields are made plain JSON; ``t``, ``kind``, ``session`` and ``worker`` are
        reserved (``AvatarError(INVALID_ARGUMENT)``)."""
        self._emit(measurement(kind, self.index, self.worker, **fields))

    def record(self, name: str, value: float) -> None:
        """A custom figure (``metric`` measurement), summarised per name in the report."""
        self.measure("metric", name=str(name), value=float(value))

    async def pause(self, seconds: float) -> None:
        """Wait ``seconds`` (returns early when the run stops or its ``duration`` is over)."""
        if self._deadline is not None:
            seconds = min(seconds, self._deadline - time.time())
        await sleep_unless(self._stop, seconds)

    async def turn(self, text: str, *, timeout: float | None = None) -> TurnResult:
        """Ask ``text`` (``session.ask(..., wait_for_playout=True)``) and measure its reply:
        the first spoken text, the first audible frame (media sessions), the end of its
        generation and, with media, the end of its playout, from the moment the turn was
        sent. With media it first lets a voice still playing end (the greeting's:
        :meth:`AudioProbe.settle`); that wait and ``ask()``'s own (``Reply.waited``) are
        reported apart as ``wait_s``, off the turn's clock. A timeout is recorded and returned
        (``ok=False``), not raised; ``AvatarError`` (the session ended) is recorded, then
        raised."""
        session, limit = self.session, timeout or self.turn_timeout
        number, self._turns = self._turns, self._turns + 1
        wait_from = time.monotonic()
        if self._probe is not None:  # the voice still playing (the greeting's) ends
            await self._probe.settle(limit)
        settled = time.monotonic() - wait_from
        reply: Reply | None = None
        error: str | None = None
        failure: AvatarError | None = None
        try:
            reply = await session.ask(text, timeout=limit, wait_for_playout=True)
        except TimeoutError:
            error = "timeout"
        except AvatarError as exc:
            error, failure = str(exc.code), exc
        result = TurnResult(
            text=reply.text if reply is not None else "",
            text_s=reply.text_latency if reply is not None else None,
            audio_s=reply.audio_latency if reply is not None else None,
            generated_s=reply.generated_latency if reply is not None else None,
            played_s=reply.played_latency if reply is not None else None,
            ok=reply is not None and reply.ended,
            error=error,
            reply=reply,
        )
        fields: dict[str, Any] = {
            "iteration": self.iteration,
            "turn": number,
            "text_s": result.text_s,
            "audio_s": result.audio_s,
            "generated_s": result.generated_s,
            "played_s": result.played_s,
            "ended_s": result.generated_s,  # deprecated name, for readers of older files
            "ok": result.ok,
            "wait_s": settled + (reply.waited if reply is not None else 0.0),
        }
        if error is not None:
            fields["error"] = error
        self.measure("turn", **fields)
        if failure is not None:
            raise failure
        return result

    async def expect(
        self, name: str, *, timeout: float = 30.0, where: Mapping[str, Any] | None = None
    ) -> Event:
        """The next event ``name`` whose data matches ``where`` (field equality), or
        ``TimeoutError``. Register before the action that causes it: see
        :meth:`expectation`."""
        return await self.expectation(name, timeout=timeout, where=where)

    def expectation(
        self, name: str, *, timeout: float = 30.0, where: Mapping[str, Any] | None = None
    ) -> Expectation:
        """``session.expect`` with a field-equality predicate: registered now, awaited later."""
        match = dict(where or {})

        def predicate(event: Event) -> bool:
            return all(event.data.get(k) == v for k, v in match.items())

        return self.session.expect(name, predicate=predicate if match else None, timeout=timeout)

    async def fault(self, name: str, /, **kwargs: Any) -> Any:
        """Inject a staging fault through the control API (``POST
        <control_url>/_control/faults/<name>`` with ``kwargs`` as JSON); returns its result.
        ``AvatarError(INVALID_ARGUMENT)`` without a ``control_url`` or for a fault the
        backend refuses (unknown name, bad arguments); ``unreachable`` when the control API
        does not answer (or answers something that is not JSON)."""
        import aiohttp  # noqa: PLC0415

        from ..testing.staging.control import CONTROL_PREFIX  # noqa: PLC0415 - aiohttp only

        base = self.spec.control_url
        if not base:
            raise AvatarError(
                ErrorCode.INVALID_ARGUMENT, "a fault needs SessionSpec.control_url (staging)"
            )
        url = f"{base.rstrip('/')}{CONTROL_PREFIX}/faults/{name}"
        timeout = aiohttp.ClientTimeout(total=FAULT_TIMEOUT)
        try:
            async with (
                aiohttp.ClientSession(timeout=timeout) as http,
                http.post(url, json=kwargs) as response,
            ):
                body = await response.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise AvatarError(
                ErrorCode.UNREACHABLE, f"fault {name}: control API: {type(exc).__name__}"
            ) from None
        if response.status != 200:
            detail = body.get("error") if isinstance(body, dict) else None
            raise AvatarError(
                ErrorCode.INVALID_ARGUMENT, f"fault {name}: {response.status} {detail or ''}"
            )
        return body.get("result") if isinstance(body, dict) else None


#: A scenario: one coroutine function run once per session of a fleet.
Scenario = Callable[["AvatarSession", ScenarioContext], Awaitable[Any]]
