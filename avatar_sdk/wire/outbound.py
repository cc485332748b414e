"""Builders for client → server payloads (PROTOCOL §2.1).

Each builder returns a fresh plain ``dict`` ready for ``emit``. Keys the reference
client leaves ``undefined`` (which vanish in JSON) are omitted when ``None``; keys it
sends as an explicit ``null`` stay ``None`` so the server sees the same shape.
"""

from __future__ import annotations

import random
import secrets
import string
from typing import Any, Final

__all__ = [
    "DEFAULT_USER_AGENT",
    "build_approved_permissions",
    "build_asr_ice_candidate",
    "build_asr_init",
    "build_asr_offer",
    "build_barge_in_marker",
    "build_check_availability",
    "build_empty",
    "build_join",
    "build_stv_new_session",
    "build_text_entered",
    "new_room_id",
    "new_sticky_id",
]

DEFAULT_USER_AGENT: Final = "avatar-sdk-python"

_ID_ALPHABET: Final = string.ascii_lowercase + string.digits


def build_join(
    *,
    room_id: str,
    token: str,
    thread_id: str | None = None,
    entry_id: str | None = None,
    user_agent: str = DEFAULT_USER_AGENT,
) -> dict[str, Any]:
    """Payload of ``join``.

    The server binds the room from ``channel`` and reads ``kaltura.{ks,entryId,threadId}``.
    Raises ``ValueError`` for an empty token: without ``ks`` the server accepts the socket
    but never answers ``join``, which would otherwise surface as a 20 s timeout.
    """
    if not token:
        raise ValueError("join requires a non-empty token (kaltura.ks)")
    kaltura: dict[str, Any] = {}
    if thread_id is not None:
        kaltura["threadId"] = thread_id
    kaltura["force_experience"] = "avatar_only"
    kaltura["capabilities"] = {"avatar": "on", "generate_followup_questions": "on"}
    kaltura["ks"] = token
    if entry_id is not None:
        kaltura["entryId"] = entry_id
    return {
        "room": room_id,
        "channel": room_id,
        "kaltura": kaltura,
        "userAgent": user_agent,
        "userAgentHints": None,
        "isMobile": False,
        "channel_password": None,
        "peer_name": "unknown",
        "peer_video": False,
        "peer_audio": True,
    }


def build_stv_new_session(room_id: str) -> dict[str, Any]:
    """Payload of ``stvNewSession``; never ``cast_mode`` (webrtc cast leaks a private IP)."""
    return {"room_id": room_id}


def build_check_availability() -> dict[str, Any]:
    """Payload of ``checkAvailability``."""
    return {}


def build_asr_init(session_id: str) -> dict[str, Any]:
    """Payload of ``asr-webrtc-init``."""
    return {"sessionId": session_id}


def build_asr_offer(sdp: str, *, is_reconnect: bool) -> dict[str, Any]:
    """Payload of ``asr-webrtc-offer``; ``is_reconnect`` marks an ICE restart on the same peer."""
    return {"offer": {"type": "offer", "sdp": sdp}, "is_reconnect": is_reconnect}


def build_asr_ice_candidate(
    candidate: str,
    sdp_mid: str | None,
    sdp_mline_index: int | None,
    username_fragment: str | None = None,
) -> dict[str, Any]:
    """Payload of ``asr-webrtc-ice-candidate``, shaped like ``RTCIceCandidate.toJSON()``.

    ``sdpMid``/``sdpMLineIndex`` are always present (``null`` when unknown) as in the
    browser; ``usernameFragment`` is omitted when ``None``.
    """
    inner: dict[str, Any] = {
        "candidate": candidate,
        "sdpMid": sdp_mid,
        "sdpMLineIndex": sdp_mline_index,
    }
    if username_fragment is not None:
        inner["usernameFragment"] = username_fragment
    return {"candidate": inner}


def build_approved_permissions(room_id: str) -> dict[str, Any]:
    """Payload of ``approvedPermissions``: this is what starts the spoken greeting."""
    return {"room": room_id}


def build_text_entered(
    text: str, *, is_final: bool = True, is_speech_start: bool | None = None
) -> dict[str, Any]:
    """Payload of ``onTextEntered``/``debug_text_entered``; ``isSpeechStart`` only when given."""
    payload: dict[str, Any] = {"text": text, "isFinal": is_final}
    if is_speech_start is not None:
        payload["isSpeechStart"] = is_speech_start
    return payload


def build_barge_in_marker() -> dict[str, Any]:
    """The ``onTextEntered`` marker that interrupts a speaking avatar (no-op when idle)."""
    return build_text_entered("", is_final=False, is_speech_start=True)


def build_empty() -> dict[str, Any]:
    """Payload of mute/unmute, pause/resume and tap-to-talk start/end."""
    return {}


def _rand_id(length: int, rng: random.Random | None) -> str:
    if rng is None:
        return "".join(secrets.choice(_ID_ALPHABET) for _ in range(length))
    return "".join(rng.choice(_ID_ALPHABET) for _ in range(length))


def new_room_id(rng: random.Random | None = None) -> str:
    """Fresh 12-char ``[a-z0-9]`` room id; a seeded ``rng`` makes it reproducible."""
    return _rand_id(12, rng)


def new_sticky_id(rng: random.Random | None = None) -> str:
    """Fresh 16-char ``[a-z0-9]`` sticky-session id; a seeded ``rng`` makes it reproducible."""
    return _rand_id(16, rng)
