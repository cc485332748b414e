"""Inbound text clamping (PROTOCOL §7, LLM05).

Server text reaches captions, logs and user callbacks; cutting it to a fixed size bounds
memory and stripping C0 controls stops terminal/log injection, while ``\\t \\n \\r`` are
kept because transcripts legitimately contain them.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["MAX_TEXT", "clamp_text"]

MAX_TEXT: Final = 8000

_CONTROL_RE: Final = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def clamp_text(value: str, limit: int = MAX_TEXT) -> str:
    """Cut ``value`` to ``limit`` characters, then drop C0 control characters and DEL.

    Cutting first keeps the work bounded for multi-megabyte inputs; the result is never
    longer than ``limit``. ``'hello\\x00\\x07world'`` becomes ``'helloworld'``.
    """
    return _CONTROL_RE.sub("", value[: max(limit, 0)])
