"""Host network changes, judged from netlink messages or address snapshots (pure: no
sockets here; :mod:`.netwatch` reads the kernel and the clock).

A change that matters to a live session is one that can break or replace its paths: an
address added or removed (not loopback, not link-local), the default route added, removed
or moved, or an interface that carries an address losing or regaining its carrier. The
kernel repeats itself (IPv6 router advertisements re-announce addresses, a route is
re-added with the same next hop), so :class:`NetworkState` keeps what it has seen and
reports only what is new. Temporary (privacy) IPv6 addresses rotate on their own and a
tentative one is announced again once duplicate detection is over: neither counts.
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

__all__ = [
    "DUMPS",
    "GROUPS",
    "NetlinkMessage",
    "NetworkState",
    "Snapshot",
    "brings_a_path",
    "diff_snapshots",
    "dump_request",
    "snapshot_of",
    "split_messages",
    "stranded",
]

# rtnetlink message types (linux/rtnetlink.h)
RTM_NEWLINK, RTM_DELLINK, RTM_GETLINK = 16, 17, 18
RTM_NEWADDR, RTM_DELADDR, RTM_GETADDR = 20, 21, 22
RTM_NEWROUTE, RTM_DELROUTE, RTM_GETROUTE = 24, 25, 26
#: What the watcher dumps at start, in order (one dump at a time: the kernel refuses two).
DUMPS = (RTM_GETLINK, RTM_GETADDR, RTM_GETROUTE)
_DUMP_BODY = {RTM_GETLINK: 16, RTM_GETADDR: 8, RTM_GETROUTE: 12}  # ifinfomsg, ifaddrmsg, rtmsg
NLMSG_DONE, NLMSG_ERROR = 3, 2
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
# multicast groups (the legacy bit mask bound at socket creation)
RTMGRP_LINK = 0x1
RTMGRP_IPV4_IFADDR = 0x10
RTMGRP_IPV4_ROUTE = 0x40
RTMGRP_IPV6_IFADDR = 0x100
RTMGRP_IPV6_ROUTE = 0x400
#: What the watcher subscribes to: links, addresses (v4, v6), routes (v4, v6).
GROUPS = RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR | RTMGRP_IPV4_ROUTE
GROUPS |= RTMGRP_IPV6_ROUTE

AF_INET, AF_INET6 = 2, 10
IFA_ADDRESS, IFA_LOCAL, IFA_FLAGS = 1, 2, 8
IFA_F_TEMPORARY, IFA_F_TENTATIVE = 0x01, 0x40
RTA_GATEWAY, RTA_OIF = 5, 4
RT_TABLE_MAIN = 254
RTN_UNICAST = 1
RT_SCOPE_LINK, RT_SCOPE_HOST = 253, 254
IFF_LOOPBACK, IFF_RUNNING = 0x8, 0x40

_NLMSGHDR = struct.Struct("=IHHII")
_IFADDRMSG = struct.Struct("=BBBBI")
_RTMSG = struct.Struct("=BBBBBBBBI")
_IFINFOMSG = struct.Struct("=BxHiII")
_RTATTR = struct.Struct("=HH")


@dataclass(frozen=True)
class NetlinkMessage:
    type: int
    payload: bytes


def _align(n: int) -> int:
    return (n + 3) & ~3


def split_messages(data: bytes) -> Iterator[NetlinkMessage]:
    """The netlink messages in one datagram (a truncated or malformed tail is ignored)."""
    offset = 0
    while offset + _NLMSGHDR.size <= len(data):
        length, kind, _flags, _seq, _pid = _NLMSGHDR.unpack_from(data, offset)
        if length < _NLMSGHDR.size or offset + length > len(data):
            return
        yield NetlinkMessage(kind, data[offset + _NLMSGHDR.size : offset + length])
        offset += _align(length)


def _attributes(data: bytes) -> dict[int, bytes]:
    attrs: dict[int, bytes] = {}
    offset = 0
    while offset + _RTATTR.size <= len(data):
        length, kind = _RTATTR.unpack_from(data, offset)
        if length < _RTATTR.size or offset + length > len(data):
            break
        attrs.setdefault(kind, data[offset + _RTATTR.size : offset + length])
        offset += _align(length)
    return attrs


def _address(family: int, raw: bytes | None) -> str | None:
    if raw is None:
        return None
    try:
        if family == AF_INET and len(raw) == 4:
            return str(ipaddress.IPv4Address(raw))
        if family == AF_INET6 and len(raw) == 16:
            return str(ipaddress.IPv6Address(raw))
    except ValueError:
        return None
    return None


def dump_request(kind: int = RTM_GETADDR, seq: int = 1) -> bytes:
    """A netlink request that dumps every link, address or route (``kind``: one of
    :data:`DUMPS`), any family: the watcher's starting point."""
    body = bytes(_DUMP_BODY[kind])
    return (
        _NLMSGHDR.pack(_NLMSGHDR.size + len(body), kind, NLM_F_REQUEST | NLM_F_DUMP, seq, 0) + body
    )


@dataclass
class NetworkState:
    """What the host's network looks like, as far as the messages seen so far tell.
    :meth:`apply` returns what changed (a short description) or None."""

    addresses: set[tuple[int, str]] = field(default_factory=set)  # (interface, address)
    defaults: set[tuple[int, str | None, int | None]] = field(default_factory=set)
    running: dict[int, bool] = field(default_factory=dict)

    def apply(self, message: NetlinkMessage) -> str | None:
        if message.type in (RTM_NEWADDR, RTM_DELADDR):
            return self._address(message)
        if message.type in (RTM_NEWROUTE, RTM_DELROUTE):
            return self._route(message)
        if message.type in (RTM_NEWLINK, RTM_DELLINK):
            return self._link(message)
        return None

    def apply_all(self, messages: Iterable[NetlinkMessage]) -> list[str]:
        changes = (self.apply(m) for m in messages)
        return [c for c in changes if c is not None]

    def _address(self, message: NetlinkMessage) -> str | None:
        if len(message.payload) < _IFADDRMSG.size:
            return None
        family, _prefix, flags, scope, index = _IFADDRMSG.unpack_from(message.payload)
        attrs = _attributes(message.payload[_IFADDRMSG.size :])
        if IFA_FLAGS in attrs and len(attrs[IFA_FLAGS]) == 4:
            flags = struct.unpack("=I", attrs[IFA_FLAGS])[0]
        address = _address(family, attrs.get(IFA_LOCAL, attrs.get(IFA_ADDRESS)))
        if address is None or scope >= RT_SCOPE_LINK or flags & IFA_F_TEMPORARY:
            return None
        key = (index, address)
        if message.type == RTM_NEWADDR:
            if flags & IFA_F_TENTATIVE or key in self.addresses:
                return None
            self.addresses.add(key)
            return f"address {address} added"
        if key not in self.addresses:
            return None
        self.addresses.discard(key)
        return f"address {address} removed"

    def _route(self, message: NetlinkMessage) -> str | None:
        if len(message.payload) < _RTMSG.size:
            return None
        family, dst_len, _src, _tos, table, _proto, _scope, kind, _flags = _RTMSG.unpack_from(
            message.payload
        )
        if dst_len != 0 or table != RT_TABLE_MAIN or kind != RTN_UNICAST:
            return None  # only the default route: the others follow the addresses
        attrs = _attributes(message.payload[_RTMSG.size :])
        gateway = _address(family, attrs.get(RTA_GATEWAY))
        oif_raw = attrs.get(RTA_OIF)
        oif = struct.unpack("=I", oif_raw)[0] if oif_raw is not None and len(oif_raw) == 4 else None
        key = (family, gateway, oif)
        if message.type == RTM_NEWROUTE:
            if key in self.defaults:
                return None
            self.defaults.add(key)
            return f"default route via {gateway or 'link'} added"
        if key not in self.defaults:
            return None
        self.defaults.discard(key)
        return f"default route via {gateway or 'link'} removed"

    def _link(self, message: NetlinkMessage) -> str | None:
        if len(message.payload) < _IFINFOMSG.size:
            return None
        _family, _type, index, flags, _change = _IFINFOMSG.unpack_from(message.payload)
        if flags & IFF_LOOPBACK:
            return None
        running = message.type == RTM_NEWLINK and bool(flags & IFF_RUNNING)
        before = self.running.get(index)
        self.running[index] = running
        if message.type == RTM_DELLINK:
            self.running.pop(index, None)
        if before is None or before == running:
            return None  # a new interface, or nothing new about its carrier
        if not any(i == index for i, _ in self.addresses):
            return None  # an interface without an address carries no session
        return f"interface {index} {'up' if running else 'down'}"


def brings_a_path(description: str) -> bool:
    """Whether a change (as :class:`NetworkState` or :func:`diff_snapshots` describe it)
    gives the host a path it did not have: an address added, a default route added, an
    interface up. A change that only takes paths away (an interface down, an address
    removed) has nothing new to try: probing then would only fail, and drop a connection
    that may live through a short outage (TCP retransmits across a one-second flap)."""
    parts = description.replace(";", ",").split(",")
    return any(p.strip().endswith((" added", " up")) for p in parts)


def stranded(local: str | None, addresses: Iterable[str] | None) -> bool:
    """Whether a connection bound to ``local`` lost its address: the host no longer has it
    (among ``addresses``, the host's addresses as the watcher knows them). Unknown either
    way (None), or a loopback address (never among them), is not stranded."""
    if local is None or addresses is None:
        return False
    try:
        addr = ipaddress.ip_address(local.split("%")[0])
    except ValueError:
        return False
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    if addr.is_loopback or addr.is_link_local:
        return False
    known = set()
    for text in addresses:
        try:
            known.add(ipaddress.ip_address(text.split("%")[0]))
        except ValueError:
            continue
    return addr not in known


#: A polling snapshot: (interface name, address) pairs, loopback and link-local left out.
Snapshot = frozenset[tuple[str, str]]


def snapshot_of(pairs: Iterable[tuple[str, str]]) -> Snapshot:
    """The snapshot of ``(interface, address)`` pairs: loopback and link-local dropped."""
    kept: set[tuple[str, str]] = set()
    for name, text in pairs:
        try:
            addr = ipaddress.ip_address(text.split("%")[0])
        except ValueError:
            continue
        if not (addr.is_loopback or addr.is_link_local):
            kept.add((name, str(addr)))
    return frozenset(kept)


def diff_snapshots(old: Snapshot, new: Snapshot) -> str | None:
    """What changed between two snapshots (None: nothing)."""
    added = sorted(a for _, a in new - old)
    removed = sorted(a for _, a in old - new)
    parts = [f"address {a} added" for a in added] + [f"address {a} removed" for a in removed]
    return ", ".join(parts) or None
