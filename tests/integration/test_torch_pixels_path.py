"""The torch engine's uint8 path in a device worker: pixels collated from shared memory into a
uint8 page-locked slot and normalised on the device give the model's outputs bit for bit as the
float32 path (normalised on the host), for a page's detection and its recognition chunks. On the
torch CPU device; a GPU runs the same slots and gather."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from models.bundle import load_bundle
from pipelines.page import after_det, prepare
from pipelines.types import DetParams, RecParams
from serving.config import AppConfig, EngineConfig
from serving.engine.choice import engine_choice
from serving.workers import device_worker, shm
from serving.workers.device_worker import ItemOk, WorkerSetup
from tests import images

pytest.importorskip("torch", reason="the torch extra (make install-test installs it)")


def _child(predictors: dict[str, Any], prefix: str) -> Any:
    child_class = (
        vars(device_worker).get("DeviceWorkerChild") or vars(device_worker)["DeviceRunner"]
    )
    child = child_class(spec=None, setup=WorkerSetup(model_dirs={}, shm_prefix=prefix), conn=None)
    child.use(predictors)
    return child


def _staged(child: Any, stage: str, refs: list[shm.ShmRef]) -> list[Any]:
    batch = child.start_batch(stage, refs)
    assert batch.slot is not None  # launched on the lane, not run synchronously
    return [o.value for o in batch.finish() if isinstance(o, ItemOk)]


def test_pixels_normalised_on_the_device_give_the_host_path_outputs(onnx_dir: str) -> None:
    config = AppConfig(
        engine=dataclasses.replace(EngineConfig(), cpu_backend="torch", onnx_dir=onnx_dir)
    )
    models = config.models
    specs = load_bundle(models.det, models.rec).specs
    engine = engine_choice(config, "cpu")
    predictors = {stage: engine.predictor(specs[stage]) for stage in ("det", "rec")}
    for predictor in predictors.values():
        predictor.load()
    claim = shm.claim_prefix()
    prefix = claim.prefix + "torchpx_"
    child = _child(predictors, prefix)
    try:
        image = images.latin_lines().image
        step = prepare(image, DetParams())
        det_refs = [shm.put(p.data, prefix, p.sizes) for p in step.pixels]
        assert det_refs[0].dtype == np.dtype(np.uint8).str
        (staged_map,) = _staged(child, "det", det_refs)
        (host_map,) = [o.value for o in child.run_batch("det", det_refs)]
        assert np.array_equal(shm.view(staged_map), shm.view(host_map))
        nxt = after_det(step.state, image, [shm.view(staged_map)], DetParams(), RecParams(), None)
        assert nxt.pixels
        rec_refs = [shm.put(p.data, prefix, p.sizes) for p in nxt.pixels]
        assert any(ref.sizes for ref in rec_refs)  # padded rows, zeroed on the device
        for ref in rec_refs:
            (staged,) = _staged(child, "rec", [ref])
            (host,) = [o.value for o in child.run_batch("rec", [ref])]
            for ours, theirs in zip(staged, host, strict=True):
                assert np.array_equal(ours, theirs)
    finally:
        shm.sweep(prefix)
        claim.release()
