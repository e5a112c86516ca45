"""What `/v1/ocr` is asked to answer with (serving/http/ocr_outputs.py): `words` and `layout`
are true or false, and anything else is refused before any work (`words=yes` read as false)."""

from __future__ import annotations

import pytest
from starlette.requests import Request

from serving.errors import ValidationFailed
from serving.http.ocr_outputs import wanted


def _request(query: str) -> Request:
    return Request(
        {"type": "http", "method": "POST", "query_string": query.encode(), "headers": []}
    )


def test_words_and_layout_are_flags() -> None:
    want = wanted(_request("words=True&layout=1"))
    assert (want.words, want.layout) == (True, True)
    want = wanted(_request("words=false&layout=0"))
    assert (want.words, want.layout) == (False, False)
    assert (wanted(_request("")).words, wanted(_request("")).layout) == (False, False)


@pytest.mark.parametrize("query", ["words=yes", "layout=on", "words="])
def test_other_values_are_refused(query: str) -> None:
    name = query.partition("=")[0]
    with pytest.raises(ValidationFailed, match=rf"^{name} must be true or false"):
        wanted(_request(query))


def test_mode_is_skip_force_or_redo() -> None:
    assert wanted(_request("")).mode == "skip"
    assert wanted(_request("format=pdf&mode=redo")).mode == "redo"
    with pytest.raises(ValidationFailed, match=r"^mode must be skip, force or redo, got 'again'"):
        wanted(_request("mode=again"))
