"""Unit tests for serving/workers/shm.py: arrays through POSIX shared memory segments."""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator

import numpy as np
import pytest

from serving.workers import shm
from serving.workers.shm import ShmRef, discard, put, server_prefix, sweep, take, take_into

pytestmark = pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs /dev/shm")


def _exists(ref: ShmRef) -> bool:
    return os.path.exists(os.path.join("/dev/shm", ref.name))


def _listed(prefix: str) -> list[str]:
    return sorted(name for name in os.listdir("/dev/shm") if name.startswith(prefix))


def _new_prefix() -> str:
    return f"ocrtest{uuid.uuid4().hex[:12]}_"


@pytest.fixture
def prefix() -> Iterator[str]:
    value = _new_prefix()
    yield value
    sweep(value)


ARRAYS = [
    np.arange(3 * 48 * 320, dtype=np.float32).reshape(3, 48, 320) / 7.0,
    np.linspace(-1.0, 1.0, 2 * 3 * 32 * 64, dtype=np.float32).reshape(2, 3, 32, 64),
    np.array([1.5], dtype=np.float32),
    np.arange(17 * 29 * 3, dtype=np.uint8).reshape(17, 29, 3),
    np.arange(256, dtype=np.uint8),
    np.full((5, 7), 200, dtype=np.uint8),
    np.zeros((0, 3), dtype=np.float32),
]


@pytest.mark.parametrize("array", ARRAYS, ids=lambda a: f"{a.dtype}{list(a.shape)}")
def test_put_take_round_trip(prefix: str, array: np.ndarray) -> None:
    ref = put(array, prefix)
    assert ref.name.startswith(prefix)
    assert ref.shape == array.shape
    assert all(type(d) is int for d in ref.shape)
    assert np.dtype(ref.dtype) == array.dtype
    assert _exists(ref)
    out = take(ref)
    assert out.dtype == array.dtype
    assert out.shape == array.shape
    np.testing.assert_array_equal(out, array)
    assert not _exists(ref)


def test_put_copies_and_take_owns_memory(prefix: str) -> None:
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    ref = put(array, prefix)
    array[:] = -1  # the segment holds a copy
    out = take(ref)
    np.testing.assert_array_equal(out, np.arange(12, dtype=np.float32).reshape(3, 4))
    assert out.flags.owndata
    out[0, 0] = 99.0  # writable and detached from the (now unlinked) segment
    assert out[0, 0] == 99.0


def test_put_non_contiguous(prefix: str) -> None:
    base = np.arange(60, dtype=np.float32).reshape(6, 10)
    view = base[::2, 1::3]
    assert not view.flags.c_contiguous
    np.testing.assert_array_equal(take(put(view, prefix)), view)


def test_put_unique_names(prefix: str) -> None:
    array = np.zeros(4, np.uint8)
    refs = [put(array, prefix) for _ in range(5)]
    assert len({r.name for r in refs}) == 5
    assert _listed(prefix) == sorted(r.name for r in refs)


def test_take_without_unlink_keeps_segment(prefix: str) -> None:
    array = np.arange(10, dtype=np.uint8)
    ref = put(array, prefix)
    first = take(ref, unlink=False)
    assert _exists(ref)
    second = take(ref)  # can be read again
    np.testing.assert_array_equal(first, array)
    np.testing.assert_array_equal(second, array)
    assert not _exists(ref)


def test_take_missing_segment_raises(prefix: str) -> None:
    ref = put(np.zeros(3, np.uint8), prefix)
    take(ref)
    with pytest.raises(FileNotFoundError):
        take(ref)


def test_take_into_collates_rows(prefix: str) -> None:
    parts = [
        np.full((2, 3, 4), 1.0, np.float32),
        np.full((1, 3, 4), 2.0, np.float32),
        np.arange(3 * 3 * 4, dtype=np.float32).reshape(3, 3, 4),
    ]
    refs = [put(p, prefix) for p in parts]
    out = np.full((7, 3, 4), -5.0, np.float32)  # one spare row
    take_into(refs, out)
    np.testing.assert_array_equal(out[:6], np.concatenate(parts))
    assert (out[6] == -5.0).all()  # rows past the refs are untouched
    assert not any(_exists(r) for r in refs)
    assert _listed(prefix) == []


def test_take_into_uint8_without_unlink(prefix: str) -> None:
    parts = [np.full((1, 4, 5, 3), i, np.uint8) for i in range(3)]
    refs = [put(p, prefix) for p in parts]
    out = np.zeros((3, 4, 5, 3), np.uint8)
    take_into(refs, out, unlink=False)
    assert [int(out[i].max()) for i in range(3)] == [0, 1, 2]
    assert [int(out[i].min()) for i in range(3)] == [0, 1, 2]
    assert all(_exists(r) for r in refs)
    for ref in refs:
        discard(ref)
    assert _listed(prefix) == []


def test_take_into_converts_dtype(prefix: str) -> None:
    refs = [put(np.array([[1, 2]], np.uint8), prefix), put(np.array([[3, 4]], np.uint8), prefix)]
    out = np.zeros((2, 2), np.float32)
    take_into(refs, out)
    np.testing.assert_array_equal(out, [[1.0, 2.0], [3.0, 4.0]])


def test_discard_is_idempotent(prefix: str) -> None:
    ref = put(np.ones(8, np.float32), prefix)
    assert _exists(ref)
    discard(ref)
    assert not _exists(ref)
    discard(ref)  # second time: nothing to do, no error
    discard(ShmRef(name=f"{prefix}never-created", shape=(1,), dtype="u1"))
    assert not _exists(ref)


def test_sweep_removes_only_matching_prefix() -> None:
    mine, other = _new_prefix(), _new_prefix()
    try:
        mine_refs = [put(np.zeros(16, np.uint8), mine) for _ in range(3)]
        other_refs = [put(np.zeros(16, np.uint8), other) for _ in range(2)]
        assert sweep(mine) == 3
        assert not any(_exists(r) for r in mine_refs)
        assert all(_exists(r) for r in other_refs)
        assert _listed(mine) == []
        assert len(_listed(other)) == 2
        assert sweep(mine) == 0
        assert sweep(other) == 2
        assert _listed(other) == []
    finally:
        sweep(mine)
        sweep(other)


def test_sweep_prefix_is_literal(prefix: str) -> None:
    # Glob metacharacters in the prefix are escaped, so "*" does not match everything.
    ref = put(np.zeros(2, np.uint8), prefix)
    assert sweep(prefix[:-1] + "*") == 0
    assert _exists(ref)
    assert sweep(prefix) == 1


def test_shmref_nbytes() -> None:
    assert ShmRef(name="x", shape=(3, 48, 320), dtype="<f4").nbytes == 3 * 48 * 320 * 4
    assert ShmRef(name="x", shape=(17, 29, 3), dtype="|u1").nbytes == 17 * 29 * 3
    assert ShmRef(name="x", shape=(2, 5), dtype="<f8").nbytes == 80
    assert ShmRef(name="x", shape=(0, 3), dtype="<f4").nbytes == 0
    assert ShmRef(name="x", shape=(), dtype="<i2").nbytes == 2


def test_nbytes_matches_array(prefix: str) -> None:
    array = np.zeros((4, 3, 32, 100), np.float32)
    ref = put(array, prefix)
    assert ref.nbytes == array.nbytes
    discard(ref)


def test_nbytes_large_shape_no_overflow() -> None:
    # int64 product: 2**20 * 2**12 elements of 4 bytes would overflow int32.
    assert ShmRef(name="x", shape=(2**20, 2**12), dtype="<f4").nbytes == 2**34


def test_server_prefix() -> None:
    assert server_prefix(1234) == "ocrsrv1234x"
    assert server_prefix() == f"ocrsrv{os.getpid()}x"
    assert server_prefix(0) == "ocrsrv0x"


def test_claimed_prefix_has_a_fresh_token_and_a_held_lock(tmp_path) -> None:
    first, second = shm.claim_prefix(str(tmp_path)), shm.claim_prefix(str(tmp_path))
    try:
        assert re.fullmatch(rf"ocrsrv{os.getpid()}x[0-9a-f]{{8}}_", first.prefix)
        assert first.prefix != second.prefix
        assert sorted(os.listdir(tmp_path)) == sorted(
            [os.path.basename(first.lock_path or ""), os.path.basename(second.lock_path or "")]
        )
    finally:
        first.release()
        second.release()
    assert os.listdir(tmp_path) == []


def test_shm_dir_constant() -> None:
    assert shm._SHM_DIR == "/dev/shm"


def _dead_pid() -> int:
    """A pid no process can have: one above the kernel's limit."""
    try:
        with open("/proc/sys/kernel/pid_max") as limit:
            return int(limit.read()) + 1
    except OSError:
        return 2**22 + 1  # the largest limit Linux allows, plus one


def test_sweep_orphans_removes_tokenless_segments_of_dead_pids_only(tmp_path) -> None:
    # Names from servers before tokens: only the pid tells, and another live pid keeps them.
    dead, live = _dead_pid(), os.getppid()
    sizes = {
        f"ocrsrv{dead}_a": 10,
        f"ocrsrv{dead}_b": 20,
        f"ocrsrv{live}_c": 40,
        "ocrtest0_d": 80,
        "other": 160,
    }
    for name, size in sizes.items():
        (tmp_path / name).write_bytes(b"\0" * size)
    assert shm.sweep_orphans(str(tmp_path)) == (2, 30)
    assert sorted(os.listdir(tmp_path)) == sorted([f"ocrsrv{live}_c", "ocrtest0_d", "other"])
    assert shm.sweep_orphans(str(tmp_path)) == (0, 0)


def test_sweep_orphans_removes_segments_of_an_earlier_start_with_the_same_pid(tmp_path) -> None:
    # In a container the server is PID 1 at every start: the pid of a server killed with -9 is
    # alive again, as the next server's. Only the lock on the token tells them apart.
    live = shm.claim_prefix(str(tmp_path))
    dead = shm.claim_prefix(str(tmp_path))
    (tmp_path / f"{live.prefix}a").write_bytes(b"\0" * 10)
    (tmp_path / f"{dead.prefix}b").write_bytes(b"\0" * 20)
    (tmp_path / f"{dead.prefix}c").write_bytes(b"\0" * 40)
    os.close(dead.fd or -1)  # what the kernel does for a killed server: its lock goes
    try:
        assert dead.prefix.startswith(server_prefix())
        assert live.prefix.startswith(server_prefix())
        assert shm.sweep_orphans(str(tmp_path)) == (2, 60)
        assert sorted(os.listdir(tmp_path)) == sorted(
            [f"{live.prefix}a", os.path.basename(live.lock_path or "")]
        )  # the dead start's lock file went with its segments
    finally:
        live.release()


def test_sweep_orphans_removes_segments_without_a_lock_file(tmp_path) -> None:
    (tmp_path / f"{server_prefix()}0123abcd_x").write_bytes(b"\0" * 8)
    assert shm.sweep_orphans(str(tmp_path)) == (1, 8)


def test_sweep_orphans_keeps_this_processs_own_prefix(tmp_path) -> None:
    mine = shm.claim_prefix(str(tmp_path))
    try:
        (tmp_path / f"{mine.prefix}a").write_bytes(b"\0" * 8)
        assert shm.sweep_orphans(str(tmp_path)) == (0, 0)
        assert (tmp_path / f"{mine.prefix}a").exists()
    finally:
        mine.release()


def test_sweep_orphans_removes_tokenless_segments_of_this_pid(tmp_path) -> None:
    # A server from before tokens, that had this process's pid: dead, since the pid is ours.
    (tmp_path / f"ocrsrv{os.getpid()}_a").write_bytes(b"\0" * 8)
    assert shm.sweep_orphans(str(tmp_path)) == (1, 8)
