"""The served precision (issue 28): `ocr-serve` with the default CPU engine (OpenVINO, precision
"auto") says in `/readyz` and its start-up log which precision each device worker runs and why:
bf16 where this machine's CPU has it, else f32."""

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
    log = server.log.read_text()
    for stage in ("det", "rec"):
        # The line names the file the model came from (the ONNX model, or its int8 form).
        pattern = rf"loaded {stage} model=PP-OCRv5_mobile_{stage} \(\S+\.onnx\) engine=openvino "
        assert re.search(pattern, log), stage
    assert f"precision={expected} (auto: this CPU has" in log
    assert f"'precision': '{expected}', 'precision_reason': 'auto: " in log
