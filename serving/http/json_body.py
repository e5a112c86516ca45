"""`/ocr`'s JSON body, parsed without letting a client stall the event loop or build millions of
Python objects.

`json.loads` builds every object before anything can look at it: 60 MB of `[{},{},...]` (20
million dicts, ~2.4 GB of objects per 100 MiB) took 3 s on the event loop before its 422, while
every other request, `/livez` included, waited. An `/ocr` request is one object of scalars (the
file is one base64 string), so before parsing, the objects and arrays a body could open (every
`{` and `[`: base64 has none) are counted, 1 MiB at a time in a thread; past `MAX_CONTAINERS` the
body is refused with 422 without being parsed. A large body that passes is parsed in a thread.

Counting containers left flat JSON: `{"k0":0,"k1":0,...}` opens one object, passed, and was
parsed in a thread that holds the GIL for the whole parse (~7 s of a frozen event loop per 100
MiB, the probes included), building ~13.6 bytes of objects per body byte where 3 were charged
(issue 49, item 3). So its `,` and `:` bytes (an upper bound on its members and elements; base64
has none) are counted too, past `MAX_SEPARATORS` refused unparsed; what passes builds a few
strings. Those are charged for what the parse really takes (`parse_bytes`): an ASCII body's
strings take a byte a character, but one character above U+00FF (sent as UTF-8 or as a `\\u`
escape) makes the text and its string two or four bytes a character (8 bytes per body byte at
the parse's peak, measured with tracemalloc), so such a body is charged for that before it is
parsed.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from serving.errors import ValidationFailed
from serving.http import paddlex_api
from serving.scheduling.memory_budget import BodyCharge

MAX_CONTAINERS = 64
"""Objects and arrays an `/ocr` body may open; its own fields open none but itself."""
MAX_SEPARATORS = 1024
"""`,` and `:` bytes an `/ocr` body may hold: two a field (about 15 fields), and those in its
strings (a `logId` of at most 128 characters, a URL): a flat object of a million members has a
million of each."""
WIDE_PARSE_COPIES = 8
"""Bytes the parse holds per body byte at its peak (the decoded text and the parsed string, four
bytes a character each) when the body has a character above U+00FF; 2 for plain ASCII, which
`body_limit.PADDLEX` already charges."""
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


def separators_within(raw: bytes, limit: int = MAX_SEPARATORS) -> bool:
    """Whether `raw` has at most `limit` `,` and `:` bytes, counted as `containers_within`."""
    seen = 0
    for start in range(0, len(raw), _CHUNK):
        end = start + _CHUNK
        seen += raw.count(b",", start, end) + raw.count(b":", start, end)
        if seen > limit:
            return False
    return True


def parse_bytes(raw: bytes) -> int:
    """Bytes the parse of `raw` holds beyond `raw` at its peak, which `body_limit.PADDLEX` does
    not already charge: none for an ASCII body without `\\u` escapes (a byte a character), else
    `WIDE_PARSE_COPIES` - 2 bytes per body byte."""
    if raw.isascii() and b"\\u" not in raw:
        return 0
    return (WIDE_PARSE_COPIES - 2) * len(raw)


def _refuse(message: str) -> ValidationFailed:
    problem = [{"type": "json_invalid", "loc": "body", "msg": message}]
    return ValidationFailed(json.dumps(problem))


def load_checked(raw: bytes) -> Any:
    """The body's JSON value, once its containers and separators are counted.

    Raises:
        ValidationFailed: more than `MAX_CONTAINERS` objects and arrays or `MAX_SEPARATORS`
            separators, or not JSON (`paddlex_api.load_body`), with PaddleX's problem list.
    """
    if not containers_within(raw):
        raise _refuse(
            f"the body opens more than {MAX_CONTAINERS} JSON objects and arrays; an /ocr "
            "request is one object of fields, its file one base64 string"
        )
    if not separators_within(raw):
        raise _refuse(
            f"the body has more than {MAX_SEPARATORS} ',' and ':'; an /ocr request is one "
            "object of a few fields, its file one base64 string"
        )
    return paddlex_api.load_body(raw)


async def load(raw: bytes, charge: BodyCharge | None = None) -> Any:
    """`load_checked(raw)`, in a thread for bodies from `OFF_LOOP_BYTES`; what the parse takes
    beyond the body's own charge (`parse_bytes`) is added to `charge` first.

    Raises:
        ValidationFailed: see `load_checked`.
        PayloadTooLarge: the parse could never be held in the memory budget (413).
        Overloaded: the budget has no room for it now (503).
    """
    if len(raw) < OFF_LOOP_BYTES:
        return load_checked(raw)
    extra = await asyncio.to_thread(parse_bytes, raw)
    if extra and charge is not None:
        charge.add_bytes(extra)
    return await asyncio.to_thread(load_checked, raw)
