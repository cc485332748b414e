"""The ``fleet`` figure's scenario: one measured text turn, nothing else.

A module of its own, importing only the SDK, so a fleet worker that loads it pays no more
than the scenario itself (the figure's measuring code imports the staging server).
"""

from __future__ import annotations

from avatar_sdk import AvatarSession
from avatar_sdk.fleet import ScenarioContext

#: What every session says, by hand or through the runner.
TURN_TEXT = "ping"


async def one_turn(session: AvatarSession, ctx: ScenarioContext) -> None:
    """The whole scenario: one ``ctx.turn`` (the runner connects, greets and closes)."""
    await ctx.turn(TURN_TEXT)
