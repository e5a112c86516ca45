"""Per-key quotas: requests per second (a token bucket per key) and pages in flight per key.

Policy only, with the time passed in: the API key middleware asks `RateLimits.take` before a
request runs, and `OcrService` charges `KeyPages` where it admits pages. What a key may keep in
the job store (`max_jobs`, `max_stored_bytes`, `max_stored_pages`) the store checks as it records
a job (`serving.jobs.store.types.StoredLimits`). Neither knows HTTP. Without
them one key could take the whole server: admission (`serving.scheduling.admission`) sheds load
fairly for the server, not between the tenants sharing it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

from serving.errors import QuotaExceeded


@dataclass(frozen=True, slots=True, kw_only=True)
class KeyQuota:
    """One key's limits; 0 is no limit."""

    requests_per_s: float = 0.0
    """Sustained requests a second."""
    burst_requests: int = 0
    """Requests that may come at once after a quiet spell; 0: one second's worth (at least 1)."""
    max_inflight_pages: int = 0
    """Pages of this key's requests in flight together (`/ocr`, `/v1/ocr`, `/v1/render`)."""
    max_jobs: int = 0
    """Jobs this key keeps in the job store, finished ones included until deleted or expired."""
    max_stored_bytes: int = 0
    """Bytes of uploaded files of this key's jobs in the store."""
    max_stored_pages: int = 0
    """Pages of this key's jobs in the store."""

    @property
    def capacity(self) -> float:
        """The bucket's size."""
        return float(self.burst_requests or max(1.0, self.requests_per_s))


class Tenant(Protocol):
    """Whom work is for: an API key's id (never its secret) and its quota (`keys.Identity`)."""

    @property
    def id(self) -> str:
        """The key's id."""

    @property
    def quota(self) -> KeyQuota:
        """The key's limits."""


@dataclass(slots=True, kw_only=True)
class TokenBucket:
    """Refills at `rate_per_s` up to `capacity`; each request takes one token."""

    rate_per_s: float
    capacity: float
    tokens: float
    updated_at: float

    def take(self, now: float) -> float:
        """Take a token: 0.0 when one was there, else the seconds until one will be (nothing
        is taken, so a refused client that waits that long gets in)."""
        elapsed = max(0.0, now - self.updated_at)
        self.tokens = min(self.capacity, self.tokens + elapsed * self.rate_per_s)
        self.updated_at = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / self.rate_per_s


@dataclass(slots=True)
class RateLimits:
    """A token bucket per key id, made full at the key's first request."""

    buckets: dict[str, TokenBucket] = field(default_factory=dict)

    def take(self, key_id: str, quota: KeyQuota, now: float) -> None:
        """Count one request of `key_id` at time `now` (seconds, monotonic).

        Raises:
            QuotaExceeded: the key's bucket is empty; `retry_after_s` says when it is not.
        """
        if quota.requests_per_s <= 0:
            return
        bucket = self.buckets.get(key_id)
        if bucket is None or bucket.rate_per_s != quota.requests_per_s:
            bucket = self.buckets[key_id] = TokenBucket(
                rate_per_s=quota.requests_per_s,
                capacity=quota.capacity,
                tokens=quota.capacity,
                updated_at=now,
            )
        wait_s = bucket.take(now)
        if wait_s > 0:
            raise QuotaExceeded(
                f"More than {quota.requests_per_s:g} requests a second for key {key_id} "
                f"(burst {quota.capacity:g})",
                retry_after_s=float(math.ceil(wait_s)),
            )


@dataclass(slots=True)
class KeyPages:
    """Pages in flight per key id, against each key's `max_inflight_pages`."""

    inflight: dict[str, int] = field(default_factory=dict)

    def admit(self, key_id: str, quota: KeyQuota, pages: int, *, held: int = 0) -> None:
        """Reserve `pages` more for a request of `key_id` that holds `held` already.

        As server-wide admission does, a request that is the key's only one in flight is taken
        whatever its size: the quota bounds a key's concurrency, not a document's pages
        (`input.max_pdf_pages` does that).

        Raises:
            QuotaExceeded: the key's other requests already hold its pages.
        """
        current = self.inflight.get(key_id, 0)
        limit = quota.max_inflight_pages
        if limit > 0 and current > held and current + pages > limit:
            raise QuotaExceeded(f"{current} pages of key {key_id} in flight; its limit is {limit}")
        self.inflight[key_id] = current + pages

    def release(self, key_id: str, pages: int) -> None:
        """Return `pages` reserved with `admit`."""
        left = self.inflight.get(key_id, 0) - pages
        if left > 0:
            self.inflight[key_id] = left
        else:
            self.inflight.pop(key_id, None)


class ClientSlots:
    """Things one client (an API key's id, or its address with keys off) holds open at once,
    each client at most `per_client` (0: no limit): its requests running
    (`auth.max_open_requests`), its results streams (`auth.max_open_streams`)."""

    def __init__(self, per_client: int, *, setting: str, what: str) -> None:
        self.per_client = per_client
        self.setting = setting
        self.what = what
        self._held: dict[str, int] = {}

    def held(self, client: str) -> int:
        """What `client` holds now."""
        return self._held.get(client, 0)

    def take(self, client: str) -> None:
        """One more for `client`; give it back with `release`.

        Raises:
            QuotaExceeded: `client` holds `per_client` already (429).
        """
        held = self._held.get(client, 0)
        if self.per_client and held >= self.per_client:
            raise QuotaExceeded(
                f"{held} {self.what} of yours are open; at most {self.per_client} at once "
                f"({self.setting}): retry when one has ended"
            )
        self._held[client] = held + 1

    def release(self, client: str) -> None:
        """Give one back."""
        left = self._held.get(client, 0) - 1
        if left > 0:
            self._held[client] = left
        else:
            self._held.pop(client, None)
