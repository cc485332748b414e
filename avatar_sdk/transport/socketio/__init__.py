"""socketio."""
