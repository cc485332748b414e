"""Opening a media file for a source: the checks and error mapping every file source shares.

One place, so ``file_source`` and ``OpusFileSource`` refuse the same files with the same
codes (CONTRACT: audio source failures; ``invalid_argument`` for what is not playable).
"""

from __future__ import annotations

import os
from typing import Final
from urllib.parse import urlsplit

import av
import av.error

from ..errors import AvatarError, ErrorCode
from .devices import classify_device_error, describe, device_error

__all__ = ["OGG_SUFFIXES", "check_local_file", "display", "is_ogg_name", "open_error"]

#: File names that usually hold Ogg (Opus, Vorbis, FLAC): worth probing for Opus.
OGG_SUFFIXES: Final = (".opus", ".ogg", ".oga")


def display(path_or_url: str) -> str:
    """The source as it may appear in an error: no query string or credentials."""
    parts = urlsplit(path_or_url)
    if parts.scheme and parts.netloc:
        return f"{parts.scheme}://{parts.hostname or ''}{parts.path}"
    return path_or_url


def check_local_file(target: str, shown: str) -> None:
    """Refuse a missing path (``device_not_found``) or a directory (``invalid_argument``)."""
    if not os.path.exists(target):
        raise device_error(ErrorCode.DEVICE_NOT_FOUND, f"no such file: {shown}")
    if os.path.isdir(target):
        raise AvatarError(ErrorCode.INVALID_ARGUMENT, f"{shown} is a directory")


def is_ogg_name(target: str) -> bool:
    return target.lower().endswith(OGG_SUFFIXES)


def open_error(exc: BaseException, shown: str) -> AvatarError:
    """The classified error of a file FFmpeg could not open or read."""
    if isinstance(exc, av.error.HTTPUnauthorizedError | av.error.HTTPForbiddenError):
        return device_error(ErrorCode.PERMISSION_DENIED, f"{shown}: {describe(exc)}")
    if isinstance(exc, av.error.HTTPNotFoundError):
        return device_error(ErrorCode.DEVICE_NOT_FOUND, f"{shown}: {describe(exc)}")
    code = classify_device_error(exc)
    if code is not None:
        return device_error(code, f"{shown}: {describe(exc)}")
    if isinstance(exc, ValueError):  # av.error.InvalidDataError and friends
        return AvatarError(ErrorCode.INVALID_ARGUMENT, f"{shown}: not a playable media file")
    return device_error(ErrorCode.DEVICE_NOT_FOUND, f"{shown}: {describe(exc)}")
