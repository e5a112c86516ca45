"""`[auth]`: API keys and their default quotas."""

from __future__ import annotations

from dataclasses import dataclass

from serving.config.checks import check


@dataclass(frozen=True, slots=True, kw_only=True)
class AuthConfig:
    """Optional API keys; with no key configured, authentication is off."""

    api_keys_env: str = "OCR_API_KEYS"
    """Environment variable holding comma-separated keys; "" = none read from the environment."""
    api_keys_file: str = ""
    """File with one key per line (blank lines and `#` comments skipped); never a file in git."""
    protect_metrics: bool = False
    """Require a key for `/metrics` too (the probes `/livez`, `/readyz`, `/health` never do)."""
    keys_file: str = ""
    """TOML file of named keys (`[[keys]]` with `id`, `role`, `sha256` of the secret, optional
    quotas), e.g. a mounted Kubernetes Secret; never a file in git."""
    requests_per_s: float = 0.0
    """Default per-key rate: requests a second (token bucket); 0 = unlimited."""
    burst_requests: int = 0
    """Default per-key burst (the bucket's size); 0 = one second's worth, at least 1."""
    max_inflight_pages: int = 0
    """Default per-key cap on pages in flight (`/ocr`, `/v1/ocr`, `/v1/render`); 0 = none
    beyond `server.max_inflight_pages`."""
    open: bool = False
    """With no keys and a bind beyond loopback, serve the jobs API anyway (else 403
    `open_store_refused`: anyone on the network could read and delete every stored document)."""
    max_jobs: int = 100
    """Default per-key cap on jobs kept in the job store, finished ones included until deleted or
    expired; one more gets 429 `stored_quota_exceeded`. With keys off, the cap of all jobs
    together. 0 = none."""
    max_stored_bytes: int = 5 * 1024**3
    """Default per-key cap on the uploaded bytes of its jobs in the store (as `max_jobs`)."""
    max_stored_pages: int = 20_000
    """Default per-key cap on the pages of its jobs in the store (as `max_jobs`)."""
    max_open_requests: int = 128
    """API requests one key (with keys off, one client address: behind a proxy, the proxy's)
    may have running at once, results streams and uploads included; one more gets 429
    `quota_exceeded` at once. A quarter of `server.limit_concurrency`'s default: one client
    cannot take every request slot. 0 = none."""
    max_open_streams: int = 8
    """Results streams that follow a job (`/v1/jobs/{id}/results`, `follow=true`) one key (or
    address) may have open at once; one more gets 429. 0 = none."""

    def __post_init__(self) -> None:
        check(self.requests_per_s >= 0, "auth.requests_per_s", "must be >= 0")
        check(self.burst_requests >= 0, "auth.burst_requests", "must be >= 0")
        check(self.max_inflight_pages >= 0, "auth.max_inflight_pages", "must be >= 0")
        check(self.max_jobs >= 0, "auth.max_jobs", "must be >= 0")
        check(self.max_stored_bytes >= 0, "auth.max_stored_bytes", "must be >= 0")
        check(self.max_stored_pages >= 0, "auth.max_stored_pages", "must be >= 0")
        check(self.max_open_requests >= 0, "auth.max_open_requests", "must be >= 0")
        check(self.max_open_streams >= 0, "auth.max_open_streams", "must be >= 0")
