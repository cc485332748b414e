"""The link slot's outbox: every send in call order, whether awaited or posted."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from avatar_sdk.errors import AvatarError, ErrorCode
from avatar_sdk.session.link_slot import LinkSlot


class _Link:
    """A link whose emits take a while (the first one longest), recording the order in which
    they were written (their start: a socket writes frames in call order)."""

    def __init__(self) -> None:
        self.connected = True
        self.sent: list[str] = []
        self.delays = [0.02]

    async def emit(self, event: str, payload: Any) -> None:
        self.sent.append(event)
        await asyncio.sleep(self.delays.pop(0) if self.delays else 0)


def _slot() -> tuple[LinkSlot, _Link, set[asyncio.Task[Any]]]:
    slot, link = LinkSlot(), _Link()
    slot.current = link  # type: ignore[assignment]
    return slot, link, set()


def _spawner(tasks: set[asyncio.Task[Any]]) -> Any:
    def spawn(coro: Any, name: str) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        tasks.add(task)
        return task

    return spawn


async def test_a_posted_send_goes_before_a_later_awaited_one() -> None:
    """``mic_enabled = False`` then ``await speak()``: the mute reaches the server first,
    though the posted send's task starts only after the awaited send was called."""
    slot, link, tasks = _slot()
    slot.outbox.post("muteUser", {}, _spawner(tasks), "mute")
    await slot.outbox.send("textEntered", {})
    await asyncio.gather(*tasks)
    assert link.sent == ["muteUser", "textEntered"]


async def test_sends_keep_call_order_when_the_first_is_slow() -> None:
    slot, link, _ = _slot()
    link.delays = [0.03, 0.0, 0.0]
    await asyncio.gather(*(slot.outbox.send(name, {}) for name in ("a", "b", "c")))
    assert link.sent == ["a", "b", "c"]


async def test_a_refused_or_cancelled_send_does_not_block_the_queue() -> None:
    slot, link, tasks = _slot()
    link.delays = [10.0]
    stuck = asyncio.ensure_future(slot.outbox.send("stuck", {}))
    await asyncio.sleep(0)
    later = asyncio.ensure_future(slot.outbox.send("later", {}))
    await asyncio.sleep(0)
    stuck.cancel()
    await later
    assert link.sent == ["stuck", "later"]
    link.connected = False
    with pytest.raises(AvatarError) as raised:
        await slot.outbox.send("nowhere", {})
    assert raised.value.code is ErrorCode.TRANSPORT_CLOSED
    slot.outbox.post("muteUser", {}, _spawner(tasks), "mute")  # refused: logged, not raised
    await asyncio.gather(*tasks)
    link.connected = True
    await slot.outbox.send("after", {})
    assert link.sent == ["stuck", "later", "after"]
