"""The one backoff formula, for node retries and compensation attempts (SPEC §10, R-W7, R-C7)."""

from __future__ import annotations

__all__ = ["MAX_DELAY", "backoff_delay"]

MAX_DELAY = 60.0  # seconds


def backoff_delay(base: float, failures: int) -> float:
    """Seconds to wait after ``failures`` failures: ``base * 2**(n-1)`` jittered ±25 %, capped at 60 s.

    Args:
        base: seconds before the second try (``backoff`` of the policy or compensation entry).
        failures: failed tries so far (1 after the first failure).

    Returns:
        The delay in seconds (0 when ``base`` is 0), never over :data:`MAX_DELAY`.
    """
    if not base:
        return 0.0
    import random  # here, not at the top: only a retry needs it, and it costs every command's start-up ~1 ms

    return min(MAX_DELAY, base * (2 ** max(0, failures - 1)) * random.uniform(0.75, 1.25))
