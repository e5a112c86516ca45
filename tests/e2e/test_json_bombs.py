"""JSON bombs against a real `ocr-serve` (issue 37, item 4; issue 49, item 3).

Before, `/ocr`'s body was `json.loads`ed on the event loop: 60 MB of `[{},{},...]` built 20
million dicts and stalled every other request for seconds before its 422. Now the body's objects
and arrays are counted first, off the event loop, and such a body is refused unparsed
(`serving/http/json_body.py`). A flat object (`{"k0":0,...}`, one container) is refused by its
`,` and `:`, and a body whose characters take 4 bytes each once parsed is charged for that.
"""

from __future__ import annotations

import base64
import json
import threading
import time

import httpx
import pytest

from tests import images
from tests.e2e.conftest import Server

# Model-free, `server.max_body_bytes = 80000000`, a 1 GiB memory budget (tests/e2e/profiles.py).
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


def _post_watching_livez(server: Server, body: bytes) -> tuple[httpx.Response, list[float]]:
    """Post `body` to `/ocr` from a thread, asking `/livez` meanwhile; the answer and how long
    each `/livez` took."""
    answers: list[httpx.Response] = []

    def post() -> None:
        answers.append(
            httpx.post(
                f"{server.url}/ocr",
                content=body,
                headers={"content-type": "application/json"},
                timeout=120,
            )
        )

    sender = threading.Thread(target=post)
    latencies: list[float] = []
    with httpx.Client(timeout=60) as client:
        sender.start()
        while sender.is_alive():
            started = time.monotonic()
            assert client.get(f"{server.url}/livez").status_code == 200
            latencies.append(time.monotonic() - started)
            time.sleep(0.02)
    sender.join()
    (answer,) = answers
    return answer, latencies


def test_a_flat_object_of_millions_of_members_is_refused_unparsed(server: Server) -> None:
    """One container, so it passed the count, and was parsed holding the GIL: seconds of a
    frozen event loop and ~13.6 bytes of objects per body byte (issue 49, item 3)."""
    flat = b"{" + b",".join(b'"k%d":0' % i for i in range(4_000_000)) + b"}"  # ~47 MB
    answer, latencies = _post_watching_livez(server, flat)
    assert answer.status_code == 422, answer.text
    assert "',' and ':'" in answer.json()["errorMsg"]
    assert len(latencies) > 3
    # Loose, for a shared machine: parsed on the loop's GIL, the body froze it ~6 s.
    assert max(latencies) < 2.0, f"/livez took {max(latencies):.2f} s while the body was checked"


def test_a_body_whose_text_takes_four_bytes_a_character_is_charged_for_it(server: Server) -> None:
    """One character above U+FFFF makes the parsed text 4 bytes a character: 45 MB held 8 times
    while parsed, beyond the body's 3 copies charged; now charged, past what bodies may hold it
    gets 413. The same body in ASCII is read (and refused as no image: 422)."""
    data = base64.b64encode(bytes(range(256)) * (45_000_000 // 342)).decode()
    ascii_body = json.dumps({"file": data, "fileType": 1}).encode()
    wide_body = json.dumps({"file": data + "\U0001f600", "fileType": 1}, ensure_ascii=False)
    answer = httpx.post(
        f"{server.url}/ocr",
        content=wide_body.encode(),
        headers={"content-type": "application/json"},
        timeout=120,
    )
    assert answer.status_code == 413, answer.text
    assert "server.memory_budget_bytes" in answer.json()["errorMsg"]
    plain = httpx.post(
        f"{server.url}/ocr",
        content=ascii_body,
        headers={"content-type": "application/json"},
        timeout=120,
    )
    assert plain.status_code == 422, plain.text
    ready = httpx.get(f"{server.url}/readyz", timeout=30).json()
    assert ready["memory_budget"]["body_bytes"] == 0  # every charge given back
