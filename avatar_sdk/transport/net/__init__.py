"""Host networking: the host network watcher (``netwatch``), the private-host guard of
server-given media URLs (``hostguard``), TLS for every connection (``tls``), the genie HTTP
client (``genie``: tool acknowledgements, ``session_completed``) and what a refused websocket
upgrade says (``upgrade``: a URL that is some other HTTP server)."""
