"""Where a job may send or fetch on its submitter's behalf: a `callback_url`, a presigned GET or
PUT URL. Hosts are allow-listed per deployment, as URL inputs are (`serving.http.url_fetch`);
every address a host resolves to must be public unless the deployment allows private ones, checked
at submit and again at each connection (a name can change what it resolves to)."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit, urlunsplit

from serving.addresses import IpAddress, refused_address
from serving.errors import OcrError, ValidationFailed


class DestinationRefused(OcrError):
    """A destination that was allowed at submit no longer is (its host resolves elsewhere)."""

    http_status = 422
    code = "destination_refused"
    default_message = "The destination is not allowed"


@dataclass(frozen=True, slots=True, kw_only=True)
class DestinationPolicy:
    """What URLs of one kind may name."""

    allowed_hosts: tuple[str, ...]
    """Host names or literal IPs; empty refuses every URL."""
    allow_private: bool
    """Whether loopback, link-local and private addresses may be reached."""
    setting: str
    """The config keys that decide, for messages (`webhooks.allowed_hosts`)."""


def check_url(url: str, policy: DestinationPolicy, what: str) -> SplitResult:
    """`url` split, once its form and host are allowed (no name resolution here).

    Raises:
        ValidationFailed: not http(s), credentials in it, a bad port, or a host not allowed.
    """
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as err:
        raise ValidationFailed(f"{what}: not a valid URL") from err
    host = (parts.hostname or "").lower()
    if parts.scheme not in ("http", "https") or not host:
        raise ValidationFailed(f"{what}: only http and https URLs with a host are accepted")
    if parts.username is not None or parts.password is not None:
        raise ValidationFailed(f"{what}: URLs with credentials are not accepted")
    if port == 0:
        raise ValidationFailed(f"{what}: the URL's port is not valid")
    if host not in {h.lower() for h in policy.allowed_hosts}:
        raise ValidationFailed(f"{what}: the host {host!r} is not allowed ({policy.setting})")
    return parts


async def connect_target(url: str, policy: DestinationPolicy, what: str) -> tuple[str, str]:
    """The URL to connect to and the `Host` header to send: for http, the host's checked address
    itself (no second lookup for the connection to follow); for https, the URL as it is (the
    certificate names the host), its addresses checked first.

    Raises:
        ValidationFailed: the URL is not allowed (`check_url`).
        DestinationRefused: the host does not resolve, or to an address not allowed.
    """
    parts = check_url(url, policy, what)
    host = (parts.hostname or "").lower()
    port = parts.port or (443 if parts.scheme == "https" else 80)
    address = await _checked_address(host, port, policy, what)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    if parts.scheme == "https":
        return url, netloc
    literal = f"[{address}]" if address.version == 6 else str(address)
    target = urlunsplit(("http", f"{literal}:{port}", parts.path or "/", parts.query, ""))
    return target, netloc


async def _resolve(host: str, port: int) -> list[str]:
    """Every address `host` resolves to (tests replace this)."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


async def _checked_address(host: str, port: int, policy: DestinationPolicy, what: str) -> IpAddress:
    try:
        addresses: list[IpAddress] = [ipaddress.ip_address(host)]
    except ValueError:
        try:
            found = await _resolve(host, port)
        except (OSError, UnicodeError) as err:
            raise DestinationRefused(f"{what}: the host {host!r} does not resolve") from err
        addresses = [ipaddress.ip_address(a.split("%", 1)[0]) for a in found]
    if not addresses:
        raise DestinationRefused(f"{what}: the host {host!r} does not resolve")
    if not policy.allow_private:
        for address in addresses:
            reason = refused_address(address)
            if reason is not None:
                raise DestinationRefused(
                    f"{what}: the host {host!r} has a {reason} address; refused "
                    f"(allow_private_addresses is off)"
                )
    return addresses[0]
