"""The avatar-session REST protocol, pure: paths, bodies, answers, errors, token expiry, and
the logic that tells from the downlink's voice when a ``say`` started and finished.

No I/O and no asyncio here (``tests/unit/test_layering.py`` holds it to that): the session
(:mod:`.session`) sends what these functions build and feeds them what it receives; a
virtual clock drives them in unit tests. The protocol itself is described in
``docs/scripted.md``.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Final, Literal
from urllib.parse import quote

from ...errors import AvatarError, ErrorCode, Surface, code_for_status

__all__ = [
    "CREATE_PATH",
    "SayLedger",
    "SayRecord",
    "Transition",
    "VoiceDetector",
    "classify_http_error",
    "jwt_exp",
    "parse_create",
    "parse_init_client",
    "parse_say",
    "session_path",
]

CREATE_PATH: Final = "/avatar-session/create"
#: The per-session verbs (``POST /avatar-session/{id}/<verb>``).
VERBS: Final = ("init-client", "say-audio", "interrupt", "keep-alive", "end")
#: Longest session id or token accepted from the server (a hostile answer is refused).
MAX_FIELD: Final = 8192


def session_path(session_id: str, verb: str) -> str:
    """``/avatar-session/{id}/{verb}``; the id is percent-encoded (it came from the server)."""
    if verb not in VERBS:
        raise ValueError(f"unknown verb {verb!r}")
    return f"/avatar-session/{quote(session_id, safe='')}/{verb}"


def build_create(visual_id: str) -> dict[str, Any]:
    """The body of ``create``: the avatar's visual-catalog id."""
    return {"visualConfig": {"id": visual_id}}


def _text(value: object, what: str, *, limit: int = MAX_FIELD) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > limit:
        raise AvatarError(ErrorCode.PROTOCOL_VIOLATION, f"{what}: missing or not a short string")
    return value


def _object(body: object, what: str) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise AvatarError(ErrorCode.PROTOCOL_VIOLATION, f"{what}: the answer is not an object")
    return body


@dataclass(frozen=True, slots=True)
class Created:
    """What ``create`` answered. ``token`` is a secret: never shown (see ``__repr__``)."""

    session_id: str
    token: str = field(repr=False)
    expires_at: float | None  # the token's ``exp`` (epoch seconds), when readable


def parse_create(body: object) -> Created:
    """``{sessionId, token}``, checked; ``PROTOCOL_VIOLATION`` when either is missing."""
    data = _object(body, "create")
    session_id = _text(data.get("sessionId"), "create.sessionId", limit=256)
    token = _text(data.get("token"), "create.token")
    return Created(session_id, token, jwt_exp(token))


@dataclass(frozen=True, slots=True)
class ClientInit:
    """What ``init-client`` answered: where to subscribe, and the TURN relay to use."""

    whep_url: str
    turn_url: str | None
    turn_username: str | None = field(default=None, repr=False)
    turn_credential: str | None = field(default=None, repr=False)


def parse_init_client(body: object) -> ClientInit:
    """``{whepUrl, turn: {url, username, credential}}``; ``turn`` may be absent."""
    data = _object(body, "init-client")
    whep = _text(data.get("whepUrl"), "init-client.whepUrl", limit=4096)
    turn = data.get("turn")
    if turn is None:
        return ClientInit(whep, None)
    if not isinstance(turn, dict):
        raise AvatarError(ErrorCode.PROTOCOL_VIOLATION, "init-client.turn is not an object")

    def optional(key: str) -> str | None:
        value = turn.get(key)
        if value is None or value == "":
            return None
        return _text(value, f"init-client.turn.{key}", limit=1024)

    return ClientInit(whep, optional("url"), optional("username"), optional("credential"))


def parse_say(body: object) -> bool:
    """The ``success`` flag of a ``say-audio`` answer (False when absent)."""
    return _object(body, "say-audio").get("success") is True


def say_form_fields(turn_id: str, duration: float) -> dict[str, str]:
    """The text parts of the ``say-audio`` multipart form (the audio part is added beside)."""
    if not (math.isfinite(duration) and duration > 0):
        raise AvatarError(ErrorCode.INVALID_ARGUMENT, "duration must be a number of seconds > 0")
    return {"turnId": turn_id, "duration": f"{duration:.3f}"}


#: Server error codes (the ``code`` of an error body) and what they mean here.
_SERVER_CODES: Final[dict[str, ErrorCode]] = {
    "wrong_token_scope": ErrorCode.WRONG_TOKEN_SCOPE,
    "unauthorized": ErrorCode.AUTH_FAILED,
    "token_expired": ErrorCode.AUTH_FAILED,
    "session_not_found": ErrorCode.SESSION_GONE,
    "bad_request": ErrorCode.BAD_REQUEST,
}


def error_code_of(body: object) -> str | None:
    """The ``code`` string of an error body (problem-details style), if it has one."""
    if isinstance(body, dict):
        code = body.get("code")
        if isinstance(code, str) and 0 < len(code) <= 64:
            return code
    return None


def classify_http_error(status: int, body: object, what: str) -> AvatarError:
    """The classified error of a non-2xx answer to ``what`` (a verb name).

    404 on any per-session call means the session is gone (``session_gone``); the rest is
    the shared status table (:func:`avatar_sdk.errors.code_for_status`). The body's ``code`` is
    only quoted when it is a short identifier (never a raw payload)."""
    code = error_code_of(body)
    mapped = _SERVER_CODES.get(code or "")
    shown = f" {code}" if code is not None and code.replace("_", "").isalnum() else ""
    detail = f"{what}: HTTP {status}{shown}"
    if mapped is not None and not (mapped is ErrorCode.SESSION_GONE and status != 404):
        return AvatarError(mapped, detail)
    if status == 404 and what != "create":
        return AvatarError(ErrorCode.SESSION_GONE, detail)
    return AvatarError(code_for_status(status, Surface.AVATAR_SESSION), detail)


def jwt_exp(token: str) -> float | None:
    """The ``exp`` claim (epoch seconds) of a JWT, read without verifying it (the server
    holds the key and enforces it); None when the token is not a readable JWT."""
    parts = token.split(".")
    if len(parts) != 3 or len(parts[1]) > MAX_FIELD:
        return None
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload.encode("ascii")))
    except (ValueError, binascii.Error, UnicodeError):
        return None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    if isinstance(exp, bool) or not isinstance(exp, int | float) or not math.isfinite(exp):
        return None
    return float(exp)


# -- voice onset and offset ----------------------------------------------------------------
VoiceEdge = tuple[Literal["onset", "offset"], float]


class VoiceDetector:
    """Voice onset (a level at or above ``threshold`` after quiet) and offset (``hangover``
    seconds of quiet after voice) on a stream of audio levels, one per decoded frame.

    :meth:`feed` takes a frame's level, its arrival time and its length; it returns the
    edges found: an onset at the arrival of the first voiced frame, an offset at the end
    of the last voiced one (reported once the hangover has passed)."""

    def __init__(self, *, threshold: float = 0.01, hangover: float = 0.2) -> None:
        if not (threshold > 0 and hangover > 0):
            raise ValueError("threshold and hangover must be > 0")
        self.threshold = threshold
        self.hangover = hangover
        self.voiced = False
        self.last_voice_end: float | None = None

    def feed(self, level: float, at: float, length: float) -> list[VoiceEdge]:
        edges: list[VoiceEdge] = []
        if level >= self.threshold:
            if not self.voiced:
                self.voiced = True
                edges.append(("onset", at))
            self.last_voice_end = at + length
        elif (
            self.voiced
            and self.last_voice_end is not None
            and at + length - self.last_voice_end >= self.hangover
        ):
            self.voiced = False
            edges.append(("offset", self.last_voice_end))
        return edges

    def silence(self, at: float) -> list[VoiceEdge]:
        """No frame arrived until ``at`` (a dead downlink): voice in progress ends."""
        end = self.last_voice_end
        if self.voiced and end is not None and at - end >= self.hangover:
            self.voiced = False
            return [("offset", end)]
        return []


# -- the say ledger ------------------------------------------------------------------------
Reason = Literal["played", "interrupted", "no_onset", "bound", "ended"]


@dataclass(slots=True)
class SayRecord:
    """One ``say`` as the ledger sees it (times on the session's clock)."""

    turn_id: str
    duration: float
    accepted_at: float
    ready_at: float | None = None  # when it became the one the server plays next
    started_at: float | None = None
    finished_at: float | None = None
    reason: Reason | None = None


@dataclass(frozen=True, slots=True)
class Transition:
    """A fact about one say: ``kind`` ``"started"`` or ``"finished"`` at ``at``."""

    turn_id: str
    kind: Literal["started", "finished"]
    at: float
    reason: Reason | None = None


class SayLedger:
    """The says accepted by the server, in its order, and what the downlink tells of them.

    The server plays accepted says one after another; the client sees only the voice on
    the downlink. The head say starts at the first voice onset after it became the one
    playing (``ready_at``) and finishes at the first offset once most of its duration has
    played (an earlier pause is a pause within it). The caller's ``duration`` bounds
    everything: no onset within ``duration + onset_margin`` of ``ready_at`` finishes it
    with ``no_onset``; voice still going past ``started + duration`` by ``end_margin``
    (another say is queued behind it) or ``onset_margin`` (none is: only late media can
    carry it that far) finishes it at ``started + duration`` (``bound``) and, as the voice
    goes on, the next say starts there (says queued back to back leave no quiet between
    them).
    """

    def __init__(
        self,
        *,
        onset_margin: float = 2.0,
        end_slack: float = 0.3,
        end_margin: float = 1.0,
    ) -> None:
        self.onset_margin = onset_margin
        self.end_slack = end_slack
        self.end_margin = end_margin
        self._queue: deque[SayRecord] = deque()
        self.voiced = False
        self.voice_since: float | None = None
        self.last_offset: float | None = None

    def __len__(self) -> int:
        return len(self._queue)

    @property
    def head(self) -> SayRecord | None:
        return self._queue[0] if self._queue else None

    def add(
        self, turn_id: str, duration: float, accepted_at: float, sent_at: float | None = None
    ) -> list[Transition]:
        """A say the server accepted at ``accepted_at``, uploaded from ``sent_at`` on (the
        server may start playing it before its answer arrives: a voice onset since
        ``sent_at`` is its start)."""
        record = SayRecord(turn_id, duration, accepted_at)
        self._queue.append(record)
        if len(self._queue) == 1:
            since = accepted_at if sent_at is None else min(sent_at, accepted_at)
            record.ready_at = since
            if self.voiced and self.voice_since is not None and self.voice_since >= since:
                record.started_at = self.voice_since
                return [Transition(turn_id, "started", self.voice_since)]
        return []

    def _finish(self, record: SayRecord, at: float, reason: Reason) -> list[Transition]:
        record.finished_at = at
        record.reason = reason
        self._queue.popleft()
        out = [Transition(record.turn_id, "finished", at, reason)]
        nxt = self.head
        if nxt is not None:
            nxt.ready_at = max(at, nxt.accepted_at)
        return out

    def on_edge(self, kind: Literal["onset", "offset"], at: float) -> list[Transition]:
        head = self.head
        if kind == "onset":
            self.voiced, self.voice_since = True, at
            if head is not None and head.started_at is None:
                head.started_at = at
                return [Transition(head.turn_id, "started", at)]
            return []
        self.voiced, self.last_offset = False, at
        if head is None or head.started_at is None:
            return []
        if at >= head.started_at + head.duration - self.end_slack:
            return self._finish(head, at, "played")
        return []  # a pause within the say

    def interrupt(self, at: float) -> list[Transition]:
        """The server cut what it was playing: the head say (started or not)."""
        head = self.head
        if head is None:
            return []
        return self._finish(head, at, "interrupted")

    def end(self, at: float) -> list[Transition]:
        """The session ended: every say still open finishes (``ended``)."""
        out: list[Transition] = []
        while self._queue:
            out += self._finish(self._queue[0], at, "ended")
        return out

    def tick(self, now: float) -> list[Transition]:
        """Apply the duration bounds at ``now``."""
        out: list[Transition] = []
        while (head := self.head) is not None:
            ready = head.ready_at if head.ready_at is not None else head.accepted_at
            if head.started_at is None:
                if self.voiced and self.voice_since is not None and now - ready >= self.end_slack:
                    # Voice already going when this say became the one playing: back to back.
                    head.started_at = ready
                    out.append(Transition(head.turn_id, "started", ready))
                    continue
                if now >= ready + head.duration + self.onset_margin:
                    out += self._finish(head, now, "no_onset")
                    continue
                break
            bound = head.started_at + head.duration
            # Voice past the duration splits says queued back to back at ``end_margin``;
            # with nothing queued behind it, late media gets the longer ``onset_margin``.
            margin = self.end_margin if len(self._queue) > 1 else self.onset_margin
            if now >= bound + margin:
                if self.voiced:
                    at = bound
                elif self.last_offset is not None and self.last_offset >= head.started_at:
                    at = self.last_offset  # the voice ended early: the audio was shorter
                else:
                    at = now
                out += self._finish(head, at, "bound")
                continue
            break
        return out
