"""Unit tests for serving/http/url_fetch.py; nothing here leaves the machine.

Addresses are checked with literal IPs and a replaced resolver; downloads run against an httpx
MockTransport, and the `Content-Encoding` tests against an HTTP server on loopback.
"""

from __future__ import annotations

import dataclasses
import gzip
import http.server
import ipaddress
import threading
from collections.abc import AsyncIterator, Callable, Iterator

import httpx
import pytest

from serving.config import InputConfig
from serving.errors import ConfigError, InvalidInput, PayloadTooLarge
from serving.http import url_fetch
from serving.http.url_fetch import FetchLimits, fetch, kind_from_url, refused_address
from serving.scheduling.memory_budget import BodyCharge, MemoryBudget

PUBLIC = "93.184.215.14"
LIMITS = FetchLimits(allowed_hosts=("files.example",), timeout_s=5.0, max_bytes=1000)


@pytest.fixture(autouse=True)
def resolver(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    table: dict[str, list[str]] = {"files.example": [PUBLIC]}

    async def resolve(host: str, port: int) -> list[str]:
        if host not in table:
            raise OSError("no such host")
        return table[host]

    monkeypatch.setattr(url_fetch, "_resolve", resolve)
    return table


# --- address checks -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("fd00::1", "private"),
        ("169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("100.64.0.1", "not globally routable"),
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:10.0.0.1", "private"),
        ("2002:7f00:1::", "loopback"),  # 6to4 of 127.0.0.1 (issue 37, item 13)
        ("2002:a00:1::1", "private"),  # 6to4 of 10.0.0.1
        ("2002:a9fe:a9fe::", "link-local"),  # 6to4 of 169.254.169.254 (cloud metadata)
    ],
)
def test_refused_addresses(address: str, reason: str) -> None:
    assert refused_address(ipaddress.ip_address(address)) == reason


@pytest.mark.parametrize("address", [PUBLIC, "8.8.8.8", "2606:4700:4700::1111"])
def test_public_addresses(address: str) -> None:
    assert refused_address(ipaddress.ip_address(address)) is None


@pytest.mark.anyio
async def test_literal_private_ip_refused_even_when_allow_listed() -> None:
    limits = FetchLimits(
        allowed_hosts=("127.0.0.1", "169.254.169.254"),
        timeout_s=1,
        max_bytes=9,
        allowed_ports=(8000,),
    )
    for url in ("http://127.0.0.1:8000/a.png", "http://169.254.169.254/latest/meta-data/"):
        with pytest.raises(InvalidInput, match=r"loopback|link-local"):
            await fetch(url, limits)


@pytest.mark.anyio
async def test_name_resolving_to_any_private_address_refused(
    resolver: dict[str, list[str]],
) -> None:
    resolver["files.example"] = [PUBLIC, "10.0.0.7"]
    with pytest.raises(InvalidInput, match="private address") as info:
        await fetch("http://files.example/a.png", LIMITS)
    assert info.value.http_status == 422


@pytest.mark.anyio
async def test_unresolvable_host(resolver: dict[str, list[str]]) -> None:
    resolver.pop("files.example")
    with pytest.raises(InvalidInput, match="does not resolve"):
        await fetch("http://files.example/a.png", LIMITS)


# --- URL and host checks --------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://other.example/a.png", "not allowed"),
        ("http://files.example.evil/a.png", "not allowed"),
        ("ftp://files.example/a.png", "Only http and https"),
        ("http://user:pw@files.example/a.png", "credentials"),
        ("http://files.example:99999/a.png", "port"),
    ],
)
async def test_refused_urls(url: str, problem: str) -> None:
    with pytest.raises(InvalidInput, match=problem):
        await fetch(url, LIMITS)


@pytest.mark.anyio
async def test_empty_allow_list_refuses_every_url() -> None:
    limits = FetchLimits(allowed_hosts=(), timeout_s=1, max_bytes=9)
    with pytest.raises(InvalidInput, match=r"input\.url_allowed_hosts"):
        await fetch("http://files.example/a.png", limits)


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("http://h/scan.png", "image"),
        ("https://h/a/b/photo.JPG?x=1", "image"),
        ("http://h/doc.pdf", "pdf"),
        ("http://h/x.tiff#frag", "image"),
    ],
)
def test_kind_from_url(url: str, kind: str) -> None:
    assert kind_from_url(url) == kind


@pytest.mark.parametrize("url", ["http://h/page.html", "http://h/noext", "http://h/"])
def test_kind_from_url_unsupported(url: str) -> None:
    with pytest.raises(InvalidInput, match="Unsupported file type"):
        kind_from_url(url)


# --- downloads ------------------------------------------------------------------------------


class _Stream(httpx.AsyncByteStream):
    def __init__(self, body: bytes) -> None:
        self.body = body

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self.body


def _transport(handler: Callable[[httpx.Request], httpx.Response]) -> httpx.MockTransport:
    """Answers `handler`'s responses as a network does, streamed (`fetch` reads them raw)."""

    def streamed(request: httpx.Request) -> httpx.Response:
        response = handler(request)
        if not response.is_stream_consumed:
            return response
        return httpx.Response(
            response.status_code, headers=response.headers, stream=_Stream(response.content)
        )

    return httpx.MockTransport(streamed)


@pytest.mark.anyio
async def test_http_connects_to_the_checked_address_with_host_header() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, content=b"PNGDATA")

    data = await fetch("http://files.example/dir/a.png?v=2", LIMITS, transport=_transport(handler))
    assert data == b"PNGDATA"
    (request,) = seen
    assert str(request.url) == f"http://{PUBLIC}/dir/a.png?v=2"  # httpx drops the default port
    assert request.headers["host"] == "files.example"


@pytest.mark.anyio
async def test_https_keeps_the_name() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, content=b"%PDF-1.7")

    limits = dataclasses.replace(LIMITS, allowed_ports=(8443,))
    data = await fetch("https://files.example:8443/d.pdf", limits, transport=_transport(handler))
    assert data == b"%PDF-1.7"
    assert str(seen[0].url) == "https://files.example:8443/d.pdf"


@pytest.mark.anyio
async def test_redirect_not_followed() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(302, headers={"Location": "http://127.0.0.1/secret"})

    with pytest.raises(InvalidInput, match="redirect"):
        await fetch("http://files.example/a.png", LIMITS, transport=_transport(handler))


@pytest.mark.anyio
async def test_error_status() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404)

    with pytest.raises(InvalidInput, match="HTTP 404"):
        await fetch("http://files.example/a.png", LIMITS, transport=_transport(handler))


@pytest.mark.anyio
async def test_declared_too_large_is_413() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b"x" * 1001)

    with pytest.raises(PayloadTooLarge, match=r"server\.max_body_bytes") as info:
        await fetch("http://files.example/a.png", LIMITS, transport=_transport(handler))
    assert info.value.http_status == 413


@pytest.mark.anyio
async def test_streamed_too_large_is_413() -> None:
    async def body() -> object:
        for _ in range(100):
            yield b"x" * 100

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body())  # type: ignore[arg-type]

    with pytest.raises(PayloadTooLarge, match="over the limit of 1000 bytes"):
        await fetch("http://files.example/a.png", LIMITS, transport=_transport(handler))


@pytest.mark.anyio
async def test_timeout_and_connection_errors_are_422() -> None:
    def timeout(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("slow", request=request)

    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    for handler in (timeout, refused):
        with pytest.raises(InvalidInput, match="Cannot fetch the URL") as info:
            await fetch("http://files.example/a.png", LIMITS, transport=_transport(handler))
        assert info.value.http_status == 422


ZEROS = 50 * 1024 * 1024
BOMB = gzip.compress(gzip.compress(bytes(ZEROS)))
"""50 MB of zeros gzipped twice: a few hundred bytes on the wire (issue 26, item 5)."""


@pytest.fixture
def gzip_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, list[str]]]:
    """An HTTP server on loopback answering `BOMB`: at `/labelled.png` as
    `Content-Encoding: gzip, gzip`, at `/unlabelled.png` with no encoding; the URL and the
    `Accept-Encoding` of each request. Loopback is let through the address check here only."""
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("Accept-Encoding", ""))
            self.send_response(200)
            if self.path == "/labelled.png":
                self.send_header("Content-Encoding", "gzip, gzip")
            self.send_header("Content-Length", str(len(BOMB)))
            self.end_headers()
            self.wfile.write(BOMB)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()

    async def loopback(host: str, port: int) -> ipaddress.IPv4Address:
        return ipaddress.IPv4Address("127.0.0.1")

    monkeypatch.setattr(url_fetch, "checked_address", loopback)
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.anyio
async def test_content_encoding_is_refused_not_inflated(
    gzip_server: tuple[str, list[str]],
) -> None:
    url, seen = gzip_server
    limits = FetchLimits(
        allowed_hosts=("127.0.0.1",), timeout_s=10, max_bytes=1_000_000, allowed_ports=_port(url)
    )
    with pytest.raises(InvalidInput, match="Content-Encoding 'gzip, gzip'") as info:
        await fetch(f"{url}/labelled.png", limits)
    assert info.value.http_status == 422
    assert seen == ["identity"]


@pytest.mark.anyio
async def test_unlabelled_compressed_bytes_are_read_as_sent(
    gzip_server: tuple[str, list[str]],
) -> None:
    url, _ = gzip_server
    limits = FetchLimits(
        allowed_hosts=("127.0.0.1",), timeout_s=10, max_bytes=1_000_000, allowed_ports=_port(url)
    )
    assert await fetch(f"{url}/unlabelled.png", limits) == BOMB
    assert len(BOMB) < 1000 < ZEROS


def _port(url: str) -> tuple[int, ...]:
    return (int(url.rsplit(":", 1)[1]),)


@pytest.mark.anyio
async def test_an_allowed_host_is_fetched_on_its_schemes_port_only() -> None:
    """Issue 49: an allow-listed host was fetched on any port (its admin ports, other
    services); now 80 or 443, or a port `input.url_allowed_ports` names."""
    fetched: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        fetched.append(str(request.url))
        return httpx.Response(200, content=b"ok")

    for url in ("http://files.example:8080/a.png", "https://files.example:22/a.png"):
        with pytest.raises(InvalidInput, match=r"input\.url_allowed_ports") as info:
            await fetch(url, LIMITS, transport=_transport(handler))
        assert info.value.http_status == 422
    assert fetched == []
    assert await fetch("http://files.example:80/a.png", LIMITS, transport=_transport(handler))
    ports = FetchLimits(allowed_hosts=("files.example",), timeout_s=5, max_bytes=9,
                        allowed_ports=(8080,))  # fmt: skip
    assert await fetch("http://files.example:8080/a.png", ports, transport=_transport(handler))
    with pytest.raises(ConfigError, match=r"input\.url_allowed_ports"):
        InputConfig(url_allowed_ports=(0,))


# --- config ---------------------------------------------------------------------------------


def test_url_config_defaults_and_validation() -> None:
    config = InputConfig()
    assert config.allow_url is False
    assert config.url_allowed_hosts == ()
    assert config.url_timeout_s == 10.0
    with pytest.raises(ConfigError, match=r"input\.url_timeout_s"):
        InputConfig(url_timeout_s=0)


@pytest.mark.anyio
async def test_http_keeps_a_non_default_port_and_ipv6() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, content=b"ok")

    limits = FetchLimits(
        allowed_hosts=("2606:4700:4700::1111",), timeout_s=1, max_bytes=9, allowed_ports=(8080,)
    )
    await fetch("http://[2606:4700:4700::1111]:8080/a.png", limits, transport=_transport(handler))
    assert str(seen[0].url) == "http://[2606:4700:4700::1111]:8080/a.png"
    assert seen[0].headers["host"] == "[2606:4700:4700::1111]:8080"


@pytest.mark.anyio
async def test_the_file_is_charged_to_the_memory_budget_as_it_arrives() -> None:
    # Issue 37, item 13: a URL's file (up to server.max_body_bytes) was held outside the budget.
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b"x" * 400)

    budget = MemoryBudget(10_000)
    with BodyCharge(budget, copies=2) as charge:
        await fetch(
            "http://files.example/a.png", LIMITS, transport=_transport(handler), charge=charge
        )
        assert budget.body_bytes == 800  # the file and its copy, held until the request ends
    assert budget.body_bytes == 0
    small = MemoryBudget(1_000)  # bodies may hold half: 500 bytes, less than 2 x 400
    with (
        pytest.raises(PayloadTooLarge, match=r"server\.memory_budget_bytes"),
        BodyCharge(small, copies=2) as charge,
    ):
        await fetch(
            "http://files.example/a.png", LIMITS, transport=_transport(handler), charge=charge
        )
    assert small.body_bytes == 0
