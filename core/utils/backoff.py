"""`backoff_delay`: how long a client waits before it tries a lost connection again (exponential, with jitter), one
rule for every adapter that reconnects."""

from __future__ import annotations

import random

__all__ = ["backoff_delay"]


def backoff_delay(failures: int, initial: float, maximum: float) -> float:
    """Seconds to wait after `failures` failed attempts in a row: doubling from `initial` up to `maximum`, then a
    random part of it (half to all), so many bots do not reconnect in step."""
    ceiling = min(maximum, initial * 2 ** min(failures, 30))
    return random.uniform(ceiling / 2, ceiling)
