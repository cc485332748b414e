"""The pure rules of the media path (no I/O, time passed in): the voice's adaptive receive
buffer (``voice_buffer``: playout delay from observed jitter, reorder, concealment) and the
avatar's A/V timeline (``av_sync``: RTP timestamps onto the sender's clock by its RTCP
sender reports, presentation times, the video's hold to its voice)."""
