"""SAME padding written out as explicit pads computes what the SAME-padded node computes
(onnxruntime on both graphs), and a stride that makes the padding input-dependent is refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from models.onnx_rewrites import SamePadding, check_same_pads, explicit_same_pads

ort = pytest.importorskip("onnxruntime")


def _graph(auto_pad: str, kernel: int, stride: int = 1) -> onnx.ModelProto:
    """x -> Conv(kernel, SAME) -> MaxPool(kernel, SAME) -> y, on 1x2xHxW."""
    weights = np.random.default_rng(1).normal(size=(3, 2, kernel, kernel)).astype(np.float32)
    conv = helper.make_node(
        "Conv", ["x", "w"], ["c"], name="conv", auto_pad=auto_pad, strides=[stride, stride]
    )
    pool = helper.make_node(
        "MaxPool", ["c"], ["y"], name="pool", auto_pad=auto_pad, kernel_shape=[kernel, kernel]
    )
    graph = helper.make_graph(
        [conv, pool],
        "same",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, None, None])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(weights, "w")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, {"x": x})[0])


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
@pytest.mark.parametrize("kernel", [2, 3, 4])
def test_explicit_pads_compute_what_same_padding_computes(auto_pad: str, kernel: int) -> None:
    x = np.random.default_rng(0).normal(size=(1, 2, 7, 10)).astype(np.float32)
    same = _graph(auto_pad, kernel)
    expected = _run(same, x)
    rewritten = explicit_same_pads(_graph(auto_pad, kernel))
    attributes = {a.name for n in rewritten.graph.node for a in n.attribute}
    assert "auto_pad" not in attributes
    assert "pads" in attributes
    np.testing.assert_allclose(_run(rewritten, x), expected, rtol=1e-6, atol=1e-6)


def test_a_stride_that_makes_the_padding_depend_on_the_input_is_refused(tmp_path: Path) -> None:
    model = _graph("SAME_UPPER", 3, stride=2)
    with pytest.raises(SamePadding, match="strides"):
        explicit_same_pads(model)
    path = tmp_path / "strided.onnx"
    onnx.save(model, str(path))
    with pytest.raises(SamePadding, match="conv"):
        check_same_pads(path)
    onnx.save(_graph("SAME_UPPER", 2), str(path))
    check_same_pads(path)  # stride 1: rewritable, no error


def test_weights_in_constant_nodes_become_initializers_and_compute_the_same() -> None:
    """The packaged text-line classifier holds its weights in Constant nodes, which onnx2torch's
    Conv cannot read (`KeyError: 'conv1_weights'`); as initializers they compute the same."""
    from models.onnx_rewrites import constants_as_initializers

    model = _graph("SAME_UPPER", 3)
    (weights,) = list(model.graph.initializer)
    del model.graph.initializer[:]
    model.graph.node.insert(0, helper.make_node("Constant", [], ["w"], value=weights))
    x = np.random.default_rng(2).normal(size=(1, 2, 6, 9)).astype(np.float32)
    expected = _run(model, x)
    rewritten = constants_as_initializers(model)
    assert [init.name for init in rewritten.graph.initializer] == ["w"]
    assert "Constant" not in {node.op_type for node in rewritten.graph.node}
    np.testing.assert_array_equal(_run(rewritten, x), expected)
