"""Connections: how long a socket may stay silent, and how many sockets a client may hold.

Uvicorn's h11 protocol arms no timer until a whole request head has arrived (its keep-alive timer
runs only after an answer, and the first byte of a new request stops it), and its
`limit_concurrency` counts sockets as well as requests. So 512 sockets that sent nothing, or half a
request line, held every slot for ever: every later request, the probes included, got 503.

`guarded_h11` is uvicorn's protocol with what nginx (`client_header_timeout`, `limit_conn`) and Go
(`ReadHeaderTimeout`) have:

- a connection must deliver a whole request head within `header_timeout_s` of opening, and of
  its previous answer: past it, a socket that sent nothing is closed, and one that sent part of
  a head gets `408` and is closed;
- at most `max_connections` sockets in all, and `max_connections_per_client` from one address
  (the socket's peer: behind a proxy that is the proxy), answered `503` with `Retry-After` and
  closed at once beyond either; the health listener's sockets are not counted.

Requests, not sockets, are what `server.limit_concurrency` counts (`serving.http.listeners`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from dataclasses import dataclass

from uvicorn.protocols.http.h11_impl import H11Protocol

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectionLimits:
    """What one socket may cost; 0 turns a count off."""

    header_timeout_s: float
    """A whole request head must arrive within this of the socket opening or its last answer."""
    max_connections: int
    """Sockets open at once, every client together."""
    max_connections_per_client: int
    """Sockets open at once from one peer address."""
    retry_after_s: int
    """`Retry-After` on the 503 that refuses a socket past a count."""
    uncounted_port: int = 0
    """A local port whose sockets count against neither cap (`server.health_port`: the probes
    reach the server while the API's sockets are all taken); its sockets are timed all the same."""


def _raw_answer(status: str, message: str, extra: bytes = b"") -> bytes:
    """A whole HTTP/1.1 answer that closes the connection, written before any request was read
    (h11 sends nothing then), as JSON in the native error format."""
    body = json.dumps(
        {"error": {"code": status.split(" ", 1)[1].lower().replace(" ", "_"), "message": message}}
    ).encode()
    head = (
        f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n"
    ).encode()
    return head + extra + b"\r\n" + body


def guarded_h11(limits: ConnectionLimits) -> type[H11Protocol]:
    """Uvicorn's h11 protocol with `limits` (pass it as `uvicorn.Config(http=...)`); the returned
    class counts the sockets of the one server it serves."""
    per_client: Counter[str] = Counter()
    open_sockets = [0]

    class GuardedH11Protocol(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None
        _address: str | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if limits.uncounted_port and self.server and self.server[1] == limits.uncounted_port:
                self._watch_head()
                return
            self._address = self.client[0] if self.client else ""
            per_client[self._address] += 1
            open_sockets[0] += 1
            over = _over_limit(open_sockets[0], per_client[self._address], limits)
            if over:
                logger.warning("connection from %s refused: %s", self._address, over)
                retry = f"retry-after: {limits.retry_after_s}\r\n".encode()
                transport.write(_raw_answer("503 Service Unavailable", over, retry))
                transport.close()
                return
            self._watch_head()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._address is not None:
                open_sockets[0] -= 1
                per_client[self._address] -= 1
                if not per_client[self._address]:
                    del per_client[self._address]
                self._address = None
            self._cancel_head_timer()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self._watch_head()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._watch_head()

        def _awaiting_head(self) -> bool:
            return self.cycle is None or self.cycle.response_complete

        def _watch_head(self) -> None:
            """Time the wait for a request head (from its start), or stop timing it once a
            request is running."""
            if not self._awaiting_head():
                self._cancel_head_timer()
            elif self._head_timer is None and not self.transport.is_closing():
                self._head_timer = self.loop.call_later(
                    limits.header_timeout_s, self._head_timed_out
                )

        def _cancel_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timed_out(self) -> None:
            self._head_timer = None
            if self.transport.is_closing() or not self._awaiting_head():
                return
            pending, _closed = self.conn.trailing_data
            if pending:  # part of a head: say why (nginx and Apache answer 408 too)
                message = (
                    f"Request head not received within {limits.header_timeout_s:g} s "
                    "(server.header_timeout_s)"
                )
                self.transport.write(_raw_answer("408 Request Timeout", message))
            self.transport.close()

    return GuardedH11Protocol


def _over_limit(total: int, from_client: int, limits: ConnectionLimits) -> str | None:
    """Why a new socket is one too many, or None."""
    if limits.max_connections and total > limits.max_connections:
        return f"Too many connections ({limits.max_connections}, server.max_connections)"
    if limits.max_connections_per_client and from_client > limits.max_connections_per_client:
        return (
            f"Too many connections from one address ({limits.max_connections_per_client}, "
            "server.max_connections_per_client)"
        )
    return None
