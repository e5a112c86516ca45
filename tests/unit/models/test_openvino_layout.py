"""A model cut at its head (`models.openvino_layout`), on real OpenVINO with small graphs built
here: where the cut falls, that body then head reads what the whole model reads, and that a
graph whose head has no single input tensor is left whole. The real recogniser's split, at bf16,
against f32: tests/integration/test_openvino_precision_models.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from models.openvino_layout import chained, head_cut_index, split_at_head

ov: Any = pytest.importorskip("openvino")
opset: Any = pytest.importorskip("openvino.opset13")

pytestmark = pytest.mark.unit


def _recogniser_like(skip_around_head: bool) -> Any:
    """Input (N, 3, 1, W) -> ReLU -> Squeeze -> Transpose (N, W, 3) -> MatMul (3 -> 5 classes)
    -> Add -> Softmax, like a CTC recogniser's end; `skip_around_head` adds the ReLU's output to
    the logits too, so two tensors cross into the head."""
    rng = np.random.default_rng(0)
    data = opset.parameter([-1, 3, 1, -1], np.float32, name="x")
    body = opset.relu(data, name="body_relu")
    squeezed = opset.squeeze(body, opset.constant(np.array([2], dtype=np.int64)), name="squeeze")
    features = opset.transpose(
        squeezed, opset.constant(np.array([0, 2, 1], dtype=np.int64)), name="features"
    )
    weights = opset.constant(rng.standard_normal((3, 5)).astype(np.float32))
    logits = opset.add(
        opset.matmul(features, weights, False, False, name="head_matmul"),
        opset.constant(rng.standard_normal(5).astype(np.float32)),
        name="head_bias",
    )
    if skip_around_head:
        pooled = opset.reduce_sum(
            squeezed, opset.constant(np.array([1], dtype=np.int64)), True, name="pool"
        )
        logits = opset.add(
            logits,
            opset.transpose(
                pooled, opset.constant(np.array([0, 2, 1], dtype=np.int64)), name="pool_t"
            ),
            name="skip",
        )
    return ov.Model([opset.softmax(logits, 2, name="probs")], [data], "rec")


def _save(model: Any, tmp_path: Path) -> str:
    path = tmp_path / "model.xml"
    ov.save_model(model, str(path), compress_to_fp16=False)
    return str(path)


def test_the_cut_is_the_head_matmuls_input_and_body_then_head_reads_as_the_whole(
    tmp_path: Path,
) -> None:
    path = _save(_recogniser_like(skip_around_head=False), tmp_path)
    model = ov.Core().read_model(path)
    cut = head_cut_index(model)
    assert cut is not None
    assert model.get_ordered_ops()[cut].get_friendly_name() == "features"
    split = split_at_head(ov, path)
    assert split is not None
    assert split.cut == "features"
    core = ov.Core()
    config = {"INFERENCE_PRECISION_HINT": "f32"}
    whole = core.compile_model(model, "CPU", config).create_infer_request()
    body = core.compile_model(split.body, "CPU", config).create_infer_request()
    head = core.compile_model(split.head, "CPU", config).create_infer_request()
    run = chained(body, head)
    for width in (4, 9):  # any width, as a recogniser's batches come
        x = np.random.default_rng(width).standard_normal((2, 3, 1, width)).astype(np.float32)
        whole.infer({0: x})
        expected = whole.get_output_tensor(0).data.copy()
        got = run(x)
        assert got.shape == (2, width, 5)
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


def test_a_head_with_a_skip_connection_around_it_is_not_cut(tmp_path: Path) -> None:
    path = _save(_recogniser_like(skip_around_head=True), tmp_path)
    assert head_cut_index(ov.Core().read_model(path)) is None
    assert split_at_head(ov, path) is None


def test_a_model_without_a_matmul_is_not_cut(tmp_path: Path) -> None:
    data = opset.parameter([1, 3, 8, 8], np.float32, name="x")
    model = ov.Model([opset.sigmoid(opset.relu(data))], [data], "det")
    assert head_cut_index(ov.Core().read_model(_save(model, tmp_path))) is None
