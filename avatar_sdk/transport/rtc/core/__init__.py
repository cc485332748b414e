"""The pure rules of the media path (no I/O, time passed in): the voice's adaptive receive
buffer (``voice_buffer``: playout delay from observed jitter, reorder, concealment)."""
