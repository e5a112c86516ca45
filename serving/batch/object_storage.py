"""`ocr-batch` reading from and writing to object storage.

Inputs `s3://bucket/prefix/` (every object under it) and `s3://bucket/key` are downloaded, in
pieces, into a work folder, then named as a local folder's files are (their keys relative to the
prefix). An output `s3://bucket/prefix/` is worked on in a local folder whose manifest is first
read back from the prefix, so a rerun skips the pages any earlier run did, and every file of it is
uploaded when the run ends. The S3 identity is the deployment's (`storage.s3_credentials_file`,
with `[storage]`'s endpoint), as the server's keyless jobs use: never given on the command line.
"""

from __future__ import annotations

import contextlib
import mimetypes
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

from serving.batch.manifest import MANIFEST
from serving.config import AppConfig
from serving.jobs.credentials import deployment_credentials
from serving.jobs.storage.errors import StorageNotFound
from serving.jobs.storage.inputs import s3_client
from serving.jobs.storage.locations import S3Location, parse_s3_url
from serving.jobs.storage.s3 import READ_BYTES, S3Client

MAX_OBJECTS = 100_000
"""Objects one input prefix may hold."""


def uses_storage(inputs: Sequence[str], out: str) -> bool:
    """Whether a run reads or writes `s3://`."""
    return any(spec.startswith("s3://") for spec in (*inputs, out))


@contextmanager
def work_folder() -> Iterator[Path]:
    """A folder for a run's downloads and its output, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="ocr-batch-") as folder:
        yield Path(folder)


def client_of(config: AppConfig) -> S3Client:
    """The deployment's S3 client.

    Raises:
        ConfigError: the credentials file does not read.
        StorageNotConfigured: no `storage.s3_credentials_file`.
    """
    return s3_client(deployment_credentials(config), config.storage)


def download_inputs(client: S3Client, inputs: Sequence[str], work: Path) -> list[str]:
    """`inputs` with each `s3://` one downloaded under `work` and replaced by its local path.

    Raises:
        ValidationFailed: a malformed `s3://` URL.
        StorageDenied, StorageNotFound, StorageUnavailable: as the store answered.
    """
    local = []
    for n, spec in enumerate(inputs):
        if not spec.startswith("s3://"):
            local.append(spec)
            continue
        location = parse_s3_url(spec, "input")
        folder = work / f"input-{n}"
        if not location.is_prefix:
            target = folder / PurePosixPath(location.key).name
            _download(client, location, target)
            local.append(str(target))
            continue
        listed = client.list(location, max_objects=MAX_OBJECTS)
        if not listed:
            raise StorageNotFound(f"{location.url()}: no object under this prefix")
        for key, _size in listed:
            relative = PurePosixPath(key[len(location.key) :])
            if any(part in ("..", ".") for part in relative.parts):
                continue
            _download(client, S3Location(location.bucket, key), folder / relative)
        local.append(str(folder))
    return local


def pull_manifest(client: S3Client, out: str, local: Path) -> None:
    """The output prefix's manifest into `local` (nothing when it has none yet)."""
    location = _folder(out)
    with contextlib.suppress(StorageNotFound):
        _download(client, S3Location(location.bucket, location.folder + MANIFEST), local / MANIFEST)


def push_outputs(client: S3Client, out: str, local: Path) -> list[str]:
    """Upload every file of the local output folder under the output prefix; returns the URLs."""
    location = _folder(out)
    written = []
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        key = location.folder + path.relative_to(local).as_posix()
        media_type = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        client.put_file(S3Location(location.bucket, key), path, media_type)
        written.append(location.url(key))
    return written


def _folder(out: str) -> S3Location:
    location = parse_s3_url(out, "--out")
    return S3Location(location.bucket, location.folder)


def _download(client: S3Client, location: S3Location, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with client.open(location) as body, target.open("wb") as file:
        shutil.copyfileobj(body, file, READ_BYTES)
