"""The query parameters and form fields each `/v1` endpoint reads; any other is refused (422)
with its name, where it used to be dropped without a word (`/v1/ocr?lang=xx` answered 200 with
the default model's text). PaddleX's `/ocr` is not checked here: its body fields keep PaddleX's
own handling (`serving.http.paddlex_api`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Iterable

from starlette.requests import Request
from starlette.responses import Response

from serving.errors import ValidationFailed
from serving.jobs.hooks import FIELDS as HOOK_FIELDS
from serving.options import OPTIONS

Handler = Callable[[Request], Awaitable[Response]]

OCR_QUERY = (*OPTIONS, "format", "words", "layout", "mode", "deskew")
"""`/v1/ocr`: the OCR options (`serving.options.OPTIONS`, `lang` and `model` among them) and
what to answer with (`serving.http.ocr_outputs.wanted`)."""
RENDER_QUERY = ("page",)
JOB_QUERY = tuple(OPTIONS)
"""`POST /v1/jobs`: the OCR options, for every page of the job (or in its `options` field)."""
LIST_JOBS_QUERY = ("status", "limit")
RESULTS_QUERY = ("follow", "format", "after")
FORMAT_QUERY = ("format", "mode", "deskew")
"""A job's documents and archive: the format, and a searchable PDF's `mode` and `deskew`."""
NO_QUERY: tuple[str, ...] = ()
DOCUMENT_FIELDS = ("file",)
"""`/v1/ocr` and `/v1/render` in multipart: the document."""
JOB_FIELDS = ("file", "options", *HOOK_FIELDS)
"""`POST /v1/jobs`: the documents, their options, and the callback, export and storage inputs
(`serving.jobs.hooks.FIELDS`)."""


def check_query(request: Request, known: Collection[str]) -> None:
    """Refuse a query parameter the endpoint does not read.

    Raises:
        ValidationFailed: naming the unknown parameters and the known ones.
    """
    check_names(request.query_params.keys(), known, "query parameter")


def check_names(names: Iterable[str], known: Collection[str], what: str) -> None:
    """Refuse names (query parameters, form fields) not in `known`, in the order given.

    Raises:
        ValidationFailed: "Unknown query parameter 'foo'; this endpoint takes a, b".
    """
    unknown = list(dict.fromkeys(name for name in names if name not in known))
    if not unknown:
        return
    listed = ", ".join(repr(name[:40]) for name in unknown[:5])
    plural = "s" if len(unknown) > 1 else ""
    takes = ", ".join(known) if known else f"no {what}s"
    raise ValidationFailed(f"Unknown {what}{plural} {listed}; this endpoint takes {takes}")


def known_query(known: Collection[str], handler: Handler) -> Handler:
    """`handler`, after its request's query parameters were checked against `known`."""

    async def checked(request: Request) -> Response:
        check_query(request, known)
        return await handler(request)

    return checked
