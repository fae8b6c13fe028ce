"""What the Python tests share (imported by spawned children too: pytest
puts this folder on sys.path, and spawn passes sys.path on)."""

import os
import time


def until(cond, seconds=10.0):
    """Polls `cond` (as a scheduler loop would) until true or `seconds` pass."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.0002)
    return False


def secret_file(tmp_path):
    """A fresh deployment secret, mode 0600, as kvroom requires."""
    secret = tmp_path / "secret"
    secret.write_bytes(os.urandom(32).hex().encode())
    secret.chmod(0o600)
    return str(secret)
