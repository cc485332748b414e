"""WebRTC: the ASR uplink (``asr``), the STV downlink over WHEP (``stv``), the two lanes of one
server session and their recovery in place (``media``: renegotiation, WHEP re-subscribe), ICE
plumbing (``ice``), the uplink's ICE consent check (``consent``) and the avatar's frames on one
presentation timeline (``presentation``). ``core/`` holds the pure rules of the voice's receive
buffer (the jitter handling) and of the A/V timeline; ``aiortc_patches/`` every piece that
reaches into aiortc's private internals."""
