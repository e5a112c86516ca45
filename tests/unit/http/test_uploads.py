"""What `/v1/ocr` and `/v1/render` read (serving/http/uploads.py), and `/ocr`'s refusal of files
sent as they are (serving/http/paddlex_api.py): a body's bytes say what it is, and a refusal says
where the document goes instead (issue 39, items 4 and 5)."""

from __future__ import annotations

import asyncio
import io
import json
import zipfile

import pytest
from starlette.requests import Request

from serving.errors import InvalidInput, OcrError, UnsupportedMediaType, ValidationFailed
from serving.http.paddlex_api import check_content_type
from serving.http.uploads import read_document
from tests import images

PNG = images.encode_png(images.latin_lines().image)
PDF = images.make_pdf([images.empty_page(100, 80)])


def _zip() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        archive.writestr("a.png", PNG)
    return buf.getvalue()


def _request(body: bytes, content_type: str) -> Request:
    async def receive() -> dict[str, object]:
        return {"type": "http.request", "body": body, "more_body": False}

    headers = [(b"content-type", content_type.encode()), (b"content-length", b"%d" % len(body))]
    return Request({"type": "http", "method": "POST", "headers": headers}, receive)


def _multipart(data: bytes, part_type: str) -> Request:
    boundary = "b0undary"
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="x"\r\n'
            f"Content-Type: {part_type}\r\n\r\n"
        ).encode()
        + data
        + f"\r\n--{boundary}--\r\n".encode()
    )
    return _request(body, f"multipart/form-data; boundary={boundary}")


def _refusal(request: Request) -> OcrError:
    with pytest.raises(OcrError) as raised:
        asyncio.run(read_document(request))
    return raised.value


@pytest.mark.parametrize(("data", "kind"), [(PNG, "image"), (PDF, "pdf")])
def test_an_octet_stream_body_is_read_by_its_bytes(data: bytes, kind: str) -> None:
    assert asyncio.run(read_document(_request(data, "application/octet-stream"))) == (data, kind)


def test_an_octet_stream_body_of_no_served_kind_is_a_clear_415() -> None:
    err = _refusal(_request(b"just some text", "application/octet-stream"))
    assert isinstance(err, UnsupportedMediaType)
    assert err.message == (
        "The application/octet-stream body is neither a PDF nor a supported image "
        "(PNG, JPEG, TIFF, GIF, BMP or WebP) by its bytes"
    )
    upload = _refusal(_multipart(b"just some text", "application/octet-stream"))
    assert isinstance(upload, InvalidInput)  # an upload's part type is a guess of the client's


@pytest.mark.parametrize("multipart", [True, False])
def test_a_zip_is_told_that_jobs_take_it(multipart: bool) -> None:
    zipped = _zip()
    request = (
        _multipart(zipped, "application/zip")
        if multipart
        else _request(zipped, "application/octet-stream")
    )
    err = _refusal(request)
    assert isinstance(err, InvalidInput)
    assert "a zip archive" in err.message
    assert err.message.endswith("a zip goes to POST /v1/jobs, which unpacks it")


def test_another_content_type_is_415_naming_what_is_read() -> None:
    err = _refusal(_request(_zip(), "application/zip"))
    assert isinstance(err, UnsupportedMediaType)
    assert "application/octet-stream" in err.message
    assert err.message.endswith("a zip goes to POST /v1/jobs, which unpacks it")


@pytest.mark.parametrize(
    "content_type",
    ["multipart/form-data; boundary=x", "image/png", "application/pdf", "application/octet-stream"],
)
def test_paddlex_ocr_tells_a_file_sent_as_it_is_where_it_goes(content_type: str) -> None:
    with pytest.raises(ValidationFailed) as raised:
        check_content_type(content_type)
    (problem,) = json.loads(raised.value.message)
    assert problem["type"] == "json_invalid"  # PaddleX's 422 for a body that is not JSON
    assert "POST /v1/ocr takes a multipart `file` or the raw file" in problem["msg"]


@pytest.mark.parametrize("content_type", ["application/json", "", "text/plain"])
def test_paddlex_ocr_reads_what_may_be_json(content_type: str) -> None:
    check_content_type(content_type)
