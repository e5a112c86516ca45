"""Request bodies counted as they arrive: 413 as soon as a body passes its endpoint's cap, and every
byte charged to the memory budget while the request runs.

A limit checked against Content-Length alone let a chunked body (no Content-Length) be read whole:
700 MB were buffered before the answer. Starlette's `max_part_size` caps multipart fields, not
file parts. So the endpoint reads its body through a `receive` that counts: past the cap it raises
`PayloadTooLarge`, which the endpoint answers in its own format without reading the rest (and
Uvicorn closes the connection), whatever the framing, content type or number of parts.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message

from serving.config import AppConfig
from serving.errors import PayloadTooLarge
from serving.http.endpoints import Handler, budget_of, config_of
from serving.scheduling.memory_budget import BodyCharge


@dataclass(frozen=True, slots=True, kw_only=True)
class BodyLimit:
    """An endpoint's body cap, and what its body costs in memory."""

    setting: str
    """The config key holding the cap, e.g. "server.max_body_bytes" (named in the 413)."""
    copies: int
    """Bytes of memory held per body byte while the request runs (`BodyCharge`); 0 for bodies
    spooled to disk."""

    def max_bytes(self, config: AppConfig) -> int:
        """The cap's value in `config`."""
        value: int = operator.attrgetter(self.setting)(config)
        return value


RAW = BodyLimit(setting="server.max_body_bytes", copies=2)
"""`/v1/ocr` and `/v1/render`: a raw body (its chunks and their joined copy while it arrives,
then the body and its shared-memory copy), or a multipart file (spooled to disk past 1 MiB, then
read into memory, plus its shared-memory copy)."""
PADDLEX = BodyLimit(setting="server.max_body_bytes", copies=3)
"""`/ocr`: the JSON text while it is parsed, the parsed base64 string, and the decoded file and
its shared-memory copy (3/4 of the text each)."""
JOBS = BodyLimit(setting="jobs.max_upload_bytes", copies=0)
"""`/v1/jobs`: files spooled to disk (past 1 MiB each) and copied into the job's folder."""


def limit_body(limit: BodyLimit, handler: Handler) -> Handler:
    """`handler`, reading its request's body through `limit`: 413 past the cap (declared or
    counted), and the body charged to the memory budget until the handler returns (503 with
    Retry-After when the budget has no room for it now). The errors are raised while the body is
    read, so that the handler answers them in its own format. An answer given before the body's
    end closes the connection: Uvicorn would otherwise read (and drop) the rest of the body."""

    async def wrapper(request: Request) -> Response:
        with BodyCharge(budget_of(request), copies=limit.copies) as charge:
            request.scope[_CHARGE] = charge
            meter = _Meter(request, limit.max_bytes(config_of(request)), limit.setting, charge)
            response = await handler(Request(request.scope, meter.receive))
        if not meter.finished:
            response.headers["Connection"] = "close"
        return response

    return wrapper


_CHARGE = "ocr.body_charge"
"""The scope key of the request's `BodyCharge` (`body_charge_of`)."""


def body_charge_of(request: Request) -> BodyCharge | None:
    """The request body's charge to the memory budget, to add what handling it takes (the
    parse of `/ocr`'s JSON); None outside `limit_body`."""
    charge = request.scope.get(_CHARGE)
    return charge if isinstance(charge, BodyCharge) else None


class _Meter:
    """`request.receive`, raising once the body passes `max_bytes` and charging each chunk."""

    def __init__(self, request: Request, max_bytes: int, setting: str, charge: BodyCharge) -> None:
        self.request = request
        self.max_bytes = max_bytes
        self.setting = setting
        self.charge = charge
        self.received = 0
        self.started = False
        self.finished = False
        """The body's last chunk has arrived."""

    async def receive(self) -> Message:
        if not self.started:  # at the first read: refused before any byte is taken
            self.started = True
            self._check_declared()
        message = await self.request.receive()
        if message["type"] == "http.request":
            size = len(message.get("body", b""))
            self.received += size
            if self.received > self.max_bytes:
                raise PayloadTooLarge(
                    f"Request body over the limit of {self.max_bytes} bytes ({self.setting})"
                )
            self.charge.add(size)
            self.finished = not message.get("more_body", False)
        return message

    def _check_declared(self) -> None:
        declared = self.request.headers.get("content-length", "")
        if not declared.isdigit():
            return
        if int(declared) > self.max_bytes:
            raise PayloadTooLarge(
                f"Request body of {declared} bytes; the limit is {self.max_bytes} ({self.setting})"
            )
        self.charge.check(int(declared))
