"""Activations (``eltwise_forward``), arithmetic and comparisons with numpy broadcasting
(``binary``), Sum / Mean (``sum``) and variadic Max / Min."""
from __future__ import annotations

import numpy as np

from ... import algorithm, binary, eltwise_forward, prop_kind, sum
from ...constants import ARG_DST, ARG_MULTIPLE_SRC, ARG_SRC, ARG_SRC_0, ARG_SRC_1
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
