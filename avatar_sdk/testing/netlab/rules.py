"""The network lab's pure part: names, addresses, requirement checks and the commands and
nftables rulesets that faults become. Nothing here runs a command or opens a socket; the
I/O side (:mod:`.lab`) hands these argument lists to ``ip``, ``tc`` and ``nft``.

Faults live in one nftables table per namespace (``inet avatar_lab``, an ``input`` chain):
the server namespace's sees the uplink (client to server), the client's the downlink.
Every change renders the whole table again and loads it in one ``nft -f`` transaction, so
a fault is on or off atomically and the rules in force are exactly :func:`render_ruleset`
of the faults in force. Rate limits are ``tbf`` qdiscs on the sending end of the veth pair
(the client's end for the uplink, the server's for the downlink).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "CLIENT_IF",
    "PREFIX",
    "SERVER_IF",
    "TABLE",
    "Blackhole",
    "Direction",
    "Fault",
    "LabAddresses",
    "Loss",
    "Protocol",
    "Reject",
    "lab_names",
    "missing_requirements",
    "owner_pid",
    "rate_limit_commands",
    "render_ruleset",
    "setup_commands",
]

#: Every namespace a lab makes is named ``avlab-<creator pid>-<n>-c`` / ``-s``: a later
#: lab finds the leftovers of a creator that died without cleaning up (SIGKILL) by the pid.
PREFIX = "avlab-"
#: The veth ends, one in each namespace (names are per namespace: no clash between labs).
CLIENT_IF = "lab0"
SERVER_IF = "lab0"
#: The nftables table (family inet) that holds the faults, in each namespace.
TABLE = "avatar_lab"

Direction = Literal["up", "down", "both"]
Protocol = Literal["all", "tcp", "udp"]

_NAME = re.compile(rf"^{re.escape(PREFIX)}(\d+)-(\d+)-[cs]$")


def lab_names(pid: int, serial: int) -> tuple[str, str]:
    """The client and server namespace names of lab ``serial`` of process ``pid``."""
    base = f"{PREFIX}{pid}-{serial}"
    return f"{base}-c", f"{base}-s"


def owner_pid(netns: str) -> int | None:
    """The pid of the process that made namespace ``netns``, or None if no lab made it."""
    match = _NAME.match(netns)
    return int(match.group(1)) if match else None


DEFAULT_SUBNET = ipaddress.IPv4Network("10.231.0.0/24")


@dataclass(frozen=True)
class LabAddresses:
    """The lab's subnet: the server at ``.1``, the client at ``.2`` (``.3``, ``.4``... after
    address changes). The two namespaces are joined to nothing but each other, so the
    addresses route nowhere else; a range from 10.0.0.0/8 keeps them private anyway."""

    subnet: ipaddress.IPv4Network = DEFAULT_SUBNET

    @property
    def server(self) -> str:
        return str(self.subnet.network_address + 1)

    def client(self, generation: int = 0) -> str:
        """The client's address after ``generation`` address changes."""
        host = 2 + generation % (self.subnet.num_addresses - 3)
        return str(self.subnet.network_address + host)

    def cidr(self, address: str) -> str:
        return f"{address}/{self.subnet.prefixlen}"


def _checked_direction(direction: str) -> Direction:
    if direction not in ("up", "down", "both"):
        raise ValueError(f"direction must be 'up', 'down' or 'both', not {direction!r}")
    return direction  # type: ignore[return-value]


def _checked_protocol(protocol: str) -> Protocol:
    if protocol not in ("all", "tcp", "udp"):
        raise ValueError(f"protocol must be 'all', 'tcp' or 'udp', not {protocol!r}")
    return protocol  # type: ignore[return-value]


@dataclass(frozen=True)
class Fault:
    """A packet fault: which direction, which protocol, optionally one server port, or
    every server port but one (``except_port``: e.g. all UDP but the TURN relay's)."""

    direction: Direction = "both"
    protocol: Protocol = "all"
    port: int | None = None
    except_port: int | None = None

    def __post_init__(self) -> None:
        _checked_direction(self.direction)
        _checked_protocol(self.protocol)
        for name in ("port", "except_port"):
            value = getattr(self, name)
            if value is not None and not 0 < value < 65536:
                raise ValueError(f"{name} must be 1-65535, not {value!r}")
        if self.except_port is not None and (self.port is not None or self.protocol == "all"):
            raise ValueError("except_port needs protocol 'tcp' or 'udp' and no port")

    def directions(self) -> tuple[Literal["up", "down"], ...]:
        return ("up", "down") if self.direction == "both" else (self.direction,)

    def match(self, direction: Literal["up", "down"]) -> str:
        """The nft match of this fault's packets in ``direction`` (the port is the
        server's: the destination going up, the source coming down)."""
        parts: list[str] = []
        if self.port is not None:
            proto = self.protocol if self.protocol != "all" else None
            side = "dport" if direction == "up" else "sport"
            parts.append(f"{proto} {side} {self.port}" if proto else f"th {side} {self.port}")
        elif self.except_port is not None:
            side = "dport" if direction == "up" else "sport"
            parts.append(f"{self.protocol} {side} != {self.except_port}")
        elif self.protocol != "all":
            parts.append(f"meta l4proto {self.protocol}")
        return " ".join(parts)

    def verdict(self, direction: Literal["up", "down"]) -> str:
        raise NotImplementedError


@dataclass(frozen=True)
class Loss(Fault):
    """Random loss: each matching packet is dropped with probability ``percent`` / 100,
    independently (nftables ``numgen random``, to 0.01 %)."""

    percent: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 <= self.percent <= 100.0:
            raise ValueError(f"loss must be 0-100 %, not {self.percent!r}")

    def verdict(self, direction: Literal["up", "down"]) -> str:
        return f"numgen random mod 10000 < {round(self.percent * 100)} drop"


@dataclass(frozen=True)
class Blackhole(Fault):
    """Every matching packet dropped, without a word to either end."""

    def verdict(self, direction: Literal["up", "down"]) -> str:
        return "drop"


@dataclass(frozen=True)
class Reject(Fault):
    """Every matching packet refused: TCP with a reset, anything else with an ICMP port
    unreachable (``protocol="all"`` does both, by kind)."""

    def verdict(self, direction: Literal["up", "down"]) -> str:
        if self.protocol == "tcp":
            return "reject with tcp reset"
        if self.protocol == "udp":
            return "reject with icmpx type port-unreachable"
        return "reject"  # nft: a reset for TCP, ICMP port unreachable for the rest


def render_ruleset(faults: Iterable[Fault], side: Literal["client", "server"]) -> str:
    """The fault table of one side's namespace for ``faults`` (an ``nft -f`` script): the
    table is created if missing, then emptied and refilled in the same transaction.

    A fault acts where the packet arrives: uplink faults in the server namespace's input
    chain, downlink faults in the client's. The sender's ``send()`` succeeds and the packet
    crosses the link before it is lost, as on a real path (a drop in the sender's own
    output chain would fail its ``send()`` with EPERM instead, which no network does)."""
    direction: Literal["up", "down"] = "up" if side == "server" else "down"
    rules: list[str] = []
    for fault in faults:
        if direction in fault.directions():
            match = fault.match(direction)
            iface = f'iifname "{CLIENT_IF if side == "client" else SERVER_IF}"'
            rules.append(" ".join(p for p in (iface, match, fault.verdict(direction)) if p))
    lines = [
        f"table inet {TABLE} {{}}",
        f"flush table inet {TABLE}",
        f"table inet {TABLE} {{",
        "  chain input {",
        "    type filter hook input priority 0; policy accept;",
        *(f"    {rule}" for rule in rules),
        "  }",
        "}",
    ]
    return "\n".join(lines) + "\n"


def setup_commands(client: str, server: str, addresses: LabAddresses) -> list[list[str]]:
    """The ``ip`` commands that build a lab: two namespaces, a veth pair made inside the
    client namespace with its peer put straight into the server one (so no interface ever
    exists in the caller's namespace), loopback up in both, one address each."""
    peer = ["peer", "name", SERVER_IF, "netns", server]
    return [
        ["ip", "netns", "add", client],
        ["ip", "netns", "add", server],
        ["ip", "-n", client, "link", "set", "lo", "up"],
        ["ip", "-n", server, "link", "set", "lo", "up"],
        ["ip", "-n", client, "link", "add", CLIENT_IF, "type", "veth", *peer],
        ["ip", "-n", client, "addr", "add", addresses.cidr(addresses.client()), "dev", CLIENT_IF],
        ["ip", "-n", server, "addr", "add", addresses.cidr(addresses.server), "dev", SERVER_IF],
        ["ip", "-n", client, "link", "set", CLIENT_IF, "up"],
        ["ip", "-n", server, "link", "set", SERVER_IF, "up"],
    ]


def rate_limit_commands(netns: str, interface: str, kbit: float | None) -> list[str]:
    """The ``tc`` command that limits ``interface``'s egress to ``kbit`` kbit/s (a token
    bucket: a burst of ~20 ms at that rate, never under 2 KB; packets wait up to 200 ms,
    then drop), or removes the limit (None)."""
    if kbit is None:
        return ["tc", "-n", netns, "qdisc", "del", "dev", interface, "root"]
    if kbit <= 0:
        raise ValueError(f"rate must be > 0 kbit/s, not {kbit!r}")
    burst = max(2048, int(kbit * 1000 / 8 * 0.02))
    return [
        "tc", "-n", netns, "qdisc", "replace", "dev", interface, "root",
        "tbf", "rate", f"{kbit:g}kbit", "burst", str(burst), "latency", "200ms",
    ]  # fmt: skip


@dataclass(frozen=True)
class Requirement:
    """One thing the lab needs, and how to get it."""

    what: str
    fix: str


@dataclass(frozen=True)
class HostFacts:
    """What :func:`missing_requirements` judges (gathered by the I/O side)."""

    platform: str
    effective_caps: int
    tools: Mapping[str, bool] = field(default_factory=dict)


CAP_NET_ADMIN = 12
CAP_SYS_ADMIN = 21
_TOOLS: Sequence[tuple[str, str]] = (
    ("ip", "iproute2"),
    ("tc", "iproute2"),
    ("nft", "nftables"),
)


def missing_requirements(facts: HostFacts) -> list[Requirement]:
    """Everything the lab lacks on this host, each with the command that fixes it."""
    if not facts.platform.startswith("linux"):
        return [Requirement("Linux (network namespaces)", "run the lab on a Linux host or VM")]
    missing: list[Requirement] = []
    needed = (1 << CAP_NET_ADMIN) | (1 << CAP_SYS_ADMIN)
    if facts.effective_caps & needed != needed:
        missing.append(
            Requirement(
                "root (CAP_NET_ADMIN and CAP_SYS_ADMIN: namespaces are made and entered)",
                "run as root, e.g. sudo -E env PATH=$PATH <your command>",
            )
        )
    packages = sorted({pkg for tool, pkg in _TOOLS if not facts.tools.get(tool, False)})
    if packages:
        tools = ", ".join(t for t, _ in _TOOLS if not facts.tools.get(t, False))
        missing.append(
            Requirement(
                f"the {tools} command(s)",
                f"sudo apt-get install -y {' '.join(packages)}"
                " (Fedora: sudo dnf install -y nftables iproute-tc)",
            )
        )
    return missing
