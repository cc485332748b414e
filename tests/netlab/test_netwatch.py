"""The host network watch against a real kernel: the lab's client namespace changes address,
loses and regains its carrier; the watcher (netlink, then the polling fallback) reports
each change once, and nothing when nothing changed (a packet fault is no host change)."""

from __future__ import annotations

import asyncio
import time

from avatar_sdk.testing.netlab import NetworkLab
from avatar_sdk.transport.net.netwatch import NetworkWatcher


async def watch(
    lab: NetworkLab, *, netlink: bool
) -> tuple[NetworkWatcher, list[tuple[float, str]], asyncio.Task[None]]:
    """A watcher started by a thread in the client namespace (the caller stays in it while
    the watcher runs: a poll reads the namespace of the thread it runs on)."""
    got: list[tuple[float, str]] = []
    watcher = NetworkWatcher(
        lambda what: got.append((time.monotonic(), what)), netlink=netlink, poll_interval=0.3
    )
    task = asyncio.ensure_future(watcher.run())
    await asyncio.wait_for(watcher.ready.wait(), 5)
    return watcher, got, task


async def until(check: object, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return True
        await asyncio.sleep(0.02)
    return False


async def test_netlink_reports_an_address_change_and_a_flap_at_once(lab: NetworkLab) -> None:
    with lab.client():
        await _netlink_case(lab)


async def _netlink_case(lab: NetworkLab) -> None:
    watcher, got, task = await watch(lab, netlink=True)
    try:
        assert watcher.mode == "netlink"
        async with await lab.blackhole():
            pass  # packets dropped: the host's network did not change
        started = time.monotonic()
        new = await lab.change_address()
        assert await until(lambda: bool(got), 2.0)
        at, what = got.pop(0)  # the first report: nothing came of the blackhole
        print(f"netlink: address change reported in {at - started:.3f} s: {what}")
        assert at - started < 2.0
        assert f"address {new} added" in what and "removed" in what
        await lab.link_down()
        assert await until(lambda: bool(got), 2.0)
        assert got.pop(0)[1] == "interface 2 down"
        await lab.link_up()
        assert await until(lambda: bool(got), 2.0)
        assert got.pop(0)[1] == "interface 2 up"
        # Each change once: the next report is the next change, not a repeat of the last.
        again = await lab.change_address()
        assert await until(lambda: bool(got), 2.0)
        assert f"address {again} added" in got.pop(0)[1]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_polling_reports_an_address_change(lab: NetworkLab) -> None:
    with lab.client():
        await _polling_case(lab)


async def _polling_case(lab: NetworkLab) -> None:
    watcher, got, task = await watch(lab, netlink=False)
    try:
        assert watcher.mode == "polling"
        started = time.monotonic()
        new = await lab.change_address()
        assert await until(lambda: bool(got), 2.0)
        at, what = got.pop(0)
        print(f"polling (0.3 s): address change reported in {at - started:.3f} s: {what}")
        assert f"address {new} added" in what
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
