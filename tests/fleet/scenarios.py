"""Scenarios the fleet tests run, importable by reference ("tests.fleet.scenarios:NAME")
from the local engine's spawned workers."""

from __future__ import annotations

import asyncio
import os
import signal

from avatar_sdk import AvatarSession
from avatar_sdk.fleet import ScenarioContext


async def two_turns(session: AvatarSession, ctx: ScenarioContext) -> None:
    """Two measured turns; the second's reply length is recorded as a metric."""
    await ctx.turn("Hello!")
    result = await ctx.turn("What can you do?")
    ctx.record("reply_chars", len(result.text))


async def one_turn(session: AvatarSession, ctx: ScenarioContext) -> None:
    await ctx.turn("Hello!")


async def raises_on_one(session: AvatarSession, ctx: ScenarioContext) -> None:
    """Session 1 breaks; the others talk."""
    await ctx.turn("Hello!")
    if ctx.index == 1:
        raise RuntimeError("the scenario broke")


async def kills_worker_1(session: AvatarSession, ctx: ScenarioContext) -> None:
    """Worker 1's first session kills its own process (SIGKILL: no cleanup at all)."""
    if ctx.worker == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    await ctx.turn("Hello!")


async def long_pause(session: AvatarSession, ctx: ScenarioContext) -> None:
    """Talks once, then waits far longer than any test: only a stop ends it."""
    await ctx.turn("Hello!")
    await ctx.pause(120)


async def heard(session: AvatarSession, ctx: ScenarioContext) -> None:
    """The backend hears the uplink as speech (its VAD must be listening), then one turn.

    The first utterance may be detected while ``connect()`` is still returning, before this
    scenario could listen (a fresh-clone run at load 8 waited 10 s for it in vain). So the
    microphone is muted past the VAD's silence (the utterance under way ends), then opened
    with the expectation already registered: that utterance's start cannot be missed."""
    session.mic_enabled = False
    await asyncio.sleep(MUTED_PAST_SILENCE)
    talking = session.expect("user_started_talking", timeout=10)
    session.mic_enabled = True
    await talking
    await ctx.turn("Hello!")


#: Longer than ``brain.listen(silence=0.6)``'s silence, with room for a loaded server.
MUTED_PAST_SILENCE = 1.5


async def bad_fault(session: AvatarSession, ctx: ScenarioContext) -> None:
    """Asks the control API for a fault it does not know."""
    await ctx.fault("no_such_fault")


async def any_fault(session: AvatarSession, ctx: ScenarioContext) -> None:
    await ctx.fault("drop_socket")


async def three_turns(session: AvatarSession, ctx: ScenarioContext) -> None:
    """Back to back, no pause: each turn starts right after the previous turn's end, while
    the avatar's voice of that turn (or of the greeting) may still be playing."""
    for text in ("Hello there, how are you today?", "Tell me more please.", "And then?"):
        await ctx.turn(text)


async def odd_measurements(session: AvatarSession, ctx: ScenarioContext) -> None:
    """A turn, then measurements whose fields are not JSON (nor picklable: a lambda)."""
    await ctx.turn("Hello!")
    ctx.measure("metric", name="odd", value=object())
    ctx.measure("note", callback=lambda: None, tags={"a", "b"}, nested={"x": (1, 2)})


async def fault_with_name(session: AvatarSession, ctx: ScenarioContext) -> None:
    """A fault argument called ``name`` (the staging backend refuses it: not a crash)."""
    await ctx.fault("drop_socket", name="x")


async def renewed_once(session: AvatarSession, ctx: ScenarioContext) -> None:
    """A turn, a renewal of the server session on the same thread, a turn on the new one."""
    await ctx.turn("Before the renewal")
    await session.renew()
    await ctx.turn("After the renewal")
