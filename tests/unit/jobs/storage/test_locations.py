"""serving/jobs/storage: `s3://` URLs parsed, and the store's statuses as the API's errors."""

from __future__ import annotations

import pytest

from serving.errors import ValidationFailed
from serving.jobs.storage.errors import (
    StorageDenied,
    StorageNotFound,
    StorageRefused,
    StorageUnavailable,
    from_status,
)
from serving.jobs.storage.locations import S3Location, parse_s3_url


def test_objects_and_prefixes() -> None:
    one = parse_s3_url("s3://my-bucket/in/scan.pdf", "input")
    assert one == S3Location("my-bucket", "in/scan.pdf")
    assert not one.is_prefix
    assert one.folder == "in/scan.pdf/"
    every = parse_s3_url("s3://my-bucket/in/", "input")
    assert every.is_prefix
    assert parse_s3_url("s3://my-bucket", "input").is_prefix


@pytest.mark.parametrize("url", ["s3://ab/x", "s3://Upper/x", "s3:/b/x", "s3://b..c/x"])
def test_bad_urls_are_refused(url: str) -> None:
    with pytest.raises(ValidationFailed):
        parse_s3_url(url, "input")


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (403, StorageDenied),
        (404, StorageNotFound),
        (400, StorageRefused),
        (429, StorageUnavailable),
        (503, StorageUnavailable),
    ],
)
def test_statuses_map_to_errors_that_name_the_object(status: int, error: type) -> None:
    found = from_status(status, "s3://b/k", "Code Message")
    assert isinstance(found, error)
    assert "s3://b/k" in found.message
