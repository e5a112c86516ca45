"""`serving.scheduling.retry_after` and the hint `Admission` gives it, with the time passed in."""

from __future__ import annotations

import pickle
import random

import pytest

from serving.errors import Overloaded
from serving.scheduling.admission import Admission
from serving.scheduling.retry_after import MAX_RETRY_AFTER_S, retry_after_s
from tests.clock import ManualClock


@pytest.mark.parametrize(
    ("floor_s", "hint_s", "base"),
    [
        (2, None, 2),
        (2, 0.5, 2),  # never below the setting
        (2, 6.2, 7),  # the state's time, whole seconds up
        (2, 1e6, MAX_RETRY_AFTER_S),  # capped
        (90, 5.0, 90),  # the setting wins over the cap
    ],
)
def test_between_the_base_and_twice_it(floor_s: int, hint_s: float | None, base: int) -> None:
    rng = random.Random(1)
    values = {retry_after_s(floor_s, hint_s, rng=rng) for _ in range(400)}
    assert min(values) == base
    assert max(values) == 2 * base


def test_overloaded_admission_says_when_room_comes_back() -> None:
    clock = ManualClock()
    admission = Admission(max_pages=2, clock=clock)
    admission.admit(1)
    clock.now += 3.0
    admission.page_done()  # a page every 3 s
    admission.admit(1, held=0)
    with pytest.raises(Overloaded) as full:
        admission.admit(2)  # two pages past the limit: two pages' time
    assert full.value.retry_after_s == pytest.approx(6.0)
    with pytest.raises(Overloaded) as late:
        admission.admit(0, deadline_s=1.0)  # 2 pages ahead, done in 6 s: 5 s past the deadline
    assert late.value.retry_after_s == pytest.approx(5.0)


def test_the_hint_crosses_processes() -> None:
    err = pickle.loads(pickle.dumps(Overloaded("full", retry_after_s=4.5)))
    assert (err.message, err.retry_after_s) == ("full", 4.5)
