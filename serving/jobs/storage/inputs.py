"""A job's inputs from object storage: `s3://bucket/key` (one object), `s3://bucket/prefix/`
(every object under it) and presigned GET URLs. Listed at submit, within the job's limits, then
read one at a time, as streams, by the stager (`serving.jobs.files.stage_uploads`), which checks
every limit again as the bytes come."""

from __future__ import annotations

import asyncio
import functools
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, BinaryIO
from urllib.parse import unquote, urlsplit, urlunsplit

from serving.config import StorageConfig
from serving.errors import PayloadTooLarge, ValidationFailed
from serving.jobs.credentials import Credentials
from serving.jobs.destinations import DestinationPolicy, connect_target
from serving.jobs.storage.errors import StorageNotConfigured, StorageNotFound
from serving.jobs.storage.locations import S3Location, parse_s3_url
from serving.jobs.storage.presigned import open_url
from serving.jobs.storage.s3 import S3Client


@dataclass(frozen=True, slots=True, kw_only=True)
class InputObject:
    """One document to read: its name in the job, and how to open it."""

    name: str
    source: str
    """Where it is, for messages (a presigned URL without its query)."""
    size: int | None
    """From the listing; None where unknown before reading (a single object, a URL)."""
    opener: Callable[[], BinaryIO]

    def stream(self) -> BinaryIO:
        """The object as a stream that opens it on its first read (the stager reads one
        document at a time)."""
        return io.BufferedReader(_Lazy(self.opener))


def presigned_policy(storage: StorageConfig) -> DestinationPolicy:
    """Where presigned URLs may point."""
    return DestinationPolicy(
        allowed_hosts=storage.url_allowed_hosts,
        allow_private=storage.allow_private_addresses,
        setting="storage.url_allowed_hosts",
    )


def s3_client(credentials: Credentials, storage: StorageConfig) -> S3Client:
    """The S3 client of these credentials.

    Raises:
        StorageNotConfigured: there are none (for this key, nor deployment-wide).
    """
    if credentials.s3 is None:
        raise StorageNotConfigured(
            "s3:// needs S3 credentials: s3_access_key_id and s3_secret_access_key in this key's "
            "[[keys]] entry (auth.keys_file), or storage.s3_credentials_file"
        )
    return S3Client.connect(credentials.s3, timeout_s=storage.transfer_timeout_s)


async def resolve_inputs(
    specs: Sequence[str],
    *,
    credentials: Credentials,
    storage: StorageConfig,
    max_objects: int,
    max_bytes: int,
) -> list[InputObject]:
    """The documents `specs` name, listed (an `s3://` prefix) and checked (hosts, counts, the
    sizes listed); nothing is read yet.

    Raises:
        ValidationFailed: a spec that is neither `s3://` nor an allowed http(s) URL, or more
            objects than `max_objects`.
        PayloadTooLarge: the objects listed hold more than `max_bytes`.
        StorageNotConfigured, StorageDenied, StorageNotFound, StorageUnavailable: as the store
            answered (an empty prefix is not found).
        DestinationRefused: a URL's host resolves to an address not allowed.
    """
    found: list[InputObject] = []
    client: S3Client | None = None
    for spec in specs:
        if spec.startswith("s3://"):
            location = parse_s3_url(spec, "input")
            client = client or s3_client(credentials, storage)
            found += await _s3_objects(client, location, max_objects - len(found))
        elif spec.startswith(("http://", "https://")):
            found.append(await _url_object(spec, storage))
        else:
            raise ValidationFailed(
                "input: expected s3://bucket/key, s3://bucket/prefix/ or a presigned https URL"
            )
        if len(found) > max_objects:
            raise ValidationFailed(
                f"More than {max_objects} files in one job (jobs.max_files_per_job)"
            )
    listed = sum(item.size or 0 for item in found)
    if listed > max_bytes:
        raise PayloadTooLarge(
            f"The inputs listed hold {listed} bytes; a job may read {max_bytes} "
            "(jobs.max_upload_bytes)"
        )
    return found


async def _s3_objects(client: S3Client, location: S3Location, room: int) -> list[InputObject]:
    if not location.is_prefix:
        return [
            InputObject(
                name=PurePosixPath(location.key).name,
                source=location.url(),
                size=None,
                opener=functools.partial(client.open, location),
            )
        ]
    listed = await asyncio.to_thread(client.list, location, max_objects=max(room, 0))
    if not listed:
        raise StorageNotFound(f"{location.url()}: no object under this prefix")
    return [
        InputObject(
            name=key[len(location.key) :],
            source=location.url(key),
            size=size,
            opener=functools.partial(client.open, S3Location(location.bucket, key)),
        )
        for key, size in listed
    ]


async def _url_object(url: str, storage: StorageConfig) -> InputObject:
    target, host = await connect_target(url, presigned_policy(storage), "input")
    parts = urlsplit(url)
    shown = urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))
    name = unquote(PurePosixPath(parts.path).name) or "document"
    return InputObject(
        name=name,
        source=shown,
        size=None,
        opener=functools.partial(
            open_url, target, host, shown, timeout_s=storage.transfer_timeout_s
        ),
    )


class _Lazy(io.RawIOBase):
    """A stream opened on its first read, closed at its end."""

    def __init__(self, opener: Callable[[], BinaryIO]) -> None:
        super().__init__()
        self._opener = opener
        self._stream: BinaryIO | None = None
        self._ended = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._ended:
            return 0
        if self._stream is None:
            self._stream = self._opener()
        data = self._stream.read(len(buffer))
        buffer[: len(data)] = data
        if not data:
            self._ended = True
            self._stream.close()
        return len(data)

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
        super().close()
