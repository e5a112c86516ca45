"""When a failed delivery is tried again: policy only, time passed in.

Exponential backoff from `webhooks.retry_first_s`, doubling up to `retry_max_interval_s`, each
wait shortened by up to a fifth at random so that receivers that failed together are not all
retried together; a receiver's `Retry-After` is kept (up to the longest wait). A delivery is over
once it succeeded, once no attempt can succeed (410 Gone, an export refused by the store), or
once its next attempt would come more than `retry_for_s` after its event: it is then `failed`,
having been tried at least once.
"""

from __future__ import annotations

from dataclasses import dataclass

from serving.config import WebhooksConfig

JITTER = 0.2
"""The largest share of a wait the jitter takes off."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """After an attempt: try again at `next_at`, or over (`next_at` None)."""

    next_at: float | None

    @property
    def again(self) -> bool:
        """Whether another attempt follows."""
        return self.next_at is not None


def after_attempt(
    *,
    ok: bool,
    permanent: bool,
    attempts: int,
    created_at: float,
    now: float,
    config: WebhooksConfig,
    retry_after_s: float | None = None,
    jitter: float = 0.0,
) -> Verdict:
    """What follows attempt number `attempts` (1 for the first) of a delivery queued at
    `created_at`, made at `now`; `jitter` in [0, 1) scales the random shortening."""
    if ok or permanent:
        return Verdict(None)
    wait_s = wait_before(attempts, config, jitter=jitter)
    if retry_after_s is not None:
        wait_s = max(wait_s, min(retry_after_s, config.retry_max_interval_s))
    if now + wait_s > created_at + config.retry_for_s:
        return Verdict(None)
    return Verdict(now + wait_s)


def wait_before(attempts: int, config: WebhooksConfig, *, jitter: float = 0.0) -> float:
    """The wait after attempt number `attempts` failed."""
    exponent = min(max(attempts - 1, 0), 60)
    base_s = min(config.retry_first_s * 2.0**exponent, config.retry_max_interval_s)
    return base_s * (1.0 - JITTER * min(max(jitter, 0.0), 1.0))
