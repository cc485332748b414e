"""Suite-wide settings: thread leases live in a private directory for this test run, so
concurrent runs on one machine never see each other's conversations."""

from __future__ import annotations

import os
import tempfile

# Strict state machine: firing an undeclared transition raises instead of logging (a bug).
os.environ.setdefault("AVATAR_SDK_STRICT_MACHINE", "1")
os.environ.setdefault("AVATAR_SDK_LEASE_DIR", tempfile.mkdtemp(prefix="avatar-sdk-test-leases-"))
