"""WebRTC: the ASR uplink (``asr``), the STV downlink over WHEP (``stv``), the two lanes of one
server session and their recovery in place (``media``: renegotiation, WHEP re-subscribe), ICE
plumbing (``ice``) and the uplink's ICE consent check (``consent``). ``core/`` holds the pure
rule of the voice's receive buffer (the jitter handling); ``aiortc_patches/`` every piece that
reaches into aiortc's private internals."""
