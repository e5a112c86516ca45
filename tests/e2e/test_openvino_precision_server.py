"""The served precision (issues 28, 41): `ocr-serve` with the default CPU engine (OpenVINO,
precision "auto") says in `/readyz` and its start-up log which precision each device worker runs,
why, and in which layers: bf16 where this machine's CPU has it (the recogniser's CTC head in f32),
else f32. Each branch runs on its kind of CPU; the choice for both kinds, on any machine:
tests/unit/models/test_openvino_precision.py."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from models.openvino_precision import has_bf16
from tests.e2e.conftest import Server

ov: Any = pytest.importorskip("openvino")


def test_readyz_and_the_log_say_each_workers_precision_and_why(server: Server) -> None:
    capabilities = list(ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"))
    expected = "bf16" if has_bf16(capabilities) else "f32"
    devices = httpx.get(f"{server.url}/readyz").json()["devices"]
    assert devices
    for name, device in devices.items():
        assert device["precision"] == expected, name
        reason = device["precision_reason"]
        assert reason.startswith(
            f"auto: this CPU has {'bf16' if expected == 'bf16' else 'no bf16'}"
        )
        assert " ".join(capabilities) in reason
        # Which layers run at which precision: a bf16 recogniser keeps its CTC head in f32.
        layers = device["precision_layers"]
        assert layers.startswith(f"det: {expected}, every layer; rec: {expected}, ")
        assert ("CTC head" in layers) == (expected == "bf16")
    log = server.log.read_text()
    for stage in ("det", "rec"):
        # The line names the file the model came from (the ONNX model, or its int8 form).
        pattern = rf"loaded {stage} model=PP-OCRv5_mobile_{stage} \(\S+\.onnx\) engine=openvino "
        assert re.search(pattern, log), stage
    assert f"precision={expected} (auto: this CPU has" in log
    # The worker's ready report, as Python writes a dict: the bf16 reason has an apostrophe
    # ("the model's text"), so its repr is in double quotes.
    assert re.search(rf"'precision': '{expected}', 'precision_reason': [\"']auto: ", log)
