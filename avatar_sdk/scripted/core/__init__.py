"""The scripted avatar session's pure parts: its REST protocol (``protocol``), its declared
states and moves (``states``) and its configuration (``config``)."""
