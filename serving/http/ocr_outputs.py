"""`/v1/ocr`'s answer in the format asked for: JSON (PaddleOCR's line order, with `words` and
`blocks` when asked), or a document rendered in a CPU worker and streamed (`serving.outputs`)."""

from __future__ import annotations

import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from serving import request_context
from serving.decode.readers import FileKind
from serving.errors import ValidationFailed
from serving.http import request_id
from serving.http.answers import charged_json
from serving.options import choices_text
from serving.outputs.document import (
    TEXT_MODES,
    Document,
    Source,
    TextMode,
    media_type_of,
    page_from_result,
    page_json,
)
from serving.outputs.formats import EXTENSIONS, MEDIA_TYPES, Format, negotiate
from serving.request_options import parse_flag
from serving.service.ocr import PageOutput
from serving.service.requests import Renderer


@dataclass(frozen=True, slots=True)
class Wanted:
    """What a `/v1/ocr` request asks to get back."""

    format: Format
    words: bool
    """JSON: each line's words with their boxes."""
    layout: bool
    """JSON: the page's `blocks` in reading order."""
    mode: TextMode = "skip"
    """PDF from a PDF: what its pages that have text get (`serving.outputs.pdf_text`)."""
    deskew: bool = False
    """PDF: each page shown straightened, its text layer with it (`serving.outputs.deskew`)."""


def wanted(request: Request) -> Wanted:
    """The request's `format` (or `Accept`), `words` and `layout` parameters, read before any
    work is done.

    Raises:
        ValidationFailed: `format` names no format, `words`, `layout` or `deskew` is neither
            true nor false, `mode` is not a mode (422).
        NotAcceptable: `Accept` names only media types not made here (406).
    """
    params = request.query_params
    return Wanted(
        format=negotiate(params.get("format"), request.headers.get("accept")),
        words=parse_flag("words", params.get("words", "false")),
        layout=parse_flag("layout", params.get("layout", "false")),
        mode=parse_mode(params.get("mode", "skip")),
        deskew=parse_flag("deskew", params.get("deskew", "false")),
    )


def content_disposition(filename: str) -> str:
    """`inline` with the file name, RFC 6266's way: quoted when plain ASCII, else RFC 5987's
    `filename*` (as Starlette's FileResponse writes it for a job's documents)."""
    quoted = urllib.parse.quote(filename)
    if quoted != filename:
        return f"inline; filename*=utf-8''{quoted}"
    return f'inline; filename="{filename}"'


def parse_mode(text: str) -> TextMode:
    """The `mode` of a searchable PDF made from a PDF (OCRmyPDF's): skip, force or redo.

    Raises:
        ValidationFailed: another value (422).
    """
    for mode in TEXT_MODES:
        if text == mode:
            return mode
    raise ValidationFailed(f"mode must be {choices_text(TEXT_MODES)}, got {text[:40]!r}")


def json_body(
    pages: list[PageOutput], want: Wanted, orders: Sequence[Sequence[Sequence[int]]] | None = None
) -> dict[str, Any]:
    """The native JSON answer: lines in PaddleOCR's order, with words and blocks when asked
    (`orders`: each page's, from `Renderer.reading_orders`)."""
    answer = []
    for index, page in enumerate(pages):
        blocks = None if orders is None else orders[index]
        body = page_json(page.result, words=want.words, layout=want.layout, blocks=blocks)
        answer.append(
            {
                "page": index,
                "width": body.pop("width"),
                "height": body.pop("height"),
                **page.scaled_note(),
                **body,
            }
        )
    return {"pages": answer}


async def answer(
    renderer: Renderer,
    pages: list[PageOutput],
    data: bytes,
    kind: FileKind,
    want: Wanted,
    *,
    name: str | None = None,
) -> Response:
    """The answer in the wanted format; a rendered one is made in a CPU worker and streamed,
    named after the upload (`name`, else "document"): the hOCR's and ALTO's source, the PDF's
    title, and the file name in `Content-Disposition` (`scan.png.pdf`, as a job's documents)."""
    headers = {request_id.HEADER: request_context.current_or_new()}
    if want.format == "json":  # charged until the client has read it (`serving.http.answers`)
        orders = None
        if want.layout:
            orders = await renderer.reading_orders([page.result for page in pages])
        return await charged_json(
            json_body(pages, want, orders), budget=renderer.budget, headers=headers
        )
    orders = await renderer.reading_orders([page.result for page in pages])
    document = Document(
        name=name or "document",
        pages=tuple(
            page_from_result(page.result, index, page.scaled_from, orders[index])
            for index, page in enumerate(pages)
        ),
        source=Source(media_type_of(data, pdf=kind == "pdf"), data),
        mode=want.mode,
        deskew=want.deskew,
    )
    stream = await renderer.render(document, want.format, source_bytes=len(data))
    headers["Content-Length"] = str(stream.size)
    headers["Content-Disposition"] = content_disposition(
        f"{name or 'document'}.{EXTENSIONS[want.format]}"
    )
    return StreamingResponse(
        stream,
        media_type=MEDIA_TYPES[want.format],
        headers=headers,
        background=BackgroundTask(stream.close),
    )
