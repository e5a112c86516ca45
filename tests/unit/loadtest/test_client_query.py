"""A load level's requests with the v1 API's query options (`?model=`: a model set by name)."""

from __future__ import annotations

import pytest

from loadtest.client import prepare_request
from loadtest.documents import Document

PNG = Document(name="a.png", data=b"\x89PNG", kind="image", content_type="image/png")


def test_v1_requests_carry_the_query_options() -> None:
    request = prepare_request("v1", PNG, {"model": "PP-OCRv5_mobile", "lang": "fr"})
    assert request.path == "/v1/ocr?model=PP-OCRv5_mobile&lang=fr"
    assert request.body == PNG.data
    assert prepare_request("v1", PNG).path == "/v1/ocr"
    assert prepare_request("v1", PNG, {}).path == "/v1/ocr"


@pytest.mark.parametrize("api", ["paddlex", "rapidocr"])
def test_other_apis_take_no_query_options(api: str) -> None:
    with pytest.raises(ValueError, match="query options are for the v1 API"):
        prepare_request(api, PNG, {"model": "x"})  # type: ignore[arg-type]
