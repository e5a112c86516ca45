"""serving/jobs/retries.py: exponential backoff with jitter, a receiver's Retry-After, and the
bound in time after which a delivery fails."""

from __future__ import annotations

import pytest

from serving.config import WebhooksConfig
from serving.jobs.retries import after_attempt, wait_before

CONFIG = WebhooksConfig(retry_first_s=5.0, retry_max_interval_s=60.0, retry_for_s=300.0)


def test_the_wait_doubles_up_to_the_longest() -> None:
    assert [wait_before(n, CONFIG) for n in range(1, 7)] == [5.0, 10.0, 20.0, 40.0, 60.0, 60.0]


def test_jitter_shortens_a_wait_by_at_most_a_fifth() -> None:
    assert wait_before(2, CONFIG, jitter=0.0) == 10.0
    assert wait_before(2, CONFIG, jitter=0.999) == pytest.approx(8.0, abs=0.01)


def test_a_failure_is_tried_again_after_its_wait() -> None:
    verdict = after_attempt(
        ok=False, permanent=False, attempts=2, created_at=0.0, now=100.0, config=CONFIG
    )
    assert verdict.next_at == 110.0


def test_success_and_final_failures_end_the_delivery() -> None:
    for ok, permanent in ((True, False), (False, True)):
        verdict = after_attempt(
            ok=ok, permanent=permanent, attempts=1, created_at=0.0, now=1.0, config=CONFIG
        )
        assert not verdict.again


def test_retry_after_is_kept_up_to_the_longest_wait() -> None:
    kept = after_attempt(
        ok=False,
        permanent=False,
        attempts=1,
        created_at=0.0,
        now=10.0,
        config=CONFIG,
        retry_after_s=30.0,
    )
    assert kept.next_at == 40.0
    capped = after_attempt(
        ok=False,
        permanent=False,
        attempts=1,
        created_at=0.0,
        now=10.0,
        config=CONFIG,
        retry_after_s=3600.0,
    )
    assert capped.next_at == 70.0


def test_no_attempt_is_planned_past_retry_for_s() -> None:
    last = after_attempt(
        ok=False, permanent=False, attempts=9, created_at=0.0, now=250.0, config=CONFIG
    )
    assert not last.again  # 250 + 60 > 300
