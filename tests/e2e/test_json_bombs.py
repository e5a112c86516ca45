"""JSON bombs against a real `ocr-serve` (issue 37, item 4).

Before, `/ocr`'s body was `json.loads`ed on the event loop: 60 MB of `[{},{},...]` built 20
million dicts and stalled every other request for seconds before its 422. Now the body's objects
and arrays are counted first, off the event loop, and such a body is refused unparsed
(`serving/http/json_body.py`).
"""

from __future__ import annotations

import base64
import threading
import time

import httpx
import pytest

from tests import images
from tests.e2e.conftest import Server

# Model-free, `server.max_body_bytes = 80000000` (tests/e2e/profiles.py).
pytestmark = pytest.mark.profile("fake")


def test_a_60_mb_body_of_empty_objects_is_refused_while_livez_stays_fast(server: Server) -> None:
    bomb = b"[" + b"{}," * 20_000_000 + b"{}]"  # 60 MB
    answers: list[httpx.Response] = []

    def post() -> None:
        answers.append(
            httpx.post(
                f"{server.url}/ocr",
                content=bomb,
                headers={"content-type": "application/json"},
                timeout=120,
            )
        )

    sender = threading.Thread(target=post)
    latencies: list[float] = []
    with httpx.Client(timeout=30) as client:
        sender.start()
        while sender.is_alive():
            started = time.monotonic()
            assert client.get(f"{server.url}/livez").status_code == 200
            latencies.append(time.monotonic() - started)
            time.sleep(0.02)
    sender.join()
    assert len(latencies) > 3  # the upload and the check took a while: /livez was asked meanwhile
    assert max(latencies) < 0.5, f"/livez took {max(latencies):.2f} s while the body was checked"
    (answer,) = answers
    assert answer.status_code == 422, answer.text
    assert answer.json()["errorCode"] == 422
    assert "JSON objects and arrays" in answer.json()["errorMsg"]


def test_deep_nesting_is_refused_and_a_normal_body_still_served(server: Server) -> None:
    deep = b'{"file": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    answer = httpx.post(
        f"{server.url}/ocr", content=deep, headers={"content-type": "application/json"}
    )
    assert answer.status_code == 422
    assert "JSON objects and arrays" in answer.json()["errorMsg"]
    png = base64.b64encode(images.encode_png(images.latin_lines().image)).decode()
    ok = httpx.post(f"{server.url}/ocr", json={"file": png, "fileType": 1}, timeout=60)
    assert ok.status_code == 200, ok.text
