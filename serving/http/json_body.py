"""`/ocr`'s JSON body, parsed without letting a client stall the event loop or build millions of
Python objects.

`json.loads` builds every object before anything can look at it: 60 MB of `[{},{},...]` (20
million dicts, ~2.4 GB of objects per 100 MiB) took 3 s on the event loop before its 422, while
every other request, `/livez` included, waited. An `/ocr` request is one object of scalars (the
file is one base64 string), so before parsing, the objects and arrays a body could open (every
`{` and `[`: base64 has none) are counted, 1 MiB at a time in a thread; past `MAX_CONTAINERS` the
body is refused with 422 without being parsed. A large body that passes is parsed in a thread.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from serving.errors import ValidationFailed
from serving.http import paddlex_api

MAX_CONTAINERS = 64
"""Objects and arrays an `/ocr` body may open; its own fields open none but itself."""
OFF_LOOP_BYTES = 256 * 1024
"""Bodies from this size are scanned and parsed in a thread."""
_CHUNK = 1024 * 1024


def containers_within(raw: bytes, limit: int = MAX_CONTAINERS) -> bool:
    """Whether `raw` has at most `limit` `{` and `[` bytes (an upper bound on the objects and
    arrays it opens, and on its nesting). Counted a chunk at a time, so another thread runs
    between chunks, and stopped as soon as the count passes `limit`."""
    seen = 0
    for start in range(0, len(raw), _CHUNK):
        end = start + _CHUNK
        seen += raw.count(b"{", start, end) + raw.count(b"[", start, end)
        if seen > limit:
            return False
    return True


def load_checked(raw: bytes) -> Any:
    """The body's JSON value, once its containers are counted.

    Raises:
        ValidationFailed: more than `MAX_CONTAINERS` objects and arrays, or not JSON
            (`paddlex_api.load_body`), with PaddleX's problem list.
    """
    if not containers_within(raw):
        message = (
            f"the body opens more than {MAX_CONTAINERS} JSON objects and arrays; an /ocr "
            "request is one object of fields, its file one base64 string"
        )
        problem = [{"type": "json_invalid", "loc": "body", "msg": message}]
        raise ValidationFailed(json.dumps(problem))
    return paddlex_api.load_body(raw)


async def load(raw: bytes) -> Any:
    """`load_checked(raw)`, in a thread for bodies from `OFF_LOOP_BYTES`."""
    if len(raw) < OFF_LOOP_BYTES:
        return load_checked(raw)
    return await asyncio.to_thread(load_checked, raw)
