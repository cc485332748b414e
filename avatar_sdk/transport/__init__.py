"""Channels: the Socket.IO control channel (``control`` over ``csr``), the ASR uplink (``asr``),
the STV downlink over WHEP (``stv``), the media lanes of one link (``media``), the genie HTTP
client (``genie``), and what they share (ICE, TLS, the host guard, the uplink's report
cadence and ICE consent).
"""
