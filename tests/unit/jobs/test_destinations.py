"""serving/jobs/destinations.py: where callbacks and presigned URLs may go; private addresses
refused unless the deployment allows them, checked on the address a name resolves to."""

from __future__ import annotations

import pytest

from serving.errors import ValidationFailed
from serving.jobs import destinations
from serving.jobs.destinations import DestinationPolicy, DestinationRefused, connect_target

pytestmark = pytest.mark.anyio


def _policy(allow_private: bool) -> DestinationPolicy:
    return DestinationPolicy(
        allowed_hosts=("hooks.example", "127.0.0.1"),
        allow_private=allow_private,
        setting="webhooks.allowed_hosts",
    )


@pytest.fixture
def resolves_to(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    addresses = ["93.184.216.34"]

    async def resolve(host: str, port: int) -> list[str]:
        return list(addresses)

    monkeypatch.setattr(destinations, "_resolve", resolve)
    return addresses


async def test_http_connects_to_the_checked_address_with_the_host_header(
    resolves_to: list[str],
) -> None:
    target, host = await connect_target("http://hooks.example:8080/a?b=1", _policy(False), "cb")
    assert (target, host) == ("http://93.184.216.34:8080/a?b=1", "hooks.example:8080")


async def test_https_keeps_its_name_for_the_certificate(resolves_to: list[str]) -> None:
    target, host = await connect_target("https://hooks.example/a", _policy(False), "cb")
    assert (target, host) == ("https://hooks.example/a", "hooks.example")


@pytest.mark.parametrize(
    ("address", "reason"),
    [("127.0.0.1", "loopback"), ("10.1.2.3", "private"), ("169.254.169.254", "link-local")],
)
async def test_a_name_resolving_to_a_private_address_is_refused_unless_allowed(
    resolves_to: list[str], address: str, reason: str
) -> None:
    resolves_to[:] = [address]
    with pytest.raises(DestinationRefused, match=reason):
        await connect_target("http://hooks.example/a", _policy(False), "cb")
    target, _ = await connect_target("http://hooks.example/a", _policy(True), "cb")
    assert target == f"http://{address}:80/a"


async def test_a_literal_loopback_address_needs_the_deployments_leave() -> None:
    with pytest.raises(DestinationRefused, match="loopback"):
        await connect_target("http://127.0.0.1:9/a", _policy(False), "cb")
    target, _ = await connect_target("http://127.0.0.1:9/a", _policy(True), "cb")
    assert target == "http://127.0.0.1:9/a"


async def test_a_host_not_listed_is_refused_before_any_lookup(resolves_to: list[str]) -> None:
    with pytest.raises(ValidationFailed, match=r"webhooks\.allowed_hosts"):
        await connect_target("https://other.example/a", _policy(True), "cb")
