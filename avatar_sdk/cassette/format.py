"""The cassette file format (pure: no I/O beyond reading a file, no asyncio).

A cassette is JSON Lines. Line 1 is the header::

    {"kind": "cassette", "version": 1, "sdk": "0.1.0", "started_at": "...Z",
     "record_content": false, "session": {"media": true, "video": true, "host": "...",
     "thread_id": null, "config": {...non-secret SessionConfig fields...}}}

Every later line is one record with ``t`` (seconds since the session was created, on the
session's clock) and ``kind``:

=============== =================================================================
``open``        ``link``, ``sid``, ``recovered``: a control socket opened
``refused``     ``link``, ``code``: opening it failed (an ``ErrorCode``)
``out``         ``link``, ``name``, ``payload``: an event the session sent
``in``          ``link``, ``name``, ``args``: an event the server sent
``drop``        ``link``, ``reason``: the socket closed (Socket.IO's reason)
``http``        ``service`` (whep|genie), ``method``, ``url``, ``status``, ``request``,
                ``response``, ``outcome``
``media``       ``lane`` (asr|stv), ``state``: a peer's connection state changed
``media_sample`` ``counts``: per-second media totals (frames in per kind, frames out)
``call``        ``name``, ``args``: the application called the session (speak...)
``end``         ``records``: the cassette was closed (absent: the process died first)
=============== =================================================================

A cassette holds no token or registered secret (every string is scrubbed), and with
``record_content=False`` no user text (each is replaced by a stable placeholder).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from ..config import SessionConfig
from ..errors import AvatarError, ErrorCode

FORMAT_VERSION: Final = 1
HEADER_KIND: Final = "cassette"
RECORD_KINDS: Final = frozenset(
    {"open", "refused", "out", "in", "drop", "http", "media", "media_sample", "call", "end"}
)
#: A line longer than this is not a cassette line (bad input is refused, not parsed).
MAX_LINE: Final = 8 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Record:
    """One cassette line after the header."""

    index: int  # 0-based position among the records
    t: float
    kind: str
    data: dict[str, Any]

    @property
    def link(self) -> int:
        value = self.data.get("link", 0)
        return value if isinstance(value, int) else 0

    @property
    def name(self) -> str:
        value = self.data.get("name", "")
        return value if isinstance(value, str) else ""

    def describe(self) -> str:
        """A short human description (for a divergence report)."""
        if self.kind in ("out", "in"):
            arrow = "->" if self.kind == "out" else "<-"
            return f"{arrow} {self.name}{_text_hint(self.data.get('payload'))}"
        if self.kind == "drop":
            return f"socket closed ({self.data.get('reason')})"
        if self.kind == "open":
            how = "recovered" if self.data.get("recovered") else "new"
            return f"socket opened ({how}, link {self.link})"
        if self.kind == "call":
            return f"app called {self.name}()"
        if self.kind == "refused":
            return f"a connection refused ({self.data.get('code')})"
        return self.kind


def _text_hint(payload: Any) -> str:
    if isinstance(payload, dict) and isinstance(payload.get("text"), str):
        text = payload["text"]
        return f" text={text[:40]!r}"
    return ""


@dataclass(frozen=True)
class Cassette:
    """A loaded cassette: its header and records. ``complete``: it has its ``end`` record
    (False: the recording process died or the file was cut; the readable prefix is here,
    ``truncated_line`` says where a partial last line was left out)."""

    header: dict[str, Any]
    records: list[Record]
    complete: bool
    truncated_line: int | None = None
    source: str = "<memory>"

    @property
    def session(self) -> dict[str, Any]:
        value = self.header.get("session", {})
        return value if isinstance(value, dict) else {}

    @property
    def media(self) -> bool:
        return bool(self.session.get("media", False))

    @property
    def video(self) -> bool:
        return bool(self.session.get("video", True))

    def config(self) -> SessionConfig:
        """The recorded SessionConfig (the fields recorded; the rest at their defaults)."""
        return config_from_dict(self.session.get("config", {}))

    def of_kind(self, *kinds: str) -> list[Record]:
        return [r for r in self.records if r.kind in kinds]


def bad_cassette(source: str, detail: str) -> AvatarError:
    return AvatarError(ErrorCode.INVALID_ARGUMENT, f"{source}: not a readable cassette: {detail}")


def parse_lines(lines: Iterable[str], source: str = "<memory>") -> Cassette:
    """Parse cassette text. A partial (undecodable) LAST line is dropped and reported in
    ``truncated_line``; any other bad line, a missing or unknown header, or a newer format
    version raises ``AvatarError`` (``invalid_argument``) naming the line."""
    raw = list(lines)
    if not raw or not raw[0].strip():
        raise bad_cassette(source, "empty file (no header line)")
    header = _decode(raw[0], 1, source)
    if header.get("kind") != HEADER_KIND:
        raise bad_cassette(source, "line 1 is not a cassette header")
    version = header.get("version")
    if not isinstance(version, int) or version < 1 or version > FORMAT_VERSION:
        raise bad_cassette(
            source, f"format version {version!r} (this SDK reads 1 to {FORMAT_VERSION})"
        )
    records: list[Record] = []
    truncated: int | None = None
    complete = False
    body = raw[1:]
    for offset, line in enumerate(body):
        number = offset + 2
        if not line.strip():
            continue
        try:
            entry = _decode(line, number, source)
        except AvatarError:
            if offset == len(body) - 1 and not line.endswith("\n"):
                truncated = number  # the process died mid-line: keep the readable prefix
                break
            raise
        kind = entry.get("kind")
        t = entry.get("t")
        if kind not in RECORD_KINDS or not isinstance(t, int | float) or isinstance(t, bool):
            raise bad_cassette(source, f"line {number} is not a cassette record")
        if kind == "end":
            complete = True
            continue
        data = {k: v for k, v in entry.items() if k not in ("kind", "t")}
        records.append(Record(len(records), float(t), str(kind), data))
    return Cassette(header, records, complete, truncated, source)


def _decode(line: str, number: int, source: str) -> dict[str, Any]:
    if len(line) > MAX_LINE:
        raise bad_cassette(source, f"line {number} is longer than {MAX_LINE} characters")
    try:
        value = json.loads(line)
    except ValueError:
        raise bad_cassette(source, f"line {number} is not JSON (cut short?)") from None
    if not isinstance(value, dict):
        raise bad_cassette(source, f"line {number} is not a JSON object")
    return value


def load(path: str | Path) -> Cassette:
    """Read a cassette file (see :func:`parse_lines`); an unreadable file raises
    ``AvatarError`` (``invalid_argument``), never ``OSError``."""
    source = str(path)
    try:
        with Path(path).open(encoding="utf-8", newline="") as file:
            lines = file.readlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise bad_cassette(source, f"cannot read it ({type(exc).__name__})") from None
    return parse_lines(lines, source)


# -- the session's configuration in the header ----------------------------------------------
#: SessionConfig fields recorded (numbers, flags and the nested retry policy; nothing else
#: in a SessionConfig is a secret, but only plain values are worth carrying).
def config_to_dict(config: SessionConfig) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            out[f.name] = {k: v for k, v in dataclasses.asdict(value).items() if _plain(v)}
        elif isinstance(value, tuple) and all(_plain(v) for v in value):
            out[f.name] = list(value)
        elif _plain(value):
            out[f.name] = value
    return out


def _plain(value: Any) -> bool:
    return value is None or isinstance(value, bool | int | float | str)


def config_from_dict(data: Any) -> SessionConfig:
    """A SessionConfig from a header's ``config`` (unknown or invalid fields are left at
    their defaults: a cassette from another SDK version still replays)."""
    config = SessionConfig()
    if not isinstance(data, dict):
        return config
    known = {f.name: f for f in dataclasses.fields(SessionConfig)}
    for name, value in data.items():
        if name not in known:
            continue
        current = getattr(config, name)
        try:
            if dataclasses.is_dataclass(current) and isinstance(value, dict):
                nested = {k: v for k, v in value.items() if hasattr(current, k)}
                config = config.with_(**{name: dataclasses.replace(current, **nested)})  # type: ignore[type-var]
            elif isinstance(current, tuple) and isinstance(value, list):
                config = config.with_(**{name: tuple(value)})
            else:
                config = config.with_(**{name: value})
        except (AvatarError, TypeError, ValueError):
            continue
    return config


@dataclass
class ContentRedactor:
    """Replaces each user text (and the prefix a speechId carries of it) by a stable
    placeholder, ``user-text-1``, ``user-text-2``... in every string it scrubs."""

    placeholders: dict[str, str] = field(default_factory=dict)

    def register(self, text: str) -> str:
        text = text.strip()
        if not text:
            return text
        if text not in self.placeholders:
            self.placeholders[text] = f"user-text-{len(self.placeholders) + 1}"
        return self.placeholders[text]

    def apply(self, value: Any) -> Any:
        if not self.placeholders:
            return value
        if isinstance(value, str):
            for text, placeholder in sorted(
                self.placeholders.items(), key=lambda kv: len(kv[0]), reverse=True
            ):
                if text in value:
                    value = value.replace(text, placeholder)
                elif len(text) > 60 and text[:60] in value:  # a speechId keeps 60 chars
                    value = value.replace(text[:60], placeholder)
            return value
        if isinstance(value, dict):
            return {k: self.apply(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.apply(v) for v in value]
        return value


__all__ = [
    "FORMAT_VERSION",
    "Cassette",
    "ContentRedactor",
    "Record",
    "config_from_dict",
    "config_to_dict",
    "load",
    "parse_lines",
]
