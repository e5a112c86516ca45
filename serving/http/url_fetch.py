"""URL inputs of `/ocr`: allow-listed hosts only, public addresses only, bounded size and time."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import mimetypes
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import httpx

from serving.addresses import IpAddress, refused_address
from serving.decode.readers import FileKind
from serving.errors import InvalidInput, PayloadTooLarge
from serving.scheduling.memory_budget import BodyCharge

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchLimits:
    """What a URL input may be and cost."""

    allowed_hosts: tuple[str, ...]
    """Host names (or literal IPs) that may be fetched; empty refuses every URL."""
    timeout_s: float
    """Connect, read and whole-download limit."""
    max_bytes: int
    """Larger downloads get 413 (the body limit of the server, `server.max_body_bytes`)."""
    allowed_ports: tuple[int, ...] = ()
    """Ports besides the scheme's own (80, 443) a URL may name (`input.url_allowed_ports`):
    before, an allow-listed host was fetched on any port, its admin ports and other services
    included (issue 49)."""


def kind_from_url(url: str) -> FileKind:
    """Image or PDF, guessed from the URL path's extension as PaddleX does.

    Raises:
        InvalidInput: neither an image nor a PDF.
    """
    mime, _ = mimetypes.guess_type(urlsplit(url).path.rsplit("/", 1)[-1])
    if mime == "application/pdf":
        return "pdf"
    if mime is not None and mime.startswith("image/"):
        return "image"
    raise InvalidInput(
        "Unsupported file type: the URL path names neither an image nor a PDF; set fileType"
    )


async def _resolve(host: str, port: int) -> list[str]:
    """Every address `host` resolves to (tests replace this)."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


async def checked_address(host: str, port: int) -> IpAddress:
    """The address to connect to: `host` resolved, every resolved address public.

    Raises:
        InvalidInput: the host does not resolve, or one of its addresses is not public.
    """
    try:
        return _checked([ipaddress.ip_address(host)], host)
    except ValueError:
        pass  # a name, not a literal address
    try:
        found = await _resolve(host, port)
    except (OSError, UnicodeError) as err:
        raise InvalidInput(f"The URL's host {host!r} does not resolve") from err
    addresses = [ipaddress.ip_address(a.split("%", 1)[0]) for a in found]
    if not addresses:
        raise InvalidInput(f"The URL's host {host!r} does not resolve")
    return _checked(addresses, host)


def _checked(addresses: list[IpAddress], host: str) -> IpAddress:
    for address in addresses:
        reason = refused_address(address)
        if reason is not None:
            raise InvalidInput(f"The URL's host {host!r} has a {reason} address; refused")
    return addresses[0]


async def fetch(
    url: str,
    limits: FetchLimits,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    charge: BodyCharge | None = None,
) -> bytes:
    """Download `url`: its host allow-listed, its addresses public, no redirects, bounded, and
    charged to the memory budget as it arrives when `charge` is given (as a request body is).

    The file is asked for, and read, without any `Content-Encoding` (a compressed answer could
    inflate past the size limit in one chunk). Plain http connects to the checked address itself
    (Host header kept), so the name cannot resolve elsewhere between the check and the
    connection. https connects by name, for the certificate check, which leaves that
    DNS-rebinding window open (a known limit).

    Raises:
        InvalidInput: a refused URL, host or address, a redirect, an error status, a
            `Content-Encoding`, a timeout or a failed connection (422).
        PayloadTooLarge: more than `limits.max_bytes` (413), or more than the memory budget's
            bodies could ever hold (`charge`).
        Overloaded: the memory budget has no room for the file now (`charge`: 503).
    """
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if parts.scheme not in ("http", "https") or not host:
        raise InvalidInput("Only http and https URLs with a host are accepted")
    if parts.username is not None or parts.password is not None:
        raise InvalidInput("URLs with credentials are not accepted")
    if host not in {h.lower() for h in limits.allowed_hosts}:
        raise InvalidInput(f"The URL's host {host!r} is not allowed (input.url_allowed_hosts)")
    default_port = 443 if parts.scheme == "https" else 80
    try:
        port = parts.port or default_port
    except ValueError as err:
        raise InvalidInput("The URL's port is not valid") from err
    if port != default_port and port not in limits.allowed_ports:
        raise InvalidInput(
            f"The URL's port {port} is not allowed: {parts.scheme} URLs are fetched on port "
            f"{default_port}, or on the ports in input.url_allowed_ports"
        )
    address = await checked_address(host, port)
    # The file as stored: httpx would undo each `Content-Encoding` layer before the size check
    # (249 bytes of `gzip, gzip` on the wire became one 50 MB chunk).
    target, headers = url, {"Accept-Encoding": "identity"}
    if parts.scheme == "http":
        literal = f"[{address}]" if address.version == 6 else str(address)
        target = urlunsplit(("http", f"{literal}:{port}", parts.path or "/", parts.query, ""))
        headers["Host"] = parts.netloc.rsplit("@", 1)[-1]
    try:
        async with asyncio.timeout(limits.timeout_s):
            return await _download(target, headers, limits, transport, charge)
    except TimeoutError as err:
        raise InvalidInput(f"Fetching the URL took longer than {limits.timeout_s} s") from err
    except httpx.HTTPError as err:
        logger.info("URL fetch failed: %s", type(err).__name__)
        raise InvalidInput(f"Cannot fetch the URL ({type(err).__name__})") from err


async def _download(
    url: str,
    headers: dict[str, str],
    limits: FetchLimits,
    transport: httpx.AsyncBaseTransport | None,
    charge: BodyCharge | None,
) -> bytes:
    async with (
        httpx.AsyncClient(
            follow_redirects=False, timeout=limits.timeout_s, transport=transport, trust_env=False
        ) as client,
        client.stream("GET", url, headers=headers) as response,
    ):
        if response.is_redirect:
            raise InvalidInput(
                f"The URL answered a redirect ({response.status_code}); not followed"
            )
        if response.status_code != 200:
            raise InvalidInput(f"The URL answered HTTP {response.status_code}")
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            raise InvalidInput(
                f"The URL answered Content-Encoding {encoding!r}; only unencoded files are fetched"
            )
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limits.max_bytes:
            raise PayloadTooLarge(
                f"The URL's file is {declared} bytes; the limit is {limits.max_bytes} "
                "(server.max_body_bytes)"
            )
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.aiter_raw():  # never inflated
            size += len(chunk)
            if size > limits.max_bytes:
                raise PayloadTooLarge(
                    f"The URL's file is over the limit of {limits.max_bytes} bytes "
                    "(server.max_body_bytes)"
                )
            if charge is not None:
                charge.add(len(chunk))
            chunks.append(chunk)
    return b"".join(chunks)
