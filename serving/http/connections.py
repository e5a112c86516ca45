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
  closed at once beyond either; the health listener's sockets are not counted. At the global
  cap a new socket first evicts the oldest one that runs no request (idle after an answer, or
  still without a whole head), and is refused only when every socket runs one: before, a client
  about to send a whole request was refused like an idle one, so 8 addresses holding 256 idle
  sockets each kept everyone out, header timeout after header timeout (issue 49, item 5).

- a client that stops reading its answer (uvicorn waits on it for ever, holding the answer and
  the memory budget it is charged to) is disconnected once it has taken no byte for
  `send_idle_timeout_s` while more wait than the socket takes; the answer's task then ends, and
  gives back its charge (`serving.http.answers`). So is one that reads, but slower than
  `send_min_bytes_per_s` on average since its answer first waited on it (looked at every
  `send_idle_timeout_s`): before, a client taking 1 KiB every 25 s kept its answer, its request
  slot and its charge for hours (issue 49).

Requests, not sockets, are what `server.limit_concurrency` counts (`serving.http.listeners`).

An answer given before the request has arrived whole (a 413 at the body's cap, a 408, the 503
above) is followed by a *lingering close*, as nginx's: the server stops writing (FIN), then reads
and drops what the client still sends, for at most `LINGER_S` (`LINGER_IDLE_S` without a byte) and
`LINGER_BYTES`, before it closes. A plain close with unread bytes makes the kernel reset the
connection, and the client, still uploading, saw `Connection reset by peer` instead of the answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import socket
import struct
import termios
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from serving.scheduling.retry_after import retry_after_s

logger = logging.getLogger(__name__)

LINGER_S = 5.0
"""A lingering close reads what the client still sends for at most this long..."""
LINGER_IDLE_S = 1.0
"""...and closes once the client has sent nothing for this long..."""
LINGER_BYTES = 256 * 1024 * 1024
"""...or once this much has been read and dropped."""


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
    send_idle_timeout_s: float = 0.0
    """A client that takes none of the answer's bytes for this long, while more wait than the
    socket takes, is disconnected; 0: never."""
    send_min_bytes_per_s: float = 0.0
    """A client that takes its answer slower than this on average, from when the answer first
    waited on it, is disconnected (looked at every `send_idle_timeout_s`); 0: any rate."""
    uncounted_port: int = 0
    """A local port whose sockets count against neither cap (`server.health_port`: the probes
    reach the server while the API's sockets are all taken); its sockets are timed all the same."""
    max_uncounted_connections: int = 0
    """Sockets open at once on `uncounted_port`, a cap of their own
    (`server.max_health_connections`: the probes are a few; before, any number was held there,
    file descriptors included); 0 = none."""


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
    probe_sockets = [0]
    """Sockets on `uncounted_port`."""
    counted: dict[GuardedH11Protocol, None] = {}
    """The counted sockets, oldest first (the order eviction looks in)."""

    class GuardedH11Protocol(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None
        _address: str | None = None
        _raw: asyncio.Transport
        _lost = False
        _linger_timer: asyncio.TimerHandle | None = None
        _lingered = -1
        """Bytes read and dropped while lingering; -1: not lingering."""
        _linger_deadline = 0.0
        _last_byte_at = 0.0
        _refused = False
        _probe = False
        """A socket on `uncounted_port` (counted in `probe_sockets`)."""
        _send_timer: asyncio.TimerHandle | None = None
        _send_began = 0.0
        """When the answer began to wait on the client (`pause_writing`), while it does."""
        _taken_at_start = 0
        _taken_at_check = 0
        """Bytes the socket had taken from us when the wait began, and at the last look."""

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._raw = transport
            self.transport = _LingerOnClose(transport, self._close)  # type: ignore[assignment]
            if limits.uncounted_port and self.server and self.server[1] == limits.uncounted_port:
                self._probe = True
                probe_sockets[0] += 1
                if limits.max_uncounted_connections and (
                    probe_sockets[0] > limits.max_uncounted_connections
                ):
                    logger.warning(
                        "probe connection refused: %d open (server.max_health_connections)",
                        limits.max_uncounted_connections,
                    )
                    transport.abort()  # no answer: the probes' own port, flooded
                    return
                self._watch_head()
                return
            self._address = self.client[0] if self.client else ""
            per_client[self._address] += 1
            open_sockets[0] += 1
            counted[self] = None
            over = _over_limit(open_sockets[0], per_client[self._address], limits)
            if over == _ALL and self._evict_one():
                over = None
            if over == _ALL:
                over = (
                    f"Too many connections ({limits.max_connections}, server.max_connections), "
                    "each running a request"
                )
            if over:
                logger.warning("connection from %s refused: %s", self._address, over)
                retry = f"retry-after: {retry_after_s(limits.retry_after_s)}\r\n".encode()
                transport.write(_raw_answer("503 Service Unavailable", over, retry))
                self._refused = True  # its request may be on the way: linger
                self.transport.close()
                return
            self._watch_head()

        def connection_lost(self, exc: Exception | None) -> None:
            self._lost = True
            if self._probe:
                self._probe = False
                probe_sockets[0] -= 1
            if self._linger_timer is not None:
                self._linger_timer.cancel()
                self._linger_timer = None
            self._uncount()
            self._cancel_head_timer()
            self._cancel_send_timer()
            super().connection_lost(exc)

        def _uncount(self) -> None:
            """Leave the counts (once)."""
            if self._address is not None:
                open_sockets[0] -= 1
                per_client[self._address] -= 1
                if not per_client[self._address]:
                    del per_client[self._address]
                counted.pop(self, None)
                self._address = None

        def _evict_one(self) -> bool:
            """Close the oldest other counted socket that runs no request, to make room for
            this one; False when every one runs a request."""
            victim = next(
                (
                    conn
                    for conn in counted
                    if conn is not self and (conn._refused or conn._awaiting_head())
                ),
                None,
            )
            if victim is None:
                return False
            victim._evict()
            return True

        def _evict(self) -> None:
            """Closed for a newer socket at `max_connections`: it ran no request. One that sent
            part of a head gets the header timeout's 408 first."""
            logger.debug("connection from %s evicted at server.max_connections", self._address)
            self._uncount()
            self._cancel_head_timer()
            if self.transport.is_closing():
                self._raw.abort()  # lingering already: drop it now
                return
            pending, _closed = self.conn.trailing_data
            if pending:
                message = (
                    f"Connections are at their cap ({limits.max_connections}, "
                    "server.max_connections) and this one has sent no whole request"
                )
                self.transport.write(_raw_answer("408 Request Timeout", message))
            self._raw.close()  # no lingering: its file descriptor goes now, as its count did

        def data_received(self, data: bytes) -> None:
            if self._lingered >= 0:  # answered and closing: dropped
                self._lingered += len(data)
                self._last_byte_at = self.loop.time()
                if self._lingered > LINGER_BYTES:
                    self._raw.close()
                return
            super().data_received(data)
            self._watch_head()

        def eof_received(self) -> None:
            if self._lingered >= 0:  # the client has sent all it had: done
                self._raw.close()

        def _close(self) -> None:
            """Close, lingering (`LINGER_S`) where the client may still be sending: its request
            not read to the end, part of one received, or the socket refused at once."""
            raw = self._raw
            if raw.is_closing() or self._lingered >= 0:
                return
            pending, _ = self.conn.trailing_data
            state = self.conn.their_state
            linger = self._refused or state in (h11.SEND_BODY, h11.ERROR) or bool(pending)
            if self._lost or not linger or not raw.can_write_eof():
                raw.close()
                return
            try:
                raw.write_eof()  # the answer ends here; the client reads it, then EOF
            except (OSError, RuntimeError):
                raw.close()
                return
            self._lingered = 0
            self._last_byte_at = self.loop.time()
            self._linger_deadline = self._last_byte_at + LINGER_S
            self.flow.resume_reading()
            self._linger_timer = self.loop.call_later(LINGER_IDLE_S, self._linger_check)

        def _linger_check(self) -> None:
            now = self.loop.time()
            if now >= self._linger_deadline or now - self._last_byte_at >= LINGER_IDLE_S:
                self._linger_timer = None
                self._raw.close()
                return
            wait_s = min(self._last_byte_at + LINGER_IDLE_S, self._linger_deadline) - now
            self._linger_timer = self.loop.call_later(wait_s, self._linger_check)

        def pause_writing(self) -> None:
            """More waits than the socket takes: time the client's reading from now, until the
            server has nothing left to send (a look finds the buffer empty)."""
            super().pause_writing()
            if limits.send_idle_timeout_s > 0 and self._send_timer is None:
                self._send_began = self.loop.time()
                self._taken_at_start = self._taken_at_check = self._taken()
                self._send_timer = self.loop.call_later(
                    limits.send_idle_timeout_s, self._send_check
                )

        def _taken(self) -> int:
            """Bytes of this connection's answers the client has taken so far: written, less
            what waits in our buffer and in the kernel's send queue (sent but not acknowledged:
            a 4 MiB send buffer drains only when a third of it is free, so our buffer alone
            showed a client reading 100 KiB/s as one taking nothing for seconds)."""
            transport = self.transport
            written = transport.written if isinstance(transport, _LingerOnClose) else 0
            return written - self._raw.get_write_buffer_size() - _kernel_unsent(self._raw)

        def _drop(self) -> None:
            """Disconnect at once with a reset: the answer's task ends (`flow.drain`) and the
            kernel drops what it still held for the client (a plain close would go on sending
            it, up to the send buffer's 4 MiB, at the client's pace)."""
            sock = self._raw.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self._raw.abort()

        def _send_check(self) -> None:
            """Disconnect a client that took no byte in `send_idle_timeout_s`, or took its
            answer slower than `send_min_bytes_per_s`; else look again while more waits."""
            self._send_timer = None
            unsent = self._raw.get_write_buffer_size()
            if self._lost or unsent == 0:
                return
            taken = self._taken()
            elapsed_s = self.loop.time() - self._send_began
            rate = (taken - self._taken_at_start) / max(elapsed_s, 1e-9)
            client = self.client[0] if self.client else "?"
            if taken <= self._taken_at_check:
                logger.info(
                    "client %s read none of its answer for %g s (server.send_idle_timeout_s): "
                    "disconnected with %d bytes unsent",
                    client,
                    limits.send_idle_timeout_s,
                    unsent,
                )
                self._drop()
                return
            if limits.send_min_bytes_per_s and rate < limits.send_min_bytes_per_s:
                logger.info(
                    "client %s read its answer at %.0f bytes/s over %.1f s, under "
                    "server.send_min_bytes_per_s (%g): disconnected with %d bytes unsent",
                    client,
                    rate,
                    elapsed_s,
                    limits.send_min_bytes_per_s,
                    unsent,
                )
                self._drop()
                return
            self._taken_at_check = taken
            self._send_timer = self.loop.call_later(limits.send_idle_timeout_s, self._send_check)

        def _cancel_send_timer(self) -> None:
            if self._send_timer is not None:
                self._send_timer.cancel()
                self._send_timer = None

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


class _LingerOnClose:
    """A transport whose `close` is the protocol's (a lingering close where it is due); the rest
    is the transport's."""

    def __init__(self, transport: asyncio.Transport, close: Callable[[], None]) -> None:
        self._transport = transport
        self._close = close
        self._closing = False
        self.written = 0
        """Bytes written through it (what the client was sent, taken or not)."""

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += len(data)
        self._transport.write(data)

    def close(self) -> None:
        self._closing = True
        self._close()

    def is_closing(self) -> bool:
        return self._closing or self._transport.is_closing()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def _kernel_unsent(transport: asyncio.Transport) -> int:
    """Bytes in the socket's send queue the peer has not acknowledged (`TIOCOUTQ`); 0 where it
    cannot be read."""
    sock = transport.get_extra_info("socket")
    if sock is None:
        return 0
    try:
        raw = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0")
    except (OSError, ValueError):
        return 0
    unsent: int = struct.unpack("i", raw)[0]
    return unsent


_ALL = "all"


def _over_limit(total: int, from_client: int, limits: ConnectionLimits) -> str | None:
    """Why a new socket is one too many (`_ALL` for `max_connections`, which eviction may
    lift), or None."""
    if limits.max_connections_per_client and from_client > limits.max_connections_per_client:
        return (
            f"Too many connections from one address ({limits.max_connections_per_client}, "
            "server.max_connections_per_client)"
        )
    if limits.max_connections and total > limits.max_connections:
        return _ALL
    return None
