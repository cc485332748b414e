"""``run_worker``: the one function every engine runs, on whatever loop it has.

It starts each of its sessions at its place on the shared ramp, instruments it (recoveries,
errors, completion), waits for the greeting, runs the scenario, closes the session and
reports it finished, ``ok`` or ``failed`` with a code. A session's failure is its own: it
never stops the others. Every task is owned by one ``TaskGroup`` and awaited.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import itertools
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ..errors import AvatarError, ErrorCode
from ..logs import sdk_logger
from ..telemetry import names as tn
from .collector import CollectorFreeze
from .context import AudioProbe, Scenario, ScenarioContext, sleep_unless
from .measure import Measurement, measurement

if TYPE_CHECKING:
    from ..events.bus import Event
    from ..session.facade import AvatarSession
    from .plan import FleetTelemetry, WorkerAssignment

__all__ = ["Emit", "Scenario", "classify", "load_scenario", "resolve_ref", "run_worker"]

log = sdk_logger(__name__)

Emit = Callable[[Measurement], None]

SCRIPT_SUFFIXES = (".yaml", ".yml", ".json")
#: The failure code of a session the run stopped (``stop`` set, Ctrl-C) before it ended.
STOPPED = "stopped"
#: The failure code of a session whose ramp slot came after the run's ``duration``.
DEADLINE = "deadline"


# -- the scenario reference ------------------------------------------------------------------
def _bad(ref: str, why: str) -> AvatarError:
    return AvatarError(ErrorCode.INVALID_ARGUMENT, f"scenario {ref!r}: {why}")


def _split(ref: str) -> tuple[str, str | None]:
    """``"target:function"`` into its parts; a Windows drive letter is not a separator."""
    head, sep, tail = ref.rpartition(":")
    if sep and tail and "/" not in tail and "\\" not in tail and len(head) > 1:
        return head, tail
    return ref, None


def resolve_ref(ref: str, base_dir: str | None = None) -> str:
    """``ref`` with a relative file path made absolute where it is found: in this process's
    cwd first (a Ray node's ``working_dir``), then in ``base_dir`` (the driver's cwd, which
    ``run_fleet`` puts in the plan). A module reference, an absolute path or a file found
    nowhere is returned as is (loading it then says what is missing)."""
    target, function = _split(ref)
    path = Path(target)
    if target.endswith((".py", *SCRIPT_SUFFIXES)) and not path.is_absolute():
        for candidate in (path, *([Path(base_dir) / path] if base_dir else [])):
            if candidate.exists():
                target = str(candidate.resolve())
                break
    return f"{target}:{function}" if function else target


def _import_file(path: Path, ref: str) -> Any:
    if not path.is_file():
        raise _bad(ref, f"no such file: {path}")
    name = f"avatar_sdk_fleet_scenario_{abs(hash(str(path.resolve())))}"
    module = sys.modules.get(name)
    if module is not None:
        return module
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise _bad(ref, "cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:  # its own bug: an error of the reference
        del sys.modules[name]
        raise _bad(ref, f"cannot import {path}: {type(exc).__name__}: {exc}") from exc
    except BaseException:
        del sys.modules[name]
        raise
    return module


def load_scenario(ref: str | Scenario, *, base_dir: str | None = None) -> Scenario:
    """The scenario function ``ref`` names: ``"pkg.module:function"``,
    ``"path/to/file.py:function"``, ``"path/to/file.py"`` (its ``scenario`` function), or a
    ``.yaml``/``.yml``/``.json`` script (:mod:`.script`). A callable is returned as is.
    A relative path is looked for in the cwd, then in ``base_dir`` (:func:`resolve_ref`).
    ``AvatarError(INVALID_ARGUMENT)`` says what is wrong with the reference, a module
    that fails to import (a syntax error, an exception at import) included."""
    if callable(ref):
        return ref
    if not isinstance(ref, str) or not ref.strip():
        raise AvatarError(ErrorCode.INVALID_ARGUMENT, "scenario must be a non-empty string")
    target, function = _split(resolve_ref(ref.strip(), base_dir))
    if target.endswith(SCRIPT_SUFFIXES):
        if function is not None:
            raise _bad(ref, "a script takes no ':function'")
        from .script import load_script  # noqa: PLC0415 - PyYAML only when needed

        return load_script(target)
    if target.endswith(".py"):
        module = _import_file(Path(target), ref)
        function = function or "scenario"
    else:
        if function is None:
            raise _bad(ref, "expected 'pkg.module:function', a .py file or a .yaml/.json script")
        try:
            module = importlib.import_module(target)
        except (Exception, SystemExit) as exc:  # not found, or broken at import
            raise _bad(ref, f"cannot import {target}: {type(exc).__name__}: {exc}") from exc
    found = getattr(module, function, None)
    if not callable(found):
        raise _bad(ref, f"no function {function!r} in it")
    return found  # type: ignore[no-any-return]


def classify(exc: BaseException, ended: dict[str, Any] | None = None) -> str:
    """The code a session failed with: an ``AvatarError``'s code (the session's own ending
    code when the error only says it was closed under the scenario), ``timeout`` for a
    ``TimeoutError``, else ``scenario_error``."""
    if isinstance(exc, AvatarError):
        if exc.code is ErrorCode.CLOSED and ended and ended.get("code"):
            return str(ended["code"])
        return str(exc.code)
    if isinstance(exc, TimeoutError):
        return "timeout"
    return "scenario_error"


# -- one session -------------------------------------------------------------------------------
class _SessionRun:
    """One session's life in the fleet, from its ramp slot to ``session_finished``."""

    def __init__(
        self,
        assignment: WorkerAssignment,
        index: int,
        scenario: Scenario,
        emit: Emit,
        stop: asyncio.Event,
        *,
        tracing: _Tracing | None = None,
        collector: CollectorFreeze | None = None,
    ) -> None:
        self.assignment = assignment
        self.tracing = tracing
        #: Told once this session is connected or will never be (``FleetPlan.freeze_gc``).
        self.collector = collector
        self.plan = assignment.plan
        self.index = index
        self.scenario = scenario
        self.stop = stop
        self._emit = emit
        self.ended: dict[str, Any] | None = None
        #: The run's end (epoch seconds, ``t0 + duration``): no iteration starts after it,
        #: pauses end at it; None: the run ends with its iterations.
        self.deadline = None if self.plan.duration is None else assignment.t0 + self.plan.duration

    def measure(self, kind: str, **fields: Any) -> None:
        self._emit(measurement(kind, self.index, self.assignment.worker, **fields))

    def _instrument(self, session: AvatarSession) -> None:
        def reconnected(event: Event) -> None:
            data = event.data
            self.measure("recovery", tier=str(data.get("tier")), seconds=data.get("duration"))

        def media_recovered(event: Event) -> None:
            data = event.data
            self.measure(
                "recovery",
                tier="media",
                channel=str(data.get("channel")),
                method=str(data.get("method")),
                seconds=data.get("duration"),
            )

        def error(event: Event) -> None:
            data = event.data
            recoverable = bool(data.get("recoverable"))
            self.measure("error", code=str(data.get("code")), recoverable=recoverable)

        def completed(event: Event) -> None:
            data = event.data
            self.measure(
                "completed",
                outcome=str(data.get("outcome") or data.get("reason") or "unknown"),
                delivered=bool(data.get("delivered")),
            )

        def ended(event: Event) -> None:
            self.ended = dict(event.data)

        def renewed(event: Event) -> None:
            data = event.data
            self.measure(
                "renewal",
                strategy=str(data.get("strategy")),
                gap=data.get("gap"),
                cut_turn=bool(data.get("cut_turn")),
            )

        session.on("reconnected", reconnected)
        session.on("media_recovered", media_recovered)
        session.on("error", error)
        session.on("session_completed", completed)
        session.on("ended", ended)
        session.on("session_renewed", renewed)

        def turn_latency(event: Event) -> None:
            data = event.data
            if data.get("source") != "voice":
                return  # a typed turn is measured by ScenarioContext.turn (its Reply)
            self.measure(
                "voice_turn",
                voice_to_voice_s=data.get("voice_to_voice"),
                text_s=data.get("text_latency"),
                generated_s=data.get("generated_latency"),
                played_s=data.get("played_latency"),
            )

        session.on("turn_latency", turn_latency)

    async def run(self) -> None:
        """Wait for the ramp slot, run the session; never raises but ``CancelledError``
        (after reporting the session ``stopped``)."""
        started = time.monotonic()
        slot, deadline = self.assignment.start_of(self.index), self.deadline
        try:
            late = deadline is not None and slot >= deadline  # reported at the deadline
            until = slot if deadline is None else min(slot, deadline)
            await sleep_unless(self.stop, until - time.time())
            if self.stop.is_set() or late:  # never started: no session_started
                why = STOPPED if self.stop.is_set() else DEADLINE
                self.measure("session_finished", status="failed", code=why, seconds=0.0)
                return
            self.measure("session_started")
            started = time.monotonic()
            code = await self._traced_live()
        except asyncio.CancelledError:
            seconds = time.monotonic() - started
            self.measure("session_finished", status="failed", code=STOPPED, seconds=seconds)
            raise
        except Exception as exc:  # a bug of the fleet itself: reported, never spread
            log.error("fleet session %d failed: %r", self.index, exc, exc_info=exc)
            code = "internal"
        finally:
            self._settled()  # it never connected, or it is over
        seconds = time.monotonic() - started
        if code is None:
            self.measure("session_finished", status="ok", seconds=seconds)
        else:
            self.measure("session_finished", status="failed", code=code, seconds=seconds)

    def _settled(self) -> None:
        if self.collector is not None:
            self.collector.settled(self.index)

    async def _traced_live(self) -> str | None:
        if self.tracing is None:
            return await self._live()
        attributes = {
            tn.FLEET_SESSION_INDEX: self.index,
            tn.FLEET_WORKER: self.assignment.worker,
        }
        with self.tracing.span(tn.SPAN_FLEET_SESSION, attributes) as span:
            code = await self._live()
            if span is not None:
                span.set_attribute(tn.FLEET_STATUS, "ok" if code is None else "failed")
                if code is not None:
                    self.tracing.failed(span, code)
            return code

    async def _live(self) -> str | None:
        """Build, converse (until done or the run stops), close; the failure code or None."""
        try:
            session = self.plan.session.build(self.index)
        except AvatarError as exc:
            self.measure("error", code=str(exc.code), recoverable=exc.recoverable)
            return str(exc.code)
        self._instrument(session)
        if self.tracing is not None:
            self.tracing.telemetry.attach(session)
        try:
            async with asyncio.TaskGroup() as tasks:
                work = tasks.create_task(self._converse(session))
                watcher = tasks.create_task(self.stop.wait())
                work.add_done_callback(lambda _: watcher.cancel())
                watcher.add_done_callback(lambda _: work.cancel())
        finally:
            await session.close()
        failure = STOPPED if work.cancelled() else work.result()
        if failure is None and session.state == "failed":
            failure = str((self.ended or {}).get("code") or "failed")
        return failure

    async def _converse(self, session: AvatarSession) -> str | None:
        plan = self.plan
        probe: asyncio.Task[None] | None = None
        try:
            greeting = session.expect("agent_turn_ended", timeout=plan.greeting_timeout)
            started = time.monotonic()
            try:
                await session.connect()
            except BaseException:
                greeting.cancel()
                raise
            finally:
                self._settled()
            self.measure("connected", seconds=time.monotonic() - started)
            audio = session.avatar_audio if plan.session.media else None
            listener = AudioProbe(audio) if audio is not None else None
            if listener is not None:
                listener.arm_end()  # the greeting's voice: the first turn lets it end
                probe = asyncio.create_task(listener.run(), name="avatar-fleet:audio-probe")
            try:
                greeted = await greeting
                self.measure("greeting", seconds=max(0.0, greeted.at - started))
            except TimeoutError:
                self.measure("error", code="greeting_timeout", recoverable=True)
            await self._iterations(session, listener)
            if self.stop.is_set():
                return STOPPED  # cut short (a pause ends early on a stop), not completed
        except Exception as exc:
            code = classify(exc, self.ended)
            if not isinstance(exc, AvatarError) or exc.code is not ErrorCode.CLOSED:
                self.measure("error", code=code, recoverable=False)
            if not isinstance(exc, AvatarError | TimeoutError):
                name = type(exc).__name__
                log.warning("fleet session %d: the scenario raised %s: %s", self.index, name, exc)
            return code
        finally:
            if probe is not None:
                probe.cancel()
                await asyncio.wait([probe])
        return None

    async def _iterations(self, session: AvatarSession, probe: AudioProbe | None) -> None:
        plan, deadline = self.plan, self.deadline
        for iteration in itertools.count():
            if plan.iterations and iteration >= plan.iterations:
                return
            if self.stop.is_set() or (deadline is not None and time.time() >= deadline):
                return
            ctx = ScenarioContext(
                session=session,
                spec=plan.session,
                index=self.index,
                worker=self.assignment.worker,
                iteration=iteration,
                emit=self._emit,
                turn_timeout=plan.turn_timeout,
                stop=self.stop,
                probe=probe,
                deadline=deadline,
            )
            await self.scenario(session, ctx)
            await asyncio.sleep(0)  # a scenario that never awaits still lets the loop run


# -- telemetry -------------------------------------------------------------------------------
#: Telemetry setups already run in this process (one per reference, whatever the workers).
_SET_UP: set[str] = set()


class _Tracing:
    """A worker's telemetry: its ``Telemetry`` and the fleet's span helpers (loaded only for
    a plan that asks for telemetry, so a plain run never imports OpenTelemetry)."""

    def __init__(self, telemetry: Any, tracing: Any) -> None:
        self.telemetry = telemetry
        self._tracing = tracing
        self.tracer = tracing.tracer_of(telemetry)

    @contextmanager
    def span(self, name: str, attributes: dict[str, Any], carrier: Any = None) -> Iterator[Any]:
        with self._tracing.span(self.tracer, name, attributes, carrier) as span:
            yield span

    async def flush(self) -> None:
        await self._tracing.flush_global_providers()

    def failed(self, span: Any, code: str) -> None:
        from opentelemetry.trace import Status, StatusCode  # noqa: PLC0415

        span.set_attribute(tn.ERROR_TYPE, code)
        span.set_status(Status(StatusCode.ERROR, code))


def _tracing_for(spec: FleetTelemetry, telemetry: Any, base_dir: str | None) -> _Tracing | None:
    """This worker's tracing: the driver's ``telemetry`` (the inline engine), else this
    process's, after running the plan's ``setup`` once in it. None (logged) without the
    OpenTelemetry API in this process."""
    from ..telemetry import INSTALL_HINT, available  # noqa: PLC0415

    if not available():
        log.warning("the fleet plan asks for telemetry, but %s in this worker", INSTALL_HINT)
        return None
    from ..telemetry import fleet as tracing  # noqa: PLC0415
    from ..telemetry.otel import Telemetry  # noqa: PLC0415

    if telemetry is None:
        if spec.setup and spec.setup not in _SET_UP:
            setup = cast(
                Callable[[dict[str, str]], object], load_scenario(spec.setup, base_dir=base_dir)
            )
            setup(dict(spec.options))
            _SET_UP.add(spec.setup)
        telemetry = Telemetry(capture_content=spec.capture_content)
    return _Tracing(telemetry, tracing)


async def run_worker(
    assignment: WorkerAssignment,
    emit: Emit,
    *,
    stop: asyncio.Event | None = None,
    telemetry: Any = None,
) -> None:
    """Run ``assignment``'s sessions on the running loop, emitting measurements as they
    happen; returns when every session finished. ``stop`` set: every session not finished
    yet closes promptly and is reported ``failed`` with code ``stopped``. ``telemetry``:
    the driver's ``Telemetry`` (the inline engine); a plan with telemetry otherwise uses
    this process's (``FleetTelemetry.setup``)."""
    spec = assignment.plan.telemetry
    if spec is None:
        await _run_sessions(assignment, emit, stop, None)
        return
    tracing = _tracing_for(spec, telemetry, assignment.plan.base_dir)
    if tracing is None:
        await _run_sessions(assignment, emit, stop, None)
        return
    try:
        attributes = {tn.FLEET_WORKER: assignment.worker}
        with tracing.span(tn.SPAN_FLEET_WORKER, attributes, spec.carrier):
            await _run_sessions(assignment, emit, stop, tracing)
    finally:
        if telemetry is None:  # this process's providers: export before the process ends
            await tracing.flush()


async def _run_sessions(
    assignment: WorkerAssignment, emit: Emit, stop: asyncio.Event | None, tracing: _Tracing | None
) -> None:
    stop = stop or asyncio.Event()
    try:
        scenario = load_scenario(assignment.plan.scenario, base_dir=assignment.plan.base_dir)
    except AvatarError as exc:
        code, worker = str(exc.code), assignment.worker
        for index in assignment.sessions:
            emit(measurement("error", index, worker, code=code, recoverable=False))
            finished = {"status": "failed", "code": code, "seconds": 0.0}
            emit(measurement("session_finished", index, worker, **finished))
        return
    # Once every session of this worker is connected, a full collection no longer walks
    # their graphs (it paused all of them at once: avatar_sdk.fleet.collector).
    collector = CollectorFreeze(len(assignment.sessions)) if assignment.plan.freeze_gc else None
    try:
        async with asyncio.TaskGroup() as tasks:
            for index in assignment.sessions:
                run = _SessionRun(
                    assignment, index, scenario, emit, stop, tracing=tracing, collector=collector
                )
                tasks.create_task(run.run(), name=f"avatar-fleet:session-{index}")
    finally:
        if collector is not None:
            collector.unfreeze()
