"""The served precision (issues 28, 41, 46): `ocr-serve` with the default CPU engine (OpenVINO,
precision "auto") says in `/readyz` and its start-up log which precision each device worker runs,
why, in which layers, and what this CPU's precision check measured for each model of each set:
bf16 where the check passed it (a recogniser's CTC head in f32), else f32; f32 where the CPU has
no bf16. Each branch runs on its kind of CPU; the choice for every kind, on any machine:
tests/unit/models/test_openvino_precision.py."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from models.openvino_layout import HEAD_CUT
from models.openvino_precision import has_bf16
from tests.e2e.conftest import Server

ov: Any = pytest.importorskip("openvino")


# The default server at "auto", whatever precision the suite's environment forces (the suite is
# also run with OCR_ENGINE__OPENVINO_PRECISION=bf16 and =f32: issue 41).
@pytest.mark.profile("precision-auto")
def test_readyz_and_the_log_say_each_workers_precision_and_why(server: Server) -> None:
    capabilities = list(ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"))
    bf16 = has_bf16(capabilities)
    devices = httpx.get(f"{server.url}/readyz").json()["devices"]
    assert devices
    models = httpx.get(f"{server.url}/v1/models").json()
    default = next(m for m in models["models"] if m["default"])
    for name, device in devices.items():
        # One precision where every model agrees, else "stage=precision ..." (other model sets
        # and the orientation classifier load beside the default pair).
        precisions = by_stage(device["precision"], " ", "=")
        reasons = by_stage(device["precision_reason"], "; ", ": ")
        layers = by_stage(device["precision_layers"], "; ", ": ")
        checks = device.get("precision_checks", {})
        pairs = [stage for stage in precisions if stage.split("@")[0] in ("det", "rec")]
        assert {"det", "rec"} <= set(pairs), name
        if not bf16:  # every model f32, and why; int8 where made (make convert) and checked
            for stage in pairs:
                if stage in checks:
                    passed = checks[stage]["at"].get("int8", {}).get("passed", False)
                    assert precisions[stage] == ("int8" if passed else "f32"), (stage, checks)
                    continue
                assert precisions[stage] == "f32"
                assert reasons[stage].startswith("auto: this CPU has no bf16")
            continue
        # A bf16 CPU: each model of each set runs what this CPU's check passed, and /readyz
        # says what it measured, when, and whether this start measured it or read the cache.
        assert set(checks) == set(pairs), name
        for stage in pairs:
            check = checks[stage]
            assert check["checked"] is True
            assert check["cache"] in ("fresh", "hit")
            assert check["measured_at"].startswith("20")
            assert {"f32", "bf16"} <= set(check["at"])
            for precision in ("f32", "bf16"):
                assert {"cer", "merged_words", "by_language"} <= set(check["at"][precision])
            passed = check["at"]["bf16"]["passed"]
            assert precisions[stage] == ("bf16" if passed else "f32"), (stage, check)
            assert "this CPU's check" in reasons[stage]
            expected_layers = "f32, every layer"
            if passed:
                head = stage.startswith("rec")
                expected_layers = f"bf16, {HEAD_CUT}" if head else "bf16, every layer"
            assert layers[stage] == expected_layers
        assert " ".join(capabilities) in device["precision_reason"]
    log = server.log.read_text()
    for stage in ("det", "rec"):
        # The line names the file the model came from (the ONNX model, or its int8 form).
        pattern = rf"loaded {stage} model={default[stage]} \(\S+\.onnx\) engine=openvino "
        assert re.search(pattern, log), stage
        assert re.search(rf"loaded {stage} .* precision=(f32|bf16) \(auto: ", log)
    if bf16:
        assert re.search(r"precision check of \S+ \+ \S+: .* \((measured in|cached)", log)
    # The worker's ready report, as Python writes a dict (a reason with an apostrophe is in
    # double quotes).
    report = re.search(
        r"device worker \S+ ready: .*'precision': '([^']*)', 'precision_reason'", log
    )
    assert report is not None


STAGES = ("ori", "det", "rec", "cls")


def by_stage(text: str, separator: str, pair: str) -> dict[str, str]:
    """A worker's summary per stage ("det=bf16 rec=f32", "det: why; rec: why"), or where every
    model agrees the one value, for each stage."""
    parts = [part.partition(pair) for part in text.split(separator)]
    if all(name.split("@")[0] in STAGES and sep for name, sep, _ in parts):
        return {name: value for name, _, value in parts}
    return dict.fromkeys(STAGES, text)


@pytest.mark.profile("f32")
def test_f32_forced_is_what_every_worker_runs_on_any_cpu(server: Server) -> None:
    """The f32 branch on every machine, a bf16 one included: `OCR_ENGINE__OPENVINO_PRECISION=f32`
    (as Docker and Kubernetes users force it) makes every model f32, every layer, and says so."""
    devices = httpx.get(f"{server.url}/readyz").json()["devices"]
    assert devices
    for name, device in devices.items():
        assert device["precision"] == "f32", name
        assert device["precision_reason"].startswith(
            "f32 asked for (engine.openvino_precision): Paddle's text; no check runs"
        )
        assert "precision_checks" not in device
        assert set(by_stage(device["precision_layers"], "; ", ": ").values()) == {
            "f32, every layer"
        }
    log = server.log.read_text()
    assert "precision=bf16" not in log
    assert re.search(r"loaded rec model=PP-OCRv6_small_rec .* precision=f32 \(f32 asked for", log)
