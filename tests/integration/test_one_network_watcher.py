"""One host network watcher per process (issue 32, item 7): every session on an event loop
shares one, started with the first session and closed with the last; before, each session
opened its own rtnetlink socket (a fleet of 1,000 sessions in one process opened 1,000)."""

from __future__ import annotations

import asyncio
import os
import sys

import pytest

from avatar_sdk import AvatarSession
from avatar_sdk.testing import StagingServer

from .conftest import FAST, until

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="counts rtnetlink sockets in /proc"
)

SESSIONS = 4


def netlink_route_sockets() -> int:
    """This process's open rtnetlink sockets subscribed to multicast groups (the network
    watcher's), read from ``/proc``."""
    mine = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            mine.add(target[len("socket:[") : -1])
    count = 0
    with open("/proc/net/netlink") as table:
        next(table)
        for line in table:
            fields = line.split()
            protocol, groups, inode = int(fields[1]), int(fields[3], 16), fields[-1]
            if protocol == 0 and groups and inode in mine:
                count += 1
    return count


async def test_sessions_share_one_netlink_socket_closed_with_the_last(
    staging: StagingServer,
) -> None:
    before = netlink_route_sockets()
    sessions = [
        AvatarSession(staging.url, staging.token, media=False, allow_insecure_transport=True,
                      config=FAST)
        for _ in range(SESSIONS)
    ]  # fmt: skip
    try:
        await asyncio.gather(*(s.connect() for s in sessions))
        watchers = [s.network_watcher for s in sessions]
        assert all(w is not None for w in watchers)
        await asyncio.gather(*(w.ready.wait() for w in watchers if w is not None))
        assert len({id(w) for w in watchers}) == 1  # one watcher, shared
        if watchers[0] is not None and watchers[0].mode == "netlink":
            assert netlink_route_sockets() - before == 1  # before: one per session
        await sessions[0].close()
        assert await until(lambda: netlink_route_sockets() - before <= 1, 2)
        assert sessions[1].network_watcher is watchers[0]  # the others keep watching
    finally:
        await asyncio.gather(*(s.close() for s in sessions))
    assert await until(lambda: netlink_route_sockets() == before, 2)  # closed with the last
