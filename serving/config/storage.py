"""`[storage]`: object storage a job reads its inputs from and writes its results to."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from serving.config.checks import check

AddressingStyle = Literal["auto", "path", "virtual"]


@dataclass(frozen=True, slots=True, kw_only=True)
class StorageConfig:
    """S3 endpoints and credentials (per key in `auth.keys_file`, or deployment-wide here), and
    where presigned URLs may point."""

    s3_endpoint_url: str = ""
    """The S3 endpoint ("" = AWS's for `s3_region`); a key's `s3_endpoint_url` overrides it."""
    s3_region: str = "us-east-1"
    """The region requests are signed for; a key's `s3_region` overrides it."""
    s3_addressing_style: AddressingStyle = "auto"
    """"path" (`ENDPOINT/bucket/key`: MinIO, SeaweedFS, Ceph), "virtual" (`bucket.ENDPOINT/key`),
    or "auto" (botocore's choice)."""
    s3_credentials_file: str = ""
    """TOML file with `access_key_id` and `secret_access_key` (optional `endpoint_url`,
    `region`): the deployment-wide credentials, used by jobs sent without a key and by keys
    with no `s3_access_key_id` of their own in `auth.keys_file`, and by `ocr-batch`. Keep it out
    of git. Without credentials, `s3://` inputs and outputs get 422."""
    url_allowed_hosts: tuple[str, ...] = ()
    """Hosts presigned GET (input) and PUT (output) URLs may name; empty refuses them."""
    allow_private_addresses: bool = False
    """Let presigned URLs reach loopback, link-local and private addresses (a store on this
    host or its network)."""
    transfer_timeout_s: float = 300.0
    """One object read or written (a listing too) within this, or it failed."""
    export_timeout_s: float = 3600.0
    """A job's outputs all written within this, or the export is tried again (by another
    replica if this one died)."""

    def __post_init__(self) -> None:
        check(
            not self.s3_endpoint_url or self.s3_endpoint_url.startswith(("http://", "https://")),
            "storage.s3_endpoint_url",
            "must be an http:// or https:// URL, or empty",
        )
        check(bool(self.s3_region), "storage.s3_region", "must not be empty")
        check(self.transfer_timeout_s > 0, "storage.transfer_timeout_s", "must be > 0")
        check(self.export_timeout_s > 0, "storage.export_timeout_s", "must be > 0")
        check(
            all(host.strip() for host in self.url_allowed_hosts),
            "storage.url_allowed_hosts",
            "must not hold an empty host",
        )
