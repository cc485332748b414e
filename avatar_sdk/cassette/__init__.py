"""Cassettes: a session's wire, recorded (``AvatarSession(record=PATH)``) and read back.

:mod:`.format` is the file format and its reader (pure), :mod:`.recorder` the writer, one
of the session's observers (:mod:`avatar_sdk.observe`), :mod:`.golden` the golden capture
turned into a cassette.
Replaying one against the staging backend is :mod:`avatar_sdk.testing.replay`.
"""

from __future__ import annotations

from .format import FORMAT_VERSION, Cassette, Record, load, parse_lines
from .recorder import CassetteRecorder

__all__ = ["FORMAT_VERSION", "Cassette", "CassetteRecorder", "Record", "load", "parse_lines"]
