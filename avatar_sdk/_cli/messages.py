"""Errors as the command line says them: one line, ``avatar-sdk: [code] sentence``, in the
command's terms (its flags, not the library's keywords). Pure string work, unit-tested."""

from __future__ import annotations

import re
from typing import Final

from ..errors import NOT_SOCKETIO, AvatarError, ErrorCode

#: The library's keyword arguments, as the flags of ``avatar-sdk talk`` that set them.
_FLAGS: Final = (
    ("allow_insecure_transport=True", "--insecure"),
    ("genie_url", "--genie-url"),
    ("ca_file", "--ca-file"),
    ("thread_id", "--thread"),
)
#: What to do about it, for failures a person can fix from the command line.
_HINTS: Final = {
    ErrorCode.AUTH_FAILED: "check the token (AVATAR_TOKEN or --token-file)",
    ErrorCode.UNREACHABLE: "check the URL and that the server is running",
    ErrorCode.TLS_FAILED: "a private CA can be trusted with --ca-file",
    ErrorCode.DEVICE_NOT_FOUND: "list them with --list-devices, pick one with --input/--output",
    ErrorCode.DEVICE_BUSY: "close the program using it, or pick another with --input/--output",
    ErrorCode.PERMISSION_DENIED: "allow this terminal (or Python) to use the microphone",
}
#: The hint of a URL that answers HTTP but is not the avatar service (a refused upgrade).
_WRONG_SERVER: Final = "check the URL: it must be the avatar service's address, not a web page's"


def _flags(text: str) -> str:
    for keyword, flag in _FLAGS:
        text = text.replace(keyword, flag)
    return text


def insecure_line(error: AvatarError) -> str:
    """``insecure_transport``: what was refused, and the flag that allows it."""
    detail = error.detail or ""
    match = re.match(r"([\w.]+) uses (\w+)://", detail)
    if match is not None:
        what, scheme = match.groups()
        what = what.rpartition(".")[2]  # SessionSpec.url: the fleet's --url
        subject = "URL" if what == "url" else _flags(what)
        refused = f"{subject} uses {scheme}://, which sends the token unencrypted"
    else:
        refused = _flags(re.sub(r";?\s*pass allow_insecure_transport=True.*$", "", detail))
        refused = refused.strip() or "an insecure connection or a private host"
    return (
        f"[{error.code}] refused: {refused}; pass --insecure to allow http/ws and private"
        " hosts (a local backend such as `avatar-sdk staging serve`)"
    )


def error_line(error: AvatarError, *, attempts: int = 1) -> str:
    """The one line (without the ``avatar-sdk:`` prefix) that tells ``error``."""
    if error.code is ErrorCode.INSECURE_TRANSPORT:
        return insecure_line(error)
    line = _flags(str(error))
    hint = _HINTS.get(error.code)
    if error.code is ErrorCode.BAD_REQUEST and NOT_SOCKETIO in (error.detail or ""):
        hint = _WRONG_SERVER
    tried = f" after {attempts} attempts" if attempts > 1 else ""
    if hint is not None or tried:
        line = f"{line}{tried}" + (f"; {hint}" if hint else "")
    return line
