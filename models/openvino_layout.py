"""A recogniser in bf16 with its CTC head in f32: two OpenVINO models, run one after the other.

bf16 shifts the recogniser's logits by up to ~0.05 (PP-OCRv5 mobile rec, random input), and
on tightly set lines that moves the CTC decoder's blank/space decision: under whole-model bf16
"Total amount" read "Totalamount" on the synthetic test pages (issue 41). Marking nodes to keep
in f32 through `rt_info` is not honoured by OpenVINO 2026.4.1's CPU plugin when set from Python,
so the model is cut in two at the input of its head (the last MatMul: the CTC head's fully
connected layer, then its bias and softmax): the body compiles at bf16, the head at f32, and
the body's output feeds the head. Measured (docs/performance.md, "Which layers, and why"): with
the detector at bf16 the synthetic PNG pages keep their words at ~0.94x whole-model bf16's
speed, but the JPEG invoice page still read "Totalamount" and Chinese lost 0.12 CER points, so
"auto" keeps PP-OCRv5 mobile's recogniser at f32; PP-OCRv6 small's passes with its head in f32.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

HEAD_CUT = "the CTC head (last MatMul to the output) in f32"
"""How `/readyz` and the log name the layout."""


@dataclass(frozen=True, slots=True)
class SplitModel:
    """A model cut in two: `body` from the input to `cut`, `head` from there to the output."""

    body: Any
    head: Any
    cut: str
    """The friendly name of the node whose output feeds the head."""


def head_cut_index(model: Any) -> int | None:
    """The index, in `model.get_ordered_ops()`, of the node whose output is the only tensor
    that crosses into the head (the data input of the last MatMul), or None where there is no
    such single crossing (no MatMul, or a skip connection around it)."""
    order = model.get_ordered_ops()
    matmuls = [i for i, op in enumerate(order) if op.get_type_name() == "MatMul"]
    if not matmuls:
        return None
    position = {op.get_friendly_name(): i for i, op in enumerate(order)}
    if len(position) != len(order):
        return None  # names are how nodes are told apart here: they must be unique
    matmul = order[matmuls[-1]]
    sources = [
        inp.get_source_output().get_node()
        for inp in matmul.inputs()
        if inp.get_source_output().get_node().get_type_name() != "Constant"
    ]
    if len(sources) != 1 or len(sources[0].outputs()) != 1:
        return None
    cut = position[sources[0].get_friendly_name()]
    # Only the cut's output may cross: no node after it reads a tensor made before it.
    for op in order[cut + 1 :]:
        for inp in op.inputs():
            node = inp.get_source_output().get_node()
            if node.get_type_name() == "Constant":
                continue
            if position[node.get_friendly_name()] < cut:
                return None
    return cut


def split_at_head(ov: Any, path: str) -> SplitModel | None:
    """The model at `path` cut at its head (`head_cut_index`), or None where it has no such cut.
    Reads the file twice: each part owns its graph."""
    opset = importlib.import_module("openvino.opset13")
    core = ov.Core()
    model = core.read_model(path)
    cut = head_cut_index(model)
    if cut is None:
        return None
    node = model.get_ordered_ops()[cut]
    body = ov.Model([opset.result(node.output(0))], model.get_parameters(), "body")
    tail_model = core.read_model(path)
    tail_node = tail_model.get_ordered_ops()[cut]
    feature = opset.parameter(
        tail_node.output(0).get_partial_shape(), tail_node.output(0).get_element_type(), "feature"
    )
    for target in list(tail_node.output(0).get_target_inputs()):
        target.replace_source_output(feature.output(0))
    head = ov.Model(tail_model.get_results(), [feature], "head")
    return SplitModel(body=body, head=head, cut=node.get_friendly_name())


def chained(body_request: Any, head_request: Any) -> Callable[[np.ndarray], np.ndarray]:
    """A batch runner: the body's infer request, its output into the head's, the head's output
    copied out (the requests own and reuse their output tensors)."""

    def run(data: np.ndarray) -> np.ndarray:
        body_request.infer({0: data})
        head_request.infer({0: body_request.get_output_tensor(0).data})
        return np.array(head_request.get_output_tensor(0).data, copy=True)

    return run


def with_argmax(ov: Any, model: Any) -> Any:
    """`model` (one output: a recogniser's (n, T, C) class probabilities) answering instead
    (n, T, 2) float32 pairs, each step's argmax class, then its probability: what CTC decoding
    reads (`models.base.ArgmaxOutput`), a 2/C of the bytes to copy out of the engine and no
    reduction left to numpy (PP-OCRv6 small: 18,710 classes, a 6-line batch of 1,700 px 95 MB).

    Exact where the graph runs at f32: the value is the probabilities' ReduceMax, the class the
    first index that holds it (numpy's `argmax`), `C - 1 - max(equal * (C - 1 .. 0))`, whose
    products and maximum are integers below 2**24. Not for a graph computed at bf16, which
    cannot hold those integers.
    """
    opset = importlib.import_module("openvino.opset13")
    (result,) = model.get_results()
    probs = result.input_value(0)
    classes = probs.get_partial_shape()[-1]
    if not classes.is_static:
        raise ValueError(f"the output's class axis is not static: {probs.get_partial_shape()}")
    count = classes.get_length()
    axis = np.int64(-1)
    best = opset.reduce_max(probs, axis, keep_dims=True)
    descending = opset.constant(np.arange(count - 1, -1, -1, dtype=np.float32))
    holders = opset.multiply(opset.convert(opset.equal(probs, best), "f32"), descending)
    first = opset.subtract(np.float32(count - 1), opset.reduce_max(holders, axis, keep_dims=True))
    pairs = opset.concat([first, best], axis=-1)
    return ov.Model(
        [opset.result(pairs)], model.get_parameters(), f"{model.get_friendly_name()}-argmax"
    )
