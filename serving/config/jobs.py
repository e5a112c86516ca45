"""`[jobs]`: batch document jobs (`/v1/jobs`)."""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass

from serving.config.checks import check


@dataclass(frozen=True, slots=True, kw_only=True)
class JobsConfig:
    """Batch document jobs (`/v1/jobs`): where they are kept, how long, and their limits."""

    data_dir: str = "var/jobs"
    """Job store (SQLite), uploads and per-page results; relative to the config file's folder
    (`serving.config_paths`). With a PostgreSQL `store`, the uploads only: a directory every
    replica mounts at this path."""
    store: str = "sqlite"
    """"sqlite": one server's embedded store under `data_dir`. A `postgresql://` URL: one store
    shared by replicas (libpq's PG* variables, e.g. PGPASSWORD, fill what the URL leaves out)."""
    lease_s: float = 30.0
    """PostgreSQL store: how long a replica's claim on a page lasts unless renewed; the pages of a
    replica that died are taken over by another this long after its last renewal."""
    poll_interval_s: float = 1.0
    """PostgreSQL store: how often a replica looks for pages other replicas queued or left, and
    for pages finished elsewhere of the jobs its results streams follow (one query for all)."""
    follow_max_s: float = 3600.0
    """How long one results stream (`/v1/jobs/{id}/results`, `follow=true`) may follow its job;
    then it ends, and the client asks again with `?after=N` (the lines, or pages, it got) to go
    on from there."""
    retention_s: float = 86400.0
    """Finished jobs (succeeded, failed, cancelled) are deleted this long after they end."""
    queued_expiry_s: float = 86400.0
    """A job none of whose pages started this long after it was submitted fails, each page with
    `expired` (then `retention_s` deletes it)."""
    min_free_disk_bytes: int = 1024**3
    """An upload (`POST /v1/jobs`) is refused with 507 unless the disks of `data_dir` and of the
    multipart spool (the temporary directory) keep this much free beyond its declared size."""
    max_files_per_job: int = 100
    """Files in one job, counting each document inside an uploaded zip; more get 422."""
    max_pages_per_job: int = 1000
    """Pages in one job (an image is one page); more get 422."""
    max_upload_bytes: int = 500 * 1024 * 1024
    """Bytes uploaded for one job, and bytes unpacked from its zips; more get 413."""
    max_zip_entries: int = 1000
    """Entries in one job's zips, counting folders and skipped ones (__MACOSX/, dotfiles); more
    get 422. Checked on each zip's central directory before it is unpacked."""
    max_inflight_pages: int = 8
    """Job pages in flight at once in this server, all jobs together."""
    page_timeout_s: float = 3600.0
    """How long one job page may take in the server, waiting behind interactive work included,
    before it is dropped (504) and tried again (4 times at most). Longer than a request's
    `server.request_timeout_s`: nobody waits on a connection, and on a busy server a page of
    `max_inflight_pages` gets only its `min_share` of the devices."""
    staging_timeout_s: float = 300.0
    """How long one upload's documents may take to be read and readied (pages counted, animated
    images converted), waiting behind interactive work included; beyond it, 504."""
    max_staging_pixels: int = 2_000_000_000
    """Pixels one job's animated images may decode when they are converted to pages (frames x
    the logical screen each frame is drawn on), checked from their headers first; more get 413."""
    max_uploads_per_key: int = 2
    """Job uploads one API key (with authentication off: one client address) may have being
    received or staged at once; more get 429."""
    min_share: float = 0.1
    """Share of the devices' time job pages keep while interactive work would take all of it
    (measured over the last minutes): below it, a job's batch goes first. 0: jobs run only when
    no interactive work waits, and starve on a server kept busy (`serving.scheduling.share`)."""

    def __post_init__(self) -> None:
        check(bool(self.data_dir), "jobs.data_dir", "must not be empty")
        check(self.retention_s > 0, "jobs.retention_s", "must be > 0")
        check(self.queued_expiry_s > 0, "jobs.queued_expiry_s", "must be > 0")
        check(self.min_free_disk_bytes >= 0, "jobs.min_free_disk_bytes", "must be >= 0")
        check(self.max_files_per_job > 0, "jobs.max_files_per_job", "must be > 0")
        check(self.max_pages_per_job > 0, "jobs.max_pages_per_job", "must be > 0")
        check(self.max_upload_bytes > 0, "jobs.max_upload_bytes", "must be > 0")
        check(self.max_zip_entries > 0, "jobs.max_zip_entries", "must be > 0")
        check(self.max_inflight_pages > 0, "jobs.max_inflight_pages", "must be > 0")
        check(self.page_timeout_s > 0, "jobs.page_timeout_s", "must be > 0")
        check(self.staging_timeout_s > 0, "jobs.staging_timeout_s", "must be > 0")
        check(self.max_staging_pixels > 0, "jobs.max_staging_pixels", "must be > 0")
        check(self.max_uploads_per_key > 0, "jobs.max_uploads_per_key", "must be > 0")
        check(0 <= self.min_share < 1, "jobs.min_share", "must be >= 0 and < 1")
        check(
            self.store == "sqlite" or self.store.startswith(("postgresql://", "postgres://")),
            "jobs.store",
            f'must be "sqlite" or a postgresql:// URL, got {redact_url(self.store)!r}',
        )
        check(self.lease_s > 0, "jobs.lease_s", "must be > 0")
        check(self.poll_interval_s > 0, "jobs.poll_interval_s", "must be > 0")
        check(self.follow_max_s > 0, "jobs.follow_max_s", "must be > 0")
        check(self.poll_interval_s < self.lease_s, "jobs.poll_interval_s", "must be < jobs.lease_s")


_SECRET_PARAMS = frozenset(("password", "sslpassword"))
"""libpq URL parameters that hold a secret (`?password=...` works as well as `user:pw@host`)."""


def redact_url(url: str) -> str:
    """`url` with the password of its user part and the values of its `password` and
    `sslpassword` query parameters (names percent-decoded, as libpq reads them) replaced by `***`
    (for logs and error messages); a URL that does not parse is hidden whole."""
    try:
        parts = urllib.parse.urlsplit(url)
        has_password = parts.password is not None
    except ValueError:
        return "***"
    if has_password:
        user = parts.netloc.rpartition("@")[0].partition(":")[0]
        host = parts.netloc.rpartition("@")[2]
        parts = parts._replace(netloc=f"{user}:***@{host}")
    if parts.query:
        fields = []
        for field in parts.query.split("&"):
            name, equals, _value = field.partition("=")
            secret = urllib.parse.unquote(name).strip().lower() in _SECRET_PARAMS
            fields.append(f"{name}=***" if secret and equals else field)
        parts = parts._replace(query="&".join(fields))
    return urllib.parse.urlunsplit(parts)
