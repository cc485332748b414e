"""``speechId`` values: ``<nonce>-<trigger>-<payload>`` (PROTOCOL §3.7).

The server keeps one active speechId and drops audio for any other, so the SDK groups
captions and turns by it; parsing tells *why* a speech started (user transcript,
greeting, idle nudge, ...) without guessing from timing.
"""

from __future__ import annotations

import re
import secrets
import string
from dataclasses import dataclass
from typing import Final

__all__ = ["KNOWN_TRIGGERS", "SpeechId", "make_speech_id"]

KNOWN_TRIGGERS: Final[tuple[str, ...]] = (
    "transcript",
    "approved-permissions",
    "tap-to-talk",
    "resume-replay",
    "wake-up",
    "begin-agent-conversation",
    "contact-info-received",
    "contact-info-rejected",
    "html-element-click",
    "iframe-completed",
    "code-block-completed",
    "hangup-message",
)

_NONCE_ALPHABET: Final = string.ascii_letters + string.digits
# The server mints 4-char nonces; shorter/longer alphanumerics are accepted so test
# fixtures such as 'a-transcript-x' still parse.
_NONCE_RE: Final = re.compile(r"[A-Za-z0-9]{1,16}")
# Longest first so that no trigger can shadow a longer one sharing its prefix.
_TRIGGERS_BY_LENGTH: Final = tuple(sorted(KNOWN_TRIGGERS, key=len, reverse=True))


@dataclass(frozen=True, slots=True)
class SpeechId:
    """A parsed speechId. ``str()`` gives the wire form back (no trailing dash when empty)."""

    nonce: str
    trigger: str
    payload: str

    @classmethod
    def parse(cls, raw: str) -> SpeechId | None:
        """Parse ``raw``; ``None`` for a non-string, an odd nonce or an unknown trigger."""
        if not isinstance(raw, str):
            return None
        nonce, sep, rest = raw.partition("-")
        if not sep or _NONCE_RE.fullmatch(nonce) is None:
            return None
        for trigger in _TRIGGERS_BY_LENGTH:
            if rest == trigger:
                return cls(nonce, trigger, "")
            if rest.startswith(trigger) and rest[len(trigger) : len(trigger) + 1] == "-":
                return cls(nonce, trigger, rest[len(trigger) + 1 :])
        return None

    @property
    def is_user_turn(self) -> bool:
        """True for speech answering the user (voice, typed text or tap-to-talk)."""
        return self.trigger in ("transcript", "tap-to-talk")

    def __str__(self) -> str:
        if self.payload:
            return f"{self.nonce}-{self.trigger}-{self.payload}"
        return f"{self.nonce}-{self.trigger}"


def make_speech_id(trigger: str, payload: str = "", nonce: str | None = None) -> str:
    """Build a speechId the way the server does (used by fakes and tests).

    Raises ``ValueError`` for an unknown trigger or a malformed nonce, because such an id
    would not parse back and would silently break grouping.
    """
    if trigger not in KNOWN_TRIGGERS:
        raise ValueError(f"unknown speechId trigger: {trigger[:80]!r}")
    if nonce is None:
        nonce = "".join(secrets.choice(_NONCE_ALPHABET) for _ in range(4))
    elif _NONCE_RE.fullmatch(nonce) is None:
        raise ValueError("speechId nonce must be 1-16 ASCII letters or digits")
    return str(SpeechId(nonce, trigger, payload))
