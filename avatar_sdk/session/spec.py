"""SessionSpec: what one live session is built from, its arguments checked.

``AvatarSession(...)`` turns its keyword arguments into a :class:`SessionSpec` with
:meth:`SessionSpec.checked` (every refusal an ``AvatarError`` raised before anything is
built), then hands it to :func:`~.assemble.assemble`. A test that needs the parts of a
session builds a spec directly.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from ssl import SSLContext
from typing import Any

from ..clock import SYSTEM_CLOCK, Clock
from ..config import AUDIO_CODECS, DEFAULT_AUDIO_CODEC, AudioCodec, SessionConfig
from ..errors import AvatarError, ErrorCode
from ..observe import Observer
from ..redact import register_secret
from ..transport.net.tls import client_context
from ..transport.rtc.ice import TurnConfig
from ..urls import check_url

__all__ = ["SessionSpec"]


@dataclass(frozen=True, slots=True)
class SessionSpec:
    """What a live session is built from: ``AvatarSession``'s arguments, checked (the URL
    and TLS context resolved, the config a ``SessionConfig``)."""

    url: str
    token: str
    config: SessionConfig
    clock: Clock = SYSTEM_CLOCK
    genie_url: str | None = None
    partner_id: str | None = None
    thread_id: str | None = None
    audio: Any = None
    video: bool = True
    media: bool = True
    audio_codec: AudioCodec = DEFAULT_AUDIO_CODEC
    allow_insecure: bool = False
    turn: TurnConfig | None = None
    journal: str | Path | None = None
    ssl_context: SSLContext | None = None
    record: str | os.PathLike[str] | None = None
    record_content: bool = False
    observer: Observer | None = None

    @classmethod
    def checked(
        cls,
        url: str,
        token: str,
        *,
        config: SessionConfig | None,
        clock: Clock | None,
        ssl: SSLContext | None,
        ca_file: str | os.PathLike[str] | None,
        thread_id: str | None,
        audio_codec: AudioCodec,
        allow_insecure: bool,
        genie_url: str | None,
        partner_id: str | None,
        audio: Any,
        video: bool,
        media: bool,
        turn: TurnConfig | None,
        journal: str | Path | None,
        record: str | os.PathLike[str] | None,
        record_content: bool,
        observer: Observer | None,
    ) -> SessionSpec:
        """``AvatarSession``'s arguments, checked in the order its docs give.

        :raises AvatarError: ``invalid_argument`` for a bad argument, ``insecure_transport``
            for an http URL without the opt-in.
        """
        if not isinstance(token, str) or not token.strip():
            raise AvatarError(ErrorCode.INVALID_ARGUMENT, "token must be a non-empty string")
        register_secret(token)
        checked_url = check_url(url, allow_insecure=allow_insecure, what="url", kind="socket")
        tls = client_context(ssl, ca_file, allow_insecure=allow_insecure)
        if thread_id is not None and (not isinstance(thread_id, str) or not thread_id):
            raise AvatarError(ErrorCode.INVALID_ARGUMENT, "thread_id must be a non-empty string")
        if config is not None and not isinstance(config, SessionConfig):
            raise AvatarError(
                ErrorCode.INVALID_ARGUMENT,
                f"config must be a SessionConfig, not {type(config).__name__}"
                " (build one: SessionConfig(**fields))",
            )
        if audio_codec not in AUDIO_CODECS:
            raise AvatarError(
                ErrorCode.INVALID_ARGUMENT,
                f"audio_codec must be one of {', '.join(map(repr, AUDIO_CODECS))}",
            )
        return cls(
            checked_url, token, config or SessionConfig(), clock or SYSTEM_CLOCK,
            genie_url=genie_url, partner_id=partner_id, thread_id=thread_id, audio=audio,
            video=bool(video), media=bool(media), audio_codec=audio_codec,
            allow_insecure=allow_insecure, turn=turn, journal=journal, ssl_context=tls,
            record=record, record_content=record_content, observer=observer,
        )  # fmt: skip
