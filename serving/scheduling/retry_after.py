"""When a shed client should come back: `Retry-After` from the server's state, spread out.

A fixed `Retry-After: 2` sends every client shed in one burst back in one burst, two seconds later,
to be shed again (issue 37, item 13). So the value is at least `server.retry_after_s`, at least
what the server's state says room will take to come back where it knows (the pages in flight at
the measured pace: `serving.scheduling.admission`), at most `MAX_RETRY_AFTER_S`, and then drawn
uniformly up to twice that, so a burst comes back spread over as long again.
"""

from __future__ import annotations

import math
import random

MAX_RETRY_AFTER_S = 60
"""The base never exceeds a minute: past that a client's own deadline decides better."""


def retry_after_s(
    floor_s: int, hint_s: float | None = None, *, rng: random.Random | None = None
) -> int:
    """Whole seconds for `Retry-After`: a base of `max(floor_s, ceil(hint_s))`, at most
    `MAX_RETRY_AFTER_S` (never below `floor_s`), drawn uniformly from [base, 2 x base]."""
    base = max(floor_s, math.ceil(hint_s)) if hint_s is not None and hint_s > 0 else floor_s
    base = max(floor_s, min(base, MAX_RETRY_AFTER_S))
    return (rng or random).randint(base, 2 * base)
