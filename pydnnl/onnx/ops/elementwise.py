"""Activations (``eltwise_forward``), arithmetic and comparisons with numpy broadcasting
(``binary``), Sum / Mean (``sum``), variadic Max / Min and Where (``binary_select``)."""
from __future__ import annotations

import numpy as np

from ... import algorithm, binary, eltwise_forward, memory, prop_kind, reorder, sum
from ...constants import (
    ARG_DST,
    ARG_FROM,
    ARG_MULTIPLE_SRC,
    ARG_SRC,
    ARG_SRC_0,
    ARG_SRC_1,
    ARG_SRC_2,
    ARG_TO,
)
from ...memory.data_types import data_type
from ..errors import unsupported
from ..tensors import BOOL, Value
from . import op

A = algorithm
F32_MAX = float(np.finfo(np.float32).max)


def eltwise(b, src: Value, alg: algorithm, alpha: float = 0.0, beta: float = 0.0) -> Value:
    """dst = alg(src) in a new tensor."""
    dst = b.alloc(src.shape)
    pd = eltwise_forward.primitive_desc(b.engine, prop_kind.forward_inference, alg, src.md,
                                        dst.md, float(alpha), float(beta))
    b.execute(eltwise_forward(pd), {ARG_SRC: src.mem, ARG_DST: dst.mem})
    return dst


def broadcast_shape(b, x: tuple, y: tuple) -> tuple:
    try:
        return tuple(np.broadcast_shapes(x, y))
    except ValueError:
        from ..errors import invalid
        raise invalid(b.node, f"input shapes {list(x)} and {list(y)} do not broadcast") from None


def binary_op(b, alg: algorithm, x: Value, y: Value, elem_type: int | None = None) -> Value:
    """dst = x alg y with numpy broadcasting: both operands viewed at the result's rank (oneDNN
    broadcasts any dim of 1, in src0 as well as src1)."""
    shape = broadcast_shape(b, x.shape, y.shape)
    rank = max(len(shape), 1)
    dst = b.alloc(shape, elem_type or x.elem_type)
    xv, yv, dv = x.ranked(rank), y.ranked(rank), dst.ranked(rank)
    pd = binary.primitive_desc(b.engine, alg, xv.md, yv.md, dv.md)
    b.execute(binary(pd), {ARG_SRC_0: xv.mem, ARG_SRC_1: yv.mem, ARG_DST: dv.mem})
    return dst


# ONNX activation -> (algorithm, alpha, beta) from the node's attributes
_ACTIVATIONS = {
    "Relu": lambda a: (A.eltwise_relu, 0.0, 0.0),
    "LeakyRelu": lambda a: (A.eltwise_relu, a.get("alpha", 0.01), 0.0),
    "Tanh": lambda a: (A.eltwise_tanh, 0.0, 0.0),
    "Sigmoid": lambda a: (A.eltwise_logistic, 0.0, 0.0),
    "Elu": lambda a: (A.eltwise_elu, a.get("alpha", 1.0), 0.0),
    "Softplus": lambda a: (A.eltwise_soft_relu, 1.0, 0.0),
    "Abs": lambda a: (A.eltwise_abs, 0.0, 0.0),
    "Sqrt": lambda a: (A.eltwise_sqrt, 0.0, 0.0),
    "Exp": lambda a: (A.eltwise_exp, 0.0, 0.0),
    "Log": lambda a: (A.eltwise_log, 0.0, 0.0),
    "Neg": lambda a: (A.eltwise_linear, -1.0, 0.0),
    "Reciprocal": lambda a: (A.eltwise_pow, 1.0, -1.0),
    "HardSigmoid": lambda a: (A.eltwise_hardsigmoid, a.get("alpha", 0.2), a.get("beta", 0.5)),
    "HardSwish": lambda a: (A.eltwise_hardswish, 1.0 / 6.0, 0.5),
    "Mish": lambda a: (A.eltwise_mish, 0.0, 0.0),
    "Round": lambda a: (A.eltwise_round, 0.0, 0.0),
}


@op(*_ACTIVATIONS)
def activation(b, node, a):
    alg, alpha, beta = _ACTIVATIONS[node.op_type](a)
    b.set(0, eltwise(b, b.value(0, "X"), alg, alpha, beta))


_GELU = {"none": A.eltwise_gelu_erf, "tanh": A.eltwise_gelu_tanh}
#: activations that can run as an eltwise post-op of their producer
POST_OP_ACTIVATIONS = frozenset(_ACTIVATIONS) | {"Gelu"}


def post_op_of(node, a) -> tuple | None:
    """(algorithm, alpha, beta) of an activation node, None when it has no such form."""
    if node.op_type == "Gelu":
        alg = _GELU.get(a.get("approximate", "none"))
        return None if alg is None else (alg, 0.0, 0.0)
    if node.op_type in _ACTIVATIONS:
        alg, alpha, beta = _ACTIVATIONS[node.op_type](a)
        return alg, float(alpha), float(beta)
    return None


@op("Gelu")
def gelu(b, node, a):
    approx = a.get("approximate", "none")
    if approx not in _GELU:
        raise unsupported(node, f"attribute approximate={approx!r}; expected 'none' or 'tanh'")
    b.set(0, eltwise(b, b.value(0, "X"), _GELU[approx]))


@op("Selu")
def selu(b, node, a):
    # gamma * elu_alpha(x): two eltwise primitives
    x = eltwise(b, b.value(0, "X"), A.eltwise_elu, a.get("alpha", 1.67326319217681884765625))
    b.set(0, eltwise(b, x, A.eltwise_linear, a.get("gamma", 1.05070102214813232421875), 0.0))


def _scalar(b, i: int, what: str, default: float) -> float:
    v = b.const(i, what)
    if v is None:
        return default
    if v.size != 1:
        raise unsupported(b.node, f"{what} must be a scalar, got shape {list(v.shape)}")
    return float(v.reshape(()))


@op("Clip")
def clip(b, node, a):
    if b.opset < 11:
        lo, hi = a.get("min", -F32_MAX), a.get("max", F32_MAX)
    else:
        lo, hi = _scalar(b, 1, "min", -F32_MAX), _scalar(b, 2, "max", F32_MAX)
    x = b.value(0, "input")
    if lo > hi:     # ONNX: every output is max
        b.set(0, eltwise(b, x, A.eltwise_linear, 0.0, hi))
    else:
        b.set(0, eltwise(b, x, A.eltwise_clip_v2, max(lo, -F32_MAX), min(hi, F32_MAX)))


@op("Pow")
def pow_(b, node, a):
    if not b.is_const(1) and b.node.input[1] not in b.inputs:
        raise unsupported(node, "exponent Y must be a constant scalar (oneDNN's eltwise_pow); "
                                "a computed exponent has no primitive")
    y = b.const(1, "exponent Y")
    if y.size != 1 or not np.issubdtype(y.dtype, np.floating) and not np.issubdtype(
            y.dtype, np.integer):
        raise unsupported(node, f"exponent Y must be a numeric scalar (eltwise_pow), got "
                                f"shape {list(y.shape)} of {y.dtype}")
    x = b.value(0, "X")
    out = eltwise(b, x, A.eltwise_pow, 1.0, float(y.reshape(())))
    if y.ndim > len(x.shape):   # a [1] exponent broadcasts a scalar base to [1]
        out = out.view(out.shape + (1,) * (y.ndim - len(x.shape)))
    b.set(0, out)


_BINARY = {"Add": A.binary_add, "Sub": A.binary_sub, "Mul": A.binary_mul, "Div": A.binary_div}
_COMPARE = {"Greater": A.binary_gt, "Less": A.binary_lt, "Equal": A.binary_eq,
            "GreaterOrEqual": A.binary_ge, "LessOrEqual": A.binary_le}


_HOST = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Greater": np.greater,
         "Less": np.less, "Equal": np.equal, "GreaterOrEqual": np.greater_equal,
         "LessOrEqual": np.less_equal}


def _host_div(x, y):
    if np.issubdtype(x.dtype, np.integer):     # ONNX's integer division truncates
        return (np.sign(x) * np.sign(y) * (np.abs(x) // np.abs(y))).astype(x.dtype)
    return x / y


@op(*_BINARY, *_COMPARE)
def arithmetic(b, node, a):
    if b.opset < 7 and a.get("broadcast") is not None:
        raise unsupported(node, "legacy broadcast/axis attributes (opset < 7)")
    if all(n in b.consts for n in node.input):
        # shape arithmetic on constants (exported models), evaluated once on the host
        x, y = (b.consts[n] for n in node.input)
        b.set(0, np.asarray(_HOST.get(node.op_type, _host_div)(x, y)))
        return
    x, y = b.value(0, "A"), b.value(1, "B")
    if node.op_type in _BINARY:
        b.set(0, binary_op(b, _BINARY[node.op_type], x, y))
    else:
        b.set(0, binary_op(b, _COMPARE[node.op_type], x, y, BOOL))


@op("Max", "Min")
def extremum(b, node, a):
    alg = A.binary_max if node.op_type == "Max" else A.binary_min
    n = len(node.input)
    acc = b.value(0, "data_0")
    for i in range(1, n):
        acc = binary_op(b, alg, acc, b.value(i, f"data_{i}"))
    b.set(0, acc)


@op("Sum", "Mean")
def sum_(b, node, a):
    srcs = [b.value(i, f"data_{i}") for i in range(len(node.input))]
    scale = 1.0 / len(srcs) if node.op_type == "Mean" else 1.0
    if len(srcs) == 1:
        b.set(0, srcs[0] if scale == 1.0 else eltwise(b, srcs[0], A.eltwise_linear, scale))
        return
    if all(s.shape == srcs[0].shape for s in srcs):
        dst = b.alloc(srcs[0].shape)
        pd = sum.primitive_desc(b.engine, dst.md, [scale] * len(srcs), [s.md for s in srcs])
        args = {ARG_MULTIPLE_SRC + i: s.mem for i, s in enumerate(srcs)}
        args[ARG_DST] = dst.mem
        b.execute(sum(pd), args)
        b.set(0, dst)
        return
    # broadcasting operands: pairwise binary adds, then the scale
    acc = srcs[0]
    for s in srcs[1:]:
        acc = binary_op(b, A.binary_add, acc, s)
    b.set(0, acc if scale == 1.0 else eltwise(b, acc, A.eltwise_linear, scale))


@op("Where")
def where(b, node, a):
    """``binary_select``: dst = C ? X : Y. oneDNN's condition is s8 with src0's dims (it is
    broadcast only where src0 is; src1 broadcasts freely), ONNX's a bool tensor broadcast
    with X and Y: C and X are brought to the shape they broadcast to (constants on the host,
    computed tensors by a broadcasting copy), and C is converted to s8 by a reorder."""
    from ...memory.desc import MemoryDesc
    from ..tensors import plain_strides
    from .host import broadcast_to

    if all(n in b.consts for n in node.input):     # shape arithmetic of exported models
        c, x, y = (b.consts[n] for n in node.input)
        b.set(0, np.where(c.astype(bool), x, y))
        return
    cname, xname = node.input[0], node.input[1]
    carr = b.consts.get(cname)
    cond = None if carr is not None else b.bool_value(0, "condition")
    xc = b.consts.get(xname)
    x = b.value(1, "X") if xc is None or xc.dtype != np.float32 else None
    y = b.value(2, "Y")
    cshape = carr.shape if carr is not None else cond.shape
    xshape = xc.shape if x is None else x.shape
    try:
        out = tuple(np.broadcast_shapes(cshape, xshape, y.shape))
        both = tuple(np.broadcast_shapes(cshape, xshape))
    except ValueError:
        from ..errors import invalid
        raise invalid(node, f"condition {list(cshape)}, X {list(xshape)} and Y "
                            f"{list(y.shape)} do not broadcast") from None
    rank = max(len(out), 1)
    dims = (1,) * (rank - len(both)) + both     # src0's and src2's dims at the result's rank
    if x is None:       # a float constant: broadcast once on the host
        x = b.alloc(dims, reuse=False)
        x.mem.write(np.broadcast_to(xc.reshape((1,) * (rank - xc.ndim) + xc.shape), dims)
                    .reshape(x.md.get_dims()))
    else:
        x = x.ranked(rank)
        if x.shape != dims:
            x = broadcast_to(b, x, dims)
    s8 = MemoryDesc(list(dims), data_type.s8, plain_strides(dims))
    c8 = memory(s8, b.engine)
    b.nbytes += s8.get_size()
    if carr is not None:  # a constant condition: converted and broadcast once on the host
        c8.write(np.broadcast_to(carr.reshape((1,) * (rank - carr.ndim) + carr.shape) != 0,
                                 dims).astype(np.int8))
    else:
        cond = cond.ranked(rank)
        if cond.shape != dims:
            cond = broadcast_to(b, cond, dims)
        b.execute(reorder(cond.mem, c8), {ARG_FROM: cond.mem, ARG_TO: c8})
    dst = b.alloc(out, x.elem_type)
    yv, dv = y.ranked(rank), dst.ranked(rank)
    pd = binary.primitive_desc(b.engine, A.binary_select, x.md, yv.md, s8, dv.md)
    b.execute(binary(pd), {ARG_SRC_0: x.mem, ARG_SRC_1: yv.mem, ARG_SRC_2: c8,
                           ARG_DST: dv.mem})
    b.set(0, dst)
