"""The torch engine on a CUDA GPU, through the server's real path: device worker processes (two
instances on one GPU), batches across requests, two batches in flight per instance, fp16.
`OCR_GPU_TESTS_ON_CPU=1` runs the same tests on the CPU where there is no GPU (their logic only).

Texts are compared with what the same engine reads on this machine's CPU at the same batching
(`cpu_texts`: bucketed, as a GPU server batches), and nearly with what Paddle read where the
bundle was made (the bundle's expected.json, exact batching).
"""

from __future__ import annotations

import base64
import concurrent.futures
import dataclasses
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from starlette.testclient import TestClient

from loadtest.server_metrics import parse_histograms
from models.engine_options import PrecisionSetting
from models.torch_options import TorchOptions
from serving.app import build_app
from serving.config import (
    AppConfig,
    EngineConfig,
    ModelsConfig,
    PaddlexConfig,
    QueueConfig,
    WorkersConfig,
)
from serving.engine.local import LocalEngine
from serving.service.runtime import Runtime
from tests.gpu.conftest import DEVICE as MAYBE_DEVICE
from tests.gpu.conftest import Pages, bucketed_options, requires_cuda
from tests.integration.conftest import wait_ready
from tests.local_client import local_client

pytestmark = requires_cuda
DEVICE = MAYBE_DEVICE or "gpu:0"
"""gpu:0, or the CPU where `OCR_GPU_TESTS_ON_CPU=1` asks for these tests' logic without a GPU."""

import cv2  # noqa: E402


def _config(
    models: ModelsConfig, *, precision: PrecisionSetting = "fp32", instances: int = 2
) -> AppConfig:
    return AppConfig(
        models=models,
        engine=dataclasses.replace(
            EngineConfig(),
            gpu_backend="torch",
            cpu_backend="torch",
            precision=precision,
            batching="bucketed",  # as "auto" on a GPU, and where these run on the CPU too
            # Eager, as these tests measured it; compile = "auto" would compile every bucket
            # at each server's start (tests/integration/test_torch_compile.py).
            torch=TorchOptions(compile="off"),
        ),
        workers=dataclasses.replace(
            WorkersConfig(),
            cpu_workers=4,
            devices=(DEVICE,),
            **{"gpu_instances" if DEVICE.startswith("gpu") else "cpu_instances": instances},  # type: ignore[arg-type]
            # Crops of concurrent pages wait a quarter second for company, so that they share
            # rec batches however fast the GPU empties the queue.
            rec_queue=QueueConfig(max_wait_ms=250.0),
        ),
        paddlex=PaddlexConfig(visualize=False),
    )


def _post_all(client: TestClient, pages: Pages, repeat: int) -> dict[str, list[list[str]]]:
    bodies = {}
    for name, image in pages.images.items():
        ok, png = cv2.imencode(".png", image)
        assert ok
        bodies[name] = base64.b64encode(png.tobytes()).decode()
    names = [name for _ in range(repeat) for name in pages.images]

    def post(name: str) -> list[str]:
        response = client.post("/ocr", json={"file": bodies[name], "fileType": 1})
        assert response.status_code == 200, response.text
        return list(response.json()["result"]["ocrResults"][0]["prunedResult"]["rec_texts"])

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        texts = list(pool.map(post, names))
    read: dict[str, list[list[str]]] = {name: [] for name in pages.images}
    for name, got in zip(names, texts, strict=True):
        read[name].append(got)
    return read


def _rec_batch_over(metrics: str) -> float:
    """The largest histogram bound that some rec batch the workers ran was larger than (0
    when none): a lower bound of the largest rec batch."""
    series = parse_histograms(metrics, {"ocr_batch_size"})
    over = 0.0
    for key, histogram in series.items():
        if ("stage", "rec") not in key[1]:
            continue
        for bound, count in sorted(histogram.buckets.items()):
            if count < histogram.count:
                over = max(over, bound)
    return over


@pytest.fixture(scope="module")
def gpu_client(gpu_models: ModelsConfig) -> Iterator[TestClient]:
    runtime = Runtime.build(_config(gpu_models), jobs=False)
    with local_client(build_app(runtime)) as client:
        wait_ready(client)
        yield client


def test_gpu_server_reads_what_the_cpu_reads(
    gpu_client: TestClient, gpu_pages: Pages, cpu_texts: dict[str, list[str]]
) -> None:
    ready = gpu_client.get("/readyz").json()
    assert set(ready["devices"]) == {f"{DEVICE}#0", f"{DEVICE}#1"}
    # Batching across requests, on the fresh server: the distinct short pages (each with its
    # own crops and widths, few lines) at once, twice each; a rec batch larger than any one
    # page's lines held crops of several requests (CPU workers batch 24 rows at most).
    short = {n: t for n, t in gpu_pages.expected.items() if 0 < len(t) <= 8}
    assert len(short) > 1
    burst = Pages({n: gpu_pages.images[n] for n in short}, short)
    for name, answers in _post_all(gpu_client, burst, repeat=2).items():
        assert answers == [cpu_texts[name]] * 2, name
    most_lines = max(len(t) for t in short.values())
    assert _rec_batch_over(gpu_client.get("/metrics").text) >= most_lines
    read = _post_all(gpu_client, gpu_pages, repeat=4)
    for name, answers in read.items():
        for texts in answers:
            assert texts == cpu_texts[name], name


def test_fp16_server_turns_ready_and_reads_nearly_the_same(
    gpu_models: ModelsConfig, gpu_pages: Pages
) -> None:
    from rapidfuzz.distance import Levenshtein

    from models.bundle import load_bundle
    from models.engine_options import EngineOptions
    from models.torch_backend import TorchPredictor

    if DEVICE.startswith("gpu"):  # fp16 ran: the convolutions' outputs are half precision
        import torch

        rec = TorchPredictor(
            load_bundle(gpu_models.det, gpu_models.rec).rec,
            EngineOptions(device=DEVICE, precision="fp16", torch=TorchOptions(compile="off")),
        )
        rec.load()
        ran: set[torch.dtype] = set()
        for module in rec._eager.modules():  # the predictor's own model (compile is off)
            if isinstance(module, torch.nn.Conv2d):
                module.register_forward_hook(lambda _m, _i, out: ran.add(out.dtype))
        rec.run(np.zeros((2, 3, 48, 320), dtype=np.float32))
        assert ran == {torch.float16}
        rec.close()
    # The default, "auto": fp16 autocast on a GPU, fp32 on the CPU (`models.torch_precision`).
    runtime = Runtime.build(_config(gpu_models, precision="auto", instances=1), jobs=False)
    with local_client(build_app(runtime)) as client:
        wait_ready(client)  # the warm-up page read right in fp16
        ready = client.get("/readyz").json()
        read = _post_all(client, gpu_pages, repeat=1)
    # What the workers say they run, and why: fp16 on a GPU (a fallback to fp32 fails here: the
    # warm-up page read wrong at fp16); the CPU runs fp32 under "auto".
    want = "fp16" if DEVICE.startswith("gpu") else "fp32"
    assert {d.get("precision") for d in ready["devices"].values()} == {want}, ready
    reasons = [d.get("precision_reason", "") for d in ready["devices"].values()]
    assert all(r.startswith("auto: ") and "fell back" not in r for r in reasons), ready
    expected = " ".join(t for texts in gpu_pages.expected.values() for t in texts)
    got = " ".join(t for answers in read.values() for t in answers[0])
    assert Levenshtein.normalized_similarity(got, expected) > 0.98


def test_in_process_gpu_engine_reads_what_the_cpu_and_nearly_what_paddle_reads(
    gpu_models: ModelsConfig, gpu_pages: Pages, cpu_texts: dict[str, list[str]]
) -> None:
    from rapidfuzz.distance import Levenshtein

    engine = LocalEngine(_config(gpu_models), device=DEVICE)
    engine.load()
    options = bucketed_options(engine)  # as `cpu_texts` read
    read = {
        name: [ln.text for ln in engine.ocr(img, options).lines]
        for name, img in gpu_pages.images.items()
    }
    assert read == cpu_texts
    # Paddle's texts were read elsewhere (another OpenCV): the same lines, nearly the same text.
    for name, texts in read.items():
        assert len(texts) == len(gpu_pages.expected[name]), name
        similarity = Levenshtein.normalized_similarity(
            " ".join(texts), " ".join(gpu_pages.expected[name])
        )
        assert similarity > 0.99, name


def test_pipelined_lane_gives_the_synchronous_answers(gpu_models: ModelsConfig) -> None:
    """Two batches in flight on the lane's streams give exactly what one at a time gives, and
    (on a GPU) batch n+1's copy in runs during batch n's compute, read off CUDA events."""
    import torch

    from models.bundle import load_bundle
    from models.engine_options import EngineOptions
    from models.torch_backend import TorchPredictor

    rec = load_bundle(gpu_models.det, gpu_models.rec).rec
    predictor = TorchPredictor(rec, EngineOptions(device=DEVICE, torch=TorchOptions(compile="off")))
    predictor.load()
    rng = np.random.default_rng(0)
    batches = [rng.random((n, 3, 48, w), dtype=np.float32) for n, w in [(6, 320), (32, 960)] * 4]
    alone = [predictor.run(b) for b in batches]
    slots = []
    outputs = []
    for batch in batches:
        slot = predictor.stage(batch.shape)
        slot.input[...] = batch
        predictor.launch(slot)
        slots.append(slot)
        if len(slots) == 2:  # as a device worker: two in flight
            first = slots.pop(0)
            outputs.append(first.result().copy())
            first.release()
    for slot in slots:
        outputs.append(slot.result().copy())
        slot.release()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    for got, want in zip(outputs, alone, strict=True):
        np.testing.assert_array_equal(got, want)
    # Reduced on the GPU (what the server asks of a recogniser): the argmax of the same output.
    predictor.output_argmax()
    for batch, want in zip(batches[:2], alone[:2], strict=True):
        pairs = predictor.run(batch)
        np.testing.assert_array_equal(pairs[..., 0], want.argmax(-1).astype(np.float32))
        np.testing.assert_array_equal(pairs[..., 1], want.max(-1))
    if torch.cuda.is_available():
        _assert_compute_stream_stays_busy(rec)


def _assert_compute_stream_stays_busy(rec: Any) -> None:
    """With two batches in flight, fed as a device worker feeds them (uint8 pixels collated into
    a slot while the batch before computes), the compute stream is busy >= 90% of a steady
    window, read off CUDA events around each model run (`loadtest.gpu.overlap`; issue 40: the
    test before passed with any overlap at all, which a forward that syncs near its end has)."""
    from loadtest.gpu.overlap import BUSY_MIN, compute_busy
    from loadtest.gpu.probes import OVERLAP_SHAPES, pixel_sizes
    from models.engine_options import EngineOptions
    from models.torch_backend import TorchPredictor

    predictor = TorchPredictor(
        rec, EngineOptions(device=DEVICE, inflight_batches=WorkersConfig().gpu.inflight_batches)
    )
    predictor.load()
    predictor.output_argmax()
    shape = OVERLAP_SHAPES["rec"]
    batch = np.random.default_rng(2).integers(0, 256, shape, dtype=np.uint8)
    compute_busy(predictor, batch, batches=3, sizes=pixel_sizes("rec", shape))  # warm
    busy = compute_busy(predictor, batch, sizes=pixel_sizes("rec", shape))
    assert busy["busy_fraction"] >= BUSY_MIN, busy
