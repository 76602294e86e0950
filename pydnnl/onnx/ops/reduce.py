"""The Reduce operators on ``reduction`` (log / exp steps through ``eltwise_forward``)."""
from __future__ import annotations

from ... import algorithm, reduction
from ...constants import ARG_DST, ARG_SRC
from ..errors import invalid, unsupported
from . import axis_of, op
from .elementwise import eltwise

A = algorithm
# op -> (reduction algorithm, p, eltwise before, eltwise after, eltwise when nothing reduces)
_REDUCE = {
    "ReduceSum": (A.reduction_sum, 0.0, None, None, None),
    "ReduceMean": (A.reduction_mean, 0.0, None, None, None),
    "ReduceMax": (A.reduction_max, 0.0, None, None, None),
    "ReduceMin": (A.reduction_min, 0.0, None, None, None),
    "ReduceProd": (A.reduction_mul, 0.0, None, None, None),
    "ReduceL1": (A.reduction_norm_lp_sum, 1.0, None, None, A.eltwise_abs),
    "ReduceL2": (A.reduction_norm_lp_sum, 2.0, None, None, A.eltwise_abs),
    "ReduceSumSquare": (A.reduction_norm_lp_power_p_sum, 2.0, None, None, A.eltwise_square),
    "ReduceLogSum": (A.reduction_sum, 0.0, None, A.eltwise_log, A.eltwise_log),
    "ReduceLogSumExp": (A.reduction_sum, 0.0, A.eltwise_exp, A.eltwise_log, None),
}
# opset from which axes is an input instead of an attribute
_AXES_INPUT = {"ReduceSum": 13}


@op(*_REDUCE)
def reduce_(b, node, a):
    alg, p, before, after, alone = _REDUCE[node.op_type]
    x = b.value(0, "data")
    rank = len(x.shape)
    if rank == 0:
        raise unsupported(node, "a scalar input (nothing to reduce)")
    if b.opset >= _AXES_INPUT.get(node.op_type, 18):
        axes = b.const(1, "axes")
        axes = None if axes is None else [int(v) for v in axes.reshape(-1)]
    else:
        axes = a.get("axes")
    if not axes:
        if a.get("noop_with_empty_axes", 0):
            b.set(0, x)
            return
        axes = list(range(rank))
    axes = sorted({axis_of(b, ax, rank, "axes entry") for ax in axes})
    if len(axes) != len(set(axes)):
        raise invalid(node, f"axes {axes} repeat an axis")
    kept = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    keepdims = a.get("keepdims", 1)
    shape = kept if keepdims else tuple(d for i, d in enumerate(x.shape) if i not in axes)
    if kept == x.shape:
        # every reduced dim has size 1: the value itself (through the op's elementwise part)
        out = eltwise(b, x, alone) if alone is not None else x
        b.set(0, out.view(shape) if shape != out.shape else out)
        return
    src = eltwise(b, x, before) if before is not None else x
    dst = b.alloc(kept)
    pd = reduction.primitive_desc(b.engine, alg, src.md, dst.md, p, 0.0)
    b.execute(reduction(pd), {ARG_SRC: src.mem, ARG_DST: dst.mem})
    if after is not None:
        dst = eltwise(b, dst, after)
    b.set(0, dst.view(shape) if shape != kept else dst)
