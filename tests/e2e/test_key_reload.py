"""API keys rotated in their file without a restart, against a real `ocr-serve` (issue 37,
item 13). Before, keys were read once at start: a revoked key kept working until a restart."""

from __future__ import annotations

import os
import time
from pathlib import Path

import httpx

from serving.http.key_reload import CHECK_S
from tests.e2e.conftest import ONE_WORKER, SLOW_FAKE, fresh_server, stop_server, wait_ready

CONFIG = (
    """
[auth]
api_keys_file = "{keys}"
protect_metrics = true
"""
    + ONE_WORKER
    + """"""
)


def _write(path: Path, text: str) -> None:
    """As the kubelet updates a mounted Secret: a new file swapped in."""
    fresh = path.with_suffix(".new")
    fresh.write_text(text)
    os.replace(fresh, path)


def _status(url: str, key: str) -> int:
    return httpx.get(f"{url}/metrics", headers={"X-API-Key": key}).status_code


def test_a_rotated_key_file_is_read_again_and_a_bad_one_keeps_the_keys(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text("old-key\n")
    server = fresh_server(tmp_path, CONFIG.format(keys=keys), backend=SLOW_FAKE)
    try:
        wait_ready(server)
        assert _status(server.url, "old-key") == 200
        assert _status(server.url, "new-key") == 401
        _write(keys, "# rotated\nnew-key\n")
        deadline = time.monotonic() + 3 * CHECK_S
        while _status(server.url, "new-key") != 200 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _status(server.url, "new-key") == 200
        assert _status(server.url, "old-key") == 401  # revoked
        _write(keys, "# every key removed by mistake\n")  # would turn authentication off
        time.sleep(CHECK_S + 1)
        assert _status(server.url, "new-key") == 200
        assert _status(server.url, "anything") == 401
        assert "API keys not reloaded" in server.log.read_text()
    finally:
        stop_server(server)
