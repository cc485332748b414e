"""Host networking: the host network watcher (``netwatch``), the private-host guard of
server-given media URLs (``hostguard``), TLS for every connection (``tls``) and the genie HTTP
client (``genie``: tool acknowledgements, ``session_completed``)."""
