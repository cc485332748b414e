"""Channels, by kind: ``socketio/`` (the control channel and connection-state recovery),
``rtc/`` (the ASR uplink, the STV downlink over WHEP, their lanes and the aiortc patches),
``liveness/`` (pure liveness rules) and ``net/`` (host network watch, host guard, TLS, the
genie HTTP client).
"""
