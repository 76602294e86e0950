"""Pieces the convolution kernel generators share: layout terms, index arithmetic, fused
bias and post-ops.

A *layout* here is the hashable tuple of :func:`pydnnl.kernels.reorder.layout_of`:
``(offset0, ((block, stride, inner_terms), ...))``, one entry per logical dimension, so every
kernel addresses plain, strided and blocked tensors through the same per-dimension offset
terms. Convolution kernels see logical tensors in oneDNN order: activations ``[N, C, sp...]``
and weights always grouped ``[G, OC/G, IC/G, k...]`` (an ungrouped weights desc gets a leading
dimension of size 1 and stride 0; deconvolution swaps the two channel dimensions, which only
swaps two entries of the tuple).
"""
from __future__ import annotations

import math

import numpy as np

from ..memory.desc import MemoryDesc
from .reorder import _offset_expr, layout_of

__all__ = ["layout_of", "offset", "grouped_layout", "swap_channel_dims", "plain_strides",
           "decompose", "postop_helpers", "apply_postops", "c_float", "ELTWISE_C"]


def offset(layout: tuple, idx):
    """The storage offset expression of logical index ``idx`` (pymbolic expressions)."""
    return _offset_expr(layout, idx)


def grouped_layout(md: MemoryDesc, grouped: bool) -> tuple:
    """Layout of weights seen as ``[G, OC/G, IC/G, k...]``: ungrouped gets a unit G dim."""
    lay = layout_of(md)
    if grouped:
        return lay
    off0, per = lay
    return (off0, ((1, 0, ()),) + per)


def swap_channel_dims(layout: tuple) -> tuple:
    """Grouped weights ``[G, A, B, k...]`` -> ``[G, B, A, k...]`` (same storage)."""
    off0, per = layout
    per = list(per)
    per[1], per[2] = per[2], per[1]
    return (off0, tuple(per))


def plain_strides(layout: tuple) -> tuple[int, ...] | None:
    """Per-dimension strides of a layout without inner blocks, else None."""
    off0, per = layout
    if any(blk != 1 or inner for blk, _, inner in per):
        return None
    return tuple(stride for _, stride, _ in per)


def decompose(flat, sizes):
    """Index expressions of a row-major flattening of ``sizes`` (last fastest) from ``flat``."""
    from pymbolic.primitives import FloorDiv, Remainder

    out = []
    inner = 1
    for k in range(len(sizes) - 1, -1, -1):
        e = flat if inner == 1 else FloorDiv(flat, inner)
        if k > 0:
            e = Remainder(e, sizes[k])
        out.append(e)
        inner *= sizes[k]
    return list(reversed(out))


def c_float(v: float) -> str:
    """An OpenCL C float literal."""
    if math.isnan(v):
        return "NAN"
    if math.isinf(v):
        return "INFINITY" if v > 0 else "(-INFINITY)"
    return repr(float(np.float32(v))) + "f"


# oneDNN eltwise forward formulas in OpenCL C on ``x`` with constants A (alpha) and B (beta).
ELTWISE_C = {
    "relu": "return x > 0.0f ? x : A * x;",
    "tanh": "return tanh(x);",
    "elu": "return x > 0.0f ? x : A * expm1(x);",
    "square": "return x * x;",
    "abs": "return fabs(x);",
    "sqrt": "return sqrt(x);",
    "linear": "return A * x + B;",
    "soft_relu": "float a = A == 0.0f ? 1.0f : A; float z = a * x; "
                 "return (z > 0.0f ? z + log1p(exp(-z)) : log1p(exp(z))) / a;",
    "hardsigmoid": "return fmin(fmax(A * x + B, 0.0f), 1.0f);",
    "logistic": "return 1.0f / (1.0f + exp(-x));",
    "exp": "return exp(x);",
    "gelu_tanh": "return 0.5f * x * (1.0f + tanh(0.79788456080286535588f * "
                 "(x + 0.044715f * x * x * x)));",
    "swish": "return x / (1.0f + exp(-A * x));",
    "log": "return log(x);",
    "clip": "return fmin(fmax(x, A), B);",
    "clip_v2": "return fmin(fmax(x, A), B);",
    "pow": "return A * pow(x, B);",
    "gelu_erf": "return 0.5f * x * (1.0f + erf(x * 0.70710678118654752440f));",
    "round": "return rint(x);",
}


def postop_helpers(post_ops: tuple) -> list[tuple]:
    """C helpers (for :func:`pydnnl.kernels.clhelpers.register_helpers`) of the eltwise ops.

    ``post_ops`` entries are ``("sum", scale, zero_point)`` or ``("eltwise", alg, alpha, beta)``
    with ``alg`` a name of :data:`ELTWISE_C`.
    """
    out = []
    for i, op in enumerate(post_ops):
        if op[0] != "eltwise":
            continue
        _, alg, alpha, beta = op
        body = ELTWISE_C[alg]
        name = f"pd_conv_postop{i}"
        code = (f"static inline float {name}(float x) {{ const float A = {c_float(alpha)}; "
                f"const float B = {c_float(beta)}; (void)A; (void)B; {body} }}")
        out.append((name, code, np.float32, np.float32))
    return out


def apply_postops(value, post_ops: tuple, prior=None):
    """``value`` after the post-ops; ``prior`` reads the destination's previous content."""
    from pymbolic import var

    for i, op in enumerate(post_ops):
        if op[0] == "sum":
            _, scale, zp = op
            p = prior if zp == 0 else prior - np.float32(zp)
            value = (p if scale == 1.0 else np.float32(scale) * p) + value
        else:
            value = var(f"pd_conv_postop{i}")(value)
    return value


def bounds_condition(pos_exprs, lo_hi, sizes):
    """``0 <= pos < size`` for every dim where the static range ``lo_hi`` may leave it."""
    from pymbolic.primitives import Comparison, LogicalAnd

    conds = []
    for e, (lo, hi), n in zip(pos_exprs, lo_hi, sizes):
        if lo < 0:
            conds.append(Comparison(e, ">=", 0))
        if hi >= n:
            conds.append(Comparison(e, "<", n))
    if not conds:
        return None
    return conds[0] if len(conds) == 1 else LogicalAnd(tuple(conds))


def guarded(cond, value):
    from pymbolic.primitives import If

    return value if cond is None else If(cond, value, np.float32(0))


def guarded_load(cond, array: str, off):
    """``array[off]`` where ``cond`` holds, else 0; the address stays inside the array.

    The index itself is clamped too: Intel's CPU compiler was seen to speculate a guarded load
    at an out-of-range address and return garbage (wrong sums, not a fault).
    """
    from pymbolic import var
    from pymbolic.primitives import If

    if cond is None:
        return var(array)[off]
    return If(cond, var(array)[If(cond, off, 0)], np.float32(0))


def make_args(specs):
    """loopy argument list from ``(name, nelems, is_output, is_input)`` and ``(name, None)``
    (an int32 value argument)."""
    import loopy as lp

    out = []
    for spec in specs:
        name, n = spec[0], spec[1]
        if n is None:
            out.append(lp.ValueArg(name, np.int32))
        else:
            is_out, is_in = spec[2], spec[3]
            out.append(lp.GlobalArg(name, np.float32, shape=(max(int(n), 1),),
                                    is_output=is_out, is_input=is_in))
    return out


def finish(knl, post_ops: tuple = ()):
    """Register the post-op helpers of a kernel."""
    from .clhelpers import register_helpers

    helpers = postop_helpers(post_ops)
    return register_helpers(knl, helpers) if helpers else knl


def split_fast(knl, iname: str, size: int, wg: int, outer_axis: int = 0):
    """Spread ``iname`` over work-groups of ``wg`` work-items (axis 0) and groups."""
    import loopy as lp

    wg = max(1, min(wg, size))
    return lp.split_iname(knl, iname, wg, inner_tag="l.0", outer_tag=f"g.{outer_axis}")


def prod(xs) -> int:
    return int(np.prod(xs)) if len(xs) else 1
