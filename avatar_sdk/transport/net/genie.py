"""GenieClient: the small HTTP API beside the conversation (tool acknowledgements and the
``session_completed`` signal). Every call is bounded and never raises on HTTP trouble:
it returns an outcome the caller turns into an event."""

from __future__ import annotations

import asyncio
import json
import ssl
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urljoin, urlsplit

import aiohttp

from ...logs import sdk_logger
from ...observe import HttpExchange, Observer, observers_of
from ...redact import register_secret
from .tls import connector, tls_failure

log = sdk_logger(__name__)

#: Conversation hosts whose genie host is known: the reference client pairs its default
#: conversation host with this genie host (its ``DEFAULT_CM_URL`` / ``DEFAULT_GENIE_URL``,
#: the ``nvp1`` region). Other hosts are not guessed: the token goes only where the caller
#: or its own backend says.
KNOWN_GENIE_HOSTS: Final = {
    "conversation.avatar.us.kaltura.ai": "https://genie.nvp1.ovp.kaltura.com",
}

#: The ``clientConfiguration`` field in which a backend may name its genie host (absolute,
#: or a path on the conversation host). The staging backend sends it; the SDK reads it.
ADVERTISED_FIELD: Final = "genieUrl"


def known_genie_url(url: str) -> str | None:
    """The genie host paired with conversation URL ``url``, when it is a known one."""
    try:
        host = urlsplit(url).hostname
    except ValueError:
        return None
    return KNOWN_GENIE_HOSTS.get(host or "")


def advertised_genie_url(url: str, client_configuration: Any) -> str | None:
    """The genie URL a backend named in its join answer, resolved against the conversation
    URL ``url``; None when absent or not acceptable. Accepted: the conversation host itself
    (same scheme, host and port; a path such as ``/genie`` is on it by construction) or the
    known genie host of that conversation host. The token is sent there, so a backend may
    not point it at a third host."""
    if not isinstance(client_configuration, dict):
        return None
    value = client_configuration.get(ADVERTISED_FIELD)
    if not isinstance(value, str) or not value.strip() or len(value) > 2048:
        return None
    try:
        resolved = urljoin(url.rstrip("/") + "/", value.strip())
        theirs, ours = urlsplit(resolved), urlsplit(url)
        same_origin = (theirs.scheme, theirs.hostname, theirs.port) == (
            ours.scheme,
            ours.hostname,
            ours.port,
        )
    except ValueError:
        return None
    known = known_genie_url(url)
    if same_origin or (known is not None and resolved.rstrip("/") == known):
        return resolved.rstrip("/")
    return None


SESSION_COMPLETED_PATH = "/thread/session_completed"
TOOL_RESPONSE_PATH = "/assistant/tool_response"
CONVERSE_PATH = "/assistant/converse"


@dataclass(frozen=True, slots=True)
class GenieOutcome:
    """How one request went. ``reason``: ``ok``, ``http_error``, ``network_error``,
    ``tls_failed`` (the certificate was not trusted: not worth retrying), ``timeout``."""

    ok: bool
    reason: str
    status: int | None = None


class GenieClient:
    """Authorised JSON POSTs to the genie host (``Authorization: KS <token>``)."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        http: aiohttp.ClientSession | None = None,
        ssl_context: ssl.SSLContext | None = None,
        observer: Observer | None = None,
    ) -> None:
        """``ssl_context``: how https is verified (None: the system CAs); it also applies to
        the sessions this client makes for itself later (a detached copy included).
        ``observer``: told each exchange (``avatar_sdk.observe``; never the Authorization
        header)."""
        self.observer = observers_of(observer)
        register_secret(token)
        self.base_url = base_url.rstrip("/")
        self.__token = token
        self._http = http
        self._own_http = http is None
        self._ssl = ssl_context

    def __repr__(self) -> str:
        return f"<GenieClient {self.base_url}>"

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"KS {self.__token}", "Content-Type": "application/json"}

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession(connector=connector(self._ssl))
            self._own_http = True
        return self._http

    async def post_json(self, path: str, body: Any, timeout: float) -> GenieOutcome:
        """POST ``body`` to ``path``; bounded by ``timeout`` seconds; never raises."""
        url = self.base_url + path
        outcome = await self._post(url, path, body, timeout)
        if self.observer:
            exchange = HttpExchange(
                "genie", "POST", url, outcome[0].status, _json_text(body), outcome[1],
                outcome[0].reason,
            )  # fmt: skip
            self.observer.http_exchange(exchange)
        return outcome[0]

    async def _post(
        self, url: str, path: str, body: Any, timeout: float
    ) -> tuple[GenieOutcome, str | None]:
        try:
            async with asyncio.timeout(timeout):
                async with self._session().post(url, json=body, headers=self.headers) as resp:
                    answer = (await resp.read()).decode("utf-8", "replace")
                    if 200 <= resp.status < 300:
                        return GenieOutcome(True, "ok", resp.status), answer
                    return GenieOutcome(False, "http_error", resp.status), answer
        except TimeoutError:
            return GenieOutcome(False, "timeout"), None
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            reason = tls_failure(exc)
            if reason is not None:
                log.warning("genie POST %s: TLS failed (%s)", path, reason)
                return GenieOutcome(False, "tls_failed"), None
            log.info("genie POST %s failed: %s", path, type(exc).__name__)
            return GenieOutcome(False, "network_error"), None

    async def session_completed(self, thread_id: str, timeout: float) -> GenieOutcome:
        """Tell the backend the conversation on ``thread_id`` genuinely ended."""
        return await self.post_json(SESSION_COMPLETED_PATH, {"id": thread_id}, timeout)

    async def tool_response(
        self, *, tool_name: str, call_id: str, response: Any, timeout: float
    ) -> GenieOutcome:
        """Acknowledge a tool call that waits for a response."""
        body = {
            "tool_name": tool_name,
            "tool_id": call_id,
            "tool_invocation_id": call_id,
            "response": response,
        }
        return await self.post_json(TOOL_RESPONSE_PATH, body, timeout)

    async def close(self) -> None:
        if self._own_http and self._http is not None and not self._http.closed:
            await self._http.close()
        self._http = None


def _json_text(body: Any) -> str | None:
    try:
        return json.dumps(body, default=str)
    except (TypeError, ValueError):
        return None
