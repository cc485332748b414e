"""TLS for every connection of a session: one client context, one classification.

A session passes the same ``ssl.SSLContext`` (or the system default) to the Socket.IO
connection, the WHEP requests and the genie API, so trusting a private CA is one argument
(``ssl=`` or ``ca_file=``). A certificate or handshake failure is reported as
``tls_failed`` wherever it happens, never as a lost connection (issue 12, defect 6): the
first is a configuration fault a retry cannot fix, the second is not.
"""

from __future__ import annotations

import os
import socket
import ssl
from pathlib import Path

import aiohttp
from aiohttp.abc import AbstractResolver

from ...errors import AvatarError, ErrorCode


def client_context(
    context: object = None, ca_file: str | os.PathLike[str] | None = None, *, allow_insecure: bool
) -> ssl.SSLContext | None:
    """The context every connection of a session uses (None: the system defaults).

    ``context``: an ``ssl.SSLContext`` used as given. ``ca_file``: a PEM file of CA
    certificates trusted *in addition to* the system's (a private CA). Both at once is an
    error (add the CA to your context). A context that does not verify certificates or host
    names is refused unless ``allow_insecure`` (``allow_insecure_transport=True``): it would
    hand the token to whoever answers.
    """
    if context is not None and ca_file is not None:
        raise AvatarError(
            ErrorCode.INVALID_ARGUMENT,
            "pass ssl= or ca_file=, not both (load the CA into your context instead)",
        )
    if ca_file is not None:
        if not isinstance(ca_file, str | os.PathLike):
            raise AvatarError(ErrorCode.INVALID_ARGUMENT, "ca_file must be a path")
        ctx = ssl.create_default_context()
        try:
            ctx.load_verify_locations(cafile=os.fspath(ca_file))
        except (OSError, ssl.SSLError) as exc:
            raise AvatarError(
                ErrorCode.INVALID_ARGUMENT,
                f"ca_file {Path(ca_file).name!r} could not be loaded ({type(exc).__name__})",
            ) from None
        return ctx
    if context is None:
        return None
    if not isinstance(context, ssl.SSLContext):
        raise AvatarError(
            ErrorCode.INVALID_ARGUMENT,
            f"ssl must be an ssl.SSLContext (got {type(context).__name__})",
        )
    if (context.verify_mode == ssl.CERT_NONE or not context.check_hostname) and not allow_insecure:
        raise AvatarError(
            ErrorCode.INSECURE_TRANSPORT,
            "the ssl context does not verify the server's certificate and host name;"
            " pass allow_insecure_transport=True to use it anyway",
        )
    return context


def connector(
    context: ssl.SSLContext | None,
    *,
    resolver: AbstractResolver | None = None,
    use_dns_cache: bool = True,
) -> aiohttp.TCPConnector:
    """A TCP connector that verifies TLS with ``context`` (None: the system defaults)."""
    return aiohttp.TCPConnector(
        ssl=context if context is not None else True,
        resolver=resolver,
        use_dns_cache=use_dns_cache,
    )


def tls_failure(exc: BaseException) -> str | None:
    """A short reason when ``exc`` (or what it wraps, however deep) is a TLS failure:
    ``"to host:port: <what OpenSSL said>"`` (or just the latter when no host is known).

    Library wrappers hide it: engineio raises ``ConnectionError('Connection error')`` in
    the ``except`` of aiohttp's ``ClientConnectorCertificateError``, and socketio re-raises
    that ``from None``; the original still hangs on ``__context__``. The reason comes from
    OpenSSL (it names the certificate problem and the host, never a request's content).
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, aiohttp.ClientConnectorCertificateError):
            return _describe(current.certificate_error, current.host, current.port)
        if isinstance(current, aiohttp.ClientSSLError):
            if isinstance(current.os_error, _TRANSIENT):
                return None
            return _describe(current.os_error, current.host, current.port)
        if isinstance(current, _TRANSIENT):
            return None
        if isinstance(current, ssl.SSLError):
            return _describe(current, None, None)
        current = current.__cause__ or current.__context__
    return None


#: TLS-layer errors a flaky network causes (a connection cut mid-handshake): these stay
#: connection losses, which a retry may fix; only verification and protocol refusals are not.
_TRANSIENT = (ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLSyscallError, ssl.SSLWantReadError)


def _describe(error: BaseException, host: str | None, port: int | None) -> str:
    if isinstance(error, ssl.SSLCertVerificationError):
        reason = error.verify_message or "certificate verify failed"
    elif isinstance(error, ssl.SSLError):
        reason = error.reason or type(error).__name__
        reason = f"TLS handshake failed: {str(reason).lower().replace('_', ' ')}"
    else:
        reason = str(error) or type(error).__name__
    where = f"to {host}:{port}: " if host is not None else ""
    return f"{where}{reason.rstrip('.')}"[:200]


def tls_error(exc: BaseException, what: str) -> AvatarError | None:
    """``AvatarError(TLS_FAILED)`` for ``exc`` if it is a TLS failure of ``what``."""
    reason = tls_failure(exc)
    if reason is None:
        return None
    joint = " " if reason.startswith("to ") else ": "
    return AvatarError(ErrorCode.TLS_FAILED, f"{what}{joint}{reason}")


def unreachable_error(exc: BaseException, what: str) -> AvatarError | None:
    """``AvatarError(UNREACHABLE)`` when ``exc`` (or what it wraps) says the connection never
    opened: the host name did not resolve, or nothing accepted the connection. It names the
    host and port, and never says "lost" for a connection that never existed."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, aiohttp.ClientConnectorDNSError):
            return AvatarError(ErrorCode.UNREACHABLE, f"{what}: host not found: {current.host}")
        if isinstance(current, aiohttp.ClientConnectorError):
            where = f"{current.host}:{current.port}"
            os_error = current.os_error
            if isinstance(os_error, socket.gaierror):
                return AvatarError(ErrorCode.UNREACHABLE, f"{what}: host not found: {current.host}")
            if isinstance(os_error, ConnectionRefusedError):
                return AvatarError(
                    ErrorCode.UNREACHABLE, f"{what}: connection refused by {where} (not listening?)"
                )
            return AvatarError(
                ErrorCode.UNREACHABLE,
                f"{what}: cannot connect to {where} ({type(os_error).__name__})",
            )
        current = current.__cause__ or current.__context__
    return None
