"""ONNX graphs rewritten into the form onnx2torch converts (`for_onnx2torch`), same arithmetic.

- **SAME padding** (`explicit_same_pads`): onnx2torch raises NotImplementedError on
  `auto_pad="SAME_UPPER"`/`"SAME_LOWER"`, which PP-OCRv6 small's detector and recogniser use (two
  2x2 convolutions and a 2x2 max-pool each, stride 1). With stride 1 and dilation 1 the padding
  does not depend on the input's size: `kernel - 1` in all, the odd one at the end (UPPER) or at
  the start (LOWER), so the node gets those `pads` and loses `auto_pad`, which onnx2torch serves
  (asymmetric pads as a padding module, -inf for max-pooling). With a larger stride the padding
  depends on each input's size; such a node is refused (`SamePadding`), before any process loads
  the model, by `check_same_pads`.
- **Weights in Constant nodes** (`constants_as_initializers`): onnx2torch's Conv reads its weights
  from the graph's initializers only (`KeyError: 'conv1_weights'`), and the packaged text-line
  classifier (`ch_ppocr_mobile_v2.0_cls`, opset 11) holds every weight in a `Constant` node; each
  tensor-valued Constant becomes an initializer of the same name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

SAME = {b"SAME_UPPER", b"SAME_LOWER"}
POOLS = {"MaxPool", "AveragePool", "LpPool"}


class SamePadding(ValueError):
    """A node pads "SAME" in a way that depends on its input's size."""


def _ints(node: Any, name: str) -> list[int] | None:
    for attribute in node.attribute:
        if attribute.name == name:
            return list(attribute.ints)
    return None


def _kernel(node: Any, weights: dict[str, Any]) -> list[int]:
    kernel = _ints(node, "kernel_shape")
    if kernel is not None:
        return kernel
    if node.op_type == "Conv" and len(node.input) > 1 and node.input[1] in weights:
        return list(weights[node.input[1]].dims[2:])
    raise SamePadding(f"{node.name} ({node.op_type}) pads SAME with no known kernel shape")


def _explicit_pads(node: Any, weights: dict[str, Any]) -> list[int]:
    """ONNX `pads` ([begins..., ends...]) equal to `node`'s SAME padding at stride 1."""
    kernel = _kernel(node, weights)
    rank = len(kernel)
    strides = _ints(node, "strides") or [1] * rank
    dilations = _ints(node, "dilations") or [1] * rank
    if any(s != 1 for s in strides) or any(d != 1 for d in dilations):
        raise SamePadding(
            f"{node.name} ({node.op_type}) pads SAME with strides {strides} and dilations "
            f"{dilations}: its padding depends on the input's size"
        )
    upper = next(a.s for a in node.attribute if a.name == "auto_pad") == b"SAME_UPPER"
    totals = [k - 1 for k in kernel]
    begins = [t // 2 if upper else t - t // 2 for t in totals]
    return begins + [t - b for t, b in zip(totals, begins, strict=True)]


def _same_nodes(graph: Any) -> list[Any]:
    return [
        node
        for node in graph.node
        if (node.op_type == "Conv" or node.op_type in POOLS)
        and any(a.name == "auto_pad" and a.s in SAME for a in node.attribute)
    ]


def explicit_same_pads(model: Any) -> Any:
    """`model` (an `onnx.ModelProto`) with every SAME-padded Conv and pool rewritten with
    explicit `pads`; modified in place and returned.

    Raises:
        SamePadding: a node's SAME padding depends on its input's size.
    """
    from onnx import helper

    graph = model.graph
    weights = {init.name: init for init in graph.initializer}
    for node in _same_nodes(graph):
        pads = _explicit_pads(node, weights)
        kept = [a for a in node.attribute if a.name not in ("auto_pad", "pads")]
        del node.attribute[:]
        node.attribute.extend([*kept, helper.make_attribute("pads", pads)])
    return model


def constants_as_initializers(model: Any) -> Any:
    """`model` with each tensor-valued `Constant` node moved into the graph's initializers under
    its output's name; modified in place and returned."""
    graph = model.graph
    kept = []
    for node in graph.node:
        value = next((a for a in node.attribute if a.name == "value"), None)
        if node.op_type == "Constant" and value is not None and len(node.output) == 1:
            tensor = value.t
            tensor.name = node.output[0]
            graph.initializer.append(tensor)
        else:
            kept.append(node)
    del graph.node[:]
    graph.node.extend(kept)
    return model


def for_onnx2torch(model: Any) -> Any:
    """`model` rewritten as onnx2torch needs it (the module doc); modified in place and returned.

    Raises:
        SamePadding: a node's SAME padding depends on its input's size.
    """
    return explicit_same_pads(constants_as_initializers(model))


def check_same_pads(onnx_file: Path) -> None:
    """Raise `SamePadding` where `explicit_same_pads` could not rewrite `onnx_file`'s graph
    (its weights are not read).
    """
    import onnx

    model = onnx.load(str(onnx_file), load_external_data=False)
    weights = {init.name: init for init in model.graph.initializer}
    for node in _same_nodes(model.graph):
        _explicit_pads(node, weights)
