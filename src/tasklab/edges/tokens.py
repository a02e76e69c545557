"""Comparing a client's secret with ours: in constant time, and never raising on what
a client sent (a number, a lone surrogate, a non-ASCII cookie byte)."""

from __future__ import annotations

import hmac


def secret_matches(given: object, expected: str) -> bool:
    if not isinstance(given, str):
        return False
    # surrogatepass: a lone surrogate from JSON is not a UTF-8 character, and must be a
    # mismatch rather than an encoding error
    return hmac.compare_digest(
        given.encode("utf-8", "surrogatepass"), expected.encode("utf-8", "surrogatepass")
    )
