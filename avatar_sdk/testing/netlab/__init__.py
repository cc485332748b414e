"""The network lab: real kernel-level faults between the SDK and the staging backend (two
network namespaces, a veth pair, nftables and ``tbf``). See :mod:`.lab` (the I/O) and
:mod:`.rules` (the pure rule building), and ``docs/netlab.md``."""

from __future__ import annotations

from .lab import ActiveFault, LabUnavailable, NetworkLab, leftover_labs, requirements

__all__ = ["ActiveFault", "LabUnavailable", "NetworkLab", "leftover_labs", "requirements"]
