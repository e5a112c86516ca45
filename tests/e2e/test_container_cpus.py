"""Worker counts from the CPUs the server may use, not the host's (issue 37, item 11).

Before, `os.cpu_count()` sized every default that counts cores: on a 64-core node an 8-CPU pod
started 64 CPU workers. Here the server is started pinned to one core (its affinity, as a cpuset
or `docker run --cpuset-cpus` pins a container) with `workers.cpu_workers` left at 0.
"""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import SLOW_FAKE, fresh_server, stop_server, wait_ready

CONFIG = """
[paddlex]
visualize = false
[workers]
devices = ["cpu"]
cpu_instances = 1
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to pin to one")
def test_a_server_pinned_to_one_core_starts_one_cpu_worker(tmp_path: Path) -> None:
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(before)})  # the server and its workers inherit it
    try:
        server = fresh_server(tmp_path, CONFIG, backend=SLOW_FAKE)
    finally:
        os.sched_setaffinity(0, before)
    try:
        wait_ready(server)
        state = httpx.get(f"{server.url}/readyz").json()  # loopback: the whole state
        assert len(state["cpu_workers"]["pids"]) == 1, state["cpu_workers"]
        assert os.cpu_count() != 1  # the host's count would have started more
    finally:
        stop_server(server)
