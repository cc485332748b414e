"""Late: a part another part needs before it exists, passed at construction.

The parts of one live session need each other in a circle (a link reports to the inbound
handler, which drives the recovery, which builds links; a failed task ends the session
through the endings, which cancel that task's supervisor). The assembly breaks each circle
with one :class:`Late`, built first and handed to the parts that need it, then bound once
when its part exists: nothing is patched onto a part after it is built, and a part used
before the assembly finished says so instead of failing on ``None``.
"""

from __future__ import annotations

from typing import Generic, TypeVar

__all__ = ["Late"]

T = TypeVar("T")


class Late(Generic[T]):
    """A holder for one part, bound once (``bind``), read by calling it."""

    __slots__ = ("_part", "_what")

    def __init__(self, what: str) -> None:
        self._what = what
        self._part: T | None = None

    def bind(self, part: T) -> T:
        """Hold ``part`` from now on (once); returns it."""
        if self._part is not None:
            raise RuntimeError(f"{self._what} is bound already")
        self._part = part
        return part

    def __call__(self) -> T:
        part = self._part
        if part is None:
            raise RuntimeError(f"{self._what} is used before the session's assembly bound it")
        return part
