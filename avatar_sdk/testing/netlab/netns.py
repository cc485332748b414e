"""Entering a network namespace from Python: ``setns(2)`` through libc (``os.setns`` only
exists from Python 3.12). A network namespace is per thread, so entering one moves only the
calling thread; the sockets it opens belong to that namespace for their whole life."""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterator

__all__ = ["NETNS_DIR", "enter_netns", "inside_netns"]

CLONE_NEWNET = 0x40000000
#: Where ``ip netns add`` mounts named namespaces.
NETNS_DIR = "/run/netns"

_libc: ctypes.CDLL | None = None


def _setns(fd: int) -> None:
    global _libc  # noqa: PLW0603 (loaded once, on first use)
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"setns: {os.strerror(errno)}")


def enter_netns(name: str) -> None:
    """The calling thread enters network namespace ``name`` for good."""
    target = os.open(os.path.join(NETNS_DIR, name), os.O_RDONLY)
    try:
        _setns(target)
    finally:
        os.close(target)


@contextlib.contextmanager
def inside_netns(name: str) -> Iterator[None]:
    """The calling thread is in network namespace ``name`` until the block ends (sockets it
    opens meanwhile stay in that namespace after it)."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        enter_netns(name)
        try:
            yield
        finally:
            _setns(own)
    finally:
        os.close(own)
