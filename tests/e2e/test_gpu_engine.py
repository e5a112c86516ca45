"""`engine.gpu_backend = "auto"`, the default (issue 39, item 8), on this machine: `ocr-serve`
with no `[engine]` section and `devices = "auto"` says in its log and in `/readyz` which engine it
chose for GPUs (here none: this machine has no GPU) and why."""

from __future__ import annotations

import httpx
import pytest

from serving.engine.gpu_choice import choose_gpu_engine
from tests.e2e.conftest import Server

# `engine.gpu_backend` and `workers.devices` at their defaults; one worker of each kind;
# model-free (tests/e2e/profiles.py).
pytestmark = [pytest.mark.e2e, pytest.mark.profile("fake")]


def test_the_default_config_says_it_chose_the_cpu_and_why(server: Server) -> None:
    here = choose_gpu_engine()
    if here.backend is not None:
        pytest.skip(f"this machine serves GPUs: {here.reason}")
    ready = httpx.get(f"{server.url}/readyz", timeout=10).json()
    log = server.log.read_text()
    engine = ready["gpu_engine"]
    assert (engine["setting"], engine["backend"], engine["gpus"]) == ("auto", "cpu", 0)
    reason = engine["reason"]
    assert reason.startswith("torch "), reason
    assert "; paddle " in reason, reason
    assert any(why in reason for why in ("not installed", "CPU build", "no CUDA device")), reason
    assert f"GPU engine: none, the CPU serves (engine.gpu_backend = 'auto': {reason})" in log
    assert set(ready["devices"]) == {"cpu"}
