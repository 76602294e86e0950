"""Gemm and MatMul on ``matmul`` (transposes as strided views, alpha and C as fused
post-ops)."""
from __future__ import annotations

from ... import algorithm, matmul, post_ops, primitive_attr
from ...constants import ARG_ATTR_MULTIPLE_POST_OP, ARG_DST, ARG_SRC, ARG_SRC_1, ARG_WEIGHTS
from ..errors import invalid, unsupported
from ..tensors import plain_md
from . import op
from .elementwise import broadcast_shape, eltwise


def with_post_ops(b, args: dict, dst_shape, ops=None) -> primitive_attr:
    """An attr with ``ops`` (or none) followed by the nodes after this one that its primitive
    applies (``fuse.plan_post_ops``); binary operands go into ``args``. ``dst_shape``: the
    node's output shape, None where the primitive's dst has another (no binary post-ops)."""
    from ..fuse import plan_post_ops

    ops = post_ops() if ops is None else ops
    for entry in plan_post_ops(b, b.node, None if dst_shape is None else tuple(dst_shape)):
        if entry[0] == "eltwise":
            ops.append_eltwise(*entry[1:])
        else:
            _, alg, v = entry
            args[ARG_ATTR_MULTIPLE_POST_OP(len(ops)) | ARG_SRC_1] = v.mem
            ops.append_binary(alg, v.md)
    attr = primitive_attr()
    attr.set_post_ops(ops)
    return attr


def _transposed(v):
    """A 2-D value seen transposed (a strided view; the matmul reads it in place)."""
    r, c = v.shape
    return v.view((c, r), plain_md((r, c)).permute_axes([1, 0]))


@op("Gemm")
def gemm(b, node, a):
    x, w = b.value(0, "A"), b.value(1, "B")
    if len(x.shape) != 2 or len(w.shape) != 2:
        raise invalid(node, f"A and B must be 2-D, got shapes {list(x.shape)} and "
                            f"{list(w.shape)}")
    if a.get("broadcast") is not None and b.opset < 7:
        raise unsupported(node, "legacy broadcast attribute (opset < 7)")
    if a.get("transA", 0):
        x = _transposed(x)
    if a.get("transB", 0):
        w = _transposed(w)
    (m, k), (k2, n) = x.shape, w.shape
    if k != k2:
        raise invalid(node, f"inner dims differ: A' is {m}x{k}, B' is {k2}x{n}")
    alpha, beta = float(a.get("alpha", 1.0)), float(a.get("beta", 1.0))
    dst = b.alloc((m, n))
    ops, args = post_ops(), {ARG_SRC: x.mem, ARG_WEIGHTS: w.mem, ARG_DST: dst.mem}
    if alpha != 1.0:
        ops.append_eltwise(algorithm.eltwise_linear, alpha, 0.0)
    if b.has(2) and beta != 0.0:
        c = b.value(2, "C")
        broadcast_shape(b, c.shape, (m, n))
        if beta != 1.0:
            c = eltwise(b, c, algorithm.eltwise_linear, beta, 0.0)
        c = c.ranked(2)
        args[ARG_ATTR_MULTIPLE_POST_OP(len(ops)) | ARG_SRC_1] = c.mem
        ops.append_binary(algorithm.binary_add, c.md)
    attr = with_post_ops(b, args, (m, n), ops)
    pd = matmul.primitive_desc(b.engine, x.md, w.md, dst.md, attr=attr)
    b.execute(matmul(pd), args)
    b.set(0, dst)


@op("MatMul")
def matmul_(b, node, a):
    x, w = b.value(0, "A"), b.value(1, "B")
    xs, ws = list(x.shape), list(w.shape)
    if not xs or not ws:
        raise invalid(node, "MatMul needs inputs of at least one dim")
    x1, w1 = len(xs) == 1, len(ws) == 1
    if x1:
        xs = [1] + xs
    if w1:
        ws = ws + [1]
    if xs[-1] != ws[-2]:
        raise invalid(node, f"inner dims differ: A {list(x.shape)}, B {list(w.shape)}")
    batch = broadcast_shape(b, tuple(xs[:-2]), tuple(ws[:-2]))
    rank = len(batch) + 2
    xs = [1] * (rank - len(xs)) + xs
    ws = [1] * (rank - len(ws)) + ws
    out = list(batch) + [xs[-2], ws[-1]]
    xv, wv = x.view(xs), w.view(ws)
    dst = b.alloc(out)
    shape = out[:-2] + ([] if x1 else [out[-2]]) + ([] if w1 else [out[-1]])
    args = {ARG_SRC: xv.mem, ARG_WEIGHTS: wv.mem, ARG_DST: dst.mem}
    attr = with_post_ops(b, args, out if shape == out else None)
    pd = matmul.primitive_desc(b.engine, xv.md, wv.md, dst.md, attr=attr)
    b.execute(matmul(pd), args)
    b.set(0, dst if shape == out else dst.view(shape))
