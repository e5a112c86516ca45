"""`models.torch_graph.host_shapes` on small hand-built ONNX graphs: the shape arithmetic other
exports write (Shape, Gather, Mul, Div, Cast, Unsqueeze, Concat, Reshape, Identity, Slice,
Squeeze) computes on the host, answers what onnx2torch's modules answer at every input shape,
and a graph that uses a shape as a tensor is refused rather than served with a hidden read."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch extra (make install-test installs it)")
pytest.importorskip("onnx")

from onnx import ModelProto, NodeProto, TensorProto, helper, numpy_helper  # noqa: E402

from models.torch_backend import import_onnx2torch  # noqa: E402
from models.torch_graph import UnsupportedGraph, host_shapes  # noqa: E402
from tests.integration.test_torch_host_reads import HostReads  # noqa: E402


def _const(name: str, values: list[int] | int) -> TensorProto:
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def _model(nodes: list[NodeProto], initializers: list[TensorProto]) -> ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, "h", "w"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, "g", [x], [y], initializer=initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])


def _reshaping_model() -> ModelProto:
    """x (n, 3, h, w) -> (n, 3, h*w/2, 2) -> its first column, squeezed: (n, 3, h*w/2)."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "i2"], ["h"], axis=0),
        helper.make_node("Gather", ["s", "i3"], ["w"], axis=0),
        helper.make_node("Gather", ["s", "i0"], ["n"], axis=0),
        helper.make_node("Mul", ["h", "w"], ["hw"]),
        helper.make_node("Cast", ["hw"], ["hw64"], to=TensorProto.INT64),
        helper.make_node("Div", ["hw64", "two"], ["half"]),
        helper.make_node("Unsqueeze", ["half", "axes0"], ["half1"]),
        helper.make_node("Concat", ["n", "three", "half1", "two1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["r"]),
        helper.make_node("Identity", ["r"], ["r2"]),
        helper.make_node("Slice", ["r2", "zero1", "one1", "axes3"], ["col"]),
        helper.make_node("Squeeze", ["col", "axes3"], ["y"]),
    ]
    consts = [
        _const("i0", [0]),
        _const("i2", 2),
        _const("i3", 3),
        _const("two", 2),
        _const("axes0", [0]),
        _const("three", [3]),
        _const("two1", [2]),
        _const("zero1", [0]),
        _const("one1", [1]),
        _const("axes3", [3]),
    ]
    return _model(nodes, consts)


@pytest.mark.filterwarnings("ignore:Using a non-tuple sequence:UserWarning")  # onnx2torch's Slice
def test_shape_arithmetic_runs_on_the_host_and_answers_as_converted() -> None:
    model = _reshaping_model()
    converted = import_onnx2torch().convert(model).eval()
    rewritten = host_shapes(import_onnx2torch().convert(model).eval())
    kinds = {type(m).__name__ for m in rewritten.modules()}
    assert not kinds & {"OnnxShape", "OnnxCopyIdentity", "OnnxReshape", "OnnxSlice"}, kinds
    for shape in [(1, 3, 4, 6), (2, 3, 8, 2), (3, 3, 2, 5)]:
        x = torch.arange(int(np.prod(shape)), dtype=torch.float32).reshape(shape)
        with torch.inference_mode():
            want = converted(x)
            with HostReads() as reads:
                got = rewritten(x)
        assert dict(reads.counts) == {}, shape
        assert got.shape == (shape[0], 3, shape[2] * shape[3] // 2)
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_a_shape_used_as_a_tensor_is_refused() -> None:
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Cast", ["s"], ["sf"], to=TensorProto.FLOAT),
        helper.make_node("ReduceSum", ["sf"], ["total"], keepdims=1),
        helper.make_node("Mul", ["x", "total"], ["y"]),
    ]
    module = import_onnx2torch().convert(_model(nodes, [])).eval()
    with pytest.raises(UnsupportedGraph):
        host_shapes(module)
