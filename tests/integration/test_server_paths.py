"""Server paths the default models do not exercise: textline orientation, a failing crop."""

from __future__ import annotations

import base64
import dataclasses
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from starlette.testclient import TestClient

from models.embedded import embedded_model_dir
from serving.app import build_app
from serving.config import AppConfig, PaddlexConfig, PipelineConfig, WorkersConfig
from serving.service.runtime import Runtime
from tests import images
from tests.conftest import ONE_SET
from tests.integration.conftest import wait_ready
from tests.local_client import local_client

CLS_YML = """Global:
  model_name: PP-LCNet_x1_0_textline_ori
PreProcess:
  transform_ops:
  - DecodeImage:
      channel_first: false
      img_mode: BGR
  - ResizeImage:
      size: [160, 80]
  - NormalizeImage:
      mean: [0.485, 0.456, 0.406]
      std: [0.229, 0.224, 0.225]
      scale: 0.00392156862745098
      order: ''
  - ToCHWImage: null
PostProcess:
  Topk:
    topk: 1
    label_list: [0_degree, 180_degree]
"""


def _cls_dir(tmp: Path) -> Path:
    """A classifier model folder: the fake answers, but the spec is read as for a real one."""
    folder = tmp / "PP-LCNet_x1_0_textline_ori"
    folder.mkdir()
    (folder / "inference.yml").write_text(CLS_YML)
    # Any program and params files: the fake predictor never loads them.
    det = embedded_model_dir("PP-OCRv5_mobile_det")
    shutil.copy(det / "inference.json", folder / "inference.json")
    shutil.copy(det / "inference.pdiparams", folder / "inference.pdiparams")
    return folder


@pytest.fixture
def make_client(tmp_path, monkeypatch) -> Iterator:
    clients = []

    def start(env: dict[str, str], *, cls: bool) -> TestClient:
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        # One set, no page classifier: the fakes here stand in for det, rec and cls only, and
        # read Paddle models (PP-OCRv5 mobile's; the default set, PP-OCRv6 small, is ONNX).
        cls_dir = str(_cls_dir(tmp_path)) if cls else ""
        models = dataclasses.replace(ONE_SET, cls=cls_dir)
        config = AppConfig(
            models=models,
            pipeline=PipelineConfig(use_textline_orientation=cls),
            workers=dataclasses.replace(WorkersConfig(), cpu_workers=1, devices=("cpu",)),
            paddlex=PaddlexConfig(visualize=False),
        )
        runtime = Runtime.build(config, backend="tests.fakes.predictors:FAULTS")
        client = local_client(build_app(runtime))
        client.__enter__()
        clients.append(client)
        wait_ready(client)
        return client

    yield start
    for client in clients:
        client.__exit__(None, None, None)


def _ocr(client: TestClient, image: np.ndarray, **fields) -> dict:
    body = {"file": base64.b64encode(images.encode_png(image)).decode(), "fileType": 1, **fields}
    return client.post("/ocr", json=body).json()


def test_textline_orientation_turns_upside_down_lines(make_client) -> None:
    latin = images.latin_lines()
    upside_down = np.ascontiguousarray(np.rot90(latin.image, 2))
    client = make_client({"OCR_FAKE_CLS_CLASS": "1"}, cls=True)
    turned = _ocr(client, upside_down)["result"]["ocrResults"][0]["prunedResult"]
    assert turned["model_settings"]["use_textline_orientation"] is True
    assert turned["textline_orientation_angles"] == [1] * len(turned["dt_polys"])
    # Lines come in the page's reading order, which is bottom-up for the turned page.
    assert sorted(turned["rec_texts"]) == sorted(latin.lines)
    off = _ocr(client, upside_down, useTextlineOrientation=False)["result"]["ocrResults"][0]
    assert off["prunedResult"]["textline_orientation_angles"] == [-1] * len(turned["dt_polys"])
    assert sorted(off["prunedResult"]["rec_texts"]) != sorted(latin.lines)


def test_a_failing_crop_fails_its_own_request_only(make_client) -> None:
    # Rec fails on any chunk wider than 1000 px: the dense page has such chunks, the
    # Latin page does not.
    client = make_client({"OCR_FAKE_REC_FAIL": "1000"}, cls=False)
    latin = images.encode_png(images.latin_lines().image)
    dense = images.encode_png(images.dense_page().image)
    import concurrent.futures

    def post(data: bytes):
        return client.post("/v1/ocr", content=data, headers={"content-type": "image/png"})

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        responses = list(pool.map(post, [latin, dense, latin, latin]))
    assert [r.status_code for r in responses] == [200, 500, 200, 200]
    assert responses[1].json()["error"]["code"] == "predictor_failed"
    assert "injected" not in responses[1].text
    assert [line["text"] for line in responses[0].json()["pages"][0]["lines"]]
