"""Identities derived from text with SHA-256: the same text gives the same UUID on every run and every host.

GPU UUIDs (device.py) and MIG UUIDs (mig.py) share this; fg_uuid_text in native/common/fg_sha256.c is the C
twin of uuid_text.
"""

from __future__ import annotations

# CPython's built-in SHA-256 gives hashlib's digest without loading OpenSSL's libcrypto, which costs several
# milliseconds in every process that resolves devices, the container runtime at each start among them.
try:
    from _sha2 import sha256 as _sha256  # Python 3.12+
except ImportError:
    try:
        from _sha256 import sha256 as _sha256  # Python 3.10, 3.11
    except ImportError:
        from hashlib import sha256 as _sha256


def digest(text: str) -> bytes:
    """SHA-256 of `text` (UTF-8)."""
    return _sha256(text.encode()).digest()


def uuid_text(prefix: str, h: bytes) -> str:
    """`prefix` and the first 16 bytes of `h` in the 8-4-4-4-12 form NVML prints (GPU-..., MIG-...)."""
    x = h[:16].hex()
    return f"{prefix}{x[0:8]}-{x[8:12]}-{x[12:16]}-{x[16:20]}-{x[20:32]}"
