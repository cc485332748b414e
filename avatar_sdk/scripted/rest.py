"""The avatar-session REST calls over aiohttp: one POST and its classified failure, and the
retry policy of the idempotent calls (``keep-alive``, ``interrupt``; a ``say`` is never
retried). What the bodies and answers mean is :mod:`.protocol`'s (pure)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential

from ..errors import AvatarError, ErrorCode
from ..transport.net.tls import tls_error, unreachable_error
from .core.protocol import classify_http_error

__all__ = ["idempotent_retrying", "post_json", "transient"]


def transient(exc: BaseException) -> bool:
    """A retry may help: the network, a timeout, a 5xx (never a 4xx, never session_gone)."""
    if isinstance(exc, AvatarError):
        return exc.code in (
            ErrorCode.SERVER_ERROR, ErrorCode.TRANSPORT_CLOSED, ErrorCode.CONNECT_TIMEOUT,
            ErrorCode.UNREACHABLE,
        )  # fmt: skip
    return False


def idempotent_retrying(sleep: Callable[[float], Awaitable[None]]) -> AsyncRetrying:
    """Three tries of an idempotent call on :func:`transient` failures, on the session's
    clock (``sleep``)."""
    return AsyncRetrying(
        stop=stop_after_attempt(3),
        wait=wait_exponential(multiplier=0.2, max=2.0),
        retry=retry_if_exception(transient),
        sleep=sleep,
        reraise=True,
    )


async def post_json(
    http: aiohttp.ClientSession,
    url: str,
    what: str,
    *,
    bearer: str,
    json: dict[str, Any] | None,
    form: aiohttp.FormData | None,
    timeout: float,
) -> Any:
    """One POST of ``json`` (or ``form``); its JSON answer (None when it is not JSON), or the
    classified ``AvatarError``: the answer's status, a timeout, a TLS or network failure."""
    headers = {"Authorization": f"Bearer {bearer}", "Accept": "application/json"}
    try:
        async with asyncio.timeout(timeout):
            async with http.post(
                url,
                json=json if form is None else None,
                data=form,
                headers=headers,
                allow_redirects=False,
            ) as resp:
                status = resp.status
                try:
                    body = await resp.json(content_type=None)
                except ValueError:
                    body = None
    except TimeoutError:
        raise AvatarError(ErrorCode.CONNECT_TIMEOUT, f"{what} unanswered") from None
    except (aiohttp.ClientError, OSError) as exc:
        raise (
            tls_error(exc, what)
            or unreachable_error(exc, what)
            or AvatarError(ErrorCode.TRANSPORT_CLOSED, f"{what}: {type(exc).__name__}")
        ) from None
    if not 200 <= status < 300:
        raise classify_http_error(status, body, what)
    return body
