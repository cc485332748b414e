"""The network lab: real kernel-level faults between the SDK and the staging backend (two
network namespaces, a veth pair, nftables and ``tbf``). See :mod:`.lab` (the I/O),
:mod:`.rules` (the pure rule building), :mod:`.relay` (a TURN relay: coturn) and
``docs/netlab.md``."""

from __future__ import annotations

from .lab import ActiveFault, LabUnavailable, NetworkLab, leftover_labs, requirements
from .relay import TurnRelay

__all__ = [
    "ActiveFault",
    "LabUnavailable",
    "NetworkLab",
    "TurnRelay",
    "leftover_labs",
    "requirements",
]
