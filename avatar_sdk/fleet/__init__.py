"""Many sessions at once: load tests and bot fleets (``docs/fleet.md``).

A scenario is ``async def scenario(session, ctx)`` (or a scripted YAML/JSON conversation);
:func:`run_fleet` starts N sessions on a ramp, on an engine (``inline``, ``local``
processes, ``ray`` actors), and measures connect time, greeting, reply latency, recoveries,
errors and completion outcomes. ``avatar-sdk fleet`` is the command-line front.

Names load on first use (PEP 562): the plan and measurements are cheap to import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from .context import ScenarioContext, TurnResult
    from .engines import Engine, get_engine
    from .measure import FleetStats, Measurement, percentile
    from .plan import FleetPlan, FleetTelemetry, SessionSpec, WorkerAssignment, assign
    from .runner import FleetReport, run, run_fleet
    from .worker import Scenario, load_scenario, run_worker

_EXPORTS: dict[str, str] = {
    "Engine": ".engines",
    "FleetPlan": ".plan",
    "FleetReport": ".runner",
    "FleetStats": ".measure",
    "FleetTelemetry": ".plan",
    "Measurement": ".measure",
    "Scenario": ".worker",
    "ScenarioContext": ".context",
    "SessionSpec": ".plan",
    "TurnResult": ".context",
    "WorkerAssignment": ".plan",
    "assign": ".plan",
    "get_engine": ".engines",
    "load_scenario": ".worker",
    "percentile": ".measure",
    "run": ".runner",
    "run_fleet": ".runner",
    "run_worker": ".worker",
}

__all__ = [
    "Engine",
    "FleetPlan",
    "FleetReport",
    "FleetStats",
    "FleetTelemetry",
    "Measurement",
    "Scenario",
    "ScenarioContext",
    "SessionSpec",
    "TurnResult",
    "WorkerAssignment",
    "assign",
    "get_engine",
    "load_scenario",
    "percentile",
    "run",
    "run_fleet",
    "run_worker",
]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
