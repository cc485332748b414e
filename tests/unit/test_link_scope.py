"""Tasks scoped to their link: retiring a link cancels and awaits its tasks (the caller's
own spared), and work spawned for a link that is gone never runs."""

from __future__ import annotations

import asyncio
from typing import Any

from avatar_sdk.session.link_slot import LinkSlot
from avatar_sdk.session.supervisor import Supervisor


class _Link:
    connected = True

    def __init__(self) -> None:
        self.closed = False

    async def close(self, timeout: float) -> None:
        self.closed = True


def _slot() -> tuple[LinkSlot, Supervisor, list[str]]:
    failures: list[str] = []
    supervisor = Supervisor(lambda name, exc: failures.append(name))
    return LinkSlot(supervisor), supervisor, failures


async def test_retiring_a_link_cancels_and_awaits_its_tasks_but_the_callers() -> None:
    slot, supervisor, failures = _slot()
    old, new = _Link(), _Link()
    slot.install(old)  # type: ignore[arg-type]
    ended: list[str] = []

    async def serve(name: str) -> None:
        try:
            await asyncio.Event().wait()
        finally:
            ended.append(name)

    recovery = slot.tasks(old).spawn(serve("recovery"), "media-recovery-stv", key="stv")  # type: ignore[arg-type]
    assert slot.tasks(old).running("stv") is recovery  # type: ignore[arg-type]

    async def rebuild() -> None:
        """A task of the old link that replaces it (a recovery escalating to cold)."""
        await slot.retire(1.0)
        slot.install(new)  # type: ignore[arg-type]
        ended.append("rebuilt")

    rebuilder = slot.tasks(old).spawn(rebuild(), "socket-recovery")  # type: ignore[arg-type]
    await rebuilder
    assert ended == ["recovery", "rebuilt"]  # awaited before the link closed, caller spared
    assert recovery.cancelled() and old.closed and slot.current is new
    assert slot.tasks(new).running("stv") is None  # type: ignore[arg-type]
    assert failures == [] and len(supervisor) == 0


async def test_work_for_a_retired_link_never_runs() -> None:
    slot, _, _ = _slot()
    link = _Link()
    slot.install(link)  # type: ignore[arg-type]
    await slot.retire(1.0)
    ran: list[Any] = []

    async def late() -> None:
        ran.append(True)

    task = slot.tasks(link).spawn(late(), "late")  # type: ignore[arg-type]
    await asyncio.gather(task, return_exceptions=True)
    assert task.cancelled() and ran == []


async def test_a_dying_link_task_still_fails_the_session() -> None:
    slot, _, failures = _slot()
    link = _Link()
    slot.install(link)  # type: ignore[arg-type]

    async def boom() -> None:
        raise RuntimeError("bug")

    task = slot.tasks(link).spawn(boom(), "media-check-asr")  # type: ignore[arg-type]
    await asyncio.gather(task, return_exceptions=True)
    assert failures == ["avatar-sdk:link-0:media-check-asr"]
