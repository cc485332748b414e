"""Where a session's genie calls go (``session_completed``, tool acknowledgements).

In order: the ``genie_url`` the caller gave; the genie host paired with a known conversation
host (:data:`~avatar_sdk.transport.net.genie.KNOWN_GENIE_HOSTS`); the genie URL the backend
names in its join answer (``clientConfiguration.genieUrl``, accepted only on the
conversation host itself or its known genie host, since the token is sent there). Without
any of them the session cannot complete its thread: it says so once, at its first
connect, at INFO, naming the option (issue 18: a quick start that promised
``session_completed`` on close and silently sent none).
"""

from __future__ import annotations

import ssl
from typing import Any

from ..errors import AvatarError
from ..logs import sdk_logger
from ..observe import Observer
from ..transport.net.genie import GenieClient, advertised_genie_url, known_genie_url
from ..urls import check_url

log = sdk_logger(__name__)

NO_GENIE = (
    "no genie host for %s: session_completed and tool acknowledgements are not sent "
    "(pass AvatarSession(genie_url=...); avatar-sdk talk: --genie-url)"
)


class GenieHost:
    """The genie client of one session, once its host is known."""

    def __init__(
        self,
        url: str,
        genie_url: str | None,
        *,
        token: str,
        ssl_context: ssl.SSLContext | None,
        allow_insecure: bool,
        observer: Observer | None = None,
    ) -> None:
        """``url``: the checked conversation URL. ``genie_url``: the caller's (checked
        here; ``invalid_argument`` / ``insecure_transport`` as for ``url``)."""
        self._url = url
        self._allow_insecure = allow_insecure
        self.__token = token
        self._ssl = ssl_context
        self._observer = observer
        given = genie_url and check_url(genie_url, allow_insecure=allow_insecure, what="genie_url")
        base = given or known_genie_url(url)
        self.client: GenieClient | None = self._client(base) if base else None

    def _client(self, base: str) -> GenieClient:
        return GenieClient(base, self.__token, ssl_context=self._ssl, observer=self._observer)

    def after_join(self, client_configuration: Any) -> GenieClient | None:
        """After the first join (``connect()``; a cold reconnect's join does not ask again):
        the client for the genie host the backend named, when none was known (None:
        nothing new; the one INFO line when there is still no host)."""
        if self.client is not None:
            return None
        found = advertised_genie_url(self._url, client_configuration)
        if found is not None:
            try:
                found = check_url(found, allow_insecure=self._allow_insecure, what="genie_url")
            except AvatarError as error:  # named, but not a URL this session may use
                log.debug("advertised genie URL refused: %s", error.code)
                found = None
        if found is None:
            log.info(NO_GENIE, self._url)
            return None
        self.client = self._client(found)
        return self.client
