"""Which IP addresses the server may connect to on a client's behalf: URL inputs
(`serving.http.url_fetch`), a job's callbacks and presigned URLs (`serving.jobs.destinations`)."""

from __future__ import annotations

import ipaddress

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def refused_address(address: IpAddress) -> str | None:
    """Why `address` may not be fetched (private, loopback, ...), or None when it is public. An
    IPv6 address that carries an IPv4 one (IPv4-mapped `::ffff:a.b.c.d`, 6to4 `2002:AABB:CCDD::`)
    is judged by the IPv4 address: a 6to4 relay, or the host's own `sit` tunnel, delivers there."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is not None:
            address = embedded
    checks = (
        ("unspecified", address.is_unspecified),
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("reserved", address.is_reserved),
        ("private", address.is_private),
        ("not globally routable", not address.is_global),
    )
    for reason, hit in checks:
        if hit:
            return reason
    return None
