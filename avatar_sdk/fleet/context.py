"""What a scenario gets besides its session: :class:`ScenarioContext`, whose ``turn()``
speaks and measures, and :class:`AudioProbe`, which times the avatar's first audible frame.

``turn()`` registers every waiter before it speaks (``session.expect``), so a fast reply is
never missed; a turn that times out is recorded (``ok=False, error="timeout"``) and the
scenario goes on, while a session that ended under it raises, failing that session.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import AvatarError, ErrorCode
from ..wire.segments import SPOKEN_TYPES
from .measure import Measurement, measurement

if TYPE_CHECKING:
    from ..events import Event, Expectation
    from ..session import AvatarSession
    from .plan import SessionSpec

__all__ = ["AudioProbe", "ScenarioContext", "TurnResult", "is_spoken"]

log = logging.getLogger(__name__)

Emit = Callable[[Measurement], None]

#: An avatar audio frame louder than this RMS (full scale 1.0) is speech: the staging
#: backend sends digital silence between turns, a real backend near-silence (Opus comfort
#: noise stays far below it).
AUDIBLE_RMS = 0.01
#: After ``agent_turn_ended``, how long a turn still waits for its first audible frame
#: (the media path lags the control channel by a jitter buffer or so).
AUDIO_GRACE = 1.0
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
    """One measured turn; latencies in seconds from the ``speak()`` call (None: not seen)."""

    text: str  # what the avatar said (its spoken segments, joined)
    text_s: float | None
    audio_s: float | None
    ended_s: float | None
    ok: bool
    error: str | None = None


class AudioProbe:
    """Reads the avatar's audio track on its own task and stamps the first audible frame
    after each :meth:`arm`. Reading every frame also keeps the track's bounded buffer from
    holding stale frames; the level is computed only while armed."""

    def __init__(self, track: Any, threshold: float = AUDIBLE_RMS) -> None:
        self.track = track
        self.threshold = threshold
        self._waiter: asyncio.Future[float] | None = None
        self.frames = 0

    def arm(self) -> asyncio.Future[float]:
        """A future for the monotonic time of the next audible frame."""
        if self._waiter is not None and not self._waiter.done():
            self._waiter.cancel()
        self._waiter = asyncio.get_running_loop().create_future()
        return self._waiter

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
                if frame_rms(frame) > self.threshold:
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
        self._turns = 0

    @property
    def stopping(self) -> bool:
        """True once the run is stopping: a long scenario may end early."""
        return self._stop.is_set()

    def measure(self, kind: str, **fields: Any) -> None:
        """Send one measurement of this session to the runner (``record`` for your own)."""
        self._emit(measurement(kind, self.index, self.worker, **fields))

    def record(self, name: str, value: float) -> None:
        """A custom figure (``metric`` measurement), summarised per name in the report."""
        self.measure("metric", name=str(name), value=float(value))

    async def pause(self, seconds: float) -> None:
        """Wait ``seconds`` (returns early when the run stops)."""
        await sleep_unless(self._stop, seconds)

    async def turn(self, text: str, *, timeout: float | None = None) -> TurnResult:
        """Speak ``text`` and wait for the avatar's turn to end, measuring the first spoken
        text, the first audible frame (media sessions) and the end, from the ``speak()``
        call. A timeout is recorded and returned (``ok=False``), not raised; ``AvatarError``
        (the session ended) is recorded, then raised."""
        session, limit = self.session, timeout or self.turn_timeout
        number, self._turns = self._turns, self._turns + 1
        words: list[str] = []
        first_text: list[float] = []

        def on_text(event: Event) -> None:
            if is_spoken(event.data):
                words.append(str(event.data.get("content", "")))
                if not first_text:
                    first_text.append(event.at)

        unsubscribe = session.on("agent_text", on_text)
        audible = self._probe.arm() if self._probe is not None else None
        ended_at: float | None = None
        error: str | None = None
        failure: AvatarError | None = None
        started = time.monotonic()
        try:
            ended = session.expect("agent_turn_ended", timeout=limit)  # before speaking
            try:
                await session.speak(text)
                ended_at = (await ended).at
            finally:
                ended.cancel()
            if audible is not None:
                grace = max(0.0, min(AUDIO_GRACE, started + limit - time.monotonic()))
                await asyncio.wait([audible], timeout=grace)
        except TimeoutError:
            error = "timeout"
        except AvatarError as exc:
            error, failure = str(exc.code), exc
        finally:
            unsubscribe()
            if audible is not None and not audible.done():
                audible.cancel()

        def since(at: float | None) -> float | None:
            return None if at is None else max(0.0, at - started)

        heard = audible is not None and audible.done() and not audible.cancelled()
        audio_at = audible.result() if heard and audible is not None else None
        result = TurnResult(
            text="".join(words).strip(),
            text_s=since(first_text[0] if first_text else None),
            audio_s=since(audio_at),
            ended_s=since(ended_at),
            ok=ended_at is not None,
            error=error,
        )
        fields: dict[str, Any] = {
            "iteration": self.iteration,
            "turn": number,
            "text_s": result.text_s,
            "audio_s": result.audio_s,
            "ended_s": result.ended_s,
            "ok": result.ok,
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

        return self.session.expect(name, predicate if match else None, timeout=timeout)

    async def fault(self, name: str, **kwargs: Any) -> Any:
        """Inject a staging fault through the control API (``POST
        <control_url>/_control/faults/<name>`` with ``kwargs`` as JSON); returns its result.
        ``AvatarError(INVALID_ARGUMENT)`` without a ``control_url`` or for a fault the
        backend refuses (unknown name, bad arguments); ``unreachable`` when the control API
        does not answer (or answers something that is not JSON)."""
        import aiohttp  # noqa: PLC0415

        from ..testing.control import CONTROL_PREFIX  # noqa: PLC0415 - aiohttp only

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
