"""Unit tests for serving/scheduling/quotas.py (time passed in) and its hook in `OcrService`."""

from __future__ import annotations

import asyncio
import pickle

import pytest

from serving.decode.readers import DecodeLimits
from serving.errors import Overloaded, QuotaExceeded
from serving.http.keys import Identity
from serving.scheduling.admission import Admission
from serving.scheduling.memory_budget import MemoryBudget
from serving.scheduling.quotas import KeyPages, KeyQuota, RateLimits, TokenBucket
from serving.service.ocr import OcrService


def test_bucket_takes_a_token_and_says_when_the_next_comes() -> None:
    bucket = TokenBucket(rate_per_s=2.0, capacity=2.0, tokens=2.0, updated_at=0.0)
    assert bucket.take(0.0) == 0.0
    assert bucket.take(0.0) == 0.0
    assert bucket.take(0.0) == pytest.approx(0.5)  # empty: one token every 0.5 s
    assert bucket.take(0.25) == pytest.approx(0.25)  # a refusal takes nothing
    assert bucket.take(0.5) == 0.0
    assert bucket.take(0.5) == pytest.approx(0.5)


def test_bucket_refills_to_its_capacity_only() -> None:
    bucket = TokenBucket(rate_per_s=1.0, capacity=3.0, tokens=0.0, updated_at=0.0)
    taken = [bucket.take(1000.0) for _ in range(4)]
    assert taken[:3] == [0.0, 0.0, 0.0]
    assert taken[3] == pytest.approx(1.0)


def test_bucket_ignores_a_clock_going_back() -> None:
    bucket = TokenBucket(rate_per_s=1.0, capacity=1.0, tokens=0.0, updated_at=10.0)
    assert bucket.take(5.0) == pytest.approx(1.0)


def test_rate_limits_are_per_key() -> None:
    limits = RateLimits()
    quota = KeyQuota(requests_per_s=1.0, burst_requests=2)
    limits.take("a", quota, now=0.0)
    limits.take("a", quota, now=0.0)
    with pytest.raises(QuotaExceeded, match="key a") as caught:
        limits.take("a", quota, now=0.1)
    assert caught.value.http_status == 429
    assert caught.value.retry_after_s == 1.0  # 0.9 s, rounded up to whole seconds
    limits.take("b", quota, now=0.1)  # b has a bucket of its own
    limits.take("a", quota, now=1.0)


def test_no_rate_is_no_limit_and_the_default_burst_is_a_second() -> None:
    limits = RateLimits()
    for _ in range(1000):
        limits.take("a", KeyQuota(), now=0.0)
    assert KeyQuota(requests_per_s=0.5).capacity == 1.0
    assert KeyQuota(requests_per_s=10.0).capacity == 10.0
    assert KeyQuota(requests_per_s=10.0, burst_requests=3).capacity == 3.0


def test_slow_rate_waits_whole_seconds() -> None:
    limits = RateLimits()
    quota = KeyQuota(requests_per_s=0.01)
    limits.take("a", quota, now=0.0)
    with pytest.raises(QuotaExceeded) as caught:
        limits.take("a", quota, now=0.0)
    assert caught.value.retry_after_s == 100.0


def test_quota_error_pickles_with_its_retry_after() -> None:
    error = pickle.loads(pickle.dumps(QuotaExceeded("over", retry_after_s=7.0)))
    assert (error.message, error.retry_after_s) == ("over", 7.0)


def test_pages_in_flight_per_key() -> None:
    pages = KeyPages()
    quota = KeyQuota(max_inflight_pages=4)
    pages.admit("a", quota, 3)
    pages.admit("b", quota, 4)  # another key's pages do not count
    with pytest.raises(QuotaExceeded, match="3 pages of key a in flight; its limit is 4"):
        pages.admit("a", quota, 2)
    pages.admit("a", quota, 1)
    pages.release("a", 4)
    pages.admit("a", quota, 4)
    assert pages.inflight == {"a": 4, "b": 4}
    pages.release("a", 4)
    pages.release("b", 4)
    assert pages.inflight == {}


def test_a_keys_only_request_is_taken_whatever_its_pages() -> None:
    pages = KeyPages()
    quota = KeyQuota(max_inflight_pages=2)
    pages.admit("a", quota, 1)
    pages.admit("a", quota, 9, held=1)  # the same request growing: nobody else of a's waits
    with pytest.raises(QuotaExceeded):
        pages.admit("a", quota, 1)
    assert pages.inflight == {"a": 10}
    unlimited = KeyPages()
    for _ in range(100):
        unlimited.admit("a", KeyQuota(), 5)


def _service(max_pages: int = 64) -> OcrService:
    return OcrService(
        cpu=None,  # type: ignore[arg-type]  # admission alone: no page is run
        scheduler=None,  # type: ignore[arg-type]
        limits=DecodeLimits(max_pdf_pages=1, pdf_render_scale=1.0, max_image_pixels=1),
        admission=Admission(max_pages=max_pages),
        budget=MemoryBudget(1 << 20),
        prefix="test_quotas_",
    )


ALICE = Identity(id="alice", role="user", quota=KeyQuota(max_inflight_pages=3))
BOB = Identity(id="bob", role="user", quota=KeyQuota(max_inflight_pages=3))


def test_service_admits_pages_against_the_keys_own_cap() -> None:
    service = _service()

    async def main() -> None:
        async with service._admitted(60.0, ALICE) as first:
            first.grow_to(2)
            async with service._admitted(60.0, ALICE):  # alice's third page: at her cap
                with pytest.raises(QuotaExceeded):
                    async with service._admitted(60.0, ALICE):
                        pass
                with pytest.raises(QuotaExceeded):
                    first.grow_to(3)
                assert first.pages == 2
                async with service._admitted(60.0, BOB), service._admitted(60.0):
                    assert service.key_pages.inflight == {"alice": 3, "bob": 1}
                    assert service.admission.inflight == 5
            first.grow_to(5)  # alice's only request again: taken whatever its pages
            assert service.key_pages.inflight == {"alice": 5}
        assert service.key_pages.inflight == {}
        assert service.admission.inflight == 0

    asyncio.run(main())


def test_a_request_the_server_sheds_gives_back_its_keys_pages() -> None:
    service = _service(max_pages=2)

    async def main() -> None:
        async with service._admitted(60.0), service._admitted(60.0):
            with pytest.raises(Overloaded):
                async with service._admitted(60.0, ALICE):
                    pass
            assert service.key_pages.inflight == {}

    asyncio.run(main())
