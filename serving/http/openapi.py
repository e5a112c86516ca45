"""The OpenAPI 3 description of every endpoint, served at `/openapi.json`, with a page at `/docs`.

The description is written by hand, one entry per (path, method), and filtered to the routes the
app has, so `/openapi.json` never lists an endpoint that is not served. A unit test checks the
converse: every route the app serves is described here.
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib import resources

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route

from serving.http.endpoints import TIMEOUT_HEADER
from serving.http.openapi_schemas import JOB_HOOK_FIELDS, SCHEMAS, Json, bounds
from serving.options import OPTIONS, Option
from serving.outputs.document import TEXT_MODES
from serving.outputs.formats import FORMATS, MEDIA_TYPES

_BINARY: Json = {"type": "string", "format": "binary"}


def _ref(name: str) -> Json:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(description: str, schema: Json) -> Json:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*statuses: int, schema: str = "Error") -> dict[str, Json]:
    text = {
        404: "Not found",
        408: (
            "Upload stalled or too slow (`server.upload_idle_timeout_s`, `upload_timeout_s`, "
            "`upload_min_bytes_per_s`)"
        ),
        413: (
            "Body over `server.max_body_bytes` (jobs: `jobs.max_upload_bytes`), chunked or not; "
            "a form field over 64 KiB; or a body `server.memory_budget_bytes` could never hold"
        ),
        406: "No format this endpoint makes matches `Accept`",
        409: "Pages of the job are still to run (a document, or the archive of a running job)",
        415: "Unsupported content type",
        422: "Invalid input or parameters",
        429: "The key's quota: requests or streams open at once, rate, pages (with Retry-After)",
        502: "The object store named by an `input` could not be reached (`storage_unavailable`)",
        503: (
            "Not ready, overloaded or no memory-budget room for the body now (with Retry-After), "
            "or a worker unavailable"
        ),
        504: "Deadline (`server.request_timeout_s`) exceeded",
    }
    return {str(status): _json(text[status], _ref(schema)) for status in statuses}


def _query(name: str, schema: Json, description: str) -> Json:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "schema": schema,
        "description": description,
    }


_JOB_ID = {"name": "job_id", "in": "path", "required": True, "schema": {"type": "string"}}
_TIMEOUT = {
    "name": TIMEOUT_HEADER,
    "in": "header",
    "required": False,
    "schema": {"type": "number", "minimum": 0, "exclusiveMinimum": True},  # OpenAPI 3.0
    "description": "This request's deadline in seconds, at most `server.request_timeout_s`: a "
    "request the server cannot finish in time at its measured pace is shed at once (503), one "
    "not done by then gets 504",
}
_JSON_TYPES = {int: "integer", float: "number", bool: "boolean", str: "string"}


def _option_schema(name: str, option: Option) -> Json:
    schema: Json = {"type": _JSON_TYPES[option.kind], **bounds(name)}
    if option.choices:
        schema["enum"] = list(option.choices)
    return schema


_OCR_OPTIONS = [
    _query(name, _option_schema(name, option), option.description)
    for name, option in OPTIONS.items()
]
_MODE = _query(
    "mode",
    {"type": "string", "enum": list(TEXT_MODES), "default": "skip"},
    "A searchable PDF made from a PDF, as OCRmyPDF's --mode: pages that have text are kept as they "
    "are (skip), get the OCR layer over their text (force), or have an earlier OCR layer "
    "(invisible text) replaced by this one (redo)",
)
_DESKEW = _query(
    "deskew",
    {"type": "boolean", "default": False},
    "A searchable PDF with each page straightened, as OCRmyPDF's --deskew: the page image drawn "
    "turned back by the page's `skew` (not re-encoded; the page keeps its size), the text layer "
    "on the straightened page",
)
_OUTPUT_OPTIONS = [
    _query(
        "format",
        {"type": "string", "enum": list(FORMATS)},
        "Answer as JSON (default), plain text, hOCR, ALTO or a searchable PDF; else `Accept` "
        "chooses (application/json, text/plain, text/vnd.hocr+html, application/alto+xml or "
        "application/xml, application/pdf)",
    ),
    _query("words", {"type": "boolean"}, "JSON: each line's words with their boxes"),
    _query("layout", {"type": "boolean"}, "JSON: the page's blocks in reading order"),
    _MODE,
    _DESKEW,
]
_DOCUMENT_BODY: Json = {
    "required": True,
    "description": "The document: multipart field `file`, or the raw bytes typed as an image, "
    "a PDF or application/octet-stream (what it is is read from its bytes)",
    "content": {
        "multipart/form-data": {
            "schema": {"type": "object", "required": ["file"], "properties": {"file": _BINARY}}
        },
        "image/png": {"schema": _BINARY},
        "image/jpeg": {"schema": _BINARY},
        "application/pdf": {"schema": _BINARY},
        "application/octet-stream": {"schema": _BINARY},
    },
}
_TEXT = {"text/plain": {"schema": {"type": "string"}}}
_HTML = {"description": "HTML page", "content": {"text/html": {"schema": {"type": "string"}}}}

OPERATIONS: dict[tuple[str, str], Json] = {
    ("/ocr", "post"): {
        "summary": "PaddleX basic serving's OCR endpoint (drop-in)",
        "tags": ["ocr"],
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": _ref("PaddlexRequest")}},
        },
        "parameters": [_TIMEOUT],
        "responses": {
            "200": _json("Recognised pages in PaddleX's envelope", _ref("PaddlexEnvelope")),
            **_errors(408, 413, 422, 503, 504, schema="PaddlexEnvelope"),
        },
    },
    ("/v1/ocr", "post"): {
        "summary": "Recognise an image or a PDF",
        "tags": ["ocr"],
        "parameters": [*_OCR_OPTIONS, *_OUTPUT_OPTIONS, _TIMEOUT],
        "requestBody": _DOCUMENT_BODY,
        "responses": {
            "200": {
                "description": "One entry per page (JSON), or the document in the format asked "
                "for, its pages' blocks and lines in reading order",
                "content": {
                    "application/json": {"schema": _ref("OcrResult")},
                    **{
                        MEDIA_TYPES[fmt].split(";")[0]: {"schema": _BINARY}
                        for fmt in FORMATS
                        if fmt != "json"
                    },
                },
            },
            **_errors(406, 408, 413, 415, 422, 503, 504),
        },
    },
    ("/v1/render", "post"): {
        "summary": "One page as the server sees it, as PNG (the web page shows PDF pages with it)",
        "tags": ["ocr"],
        "parameters": [
            _query("page", {"type": "integer", "minimum": 0}, "0-based page, default 0")
        ],
        "requestBody": _DOCUMENT_BODY,
        "responses": {
            "200": {"description": "The page", "content": {"image/png": {"schema": _BINARY}}},
            **_errors(408, 413, 415, 422, 503),
        },
    },
    ("/v1/jobs", "post"): {
        "summary": "Submit a batch job: one or more `file` parts (images, PDFs, zips of them)",
        "tags": ["jobs"],
        "parameters": _OCR_OPTIONS,
        "requestBody": {
            "required": True,
            "content": {
                "multipart/form-data": {
                    "schema": {
                        "type": "object",
                        "description": "One or more `file` parts, or `input` fields, or both",
                        "properties": {
                            "file": {"type": "array", "items": _BINARY},
                            "options": {
                                "type": "string",
                                "description": "JSON object of options (at most 64 KiB)",
                            },
                            **JOB_HOOK_FIELDS,
                        },
                    }
                }
            },
        },
        "responses": {
            "202": _json("Accepted; `Location` names the job", _ref("Job")),
            **_errors(404, 408, 413, 415, 422, 502, 503),
        },
    },
    ("/v1/jobs", "get"): {
        "summary": "Jobs, newest first",
        "tags": ["jobs"],
        "parameters": [
            _query(
                "status",
                {
                    "type": "string",
                    "enum": ["queued", "running", "succeeded", "failed", "cancelled"],
                },
                "",
            ),
            _query("limit", {"type": "integer", "minimum": 1, "maximum": 1000}, "Default 100"),
        ],
        "responses": {
            "200": _json(
                "Jobs",
                {"type": "object", "properties": {"jobs": {"type": "array", "items": _ref("Job")}}},
            ),
            **_errors(404, 422),
        },
    },
    ("/v1/jobs/{job_id}", "get"): {
        "summary": "A job's status, counts, files and failed pages",
        "tags": ["jobs"],
        "parameters": [_JOB_ID],
        "responses": {"200": _json("The job", _ref("Job")), **_errors(404)},
    },
    ("/v1/jobs/{job_id}", "delete"): {
        "summary": "Cancel a job and delete it with its files and results",
        "tags": ["jobs"],
        "parameters": [_JOB_ID],
        "responses": {"200": _json("Deleted", {"type": "object"}), **_errors(404)},
    },
    ("/v1/jobs/{job_id}/results", "get"): {
        "summary": "Finished pages as NDJSON (following the job until it ends), or plain text",
        "tags": ["jobs"],
        "parameters": [
            _JOB_ID,
            _query(
                "follow",
                {"type": "boolean"},
                "Default true: stream until the job ends, or for jobs.follow_max_s",
            ),
            _query("format", {"type": "string", "enum": ["ndjson", "text"]}, "Default ndjson"),
            _query(
                "after",
                {"type": "integer", "minimum": 0},
                "Pages already received (NDJSON lines, or text pages): go on after them",
            ),
        ],
        "responses": {
            "200": {
                "description": "One JSON line per page, or text with pages ended by form feeds",
                "content": {"application/x-ndjson": {"schema": {"type": "string"}}, **_TEXT},
            },
            **_errors(404, 422, 429),
        },
    },
    ("/v1/jobs/{job_id}/documents", "get"): {
        "summary": "The job's documents: index, name, pages, pages done and failed, status",
        "tags": ["jobs"],
        "parameters": [_JOB_ID],
        "responses": {
            "200": _json(
                "One entry per uploaded document (a zip's entries each one), in upload order",
                {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string"},
                        "status": {"type": "string"},
                        "documents": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "properties": {
                                    "index": {"type": "integer"},
                                    "name": {"type": "string"},
                                    "kind": {"type": "string", "enum": ["pdf", "image"]},
                                    "pages": {"type": "integer"},
                                    "pages_done": {"type": "integer"},
                                    "pages_failed": {"type": "integer"},
                                    "status": {
                                        "type": "string",
                                        "enum": ["pending", "succeeded", "failed", "incomplete"],
                                    },
                                    "href": {"type": "string"},
                                },
                            },
                        },
                    },
                },
            ),
            **_errors(404),
        },
    },
    ("/v1/jobs/{job_id}/documents/{index}", "get"): {
        "summary": "One document in a format: JSON, text, hOCR, ALTO or a searchable PDF",
        "tags": ["jobs"],
        "parameters": [
            _JOB_ID,
            {"name": "index", "in": "path", "required": True, "schema": {"type": "integer"}},
            _query(
                "format",
                {"type": "string", "enum": list(FORMATS)},
                "Default: as `Accept` asks, else json. Pages that failed (or never ran in a "
                "cancelled job) come out without text",
            ),
            _MODE,
            _DESKEW,
        ],
        "responses": {
            "200": {
                "description": "The document, as a download",
                "content": {
                    MEDIA_TYPES[fmt].split(";")[0]: {
                        "schema": {"type": "object"} if fmt == "json" else _BINARY
                    }
                    for fmt in FORMATS
                },
            },
            **_errors(404, 406, 409, 413, 422, 503),
        },
    },
    ("/v1/jobs/{job_id}/archive", "get"): {
        "summary": "Every document of a finished job in one format, as a zip streamed as made",
        "tags": ["jobs"],
        "parameters": [
            _JOB_ID,
            _query("format", {"type": "string", "enum": list(FORMATS)}, "Default json"),
            _MODE,
            _DESKEW,
        ],
        "responses": {
            "200": {
                "description": "A zip: each document as NAME.EXT (NAME.EXT.error.json if it "
                "could not be made)",
                "content": {"application/zip": {"schema": _BINARY}},
            },
            **_errors(404, 409, 422),
        },
    },
    ("/v1/jobs/{job_id}/cancel", "post"): {
        "summary": "Stop a job, keeping what it finished",
        "tags": ["jobs"],
        "parameters": [_JOB_ID],
        "responses": {"200": _json("The job", _ref("Job")), **_errors(404)},
    },
    ("/v1/models", "get"): {
        "summary": "The model sets served: each one's languages (`lang`), models, and the device"
        " workers running it with their engine and precision; the default; sets left out, with why",
        "tags": ["ocr"],
        "responses": {
            "200": _json("The model sets", {"type": "object"}),
            **_errors(422),
        },
    },
    ("/health", "get"): {
        "summary": "PaddleX's health answer",
        "tags": ["operations"],
        "responses": {"200": _json("Healthy", _ref("PaddlexEnvelope"))},
    },
    ("/livez", "get"): {
        "summary": "The process answers",
        "tags": ["operations"],
        "responses": {"200": _json("Alive", {"type": "object"})},
    },
    ("/readyz", "get"): {
        "summary": "Ready once every device worker has loaded its models and run a warm-up page"
        " (the parts' state, pids and start-up error only to loopback callers)",
        "tags": ["operations"],
        "responses": {
            "200": _json("Ready", _ref("Readiness")),
            "503": _json("Not ready yet (or start-up failed)", _ref("Readiness")),
        },
    },
    ("/metrics", "get"): {
        "summary": "Prometheus metrics (text exposition format)",
        "tags": ["operations"],
        "responses": {"200": {"description": "Metrics", "content": _TEXT}},
    },
    ("/openapi.json", "get"): {
        "summary": "This description",
        "tags": ["operations"],
        "responses": {"200": _json("OpenAPI 3", {"type": "object"})},
    },
    ("/docs", "get"): {
        "summary": "API documentation page",
        "tags": ["pages"],
        "responses": {"200": _HTML},
    },
    ("/", "get"): {
        "summary": "Web page to try OCR",
        "tags": ["pages"],
        "responses": {"200": _HTML},
    },
    ("/static/{path}", "get"): {
        "summary": "Files of the web pages",
        "tags": ["pages"],
        "parameters": [
            {"name": "path", "in": "path", "required": True, "schema": {"type": "string"}}
        ],
        "responses": {"200": {"description": "The file"}, "404": {"description": "No such file"}},
    },
}


def served_operations(routes: Iterable[BaseRoute]) -> set[tuple[str, str]]:
    """(path, method) of every endpoint in `routes`; a mount counts as `{path}/{path}` GET."""
    served: set[tuple[str, str]] = set()
    for route in routes:
        if isinstance(route, Route):
            for method in route.methods or ():
                if method != "HEAD":
                    served.add((route.path, method.lower()))
        elif isinstance(route, Mount):
            served.add((f"{route.path}/{{path}}", "get"))
    return served


def build_spec(routes: Iterable[BaseRoute]) -> Json:
    """The OpenAPI document for the endpoints among `routes`."""
    served = served_operations(routes)
    paths: dict[str, Json] = {}
    for (path, method), operation in OPERATIONS.items():
        if (path, method) in served:
            paths.setdefault(path, {})[method] = operation
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "ocr-serving",
            "version": "0.1.0",
            "description": "OCR over HTTP: a PaddleX-compatible `/ocr`, a native `/v1` API, batch "
            "jobs and operations endpoints. Every response carries `X-Request-ID` (the client's, "
            "or a new one).",
        },
        "paths": paths,
        "components": {"schemas": SCHEMAS},
    }


async def openapi_json(request: Request) -> Response:
    """`GET /openapi.json`: this server's OpenAPI document."""
    return JSONResponse(build_spec(request.app.routes))


async def docs(request: Request) -> Response:
    """`GET /docs`: a page that renders `/openapi.json` (no external assets)."""
    page = resources.files("serving.http").joinpath("static/docs.html").read_text(encoding="utf-8")
    return HTMLResponse(page)


ROUTES = [
    Route("/openapi.json", openapi_json, methods=["GET"]),
    Route("/docs", docs, methods=["GET"]),
]
