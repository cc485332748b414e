"""ReleaseOnce: a cancelled caller stops waiting, not releasing; later callers await the
same release; its error reaches each caller that waits."""

from __future__ import annotations

import asyncio

import pytest

from avatar_sdk.release_once import ReleaseOnce


async def test_a_cancelled_caller_does_not_cut_the_release_short() -> None:
    once = ReleaseOnce()
    gate = asyncio.Event()
    steps: list[str] = []

    async def release() -> None:
        steps.append("began")
        await gate.wait()
        steps.append("ended")

    first = asyncio.ensure_future(once.run(release))
    await asyncio.sleep(0)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert once.started
    second = asyncio.ensure_future(once.run(release))  # the owner's own close, later
    await asyncio.sleep(0)
    assert not second.done()
    gate.set()
    await second
    assert steps == ["began", "ended"]  # ran once, to the end


async def test_its_error_reaches_every_caller_that_waits() -> None:
    once = ReleaseOnce()

    async def release() -> None:
        raise OSError("socket gone")

    for _ in range(2):
        with pytest.raises(OSError, match="socket gone"):
            await once.run(release)
