"""Where a job's outputs are written when it ends: under an `s3://` prefix, or each to its
presigned PUT URL (`serving.jobs.hooks.JobHooks`). The exporter (`serving.http.job_export`)
makes each output as a file and hands it here."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit, urlunsplit

from serving.config import StorageConfig
from serving.jobs.credentials import Credentials
from serving.jobs.destinations import connect_target
from serving.jobs.hooks import JobHooks
from serving.jobs.storage.inputs import presigned_policy, s3_client
from serving.jobs.storage.locations import S3Location, parse_s3_url
from serving.jobs.storage.presigned import put_file
from serving.jobs.storage.s3 import S3Client


class OutputSink(Protocol):
    """Takes a job's outputs, one file at a time."""

    @property
    def location(self) -> str:
        """Where the outputs go, for the job's event (no presigned signature)."""

    def wants(self, name: str) -> bool:
        """Whether output `name` is written (presigned URLs: only those named)."""

    async def put(self, name: str, path: Path, content_type: str) -> str:
        """Write the file at `path` as output `name`; returns where it went.

        Raises:
            StorageDenied, StorageNotFound, StorageRefused: no retry will help.
            StorageUnavailable: the store could not be reached or failed; try later.
        """


def open_sink(hooks: JobHooks, credentials: Credentials, storage: StorageConfig) -> OutputSink:
    """The sink `hooks` name.

    Raises:
        StorageNotConfigured: `s3://` without credentials for the key.
        ValidationFailed: the job exports nothing.
    """
    if hooks.output is not None:
        return _S3Sink(s3_client(credentials, storage), parse_s3_url(hooks.output, "output"))
    return _PresignedSink(dict(hooks.output_urls), storage)


class _S3Sink:
    def __init__(self, client: S3Client, location: S3Location) -> None:
        self._client = client
        self._location = location

    @property
    def location(self) -> str:
        return self._location.url(self._location.folder)

    def wants(self, name: str) -> bool:
        return True

    async def put(self, name: str, path: Path, content_type: str) -> str:
        target = S3Location(self._location.bucket, f"{self._location.folder}{name}")
        await asyncio.to_thread(self._client.put_file, target, path, content_type)
        return target.url()


class _PresignedSink:
    def __init__(self, urls: dict[str, str], storage: StorageConfig) -> None:
        self._urls = urls
        self._storage = storage

    @property
    def location(self) -> str:
        return "presigned URLs"

    def wants(self, name: str) -> bool:
        return name in self._urls

    async def put(self, name: str, path: Path, content_type: str) -> str:
        url = self._urls[name]
        what = f"output_urls[{name!r}]"
        target, host = await connect_target(url, presigned_policy(self._storage), what)
        parts = urlsplit(url)
        shown = urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))
        await asyncio.to_thread(
            put_file,
            target,
            host,
            shown,
            path,
            content_type,
            timeout_s=self._storage.transfer_timeout_s,
        )
        return shown
