"""Markers from folders; shared fixtures."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("PADDLE_PDX_DISABLE_MODEL_SOURCE_CHECK", "True")

_MARKERS = {"unit": "unit", "integration": "integration", "e2e": "e2e", "gpu": "gpu"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parts = item.path.parts
        for folder, marker in _MARKERS.items():
            if folder in parts:
                item.add_marker(getattr(pytest.mark, marker))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
