"""SHA-256 for fingerprints, ids and trace ids, without loading OpenSSL (issue 33).

``hashlib`` loads OpenSSL's ``_hashlib`` when imported: ~2 ms of every command's start-up, for hashes of a few
hundred bytes. The interpreter's own SHA-256 (``_sha2`` from Python 3.12, ``_sha256`` before) gives the same
digests; ``hashlib``'s is the fallback on an interpreter built without it.
"""

from __future__ import annotations

__all__ = ["sha256"]

try:
    from _sha2 import sha256  # type: ignore[import-not-found,unused-ignore]
except ImportError:
    try:
        from _sha256 import sha256  # type: ignore[import-not-found,no-redef,unused-ignore]
    except ImportError:  # pragma: no cover - CPython always builds one of them
        from hashlib import sha256  # type: ignore[assignment,unused-ignore]
