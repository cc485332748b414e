"""liveness."""
