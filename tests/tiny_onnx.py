"""Tiny synthetic ONNX models in the shape of the OCR models (built with `onnx.helper`), for
tests of the torch engine's conversion and compilation that must run in seconds: a recogniser
(a strided conv, shape arithmetic on its output, a reshape and a matmul to class scores) and a
detector (a strided conv, a 2x Resize back to the input's size, a conv to one sigmoid map)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from models.spec import ModelSpec
from pipelines.types import DetParams, RecParams

REC_HEIGHT_PX = 48
REC_CLASSES = 12
CHARACTERS = tuple("abcdefghij")
"""The tiny recogniser's dictionary: its classes are the CTC blank, these and the space."""


def _save(graph: object, path: Path) -> Path:
    import onnx
    from onnx import helper

    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def _weights(rng: np.random.Generator, name: str, *shape: int) -> object:
    from onnx import numpy_helper

    scale = 1.0 / np.sqrt(np.prod(shape[1:]) if len(shape) > 1 else shape[0])
    return numpy_helper.from_array(
        (rng.standard_normal(shape) * scale).astype(np.float32), name=name
    )


def rec_model(path: Path, seed: int = 0) -> Path:
    """(n, 3, 48, w) -> (n, w / 4, 12) softmax scores, through Shape/Gather/Concat/Reshape."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    channels, height = 8, REC_HEIGHT_PX // 4
    nodes = [
        helper.make_node(
            "Conv",
            ["x", "w1", "b1"],
            ["c"],
            kernel_shape=[3, 3],
            pads=[1, 1, 1, 1],
            strides=[4, 4],
        ),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Shape", ["r"], ["s"]),
        helper.make_node("Gather", ["s", "i0"], ["n"], axis=0),
        helper.make_node("Gather", ["s", "i3"], ["t"], axis=0),
        helper.make_node("Concat", ["n", "minus1", "t"], ["shape"], axis=0),
        helper.make_node("Reshape", ["r", "shape"], ["flat"]),
        helper.make_node("Transpose", ["flat"], ["seq"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["seq", "w2"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["y"], axis=-1),
    ]
    inits = [
        _weights(rng, "w1", channels, 3, 3, 3),
        _weights(rng, "b1", channels),
        _weights(rng, "w2", channels * height, REC_CLASSES),
        numpy_helper.from_array(np.array([0], dtype=np.int64), "i0"),
        numpy_helper.from_array(np.array([3], dtype=np.int64), "i3"),
        numpy_helper.from_array(np.array([-1], dtype=np.int64), "minus1"),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny_rec",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, REC_HEIGHT_PX, "w"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", "t", REC_CLASSES])],
        inits,
    )
    return _save(graph, path)


def det_model(path: Path, seed: int = 1) -> Path:
    """(n, 3, h, w) -> (n, 1, h, w) sigmoid map (h and w even), through a 2x Resize."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes = [
        helper.make_node(
            "Conv",
            ["x", "w1", "b1"],
            ["c"],
            kernel_shape=[3, 3],
            pads=[1, 1, 1, 1],
            strides=[2, 2],
        ),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node(
            "Resize",
            ["r", "roi", "scales"],
            ["up"],
            mode="nearest",
            coordinate_transformation_mode="asymmetric",
            nearest_mode="floor",
        ),
        helper.make_node("Conv", ["up", "w2", "b2"], ["m"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["m"], ["y"]),
    ]
    inits = [
        _weights(rng, "w1", 4, 3, 3, 3),
        _weights(rng, "b1", 4),
        _weights(rng, "w2", 1, 4, 3, 3),
        _weights(rng, "b2", 1),
        numpy_helper.from_array(np.zeros(0, dtype=np.float32), "roi"),
        numpy_helper.from_array(np.array([1, 1, 2, 2], dtype=np.float32), "scales"),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny_det",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, "h", "w"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 1, "h", "w"])],
        inits,
    )
    return _save(graph, path)


def tiny_specs(directory: Path) -> dict[str, ModelSpec]:
    """The two tiny models, written under `directory`, as the specs the torch engine loads."""
    rec = directory / "rec"
    det = directory / "det"
    return {
        "rec": ModelSpec(
            kind="rec",
            model_name="tiny_rec",
            directory=rec,
            onnx_file=rec_model(rec / "inference.onnx"),
            rec_params=RecParams(image_height=REC_HEIGHT_PX, min_width=32),
            character_dict=CHARACTERS,
        ),
        "det": ModelSpec(
            kind="det",
            model_name="tiny_det",
            directory=det,
            onnx_file=det_model(det / "inference.onnx"),
            det_params=DetParams(),
        ),
    }
