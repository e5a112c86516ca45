"""Reading what clients upload: a body within its size limit, the document of `/v1/ocr` and
`/v1/render` (multipart or raw), Starlette's multipart refusals as this API's errors, and a client
hanging up mid-upload as a 499 at INFO."""

from __future__ import annotations

import logging
from pathlib import PurePosixPath
from typing import NamedTuple

from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request

from serving.decode.readers import FileKind, sniff_kind
from serving.errors import (
    ClientGone,
    InvalidInput,
    OcrError,
    PayloadTooLarge,
    UnsupportedMediaType,
    ValidationFailed,
)
from serving.http.params import DOCUMENT_FIELDS, check_names

logger = logging.getLogger(__name__)

FIELD_MAX_BYTES = 64 * 1024
"""Largest multipart field that is not a file (e.g. the jobs API's `options`): fields are held in
memory and parsed on the event loop. File parts are capped by the whole body's limit
(`serving.http.body_limit`)."""

_RAW_TYPES: dict[str, FileKind] = {"application/pdf": "pdf"}
"""Raw body types besides image/*."""
SNIFFED_TYPE = "application/octet-stream"
"""A raw body of no declared kind: its bytes say what it is (they do for every type anyway)."""
IMAGE_FORMATS = "PNG, JPEG, TIFF, GIF, BMP or WebP"
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
TO_JOBS = "a zip goes to POST /v1/jobs, which unpacks it"


async def read_body(request: Request) -> bytes:
    """The body. Its size is capped as it arrives by the route's `body_limit.limit_body`, which
    wraps every endpoint that reads one (413 at the first byte past the cap, declared or not)."""
    try:
        return await request.body()
    except ClientDisconnect as err:
        raise gone_mid_upload() from err


class Upload(NamedTuple):
    """A document as uploaded: its bytes, its kind (from its bytes), and its file name."""

    data: bytes
    kind: FileKind
    name: str | None
    """The multipart part's file name, less any folder; None for a raw body."""


async def read_document(request: Request) -> tuple[bytes, FileKind]:
    """`read_upload`'s bytes and kind."""
    upload = await read_upload(request)
    return upload.data, upload.kind


def file_name(sent: str | None) -> str | None:
    """A client's file name, less any folder (either slash), at most 200 characters; None for
    none."""
    name = PurePosixPath((sent or "").replace("\\", "/")).name[-200:]
    return name if name and name.isprintable() else None


async def read_upload(request: Request) -> Upload:
    """The document of `/v1/ocr` and `/v1/render`: multipart field `file`, or a raw body typed
    image/*, application/pdf or application/octet-stream; its kind from its bytes, else from its
    declared type.

    Raises:
        UnsupportedMediaType: another content type, or an application/octet-stream body that is
            neither a PDF nor a supported image.
        PayloadTooLarge: a form field over `FIELD_MAX_BYTES` (the body's own cap is the
            route's `body_limit.limit_body`).
        ValidationFailed: no `file` field, or a malformed multipart body.
        InvalidInput: an empty file, or neither a PDF nor a supported image (a zip: told that
            /v1/jobs takes it).
        ClientGone: the client hung up during the upload.
    """
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type == "multipart/form-data":
        try:
            async with request.form(
                max_files=1, max_fields=16, max_part_size=FIELD_MAX_BYTES
            ) as form:
                check_names(form.keys(), DOCUMENT_FIELDS, "form field")
                upload = form.get("file")
                if not isinstance(upload, UploadFile):
                    raise ValidationFailed("Send the document in a multipart field named `file`")
                data = await upload.read()
                part_type = (upload.content_type or "").lower()
                raw = False
                name = file_name(upload.filename)
        except HTTPException as err:  # Starlette's multipart parser refuses the body
            raise form_error(err.detail) from err
        except ClientDisconnect as err:
            raise gone_mid_upload() from err
    elif content_type.startswith("image/") or content_type in (*_RAW_TYPES, SNIFFED_TYPE):
        data = await read_body(request)
        part_type = content_type
        raw = True
        name = None
    else:
        zipped = f"; {TO_JOBS}" if "zip" in content_type else ""
        raise UnsupportedMediaType(
            f"Content type {content_type[:80] or 'none'!r}: send multipart/form-data with a "
            f"`file` field, or a raw body typed image/*, application/pdf or {SNIFFED_TYPE}"
            f"{zipped}"
        )
    if not data:
        raise InvalidInput("Invalid input file: empty file")
    kind = (
        sniff_kind(data)
        or _RAW_TYPES.get(part_type)
        or ("image" if part_type.startswith("image/") else None)
    )
    if kind is None:
        raise not_a_document(data, raw_octets=raw and part_type == SNIFFED_TYPE)
    return Upload(data, kind, name)


def not_a_document(data: bytes, *, raw_octets: bool) -> OcrError:
    """The refusal of bytes that are neither a PDF nor a supported image: a zip is told where
    it goes; a raw `application/octet-stream` body gets 415 (its type said nothing, and its
    bytes are no type served), an upload 422."""
    if data[:4] in _ZIP_MAGIC:
        return InvalidInput(
            f"Invalid input file: a zip archive; /v1/ocr reads one document: {TO_JOBS}"
        )
    what = f"neither a PDF nor a supported image ({IMAGE_FORMATS})"
    if raw_octets:
        return UnsupportedMediaType(f"The {SNIFFED_TYPE} body is {what} by its bytes")
    return InvalidInput(f"Invalid input file: {what}")


def form_error(detail: str) -> OcrError:
    """Starlette's refusal of a multipart body (a 400 with `detail`) as this API's error: 413 for
    a field over `FIELD_MAX_BYTES` (file parts are never refused by size here), else 422."""
    if "maximum size" in detail:
        return PayloadTooLarge(
            f"A multipart field that is not a file holds at most {FIELD_MAX_BYTES // 1024} KiB"
        )
    return ValidationFailed(f"Malformed multipart body: {detail}")


def gone_mid_upload(what: str = "the upload") -> ClientGone:
    """The client hung up while sending `what`: no failure of ours, so INFO and no traceback."""
    logger.info("client went away during %s", what)
    return ClientGone("Client closed the request during the upload")
