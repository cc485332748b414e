"""Ctrl-C while a command starts: exit 130, quietly, wherever it lands.

Python raises ``KeyboardInterrupt`` at the next bytecode after SIGINT. During the imports
that can be inside a C extension's module init (PyAV's Cython init imports ``zlib`` to
unpack its strings), which reports it as an ``ImportError`` with a traceback and exit 1;
seen on a fresh clone, whose imports are slow. :func:`install` (first thing, before the
command line loads) puts a handler in place that ends the process with 130 when the
interrupt lands inside an import (nothing is open yet: a command imports what it needs
before it opens anything) and otherwise raises ``KeyboardInterrupt`` as Python's own does.
:func:`run` hands back Python's handler before the command's event loop starts, so
``asyncio.run`` installs its own graceful one, and then runs it; :func:`uninstall` hands it
back when the command line returns (called in-process, as tests do). Written by hand: no
library decides where an interrupt landed.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import Coroutine
from types import FrameType
from typing import Any, TypeVar

from .exits import INTERRUPTED

__all__ = ["install", "run", "uninstall"]

T = TypeVar("T")


def _in_import(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    if _in_import(frame):
        os.write(2, b"avatar-sdk: interrupted\n")
        os._exit(INTERRUPTED)
    signal.default_int_handler(signum, frame)


def install() -> None:
    """The start-up handler (the main thread only; a handler someone set is kept)."""
    on_main = threading.current_thread() is threading.main_thread()
    if on_main and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_sigint)


def uninstall() -> None:
    """Python's handler back, if the start-up one is still in place (main thread only)."""
    on_main = threading.current_thread() is threading.main_thread()
    if on_main and signal.getsignal(signal.SIGINT) is _on_sigint:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` with Python's SIGINT handler back in place first."""
    uninstall()
    return asyncio.run(main)
