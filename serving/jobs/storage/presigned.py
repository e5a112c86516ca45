"""Presigned URLs: an object read with GET, a file written with PUT, over plain HTTP(S) to the
address `serving.jobs.destinations` checked; no redirect followed, errors mapped as S3's.

Calls are synchronous and run on a thread, as boto3's (`serving.jobs.storage.s3`).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, BinaryIO

import httpx

from serving.jobs.storage.errors import StorageUnavailable, from_status

READ_BYTES = 1 << 20


def open_url(target: str, host: str, what: str, *, timeout_s: float) -> BinaryIO:
    """The object a presigned GET URL names, to read as a stream (close it); `target` and
    `host` as `serving.jobs.destinations.connect_target` gives them, `what` the URL to name in
    errors (no query: its signature)."""
    client = httpx.Client(follow_redirects=False, timeout=timeout_s, trust_env=False)
    try:
        request = client.build_request(
            "GET", target, headers={"Host": host, "Accept-Encoding": "identity"}
        )
        response = client.send(request, stream=True)
    except httpx.HTTPError as err:
        client.close()
        raise StorageUnavailable(f"{what}: {type(err).__name__}") from err
    if response.status_code != 200:
        response.close()
        client.close()
        raise from_status(response.status_code, what, response.reason_phrase)
    return io.BufferedReader(_Response(response, client, what), READ_BYTES)


def put_file(
    target: str, host: str, what: str, path: Path, content_type: str, *, timeout_s: float
) -> int:
    """PUT the file at `path` to a presigned URL (its length declared: S3 refuses chunked
    bodies; no `Content-Type`: a URL presigned without one, as signature version 2 signs it,
    would refuse any); returns its size. `content_type` is not sent."""
    size = path.stat().st_size
    headers = {"Host": host, "Content-Length": str(size)}
    try:
        with (
            path.open("rb") as file,
            httpx.Client(follow_redirects=False, timeout=timeout_s, trust_env=False) as client,
        ):
            response = client.put(target, content=file, headers=headers)
    except httpx.HTTPError as err:
        raise StorageUnavailable(f"{what}: {type(err).__name__}") from err
    if not 200 <= response.status_code < 300:
        raise from_status(response.status_code, what, response.reason_phrase)
    return size


class _Response(io.RawIOBase):
    """A streamed answer's body as a raw file; its errors mapped."""

    def __init__(self, response: httpx.Response, client: httpx.Client, what: str) -> None:
        super().__init__()
        self._chunks = response.iter_raw(READ_BYTES)
        self._response = response
        self._client = client
        self._what = what
        self._pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        try:
            while not self._pending:
                self._pending = next(self._chunks)
        except StopIteration:
            return 0
        except httpx.HTTPError as err:
            raise StorageUnavailable(f"{self._what}: {type(err).__name__}") from err
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size

    def close(self) -> None:
        self._response.close()
        self._client.close()
        super().close()
