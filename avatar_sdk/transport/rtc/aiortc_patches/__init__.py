"""aiortc_patches."""
