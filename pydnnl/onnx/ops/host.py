"""Shape arithmetic: Shape reads the static shape; ConstantOfShape, Range, Cast and Expand of
constants (exported models compute state shapes and reshape targets this way) are evaluated
with numpy when the program is built. Expand of a computed tensor is a broadcasting
``binary``."""
from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper

from ... import algorithm, binary
from ...constants import ARG_DST, ARG_SRC_0, ARG_SRC_1
from ..errors import invalid, unsupported
from . import op


def host_inputs(b, node) -> list[np.ndarray] | None:
    """Every given input as a host constant, or None when one is a device tensor."""
    names = [n for n in node.input if n]
    if not all(n in b.consts for n in names):
        return None
    return [b.consts[n] if n else None for n in node.input]


@op("Shape")
def shape(b, node, a):
    name = node.input[0]
    dims = b.consts[name].shape if name in b.consts else b.value(0, "data").shape
    dims = np.array(dims, np.int64)
    start, end = a.get("start", 0), a.get("end", None)
    b.set(0, dims[start:end])


@op("ConstantOfShape")
def constant_of_shape(b, node, a):
    dims = [int(v) for v in b.const(0, "input").reshape(-1)]
    value = (numpy_helper.to_array(node.attribute[0].t).reshape(-1) if node.attribute
             else np.zeros(1, np.float32))
    b.set(0, np.full(dims, value[0], value.dtype))


@op("Expand")
def expand(b, node, a):
    dims = tuple(int(v) for v in b.const(1, "shape").reshape(-1))
    name = node.input[0]
    if name in b.consts:
        x = b.consts[name]
        b.set(0, np.ascontiguousarray(np.broadcast_to(x, np.broadcast_shapes(x.shape, dims))))
        return
    x = b.value(0, "input")
    try:
        out = np.broadcast_shapes(x.shape, dims)
    except ValueError:
        raise invalid(node, f"shape {list(dims)} does not broadcast with the input's "
                            f"{list(x.shape)}") from None
    b.set(0, x if out == x.shape else broadcast_to(b, x, out))


def broadcast_to(b, x, shape: tuple):
    """A new tensor of ``shape`` holding ``x`` broadcast (numpy's rules; ``x``'s dims are 1 or
    ``shape``'s). No broadcasting copy primitive exists (a reorder's dims are equal, and a
    memory desc has no zero strides): ``binary_add`` of x and zeros, the zeros written once
    here into a buffer of their own (a reused one would be overwritten by its earlier
    producer on every run)."""
    shape = tuple(int(d) for d in shape)
    zeros, dst = b.alloc(shape, reuse=False), b.alloc(shape, x.elem_type)
    zeros.mem.write(np.zeros(zeros.md.get_dims(), np.float32))
    xv = x.ranked(len(shape))
    pd = binary.primitive_desc(b.engine, algorithm.binary_add, xv.md, zeros.md, dst.md)
    b.execute(binary(pd), {ARG_SRC_0: xv.mem, ARG_SRC_1: zeros.mem, ARG_DST: dst.mem})
    return dst


@op("Cast")
def cast(b, node, a):
    to = helper.tensor_dtype_to_np_dtype(a["to"])
    ins = host_inputs(b, node)
    if ins is not None:
        b.set(0, ins[0].astype(to))
        return
    x = b.value(0, "input")
    if to != np.float32:
        raise unsupported(node, f"cast of a computed tensor to {to} (the backend computes in "
                                f"float32)")
    b.set(0, x)


@op("Range")
def range_(b, node, a):
    start, limit, delta = (b.const(i, what).reshape(())
                           for i, what in enumerate(("start", "limit", "delta")))
    b.set(0, np.arange(start, limit, delta, dtype=np.result_type(start, limit, delta)))
