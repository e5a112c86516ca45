"""Which binds refuse the jobs API with keys off (`serving.http.open_store`)."""

from __future__ import annotations

import pytest

from serving.http.open_store import is_loopback_bind, store_refused


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.53", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.10", False),
        ("ocr.example", False),
    ],
)
def test_loopback_binds(host: str, loopback: bool) -> None:
    assert is_loopback_bind(host) is loopback
    assert store_refused(host, open_access=False) is not loopback
    assert not store_refused(host, open_access=True)
