"""The torch engine's graph pass: shape arithmetic on the host, so a forward never waits on it.

onnx2torch keeps an ONNX model's shape, axes and scale constants as buffers, which `.to(device)`
moves to the GPU, and computes `Shape` as a device tensor; its Reshape, Slice, Squeeze and
Resize modules then read those back (`.tolist()`, `bool(tensor)`, `int(tensor)`), and on a GPU
every such read waits for all the work queued before it. Counted on PP-OCRv5 mobile: 52 host
reads a forward, the last near the end of the graph (issue 27).

`host_shapes(module)` rewrites the converted `torch.fx.GraphModule` so that these values are
Python numbers computed on the host: a `Shape` becomes the input's `torch.Size` (known without
the device), the arithmetic on it (Slice, Gather, Squeeze, Unsqueeze, Concat, Reshape, Cast, Add,
Sub, Mul, Div) Python arithmetic, and constants become Python literals folded where the module is
built; Reshape, Slice, Squeeze, Unsqueeze and Resize of tensors then take those numbers. ONNX
`Identity` nodes (a `clone()` each in onnx2torch) are dropped. The result is the same arithmetic
on any input shape (nothing is specialised to one shape), and `torch.compile(fullgraph=True)`
traces it whole. A graph that uses a shape value some other way raises `UnsupportedGraph`
rather than being served with a hidden read.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

HostValue = Any
"""A shape-like value on the host: a Python number (rank 0), a tuple of numbers (rank 1), or
the `torch.fx.Node` that computes one of those at run time."""

SMALL_CONSTANT = 64
"""Largest buffer (elements) read as a Python literal where a host value is wanted."""


class UnsupportedGraph(ValueError):
    """The graph uses a shape value in a way `host_shapes` cannot keep on the host."""


# --- run-time helpers (called by the rewritten graph; all traceable by torch.compile) ---


def host_shape(x: Any, start: int, end: int | None) -> tuple[Any, ...]:
    """ONNX Shape: the dimensions of `x`, from its metadata (no device read)."""
    return tuple(x.shape[start:end])


def host_slice(value: tuple[Any, ...], start: int, end: int, step: int) -> tuple[Any, ...]:
    """ONNX Slice of a rank-1 host value (Python slicing clamps as ONNX does)."""
    return value[start:end:step]


def host_squeeze(value: tuple[Any, ...]) -> Any:
    """ONNX Squeeze of a one-element rank-1 host value: its number."""
    if len(value) != 1:
        raise ValueError(f"cannot squeeze {len(value)} host values to one")
    return value[0]


def host_unsqueeze(value: Any) -> tuple[Any, ...]:
    """ONNX Unsqueeze of a host number: a one-element tuple."""
    return (value,)


def host_gather(value: tuple[Any, ...], indices: Any) -> Any:
    """ONNX Gather (axis 0) from a rank-1 host value: a number for a scalar index, else a
    tuple."""
    if isinstance(indices, tuple):
        return tuple(value[i] for i in indices)
    return value[indices]


def host_concat(*values: tuple[Any, ...]) -> tuple[Any, ...]:
    """ONNX Concat (axis 0) of rank-1 host values."""
    joined: tuple[Any, ...] = ()
    for value in values:
        joined += value
    return joined


def host_reshape(value: Any, rank: int) -> Any:
    """ONNX Reshape of a host value to rank 0 (its one number) or rank 1 (a tuple)."""
    items = value if isinstance(value, tuple) else (value,)
    if rank == 0:
        if len(items) != 1:
            raise ValueError(f"cannot reshape {len(items)} host values to a scalar")
        return items[0]
    return items


def _trunc_div(a: Any, b: Any) -> Any:
    if isinstance(a, float) or isinstance(b, float):
        return a / b
    quotient = abs(a) // abs(b)  # ONNX integer Div truncates toward zero
    return quotient if (a < 0) == (b < 0) else -quotient


_HOST_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "div": _trunc_div,
    "_onnx_div": _trunc_div,  # onnx2torch's Div: true division of floats, truncating of integers
}


def host_binary(op: str, a: Any, b: Any) -> Any:
    """ONNX Add/Sub/Mul/Div of host values, broadcasting a number against a tuple."""
    fn = _HOST_OPS[op]
    if isinstance(a, tuple) and isinstance(b, tuple):
        if len(a) == len(b):
            return tuple(fn(x, y) for x, y in zip(a, b, strict=True))
        if len(b) == 1:
            return tuple(fn(x, b[0]) for x in a)
        if len(a) == 1:
            return tuple(fn(a[0], y) for y in b)
        raise ValueError(f"cannot broadcast host values of lengths {len(a)} and {len(b)}")
    if isinstance(a, tuple):
        return tuple(fn(x, b) for x in a)
    if isinstance(b, tuple):
        return tuple(fn(a, y) for y in b)
    return fn(a, b)


def host_cast(value: Any, to_int: bool) -> Any:
    """ONNX Cast of a host value to an integer or a floating type."""
    cast: Callable[[Any], Any] = int if to_int else float
    return tuple(cast(v) for v in value) if isinstance(value, tuple) else cast(value)


def reshape(x: Any, shape: Sequence[Any]) -> Any:
    """ONNX Reshape (allowzero=0) of a tensor to a host shape: 0 copies the input's dimension."""
    return x.reshape([x.shape[i] if d == 0 else d for i, d in enumerate(shape)])


def slice_tensor(
    x: Any,
    starts: Sequence[int],
    ends: Sequence[int],
    axes: Sequence[int],
    steps: Sequence[int],
) -> Any:
    """ONNX Slice of a tensor with host starts, ends, axes and steps."""
    index: list[Any] = [slice(None)] * x.dim()
    flip: list[int] = []
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        dim = axis % x.dim()
        if step < 0:  # as onnx2torch: slice the flipped tensor
            flip.append(dim)
            start, end, step = -start - 1, -end - 1, -step
        index[dim] = slice(start, end, step)
    if flip:
        x = x.flip(flip)
    return x[tuple(index)]


def squeeze(x: Any, axes: Sequence[int]) -> Any:
    """ONNX Squeeze of a tensor on host axes (all size-1 axes when none are given)."""
    if not axes:
        return x.squeeze()
    return x.squeeze(tuple(a % x.dim() for a in axes))


def unsqueeze(x: Any, axes: Sequence[int]) -> Any:
    """ONNX Unsqueeze of a tensor at host axes (counted in the output's rank)."""
    rank = x.dim() + len(axes)
    for axis in sorted(a % rank for a in axes):
        x = x.unsqueeze(axis)
    return x


_TORCH_MODES = {
    ("nearest", 1): "nearest",
    ("nearest", 2): "nearest",
    ("nearest", 3): "nearest",
    ("linear", 1): "linear",
    ("linear", 2): "bilinear",
    ("linear", 3): "trilinear",
    ("cubic", 2): "bicubic",
}
"""ONNX Resize mode and spatial rank -> `interpolate`'s mode (onnx2torch's `_MODES_MAPPING`)."""


def resize(
    x: Any,
    scales: Sequence[float] | None,
    sizes: Sequence[int] | None,
    onnx_mode: str,
    align_corners: bool | None,
) -> Any:
    """ONNX Resize with host scales or sizes, as onnx2torch's `OnnxResize` computes it."""
    import torch

    mode = _TORCH_MODES.get((onnx_mode, x.dim() - 2))
    if mode is None:
        raise NotImplementedError(f"{onnx_mode} resize of a {x.dim() - 2}-D input")
    return torch.nn.functional.interpolate(
        x,
        size=list(sizes[2:]) if sizes else None,
        scale_factor=list(scales[2:]) if scales else None,
        mode=mode,
        align_corners=align_corners,
    )


# --- the pass ---


def _literal(tensor: Any) -> Any:
    values = tensor.detach().cpu().tolist()
    if tensor.dim() == 0:
        return values
    if tensor.dim() != 1:
        raise UnsupportedGraph(f"a host constant of rank {tensor.dim()}")
    return tuple(values)


class _Rewriter:
    def __init__(self, gm: Any) -> None:
        self.gm = gm
        self.graph = gm.graph
        self.host: dict[Any, HostValue] = {}

    def is_node(self, value: Any) -> bool:
        return hasattr(value, "op") and hasattr(value, "graph")

    def constant(self, node: Any, *, small: bool) -> HostValue | None:
        if not self.is_node(node) or node.op != "get_attr":
            return None
        tensor = self.gm.get_buffer(node.target)
        if small and (tensor.numel() > SMALL_CONSTANT or tensor.is_floating_point()):
            return None
        return _literal(tensor)

    def value(self, arg: Any, *, small: bool = False) -> HostValue | None:
        """`arg` as a host value: a shape-derived one, else a constant (only small integer
        ones when `small`), else None (a tensor)."""
        if arg is None:
            return None
        if arg in self.host:
            return self.host[arg]
        return self.constant(arg, small=small)

    def need(self, node: Any, arg: Any, *, known: bool = True) -> HostValue:
        """`arg` as a host value; `known`: one known now (a literal, not computed at run time
        from a shape)."""
        value = self.value(arg)
        if value is None:
            raise UnsupportedGraph(f"{node.name} takes a tensor where a constant is wanted")
        if known and self.is_node(value):
            raise UnsupportedGraph(f"{node.name} takes axes or bounds computed from a shape")
        return value

    def emit(self, node: Any, fn: Callable[..., Any], *args: Any) -> Any:
        """A host value computed now when every argument is known, else by a new node."""
        if not any(self.is_node(a) for a in _flatten(args)):
            return fn(*args)
        with self.graph.inserting_before(node):
            return self.graph.call_function(fn, tuple(args))

    def replace(self, node: Any, fn: Callable[..., Any], *args: Any) -> None:
        with self.graph.inserting_before(node):
            new = self.graph.call_function(fn, tuple(args))
        node.replace_all_uses_with(new)
        self.graph.erase_node(node)

    def run(self) -> None:
        for node in list(self.graph.nodes):
            if node.op == "call_module":
                self.module_node(node, self.gm.get_submodule(node.target))
            elif node.op in ("call_function", "call_method", "output") and any(
                a in self.host for a in _flatten(node.args)
            ):
                raise UnsupportedGraph(f"{node.name} uses a host shape value")

    def module_node(self, node: Any, module: Any) -> None:
        kind = type(module).__name__
        args = list(node.args)
        handler = _HANDLERS.get(kind)
        if handler is not None and handler(self, node, module, args):
            return
        if any(a in self.host for a in _flatten(args)):
            raise UnsupportedGraph(f"{node.name} ({kind}) takes a host shape value as a tensor")


def _flatten(args: Any) -> list[Any]:
    out: list[Any] = []
    for a in args:
        if isinstance(a, list | tuple):
            out.extend(_flatten(a))
        else:
            out.append(a)
    return out


Handler = Callable[[_Rewriter, Any, Any, list[Any]], bool]
"""Rewrites one converted node; False leaves it as it is (a tensor operation)."""


def _identity(rw: _Rewriter, node: Any, module: Any, args: list[Any]) -> bool:
    if args[0] in rw.host:
        rw.host[node] = rw.host[args[0]]
    else:
        node.replace_all_uses_with(args[0])
        rw.graph.erase_node(node)
    return True


def _shape(rw: _Rewriter, node: Any, module: Any, args: list[Any]) -> bool:
    rw.host[node] = rw.emit(node, host_shape, args[0], module._start, module._end)
    return True


def _slice(rw: _Rewriter, node: Any, module: Any, args: list[Any]) -> bool:
    data, starts, ends, *rest = [*args, None, None]
    axes, steps = rest[0], rest[1]
    starts_v, ends_v = rw.need(node, starts), rw.need(node, ends)
    axes_v = rw.need(node, axes) if axes is not None else tuple(range(len(starts_v)))
    steps_v = rw.need(node, steps) if steps is not None else (1,) * len(starts_v)
    if data in rw.host:
        if len(axes_v) != 1 or axes_v[0] not in (0, -1):
            raise UnsupportedGraph(f"{node.name} slices a host value on axes {axes_v}")
        rw.host[node] = rw.emit(node, host_slice, rw.host[data], starts_v[0], ends_v[0], steps_v[0])
        return True
    rw.replace(node, slice_tensor, data, starts_v, ends_v, axes_v, steps_v)
    return True


def _axes(rw: _Rewriter, node: Any, module: Any, args: list[Any]) -> Sequence[int]:
    if len(args) > 1 and args[1] is not None:
        axes: Sequence[int] = rw.need(node, args[1])
        return axes
    static = getattr(module, "axes", None) or getattr(module, "_axes", None)
    return tuple(static or ())


def _squeeze(rw: _Rewriter, node: Any, module: Any, args: list[Any]) -> bool:
    axes = _axes(rw, node, module, args)
    if args[0] in rw.host:
        rw.host[node] = rw.emit(node, host_squeeze, rw.host[args[0]])
        return True
    rw.replace(node, squeeze, args[0], tuple(axes))
    return True


def _unsqueeze(rw: _Rewriter, node: Any, module: Any, args: list[Any]) -> bool:
    axes = _axes(rw, node, module, args)
    if args[0] in rw.host:
        rw.host[node] = rw.emit(node, host_unsqueeze, rw.host[args[0]])
        return True
    if len(args) > 1:  # dynamic axes (static-axes modules read no tensor)
        rw.replace(node, unsqueeze, args[0], tuple(axes))
    return True


def _gather(rw: _Rewriter, node: Any, module: Any, args: list[Any]) -> bool:
    if args[0] not in rw.host:
        return False  # a tensor gather reads nothing on the host
    if module._axis != 0:
        raise UnsupportedGraph(f"{node.name} gathers a host value on axis {module._axis}")
    rw.host[node] = rw.emit(node, host_gather, rw.host[args[0]], rw.need(node, args[1]))
    return True


def _concat(rw: _Rewriter, node: Any, module: Any, args: list[Any]) -> bool:
    if not any(a in rw.host for a in args):
        return False
    values = [rw.value(a, small=True) for a in args]
    if any(v is None for v in values):
        raise UnsupportedGraph(f"{node.name} concatenates host values with tensors")
    rw.host[node] = rw.emit(node, host_concat, *values)
    return True


def _reshape(rw: _Rewriter, node: Any, module: Any, args: list[Any]) -> bool:
    data, shape = args
    shape_v = rw.need(node, shape, known=data in rw.host)  # a tensor's may come from a shape
    if data in rw.host:
        rw.host[node] = rw.emit(node, host_reshape, rw.host[data], len(shape_v))
        return True
    rw.replace(node, reshape, data, shape_v)
    return True


def _binary(rw: _Rewriter, node: Any, module: Any, args: list[Any]) -> bool:
    if not any(a in rw.host for a in args):
        return False
    op = getattr(module.math_op_function, "__name__", "")
    values = [rw.value(a, small=True) for a in args]
    if op not in _HOST_OPS or any(v is None for v in values):
        raise UnsupportedGraph(f"{node.name} ({op}) mixes host values with tensors")
    rw.host[node] = rw.emit(node, host_binary, op, *values)
    return True


def _cast(rw: _Rewriter, node: Any, module: Any, args: list[Any]) -> bool:
    if args[0] not in rw.host:
        return False
    to_int = not module.torch_dtype.is_floating_point
    rw.host[node] = rw.emit(node, host_cast, rw.host[args[0]], to_int)
    return True


def _resize(rw: _Rewriter, node: Any, module: Any, args: list[Any]) -> bool:
    data, roi, scales, sizes, *_ = [*args, None, None, None]
    roi_v = rw.value(roi) if roi is not None else None
    if not module.ignore_roi and roi_v:
        raise UnsupportedGraph(f"{node.name} resizes with a region of interest")
    scales_v = rw.need(node, scales) if scales is not None else None
    sizes_v = rw.need(node, sizes) if sizes is not None else None
    if scales_v and tuple(scales_v[:2]) != (1, 1):
        raise UnsupportedGraph(f"{node.name} scales the batch or channel axis")
    rw.replace(
        node,
        resize,
        data,
        tuple(scales_v or ()),
        tuple(sizes_v or ()),
        module.onnx_mode,
        module.align_corners,
    )
    return True


_HANDLERS: dict[str, Handler] = {
    "OnnxCopyIdentity": _identity,
    "OnnxShape": _shape,
    "OnnxSlice": _slice,
    "OnnxSqueezeDynamicAxes": _squeeze,
    "OnnxSqueezeStaticAxes": _squeeze,
    "OnnxUnsqueezeDynamicAxes": _unsqueeze,
    "OnnxUnsqueezeStaticAxes": _unsqueeze,
    "OnnxGather": _gather,
    "OnnxConcat": _concat,
    "OnnxReshape": _reshape,
    "OnnxBinaryMathOperation": _binary,
    "OnnxCast": _cast,
    "OnnxResize": _resize,
}


def host_shapes(module: Any) -> Any:
    """`module` (an onnx2torch `GraphModule`, on the CPU) rewritten so that no forward reads a
    device value on the host; see the module docstring. Modifies and returns `module`.

    Raises:
        UnsupportedGraph: a shape value is used in a way this pass does not know.
    """
    rewriter = _Rewriter(module)
    rewriter.run()
    graph = module.graph
    graph.eliminate_dead_code()
    graph.lint()
    module.delete_all_unused_submodules()
    used = {n.target for n in graph.nodes if n.op == "get_attr"}
    initializers = getattr(module, "initializers", None)
    if initializers is not None:
        for name in [name for name, _ in initializers.named_buffers()]:
            if f"initializers.{name}" not in used:
                delattr(initializers, name)
    module.recompile()
    return module
