"""OpenTelemetry traces and metrics for avatar sessions (the ``otel`` extra).

``pip install 'avatar-sdk[otel]'`` brings ``opentelemetry-api`` only: the application
brings the SDK and an exporter, and sets its providers. Then, explicitly, per session::

    from avatar_sdk.telemetry import Telemetry
    session = AvatarSession(url, token, telemetry=Telemetry())

or ``avatar_sdk.telemetry.instrument(session)``. Nothing is imported from OpenTelemetry
until one of these is used, and with no provider set nothing is attached. Every name the
telemetry writes: :mod:`avatar_sdk.telemetry.names`; the guide: ``docs/observability.md``.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any

from .._lazy import lazy_exports
from ..errors import AvatarError, ErrorCode

if TYPE_CHECKING:
    from .otel import Telemetry

__all__ = ["Telemetry", "available", "instrument"]

_EXPORTS = {"Telemetry": ".otel"}
_lazy_getattr, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

#: Where to get the API from, in every message that says it is missing.
INSTALL_HINT = "pip install 'avatar-sdk[otel]'"


def available() -> bool:
    """Whether the OpenTelemetry API can be imported (found, not imported)."""
    try:
        return importlib.util.find_spec("opentelemetry") is not None
    except (ImportError, ValueError):
        return False


def __getattr__(name: str) -> Any:
    if name in _EXPORTS and not available():
        raise AvatarError(
            ErrorCode.INVALID_ARGUMENT, f"telemetry needs the OpenTelemetry API: {INSTALL_HINT}"
        )
    return _lazy_getattr(name)


_default: Telemetry | None = None


def instrument(
    session: Any,
    *,
    tracer_provider: Any = None,
    meter_provider: Any = None,
    capture_content: bool = False,
) -> bool:
    """Instrument ``session`` with OpenTelemetry; True if it was. False, and nothing
    imported, when the API is not installed; False when no provider is configured (the
    global ones, or those given). The keywords are :class:`Telemetry`'s."""
    global _default  # noqa: PLW0603 - one shared instrumentation for the global providers
    if not available():
        return False
    from .otel import Telemetry  # noqa: PLC0415

    if tracer_provider is None and meter_provider is None and not capture_content:
        if _default is None:
            _default = Telemetry()
        telemetry = _default
    else:
        telemetry = Telemetry(
            tracer_provider=tracer_provider,
            meter_provider=meter_provider,
            capture_content=capture_content,
        )
    if telemetry.instruments() is None:
        if telemetry is _default:
            _default = None  # resolved again next time: the app may set its providers later
        return False
    telemetry.attach(session)
    return True
