"""`[webhooks]`: the signed calls a job makes when it ends (`callback_url`)."""

from __future__ import annotations

from dataclasses import dataclass

from serving.config.checks import check


@dataclass(frozen=True, slots=True, kw_only=True)
class WebhooksConfig:
    """Where a job's `callback_url` may point, how it is signed, and how long it is retried."""

    allowed_hosts: tuple[str, ...] = ()
    """Hosts a job's `callback_url` may name (exact names or literal IPs); empty refuses every
    `callback_url` (422), as `input.url_allowed_hosts` does for URL inputs."""
    allow_private_addresses: bool = False
    """Let callbacks reach loopback, link-local and private addresses (a receiver on this host or
    its network); off, a host resolving to one is refused at submit and at every attempt."""
    secret_file: str = ""
    """File holding the deployment-wide signing secret (`whsec_` and the base64 of 24 to 64 random
    bytes): it signs the calls of jobs sent without a key, or by a key whose `[[keys]]` entry in
    `auth.keys_file` has no `webhook_secret` of its own. Keep it out of git. With neither, a job
    naming `callback_url` gets 422."""
    timeout_s: float = 15.0
    """One attempt: connected, sent and answered within this, or it failed (the Standard Webhooks
    guidance is 15 to 30 s)."""
    retry_first_s: float = 5.0
    """Wait before the first retry; each next retry waits twice as long, up to
    `retry_max_interval_s`, each wait shortened by up to a fifth at random (jitter)."""
    retry_max_interval_s: float = 3600.0
    """The longest wait between two attempts (a receiver's `Retry-After` is kept up to this)."""
    retry_for_s: float = 43200.0
    """A delivery still failing this long after its event stops (`failed`). Keep it under
    `jobs.retention_s`: a job's deliveries are deleted with the job."""
    max_concurrent: int = 8
    """Deliveries (calls and object-storage exports) in flight at once, in this server."""

    def __post_init__(self) -> None:
        check(self.timeout_s > 0, "webhooks.timeout_s", "must be > 0")
        check(self.retry_first_s > 0, "webhooks.retry_first_s", "must be > 0")
        check(
            self.retry_max_interval_s >= self.retry_first_s,
            "webhooks.retry_max_interval_s",
            "must be >= webhooks.retry_first_s",
        )
        check(self.retry_for_s > 0, "webhooks.retry_for_s", "must be > 0")
        check(self.max_concurrent > 0, "webhooks.max_concurrent", "must be > 0")
        check(
            all(host.strip() for host in self.allowed_hosts),
            "webhooks.allowed_hosts",
            "must not hold an empty host",
        )
