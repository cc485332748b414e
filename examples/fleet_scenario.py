"""A load scenario: each session asks two questions and records how long the answer is.

Run it as is (8 sessions on 2 worker processes against the staging backend, started in a
child process)::

    .venv/bin/python examples/fleet_scenario.py

or from the command line, with live progress, the JSON Lines and the chart::

    avatar-sdk fleet examples/fleet_scenario.py --staging -n 50 --rate 10 \\
        --jsonl run.jsonl --html run.html

``scenario`` is what the runner imports in every worker (``examples/fleet_scenario.py``
names it by default; ``file.py:function`` names another function).
"""

from __future__ import annotations

import asyncio

from avatar_sdk import AvatarSession
from avatar_sdk.fleet import FleetPlan, ScenarioContext, SessionSpec, run_fleet
from avatar_sdk.fleet.report import summary_rows
from avatar_sdk.testing import StagingProcess


async def scenario(session: AvatarSession, ctx: ScenarioContext) -> None:
    """One conversation; ``ctx.turn`` speaks and measures (first text, audio, turn end)."""
    await ctx.turn("Hello!")
    await ctx.pause(0.2)
    answer = await ctx.turn(f"What can you do for user {ctx.index}?")
    ctx.record("answer_chars", len(answer.text))


async def main() -> None:
    async with StagingProcess() as staging:
        spec = SessionSpec(
            staging.url,
            staging.token,
            genie_url=staging.genie_url,
            allow_insecure_transport=True,  # the staging backend is plain http on loopback
        )
        plan = FleetPlan(__file__, spec, sessions=8, rate=8.0, workers=2)
        report = await run_fleet(plan, engine="local")
    for figure, count, p50, p90, _ in summary_rows(report.stats):
        print(f"{figure:22} {count:10} {p50:>8} {p90:>8}".rstrip())


if __name__ == "__main__":  # the workers import this file: only the driver runs main()
    asyncio.run(main())
