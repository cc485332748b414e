"""Audio device failures mapped to the public error codes.

A microphone (or a media file standing in for one) fails in platform-specific ways:
built-in ``OSError`` subclasses, bare errnos, or sounddevice's ``PortAudioError`` whose
only clue is its message. :func:`classify_device_error` is the one table that turns all
of them into ``permission_denied`` / ``device_not_found`` / ``device_busy`` (CONTRACT,
"Audio source failures"), so sources and the session agree on the code.

The exceptions our sources raise are :class:`AvatarError` *and* the matching built-in
(``PermissionError``, ``FileNotFoundError``, ``OSError``): code that catches either, or
classifies by built-in type, gets the same answer.
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from typing import Final

from ..errors import AvatarError, ErrorCode

__all__ = [
    "DEVICE_CODES",
    "DeviceBusyError",
    "DeviceNotFoundError",
    "DevicePermissionError",
    "classify_device_error",
    "device_error",
]

#: The codes an audio source failure can carry.
DEVICE_CODES: Final[frozenset[ErrorCode]] = frozenset(
    {ErrorCode.DEVICE_NOT_FOUND, ErrorCode.DEVICE_BUSY, ErrorCode.PERMISSION_DENIED}
)

_NOT_FOUND_ERRNOS: Final = frozenset({errno.ENODEV, errno.ENOENT, errno.ENXIO})
_PERMISSION_ERRNOS: Final = frozenset({errno.EACCES, errno.EPERM})

# PortAudio reports everything as PortAudioError; its text is the only discriminator.
# "error querying device" is what sounddevice raises when there is no default input.
_PA_NOT_FOUND: Final = ("invalid device", "not found", "error querying device")
_PA_PERMISSION: Final = ("permission",)


def classify_device_error(exc: BaseException) -> ErrorCode | None:
    """The public code for an audio device failure, or None when ``exc`` is not one.

    - an :class:`AvatarError` that already carries a device code keeps it;
    - ``PermissionError`` (and ``OSError`` with EACCES/EPERM) → ``permission_denied``;
    - ``FileNotFoundError`` and ``OSError`` with ENODEV/ENOENT/ENXIO → ``device_not_found``;
    - any other ``OSError`` (EBUSY included) → ``device_busy``;
    - sounddevice's ``PortAudioError`` (matched by class name, so sounddevice is never
      imported here) → ``device_not_found`` when it mentions an invalid/missing device,
      ``permission_denied`` when it mentions permission, else ``device_busy``;
    - anything else → None.
    """
    if isinstance(exc, AvatarError):
        return exc.code if exc.code in DEVICE_CODES else None
    if isinstance(exc, PermissionError):
        return ErrorCode.PERMISSION_DENIED
    if isinstance(exc, FileNotFoundError):
        return ErrorCode.DEVICE_NOT_FOUND
    if isinstance(exc, OSError):
        if exc.errno in _NOT_FOUND_ERRNOS:
            return ErrorCode.DEVICE_NOT_FOUND
        if exc.errno in _PERMISSION_ERRNOS:
            return ErrorCode.PERMISSION_DENIED
        return ErrorCode.DEVICE_BUSY
    if any(cls.__name__ == "PortAudioError" for cls in type(exc).__mro__):
        text = " ".join(str(arg) for arg in exc.args[:1]).lower() or str(exc).lower()
        if any(key in text for key in _PA_PERMISSION):
            return ErrorCode.PERMISSION_DENIED
        if any(key in text for key in _PA_NOT_FOUND):
            return ErrorCode.DEVICE_NOT_FOUND
        return ErrorCode.DEVICE_BUSY
    return None


class DeviceNotFoundError(AvatarError, FileNotFoundError):
    """``device_not_found``; also a ``FileNotFoundError`` (errno ENODEV)."""

    def __init__(self, detail: str | None = None) -> None:
        super().__init__(ErrorCode.DEVICE_NOT_FOUND, detail)
        self.errno = errno.ENODEV

    def __reduce__(self) -> tuple[type[DeviceNotFoundError], tuple[str | None]]:
        return (type(self), (self.detail,))


class DeviceBusyError(AvatarError, OSError):
    """``device_busy``; also an ``OSError`` (errno EBUSY)."""

    def __init__(self, detail: str | None = None) -> None:
        super().__init__(ErrorCode.DEVICE_BUSY, detail)
        self.errno = errno.EBUSY

    def __reduce__(self) -> tuple[type[DeviceBusyError], tuple[str | None]]:
        return (type(self), (self.detail,))


class DevicePermissionError(AvatarError, PermissionError):
    """``permission_denied``; also a ``PermissionError`` (errno EACCES)."""

    def __init__(self, detail: str | None = None) -> None:
        super().__init__(ErrorCode.PERMISSION_DENIED, detail)
        self.errno = errno.EACCES

    def __reduce__(self) -> tuple[type[DevicePermissionError], tuple[str | None]]:
        return (type(self), (self.detail,))


_BY_CODE: Final[dict[ErrorCode, Callable[[str | None], AvatarError]]] = {
    ErrorCode.DEVICE_NOT_FOUND: DeviceNotFoundError,
    ErrorCode.DEVICE_BUSY: DeviceBusyError,
    ErrorCode.PERMISSION_DENIED: DevicePermissionError,
}


def device_error(code: ErrorCode, detail: str | None = None) -> AvatarError:
    """The exception our sources raise for ``code`` (one of :data:`DEVICE_CODES`)."""
    cls = _BY_CODE.get(code)
    if cls is None:
        return AvatarError(code, detail)
    return cls(detail)


def describe(exc: BaseException, limit: int = 160) -> str:
    """A short, single-line description of ``exc`` for an error's detail."""
    text = " ".join(str(exc).split())
    name = type(exc).__name__
    out = f"{name}: {text}" if text else name
    return out if len(out) <= limit else out[: limit - 3] + "..."
