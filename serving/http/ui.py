"""The web page at `/` to try OCR in a browser, its static files, and `/v1/render` for PDF pages."""

from __future__ import annotations

from importlib import resources

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from serving.errors import ValidationFailed
from serving.http.answers import ChargedAnswer
from serving.http.auth import identity_of
from serving.http.body_limit import RAW, limit_body
from serving.http.endpoints import config_of, observed, ocr_of, until_disconnect
from serving.http.exceptions import native_errors
from serving.http.params import RENDER_QUERY, known_query
from serving.http.uploads import read_document

STATIC = resources.files("serving.http").joinpath("static")


async def index(request: Request) -> Response:
    """`GET /`: upload an image or a PDF, see its boxes and text."""
    return HTMLResponse(STATIC.joinpath("index.html").read_text(encoding="utf-8"))


async def render(request: Request) -> Response:
    """`POST /v1/render?page=N`: page N of the posted document as PNG (body as `/v1/ocr`)."""
    ocr = ocr_of(request)
    ocr.check_ready()
    page_text = request.query_params.get("page", "0")
    if not page_text.isdigit() or len(page_text) > 6:
        raise ValidationFailed("page must be a page number counted from 0")
    data, kind = await read_document(request)
    png, held = await until_disconnect(
        request,
        ocr.render_page(
            data,
            kind,
            int(page_text),
            timeout_s=config_of(request).server.request_timeout_s,
            tenant=identity_of(request),
        ),
    )
    # Charged until sent, as the JSON answers (`serving.http.answers`): a client reading it
    # slowly, or never, holds its room in the budget, not memory outside it.
    return ChargedAnswer(png, held=held, media_type="image/png")


ROUTES = [
    Route("/", index, methods=["GET"]),
    Route(
        "/v1/render",
        observed("/v1/render", limit_body(RAW, native_errors(known_query(RENDER_QUERY, render)))),
        methods=["POST"],
    ),
    Mount("/static", app=StaticFiles(directory=str(STATIC)), name="static"),
]
