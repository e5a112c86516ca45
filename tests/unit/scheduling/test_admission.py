"""Admission by measured pace against the deadline, with a hand-driven clock."""

from __future__ import annotations

import pytest

from serving.errors import Overloaded
from serving.scheduling.admission import Admission


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _busy_at_pace(page_s: float, pages: int = 4) -> tuple[Admission, Clock]:
    clock = Clock()
    admission = Admission(max_pages=64, clock=clock)
    admission.admit(pages, deadline_s=300)
    for _ in range(pages):
        clock.now += page_s
        admission.page_done()
    admission.release(pages)
    return admission, clock


def test_an_idle_server_admits_anything_and_learns_its_pace() -> None:
    admission, _ = _busy_at_pace(5.0)
    assert admission.page_s == pytest.approx(5.0)
    assert admission.inflight == 0
    admission.admit(10, deadline_s=1.0)  # idle: admitted, whatever the estimate says
    assert admission.inflight == 10


def test_a_burst_is_shed_where_it_would_miss_its_deadline_not_at_a_fixed_count() -> None:
    """64 pages on a 5 s/page server: the old count admitted all and the last ones got 504."""
    admission, _ = _busy_at_pace(5.0)
    admitted = 0
    refusals: list[str] = []
    for _ in range(64):
        try:
            admission.admit(1, deadline_s=300.0)
            admitted += 1
        except Overloaded as err:
            refusals.append(err.message)
    # (in flight + 1) * 5 s <= 300 s: 60 pages can be done in time.
    assert admitted == 60
    assert len(refusals) == 4
    assert all("deadline" in message for message in refusals)
    assert admission.expected_s(0) == pytest.approx(300.0)


def test_the_cap_still_holds_before_any_pace_is_known() -> None:
    admission = Admission(max_pages=4, clock=Clock())
    admission.admit(3, deadline_s=300)
    with pytest.raises(Overloaded, match="limit 4"):
        admission.admit(2, deadline_s=300)
    admission.admit(1, deadline_s=300)
    assert admission.inflight == 4


def test_the_pace_follows_the_server_smoothly() -> None:
    admission, clock = _busy_at_pace(1.0, pages=10)
    admission.admit(10, deadline_s=300)
    for _ in range(10):
        clock.now += 3.0
        admission.page_done()
    admission.release(10)
    assert admission.page_s is not None
    assert 2.5 < admission.page_s < 3.0


def test_idle_time_between_bursts_is_not_counted_as_work() -> None:
    admission, clock = _busy_at_pace(1.0)
    clock.now += 3600.0  # an idle hour
    admission.admit(1, deadline_s=300)
    clock.now += 1.0
    admission.page_done()
    assert admission.page_s == pytest.approx(1.0)


def test_a_request_alone_is_taken_whatever_its_size() -> None:
    """A 6-page PDF under a cap of 3 was shed even on an idle server, and so on every retry."""
    admission = Admission(max_pages=3, clock=Clock())
    admission.admit(1, deadline_s=300)
    admission.admit(5, deadline_s=300, held=1)
    assert admission.inflight == 6
    with pytest.raises(Overloaded):
        admission.admit(1, deadline_s=300)
