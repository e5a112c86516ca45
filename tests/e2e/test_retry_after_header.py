"""`Retry-After` on shed requests against a real `ocr-serve` (issue 37, item 13): spread, not a
fixed 2 s, and at least what the server's measured pace says one page in flight takes to finish.
Model-free device workers, each batch `LATENCY_S`, one page in flight at most."""

from __future__ import annotations

import concurrent.futures
import math

import httpx
import pytest

from serving.scheduling.retry_after import MAX_RETRY_AFTER_S
from tests import images
from tests.e2e.conftest import Server
from tests.e2e.profiles import RETRY_AFTER_S as FLOOR_S

# Model-free device workers, every batch 1 s, one page in flight, `server.retry_after_s` FLOOR_S
# (tests/e2e/profiles.py).
pytestmark = pytest.mark.profile("one-slot")
PNG = images.encode_png(images.latin_lines().image)


def _post(server: Server) -> httpx.Response:
    headers = {"content-type": "image/png"}
    return httpx.post(f"{server.url}/v1/ocr", content=PNG, headers=headers, timeout=120)


def _page_s(server: Server) -> float:
    return float(httpx.get(f"{server.url}/readyz").json()["admission"]["page_s"])


def test_shed_requests_are_told_to_come_back_spread_from_the_pace(server: Server) -> None:
    assert _post(server).status_code == 200  # the server learns its pace on this page
    page_s = _page_s(server)
    assert page_s > 0
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        busy = pool.submit(_post, server)
        while httpx.get(f"{server.url}/readyz").json()["admission"]["inflight_pages"] < 1:
            pass  # until the busy page holds the one slot
        answers = [_post(server) for _ in range(24)]
        assert busy.result().status_code == 200
    shed = [int(a.headers["retry-after"]) for a in answers if a.status_code == 503]
    assert len(shed) >= 12, [a.status_code for a in answers]  # the busy page lasts seconds
    # One page ahead of each: at least its time at the measured pace, and the setting.
    base = max(FLOOR_S, min(math.ceil(page_s), MAX_RETRY_AFTER_S))
    assert all(base <= value <= 2 * MAX_RETRY_AFTER_S for value in shed), (base, shed)
    assert len(set(shed)) > 1, shed  # spread: a burst shed together does not return together
