"""``run_fleet``: plan -> assignments -> an engine -> measurements -> a report.

The driver side of a run. It checks the scenario reference (and, for engines that pickle
it, the plan) before any worker starts: a typo fails once, here, not in N processes. The
reference goes to the workers as given, with the driver's cwd as a fallback for a relative
path (a Ray node resolves it in its own ``working_dir`` first). It writes every
measurement as one JSON line, feeds :class:`FleetStats`, and returns a :class:`FleetReport`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import pickle
import time
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ..errors import AvatarError, ErrorCode
from ..logs import sdk_logger
from .engines import Engine, get_engine
from .engines.inline import InlineEngine
from .measure import FleetStats, Measurement
from .plan import FleetPlan, assign
from .worker import load_scenario

__all__ = ["FleetReport", "run", "run_fleet"]

log = sdk_logger(__name__)


@dataclass(frozen=True)
class FleetReport:
    """The outcome of a run: the final figures (``FleetStats.snapshot()``), the per-second
    timeline, and the plan (its token hidden from the repr)."""

    plan: FleetPlan
    stats: dict[str, Any]
    timeline: list[dict[str, Any]]
    engine: str
    elapsed: float
    measurements: int
    jsonl: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def started(self) -> int:
        return int(self.stats["started"])

    @property
    def finished(self) -> int:
        return int(self.stats["finished"])

    @property
    def failed(self) -> int:
        return int(self.stats["failed"])

    @property
    def ok(self) -> bool:
        """Every planned session finished ``ok``."""
        return self.failed == 0 and self.finished == self.plan.sessions


def _engine_name(engine: str | Engine) -> str:
    return engine if isinstance(engine, str) else type(engine).__name__


async def run_fleet(
    plan: FleetPlan,
    *,
    engine: str | Engine = "local",
    on_measurement: Callable[[Measurement], None] | None = None,
    jsonl: str | Path | None = None,
    stats: FleetStats | None = None,
    telemetry: Any = None,
) -> FleetReport:
    """Run ``plan`` on ``engine`` (a name: ``local``, ``inline``, ``ray``; or an
    :class:`Engine`) and return its report once every session finished.

    ``on_measurement`` sees each measurement as it arrives (on this loop); ``jsonl``: write
    every measurement there, one JSON object per line; ``stats``: the ``FleetStats`` to
    feed (a live display reads it meanwhile). Cancelling stops the workers (sessions close
    and are reported ``stopped``) and re-raises once they are gone.

    A plan with ``telemetry`` (:class:`~avatar_sdk.fleet.plan.FleetTelemetry`) is traced:
    the run's span is made with ``telemetry`` (an ``avatar_sdk.telemetry.Telemetry``; None:
    one on the global providers), which also instruments the inline engine's sessions.
    """
    if plan.base_dir is None:  # the reference goes out as given; this is the fallback
        plan = plan.with_(base_dir=os.getcwd())
    # AvatarError(INVALID_ARGUMENT) here, before any worker starts
    load_scenario(plan.scenario, base_dir=plan.base_dir)
    name = _engine_name(engine)
    runner = get_engine(engine) if isinstance(engine, str) else engine
    if isinstance(runner, InlineEngine):
        plan = plan.with_(workers=1)
    else:
        _check_picklable(plan)
    stats = stats if stats is not None else FleetStats()
    sink: IO[str] | None = None
    if jsonl is not None:
        path = Path(jsonl)
        path.parent.mkdir(parents=True, exist_ok=True)
        # opened off the loop; the lines are then written to its buffer (no syscall each)
        sink = await asyncio.to_thread(path.open, "w", encoding="utf-8")

    def emit(item: Measurement) -> None:
        stats.feed(item)
        if sink is not None:
            sink.write(json.dumps(item, separators=(",", ":"), default=str) + "\n")
        if on_measurement is not None:
            on_measurement(item)

    started = time.monotonic()
    try:
        with ExitStack() as stack:
            plan = _traced(plan, runner, name, telemetry, stack)
            await runner.run(assign(plan, time.time()), emit)
    finally:
        if sink is not None:
            sink.close()
    return FleetReport(
        plan=plan,
        stats=stats.snapshot(),
        timeline=stats.timeline(),
        engine=name,
        elapsed=time.monotonic() - started,
        measurements=stats.measurements,
        jsonl=str(jsonl) if jsonl is not None else None,
    )


def _traced(
    plan: FleetPlan, runner: Engine, engine: str, telemetry: Any, stack: ExitStack
) -> FleetPlan:
    """Open the run's span (for the rest of ``stack``) and put its trace context in the plan
    the workers get; the plan unchanged when it asks for no telemetry."""
    spec = plan.telemetry
    if spec is None:
        return plan
    from ..telemetry import INSTALL_HINT, available  # noqa: PLC0415 - only for a traced run

    if not available():
        raise AvatarError(
            ErrorCode.INVALID_ARGUMENT, f"FleetPlan.telemetry needs OpenTelemetry: {INSTALL_HINT}"
        )
    from ..telemetry import fleet as tracing  # noqa: PLC0415
    from ..telemetry import names as n  # noqa: PLC0415
    from ..telemetry.otel import Telemetry  # noqa: PLC0415

    telemetry = telemetry or Telemetry(capture_content=spec.capture_content)
    if isinstance(runner, InlineEngine):
        runner.telemetry = telemetry
    attributes = {n.FLEET_ENGINE: engine, n.FLEET_SESSIONS: plan.sessions}
    span = stack.enter_context(
        tracing.span(tracing.tracer_of(telemetry), n.SPAN_FLEET_RUN, attributes)
    )
    if span is None:
        return plan
    return plan.with_(telemetry=dataclasses.replace(spec, carrier=tracing.carrier_of(span)))


def _check_picklable(plan: FleetPlan) -> None:
    """An engine other than inline pickles the plan to its workers: a closure or a lambda
    fails here, once, rather than as a raw pickling error or every session ``internal``."""
    try:
        pickle.dumps(plan)
    except Exception as exc:  # PicklingError, AttributeError, TypeError: all the same here
        why = f"{type(exc).__name__}: {exc}"
        if callable(plan.scenario):
            rule = "scenario must be a module-level function for the local and ray engines"
        else:
            rule = "the plan must be picklable for the local and ray engines"
        raise AvatarError(ErrorCode.INVALID_ARGUMENT, f"{rule} ({why})") from None


def run(plan: FleetPlan, **options: Any) -> FleetReport:
    """``run_fleet`` from synchronous code (its own event loop): ``run(plan, engine=...)``."""
    return asyncio.run(run_fleet(plan, **options))


def summary_counts(report: FleetReport) -> Mapping[str, int]:
    """Started, finished, ok and failed sessions, and turns ok/failed, flat."""
    s = report.stats
    return {
        "started": s["started"],
        "finished": s["finished"],
        "ok": s["ok"],
        "failed": s["failed"],
        "turns_ok": s["turns"]["ok"],
        "turns_failed": s["turns"]["failed"],
    }
