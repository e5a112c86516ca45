"""Pinned staging and stream pipelining (`models.staging`) on a fake device whose copies and
kernels take time: what overlaps is read off the recorded events, never off a stopwatch."""

from __future__ import annotations

import numpy as np
import pytest

from models.staging import Lane, LaneError
from tests.fakes.timed_device import Kernel, TimedDevice

DOUBLE = Kernel(lambda x: x * 2.0)


def batch(tag: int, rows: int = 2) -> np.ndarray:
    return np.full((rows, 3, 8, 16), float(tag), dtype=np.float32)


@pytest.fixture
def device():
    # Batch 1's kernel holds until batch 2's upload has started, and batch 2's kernel until
    # batch 1's download has started: both happen only if the lane issued them concurrently.
    device = TimedDevice(
        gates={("compute", 1): ("upload", 2), ("compute", 2): ("download", 1)},
    )
    yield device
    device.close()


def launch(lane: Lane, tag: int):
    slot = lane.stage((2, 3, 8, 16))
    slot.input[...] = batch(tag)  # the caller collates straight into page-locked memory
    lane.launch(slot, DOUBLE)
    return slot


def test_next_batch_copies_while_the_current_one_computes(device) -> None:
    lane = Lane(device)
    first = launch(lane, 1)
    second = launch(lane, 2)  # issued without waiting for batch 1
    np.testing.assert_array_equal(first.result(), batch(1) * 2)
    np.testing.assert_array_equal(second.result(), batch(2) * 2)
    first.release()
    second.release()
    assert device.gate_seen == {("compute", 1): True, ("compute", 2): True}
    log = device.log
    # Batch 2's upload started before batch 1's kernel ended, and batch 1's download before
    # batch 2's kernel ended.
    assert log.index(("start", ("upload", 2))) < log.index(("end", ("compute", 1)))
    assert log.index(("start", ("download", 1))) < log.index(("end", ("compute", 2)))
    # Each batch: copy in, compute, copy out, in that order.
    for tag in (1, 2):
        order = [log.index(("end", (op, tag))) for op in ("upload", "compute", "download")]
        assert order == sorted(order)


def test_a_serial_lane_is_caught_by_the_gates() -> None:
    # The same device and gates, used one batch at a time: the gates are not satisfied, so the
    # test above can fail.
    device = TimedDevice(gates={("compute", 1): ("upload", 2)}, gate_timeout_s=0.2)
    try:
        lane = Lane(device)
        first = launch(lane, 1)
        first.result()
        first.release()
        second = launch(lane, 2)
        second.result()
        second.release()
        assert device.gate_seen == {("compute", 1): False}
    finally:
        device.close()


def test_slots_and_page_locked_buffers_are_reused() -> None:
    device = TimedDevice(copy_s=0.0, compute_s=0.0)
    try:
        lane = Lane(device, max_slots=2)
        for tag in range(1, 7):
            slots = [launch(lane, tag), launch(lane, tag + 10)]
            for slot, expected in zip(slots, (tag, tag + 10), strict=True):
                np.testing.assert_array_equal(slot.result(), batch(expected) * 2)
                slot.release()
        assert lane.slots == 2
        assert device.pinned_allocations == 4  # one input and one output buffer per slot
        # A smaller batch fits the same buffers.
        small = lane.stage((1, 3, 8, 8))
        assert small.input.shape == (1, 3, 8, 8)
        small.release()
        assert device.pinned_allocations == 4
    finally:
        device.close()


def test_all_slots_in_use_is_an_error_not_a_wait() -> None:
    device = TimedDevice(copy_s=0.0, compute_s=0.0)
    try:
        lane = Lane(device, max_slots=1)
        slot = lane.stage((1, 3, 8, 8))
        with pytest.raises(LaneError):
            lane.stage((1, 3, 8, 8))
        slot.release()
        lane.stage((1, 3, 8, 8)).release()
    finally:
        device.close()


def test_result_before_launch_is_an_error() -> None:
    device = TimedDevice()
    try:
        slot = Lane(device).stage((1, 3, 8, 8))
        with pytest.raises(LaneError):
            slot.result()
    finally:
        device.close()


def test_run_copies_the_result_out_of_the_slot() -> None:
    device = TimedDevice(copy_s=0.0, compute_s=0.0)
    try:
        lane = Lane(device, max_slots=1)
        out = lane.run(batch(3), DOUBLE)
        lane.run(batch(4), DOUBLE)  # reuses the slot; `out` must not change
        np.testing.assert_array_equal(out, batch(3) * 2)
    finally:
        device.close()
