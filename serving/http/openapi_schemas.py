"""The OpenAPI component schemas: errors, PaddleX envelopes, OCR results, readiness, jobs."""

from __future__ import annotations

import math
from typing import Any

from pipelines.types import LIMIT_TYPES
from serving.options import OPTIONS

Json = dict[str, Any]


def bounds(name: str) -> Json:
    """JSON Schema `minimum` and `maximum` of an OCR option (`serving.options.OPTIONS`); none for
    an option without bounds, or with unbounded ones (JSON has no infinity)."""
    low, high = OPTIONS[name].bounds or (-math.inf, math.inf)
    if math.isinf(low) or math.isinf(high):
        return {}
    return {"minimum": low, "maximum": high}


_ERROR: Json = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message", "request_id"],
            "properties": {
                "code": {"type": "string", "example": "invalid_input"},
                "message": {"type": "string"},
                "request_id": {"type": "string"},
            },
        }
    },
}
_ENVELOPE: Json = {
    "type": "object",
    "required": ["logId", "errorCode", "errorMsg"],
    "properties": {
        "logId": {"type": "string", "description": "The request's logId, else the request id"},
        "errorCode": {"type": "integer", "description": "0, or the HTTP status on errors"},
        "errorMsg": {"type": "string"},
        "result": {
            "type": "object",
            "description": "`ocrResults[]` (`prunedResult`, and `ocrImage`/`inputImage` when "
            "visualised) and `dataInfo`, as PaddleX basic serving",
        },
    },
}
_LINE: Json = {
    "type": "object",
    "required": ["text", "score", "box"],
    "properties": {
        "text": {"type": "string"},
        "score": {"type": "number"},
        "box": {
            "type": "array",
            "description": "Four [x, y] corners in page pixels, clockwise from top left",
            "items": {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2},
        },
        "words": {
            "type": "array",
            "description": "With `words=true`: the line's words (runs between spaces; a run of "
            "CJK characters is one word), placed from the recogniser's alignment",
            "items": {
                "type": "object",
                "required": ["text", "box", "score"],
                "properties": {
                    "text": {"type": "string"},
                    "box": {
                        "type": "array",
                        "description": "[x0, y0, x1, y1] in page pixels",
                        "items": {"type": "integer"},
                        "minItems": 4,
                        "maxItems": 4,
                    },
                    "score": {"type": "number"},
                },
            },
        },
    },
}
_PAGE: Json = {
    "type": "object",
    "required": ["page", "width", "height", "lines"],
    "properties": {
        "page": {"type": "integer", "description": "0-based"},
        "width": {"type": "integer"},
        "height": {"type": "integer"},
        "skew": {
            "type": "number",
            "description": "How far the page's lines are turned from level, in degrees "
            "counter-clockwise (positive: lines rise to the right), from its detected line boxes; "
            "`deskew=true` turns the page back by it",
        },
        "scaled_from": {
            "type": "object",
            "description": "Present when the page was decoded smaller than sent (its longer "
            "side over input.max_page_side_px, or too large for the memory budget): the size "
            "as sent; width, height and boxes are in the decoded page's pixels",
            "required": ["width", "height"],
            "properties": {"width": {"type": "integer"}, "height": {"type": "integer"}},
        },
        "lines": {"type": "array", "items": {"$ref": "#/components/schemas/Line"}},
        "blocks": {
            "type": "array",
            "description": "With `layout=true`: blocks (paragraphs) in reading order, columns "
            "one after another; `lines` are indices into the page's `lines`",
            "items": {
                "type": "object",
                "required": ["box", "lines"],
                "properties": {
                    "box": {"type": "array", "items": {"type": "integer"}},
                    "lines": {"type": "array", "items": {"type": "integer"}},
                },
            },
        },
    },
}
_JOB: Json = {
    "type": "object",
    "required": ["id", "status", "pages_total", "pages_done", "pages_failed", "created_at"],
    "properties": {
        "id": {"type": "string"},
        "status": {
            "type": "string",
            "enum": ["queued", "running", "succeeded", "failed", "cancelled"],
        },
        "pages_total": {"type": "integer"},
        "pages_done": {"type": "integer"},
        "pages_failed": {"type": "integer"},
        "created_at": {"type": "string", "format": "date-time"},
        "started_at": {"type": "string", "format": "date-time", "nullable": True},
        "finished_at": {"type": "string", "format": "date-time", "nullable": True},
        "owner": {
            "type": "string",
            "nullable": True,
            "description": "Id of the API key that submitted it (null: authentication off)",
        },
        "options": {"type": "object"},
        "files": {"type": "array", "items": {"type": "object"}},
        "failed_pages": {"type": "array", "items": {"type": "object"}},
        "callback": {
            "type": "object",
            "description": "Its `callback_url` (without its query) and `events`",
        },
        "output": {
            "type": "object",
            "description": "Where its outputs are exported: `location` (s3://), `urls` (presigned "
            "PUT URLs, without their query), `formats`",
        },
        "deliveries": {
            "type": "array",
            "description": "With a callback or an output: each webhook and export, its `status` "
            "(pending, delivered, failed), `attempts`, `next_attempt_at`, `last_error` and the "
            "`log` of its last attempts",
            "items": {"type": "object"},
        },
    },
}
JOB_HOOK_FIELDS: Json = {
    "callback_url": {
        "type": "string",
        "description": "POSTed a signed event (Standard Webhooks) when the job ends; hosts "
        "allow-listed in `webhooks.allowed_hosts`",
    },
    "callback_events": {
        "type": "string",
        "description": "Comma-separated: `job` (default: its end), `document` (each document's)",
    },
    "input": {
        "type": "array",
        "items": {"type": "string"},
        "description": "Documents to read: s3://bucket/key, s3://bucket/prefix/, or presigned "
        "GET URLs (hosts in `storage.url_allowed_hosts`)",
    },
    "output": {
        "type": "string",
        "description": "s3://bucket/prefix/: `results.jsonl` and each document are written there "
        "when the job ends",
    },
    "output_urls": {
        "type": "string",
        "description": "JSON object: output name (`results.jsonl`, `NAME.EXT`) to a presigned "
        "PUT URL",
    },
    "output_formats": {
        "type": "string",
        "description": "Comma-separated formats each document is exported in (default json)",
    },
}
_PADDLEX_REQUEST: Json = {
    "type": "object",
    "required": ["file"],
    "properties": {
        "file": {"type": "string", "description": "Base64 of the file (URLs are refused)"},
        "fileType": {
            "type": "integer",
            "enum": [0, 1],
            "nullable": True,
            "description": "0 PDF, 1 image",
        },
        "useDocOrientationClassify": {"type": "boolean", "nullable": True},
        "useDocUnwarping": {"type": "boolean", "nullable": True},
        "useTextlineOrientation": {"type": "boolean", "nullable": True},
        "textDetLimitSideLen": {
            "type": "integer",
            "minimum": 0,
            "maximum": bounds("det_limit_side_len")["maximum"],
            "nullable": True,
            "description": "0: the default",
        },
        "textDetLimitType": {
            "type": "string",
            "enum": list(LIMIT_TYPES),
            "nullable": True,
        },
        "textDetThresh": {"type": "number", **bounds("det_thresh"), "nullable": True},
        "textDetBoxThresh": {"type": "number", **bounds("det_box_thresh"), "nullable": True},
        "textDetUnclipRatio": {"type": "number", **bounds("det_unclip_ratio"), "nullable": True},
        "textRecScoreThresh": {"type": "number", **bounds("score_thresh"), "nullable": True},
        "returnWordBox": {"type": "boolean", "nullable": True},
        "visualize": {"type": "boolean", "nullable": True},
        "logId": {
            "type": "string",
            "nullable": True,
            "maxLength": 128,
            "description": "Echoed in the answer: printable characters only, else 422",
        },
    },
}
SCHEMAS: dict[str, Json] = {
    "Error": _ERROR,
    "PaddlexRequest": _PADDLEX_REQUEST,
    "PaddlexEnvelope": _ENVELOPE,
    "Line": _LINE,
    "Page": _PAGE,
    "OcrResult": {
        "type": "object",
        "required": ["pages"],
        "properties": {"pages": {"type": "array", "items": {"$ref": "#/components/schemas/Page"}}},
    },
    "Readiness": {
        "type": "object",
        "required": ["ready"],
        "properties": {
            "ready": {"type": "boolean"},
            "devices": {
                "type": "object",
                "description": "Loopback callers only, as the rest. Per device worker: ready, "
                "pid, restarts, precision and precision_reason (which precision its models run "
                "at and why, e.g. OpenVINO's auto choice for this CPU); OpenVINO workers "
                "under auto or int8: precision_checks (per model: what this CPU's precision "
                "check measured, CER and merged words at f32 and each precision tried, the "
                "verdict, measured_at, cache hit or fresh); torch workers: compile "
                "and compile_reason (compiled or eager, and why)",
            },
            "cpu_workers": {"type": "object"},
            "gpu_engine": {
                "type": "object",
                "description": "Which engine GPU device workers run and why: setting "
                "(engine.gpu_backend), backend (torch, paddle, or cpu: none here uses a GPU), "
                "gpus, reason",
            },
            "error": {"type": "string"},
        },
    },
    "Job": _JOB,
}
