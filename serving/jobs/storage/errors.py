"""Object storage's answers as the API's errors: each says which object, what the store said,
and whether trying again can help (`StorageUnavailable` only)."""

from __future__ import annotations

from serving.errors import OcrError


class StorageNotConfigured(OcrError):
    """A job names `s3://` but no credentials are configured for its key or the deployment."""

    http_status = 422
    code = "storage_not_configured"
    default_message = "No object storage credentials are configured for this key"


class StorageDenied(OcrError):
    """The store refused the credentials or the access (403: wrong keys, no permission)."""

    http_status = 422
    code = "storage_access_denied"
    default_message = "The object store denied access"


class StorageNotFound(OcrError):
    """No such object or bucket (404)."""

    http_status = 422
    code = "storage_not_found"
    default_message = "No such object in the object store"


class StorageRefused(OcrError):
    """The store refused the request for another reason of the client's (a 4xx)."""

    http_status = 422
    code = "storage_refused"
    default_message = "The object store refused the request"


class StorageUnavailable(OcrError):
    """The store could not be reached, timed out, or failed (5xx): trying later may work."""

    http_status = 502
    code = "storage_unavailable"
    default_message = "The object store is unavailable"


PERMANENT = (StorageNotConfigured, StorageDenied, StorageNotFound, StorageRefused)
"""Storage errors no retry can mend."""


def from_status(status: int, what: str, detail: str) -> OcrError:
    """The error for an HTTP `status` answered to `what` (an object's URL), with the store's
    `detail` (its error code and message, never a credential)."""
    if status == 403:
        return StorageDenied(f"{what}: access denied by the object store (403 {detail})")
    if status == 404:
        return StorageNotFound(f"{what}: not found in the object store (404 {detail})")
    if 400 <= status < 500 and status not in (408, 429):
        return StorageRefused(f"{what}: the object store refused the request ({status} {detail})")
    return StorageUnavailable(f"{what}: the object store answered {status} {detail}".rstrip())
