"""`s3://bucket/key` and `s3://bucket/prefix/` as a job names them: parsed and checked."""

from __future__ import annotations

import re
from dataclasses import dataclass

from serving.errors import ValidationFailed

_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
"""S3's bucket names: 3 to 63 lower-case letters, digits, dots and hyphens."""
MAX_KEY_BYTES = 1024


@dataclass(frozen=True, slots=True)
class S3Location:
    """A bucket and a key in it: one object, or a prefix when it ends with `/` (or is empty)."""

    bucket: str
    key: str

    @property
    def is_prefix(self) -> bool:
        """Whether it names every object under a prefix rather than one object."""
        return self.key == "" or self.key.endswith("/")

    @property
    def folder(self) -> str:
        """The key as a prefix outputs go under: empty, or ending with `/`."""
        return self.key if self.is_prefix else f"{self.key}/"

    def url(self, key: str | None = None) -> str:
        """`s3://bucket/key` (this location's key, or `key`)."""
        return f"s3://{self.bucket}/{self.key if key is None else key}"


def parse_s3_url(url: str, what: str) -> S3Location:
    """The bucket and key of `s3://bucket/key`.

    Raises:
        ValidationFailed: not an `s3://` URL with a valid bucket name and key.
    """
    if not url.startswith("s3://"):
        raise ValidationFailed(f"{what}: expected s3://bucket/key or s3://bucket/prefix/")
    bucket, _, key = url[len("s3://") :].partition("/")
    if not _BUCKET.fullmatch(bucket) or ".." in bucket:
        raise ValidationFailed(f"{what}: {bucket!r} is not an S3 bucket name")
    if len(key.encode()) > MAX_KEY_BYTES or any(ord(c) < 32 for c in key):
        raise ValidationFailed(f"{what}: the key is not a valid S3 key")
    if any(part in (".", "..") for part in key.split("/")):
        raise ValidationFailed(f"{what}: the key may not hold '.' or '..' segments")
    return S3Location(bucket, key)
