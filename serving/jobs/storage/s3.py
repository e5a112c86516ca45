"""S3 through boto3 (the `s3` extra): list a prefix, read an object as a stream, write a file in
parts, each answer's error mapped to the API's (`serving.jobs.storage.errors`).

Calls are synchronous (boto3's); callers run them on a thread. Memory stays within
`TRANSFER_BYTES` a transfer: an object is read in the stager's pieces, and a file is written in
parts of `TRANSFER_BYTES` one at a time (boto3's transfer manager without threads), so the memory
budget is charged that much for each transfer in flight (`serving.jobs.storage.inputs`,
`serving.jobs.storage.outputs`).
"""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from serving.jobs.credentials import S3Credentials
from serving.jobs.storage.errors import StorageNotConfigured, StorageUnavailable, from_status
from serving.jobs.storage.locations import S3Location

logger = logging.getLogger(__name__)

TRANSFER_BYTES = 8 << 20
"""A written file's part (multipart above it), and what one transfer may hold in memory."""
READ_BYTES = 1 << 20
"""An object is read in pieces of this size."""
MAX_ATTEMPTS = 3
"""botocore's own tries of one request (its `standard` retry mode: throttling, 5xx, resets)."""


class S3Client:
    """One S3 identity's client; `connect` builds it."""

    def __init__(self, client: Any) -> None:
        self._client = client

    @classmethod
    def connect(cls, credentials: S3Credentials, *, timeout_s: float) -> S3Client:
        """A client for `credentials`, every request within `timeout_s` to connect and to read.

        Raises:
            StorageNotConfigured: boto3 is not installed (the `s3` extra).
        """
        try:
            import boto3
            from botocore.config import Config
        except ImportError as err:
            raise StorageNotConfigured(
                "This server has no S3 client: install it with pip install '.[s3]'"
            ) from err
        config = Config(
            connect_timeout=timeout_s,
            read_timeout=timeout_s,
            retries={"max_attempts": MAX_ATTEMPTS, "mode": "standard"},
            s3={"addressing_style": credentials.addressing_style},
            signature_version="s3v4",
            # Checksums only where S3 requires them: S3-compatible stores (Ceph, older MinIO)
            # refuse the trailing checksums botocore sends by default since 1.36.
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        )
        client = boto3.session.Session().client(
            "s3",
            endpoint_url=credentials.endpoint_url or None,
            region_name=credentials.region,
            aws_access_key_id=credentials.access_key_id,
            aws_secret_access_key=credentials.secret_access_key,
            config=config,
        )
        return cls(client)

    def list(self, location: S3Location, *, max_objects: int) -> list[tuple[str, int]]:
        """The objects under the prefix `location` (key, size), in key order, at most
        `max_objects` + 1 (one more says there are too many); folder markers left out."""
        found: list[tuple[str, int]] = []
        with _mapped(location.url()):
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=location.bucket, Prefix=location.key
            )
            for page in pages:
                for item in page.get("Contents", ()):
                    if not item["Key"].endswith("/"):
                        found.append((item["Key"], int(item["Size"])))
                if len(found) > max_objects:
                    break
        return found[: max_objects + 1]

    def open(self, location: S3Location) -> BinaryIO:
        """The object at `location`, to read as a stream (close it)."""
        with _mapped(location.url()):
            answer = self._client.get_object(Bucket=location.bucket, Key=location.key)
        return io.BufferedReader(_Body(answer["Body"], location.url()), READ_BYTES)

    def put_file(self, location: S3Location, path: Path, content_type: str) -> int:
        """Write the file at `path` to `location`; returns its size."""
        from boto3.s3.transfer import TransferConfig

        transfer = TransferConfig(
            multipart_threshold=TRANSFER_BYTES,
            multipart_chunksize=TRANSFER_BYTES,
            use_threads=False,
        )
        with _mapped(location.url()):
            self._client.upload_file(
                str(path),
                location.bucket,
                location.key,
                ExtraArgs={"ContentType": content_type},
                Config=transfer,
            )
        return path.stat().st_size


class _Body(io.RawIOBase):
    """An object's body as a raw file to read (what the stager copies), its errors mapped."""

    def __init__(self, body: Any, what: str) -> None:
        super().__init__()
        self._body = body
        self._what = what

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        with _mapped(self._what):
            data: bytes = self._body.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        with contextlib.suppress(Exception):  # closing a broken stream must not mask its error
            self._body.close()
        super().close()


@contextlib.contextmanager
def _mapped(what: str) -> Iterator[None]:
    """botocore's errors as the API's: the store's status and error code, never a credential."""
    from boto3.exceptions import S3UploadFailedError
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        yield
    except (ClientError, S3UploadFailedError) as err:
        # boto3's transfers raise their own error over the store's (`__context__`).
        cause = err if isinstance(err, ClientError) else err.__context__
        if not isinstance(cause, ClientError):
            raise StorageUnavailable(f"{what}: {type(err).__name__}") from err
        answer = cause.response
        status = int(answer.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        error = answer.get("Error", {})
        detail = " ".join(str(p) for p in (error.get("Code"), error.get("Message")) if p)
        raise from_status(status, what, detail) from err
    except (BotoCoreError, OSError) as err:
        logger.info("object store: %s: %r", what, err)
        raise StorageUnavailable(f"{what}: {type(err).__name__}") from err
