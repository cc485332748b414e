"""Host network-change judgement (pure): netlink messages built here byte by byte, as the
kernel sends them, and the polling fallback's snapshots; the watcher's polling loop under a
fake clock. (The netlink watcher against a real kernel: tests/netlab.)"""

from __future__ import annotations

import asyncio
import ipaddress
import struct

import pytest

from avatar_sdk.clock import FakeClock
from avatar_sdk.transport.liveness.netchange import (
    DUMPS,
    IFA_F_TEMPORARY,
    IFA_F_TENTATIVE,
    IFF_LOOPBACK,
    IFF_RUNNING,
    RT_SCOPE_HOST,
    RT_SCOPE_LINK,
    RTM_DELADDR,
    RTM_DELROUTE,
    RTM_NEWADDR,
    RTM_NEWLINK,
    RTM_NEWROUTE,
    NetlinkMessage,
    NetworkState,
    brings_a_path,
    diff_snapshots,
    dump_request,
    snapshot_of,
    split_messages,
    stranded,
)
from avatar_sdk.transport.net import netwatch


def attr(kind: int, data: bytes) -> bytes:
    raw = struct.pack("=HH", 4 + len(data), kind) + data
    return raw + bytes(-len(raw) % 4)


def nlmsg(kind: int, payload: bytes) -> bytes:
    raw = struct.pack("=IHHII", 16 + len(payload), kind, 0, 0, 0) + payload
    return raw + bytes(-len(raw) % 4)


def addr_msg(kind: int, address: str, *, index: int = 2, scope: int = 0, flags: int = 0) -> bytes:
    ip = ipaddress.ip_address(address)
    family = 2 if ip.version == 4 else 10
    body = struct.pack("=BBBBI", family, 24, flags & 0xFF, scope, index)
    body += attr(1, ip.packed) + attr(2, ip.packed) + attr(8, struct.pack("=I", flags))
    return nlmsg(kind, body)


def route_msg(kind: int, gateway: str | None, *, dst_len: int = 0, table: int = 254) -> bytes:
    body = struct.pack("=BBBBBBBBI", 2, dst_len, 0, 0, table, 3, 0, 1, 0)
    if gateway is not None:
        body += attr(5, ipaddress.ip_address(gateway).packed)
    body += attr(4, struct.pack("=I", 2))
    return nlmsg(kind, body)


def link_msg(index: int, flags: int) -> bytes:
    return nlmsg(RTM_NEWLINK, struct.pack("=BxHiII", 0, 1, index, flags, 0))


def changes(state: NetworkState, *datagrams: bytes) -> list[str]:
    return state.apply_all(m for d in datagrams for m in split_messages(d))


def test_messages_are_split_and_a_bad_tail_is_ignored() -> None:
    two = addr_msg(RTM_NEWADDR, "10.0.0.2") + addr_msg(RTM_NEWADDR, "10.0.0.3")
    assert [m.type for m in split_messages(two)] == [RTM_NEWADDR, RTM_NEWADDR]
    assert list(split_messages(two[:-3]))[-1:] != []  # the first still reads
    assert len(list(split_messages(two[:-3]))) == 1
    assert list(split_messages(b"\xff" * 10)) == []
    assert list(split_messages(struct.pack("=IHHII", 4, 20, 0, 0, 0))) == []  # length < header


def test_an_address_counts_once_added_and_once_removed() -> None:
    state = NetworkState()
    assert changes(state, addr_msg(RTM_NEWADDR, "10.0.0.2")) == ["address 10.0.0.2 added"]
    assert changes(state, addr_msg(RTM_NEWADDR, "10.0.0.2")) == []  # re-announced
    assert changes(state, addr_msg(RTM_DELADDR, "10.0.0.2")) == ["address 10.0.0.2 removed"]
    assert changes(state, addr_msg(RTM_DELADDR, "10.0.0.2")) == []


@pytest.mark.parametrize(
    ("address", "kwargs"),
    [
        ("127.0.0.1", {"scope": RT_SCOPE_HOST}),
        ("fe80::1", {"scope": RT_SCOPE_LINK}),
        ("2001:db8::99", {"flags": IFA_F_TEMPORARY}),
        ("2001:db8::5", {"flags": IFA_F_TENTATIVE}),
    ],
)
def test_addresses_that_carry_no_session_do_not_count(address: str, kwargs: dict[str, int]) -> None:
    assert changes(NetworkState(), addr_msg(RTM_NEWADDR, address, **kwargs)) == []


def test_a_tentative_address_counts_once_duplicate_detection_is_over() -> None:
    state = NetworkState()
    assert changes(state, addr_msg(RTM_NEWADDR, "2001:db8::5", flags=IFA_F_TENTATIVE)) == []
    assert changes(state, addr_msg(RTM_NEWADDR, "2001:db8::5")) == ["address 2001:db8::5 added"]


def test_only_the_default_route_counts() -> None:
    state = NetworkState()
    assert changes(state, route_msg(RTM_NEWROUTE, None, dst_len=24)) == []
    assert changes(state, route_msg(RTM_NEWROUTE, "10.0.0.1", table=255)) == []
    assert changes(state, route_msg(RTM_NEWROUTE, "10.0.0.1")) == [
        "default route via 10.0.0.1 added"
    ]
    assert changes(state, route_msg(RTM_NEWROUTE, "10.0.0.1")) == []
    assert changes(state, route_msg(RTM_NEWROUTE, "10.0.9.1")) == [
        "default route via 10.0.9.1 added"
    ]
    assert changes(state, route_msg(RTM_DELROUTE, "10.0.0.1")) == [
        "default route via 10.0.0.1 removed"
    ]


def test_a_carrier_change_counts_on_an_interface_with_an_address() -> None:
    state = NetworkState()
    up = IFF_RUNNING | 1
    assert changes(state, link_msg(2, up), link_msg(3, up)) == []  # first sight: the baseline
    changes(state, addr_msg(RTM_NEWADDR, "10.0.0.2", index=2))
    assert changes(state, link_msg(2, 1)) == ["interface 2 down"]
    assert changes(state, link_msg(2, 1)) == []
    assert changes(state, link_msg(2, up)) == ["interface 2 up"]
    assert changes(state, link_msg(3, 1)) == []  # no address: a container's veth, say
    assert changes(state, link_msg(1, IFF_LOOPBACK), link_msg(1, IFF_LOOPBACK | up)) == []


def test_truncated_payloads_are_ignored() -> None:
    state = NetworkState()
    for kind in (RTM_NEWADDR, RTM_NEWROUTE, RTM_NEWLINK):
        assert state.apply(NetlinkMessage(kind, b"\x02")) is None
    assert state.apply(NetlinkMessage(999, b"")) is None


@pytest.mark.parametrize(
    ("description", "brings"),
    [
        ("address 10.0.0.3 added", True),
        ("address 10.0.0.2 removed; address 10.0.0.3 added", True),
        ("address 10.0.0.2 removed", False),
        ("interface 2 down", False),
        ("interface 2 down; interface 2 up", True),
        ("default route via 10.0.0.1 removed", False),
        ("default route via 10.0.9.1 added", True),
        ("address 192.0.2.9 added, address 192.0.2.2 removed", True),
    ],
)
def test_only_a_change_that_brings_a_path_is_acted_on(description: str, brings: bool) -> None:
    assert brings_a_path(description) is brings


def test_dump_requests() -> None:
    for kind in DUMPS:
        (message,) = split_messages(dump_request(kind))
        assert message.type == kind


def test_snapshots_leave_out_loopback_and_link_local() -> None:
    snap = snapshot_of(
        [("lo", "127.0.0.1"), ("eth0", "192.0.2.2"), ("eth0", "fe80::1%eth0"), ("x", "junk")]
    )
    assert snap == frozenset({("eth0", "192.0.2.2")})
    moved = snapshot_of([("wlan0", "192.0.2.9")])
    assert diff_snapshots(snap, snap) is None
    assert diff_snapshots(snap, moved) == "address 192.0.2.9 added, address 192.0.2.2 removed"


async def test_the_polling_fallback_reports_each_change_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = FakeClock()
    seen = [snapshot_of([("eth0", "192.0.2.2")])]
    monkeypatch.setattr(netwatch, "host_snapshot", lambda: seen[-1])
    got: list[str] = []
    watcher = netwatch.NetworkWatcher(got.append, clock=clock, poll_interval=2.0, netlink=False)
    task = asyncio.ensure_future(watcher.run())
    try:
        await asyncio.wait_for(watcher.ready.wait(), 1)
        assert watcher.mode == "polling"
        await clock.advance(2.0)
        assert got == []
        seen.append(snapshot_of([("wlan0", "198.51.100.7")]))
        await clock.advance(2.0)
        assert got == ["address 198.51.100.7 added, address 192.0.2.2 removed"]
        await clock.advance(4.0)
        assert len(got) == 1
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_failing_callback_is_logged_not_fatal(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    seen = [snapshot_of([("eth0", "192.0.2.2")])]
    monkeypatch.setattr(netwatch, "host_snapshot", lambda: seen[-1])

    def bad(what: str) -> None:
        raise RuntimeError("boom")

    watcher = netwatch.NetworkWatcher(bad, clock=clock, poll_interval=1.0, netlink=False)
    task = asyncio.ensure_future(watcher.run())
    try:
        await asyncio.wait_for(watcher.ready.wait(), 1)
        seen.append(frozenset())
        await clock.advance(1.0)
        assert "RuntimeError" in caplog.text
        assert not task.done()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


@pytest.mark.parametrize(
    ("local", "addresses", "gone"),
    [
        ("10.0.0.2", {"10.0.0.3"}, True),
        ("10.0.0.2", {"10.0.0.2", "10.0.0.3"}, False),
        ("::ffff:10.0.0.2", {"10.0.0.2"}, False),  # the same address, IPv4-mapped
        ("::ffff:10.0.0.2", {"10.0.0.3"}, True),
        ("2001:db8::5", {"2001:db8::6"}, True),
        ("127.0.0.1", set(), False),  # loopback is never among the host's addresses
        ("fe80::1%eth0", set(), False),
        (None, {"10.0.0.3"}, False),  # not known: not stranded
        ("10.0.0.2", None, False),
        ("not an address", {"10.0.0.3"}, False),
    ],
)
def test_a_socket_is_stranded_only_when_its_address_is_known_gone(
    local: str | None, addresses: set[str] | None, gone: bool
) -> None:
    assert stranded(local, addresses) is gone
