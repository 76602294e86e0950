"""oneDNN's eltwise algorithms as OpenCL C expressions, forward and backward.

Each function returns the text of one ``float`` expression over variables the caller names,
with ``alpha`` and ``beta`` written in as exact float literals, so that an eltwise kernel or
a producer that fuses an eltwise post-op (GEMM, convolution) pastes it where it needs it. The
formulas and their edge conventions follow oneDNN's "Eltwise" developer guide (v3):

- relu: ``s > 0 ? s : alpha * s``; its derivative at ``s == 0`` is ``alpha`` (the ``s <= 0``
  side), from src and from dst alike.
- clip: ``min(max(s, alpha), beta)``, derivative 1 on ``alpha < s <= beta`` (upper bound
  included); clip_v2: the same forward, derivative 1 on ``alpha < s < beta`` (both bounds
  excluded), and ``clip_v2_use_dst_for_bwd`` tests ``d`` against the same open interval.
- soft_relu: ``log(1 + exp(alpha * s)) / alpha`` (v3 meaning of alpha), derivative
  ``1 / (1 + exp(-alpha * s))``.
- round: round half to even (``rint``, the default rounding mode); it has no backward.
- pow: ``alpha * s ** beta``; its derivative is 0 when ``beta == 0``. Every expression reads
  its variables (``pow(s, 0.0f)`` for ``beta == 0``): Intel's CPU runtime corrupted its heap at
  process exit after running a kernel whose loads were dead.
- hardsigmoid / hardswish: ``v = alpha * s + beta`` clamped to [0, 1] (times ``s`` for
  hardswish); derivatives are taken on the open interval ``0 < v < 1`` (hardswish: ``dd`` for
  ``v >= 1``, 0 for ``v <= 0``).

Pure: no device, no loopy. Every expression is parenthesised and evaluates its variables only
(they may appear several times: pass variable names, not expressions with side effects).
"""
from __future__ import annotations

import math

import numpy as np

from ..constants import algorithm
from ..error import invalid_arguments

A = algorithm

SUPPORTED: frozenset = frozenset({
    A.eltwise_relu, A.eltwise_tanh, A.eltwise_elu, A.eltwise_square, A.eltwise_abs,
    A.eltwise_sqrt, A.eltwise_linear, A.eltwise_soft_relu, A.eltwise_hardsigmoid,
    A.eltwise_logistic, A.eltwise_exp, A.eltwise_gelu_tanh, A.eltwise_gelu_erf,
    A.eltwise_swish, A.eltwise_log, A.eltwise_clip, A.eltwise_clip_v2, A.eltwise_pow,
    A.eltwise_round, A.eltwise_mish, A.eltwise_hardswish,
    A.eltwise_relu_use_dst_for_bwd, A.eltwise_tanh_use_dst_for_bwd,
    A.eltwise_elu_use_dst_for_bwd, A.eltwise_sqrt_use_dst_for_bwd,
    A.eltwise_logistic_use_dst_for_bwd, A.eltwise_exp_use_dst_for_bwd,
    A.eltwise_clip_v2_use_dst_for_bwd,
})

# the *_use_dst_for_bwd algorithms and the algorithm whose forward they share
_DST_VARIANTS = {
    A.eltwise_relu_use_dst_for_bwd: A.eltwise_relu,
    A.eltwise_tanh_use_dst_for_bwd: A.eltwise_tanh,
    A.eltwise_elu_use_dst_for_bwd: A.eltwise_elu,
    A.eltwise_sqrt_use_dst_for_bwd: A.eltwise_sqrt,
    A.eltwise_logistic_use_dst_for_bwd: A.eltwise_logistic,
    A.eltwise_exp_use_dst_for_bwd: A.eltwise_exp,
    A.eltwise_clip_v2_use_dst_for_bwd: A.eltwise_clip_v2,
}

# algorithms with no backward at all (oneDNN: invalid_arguments for backward_data)
NO_BACKWARD: frozenset = frozenset({A.eltwise_round})

# exact float32 constants (written with enough digits to round-trip)
_SQRT_2_OVER_PI = 0.7978845608028654      # sqrt(2 / pi)
_GELU_C = 0.044715
_SQRT_HALF = 0.7071067811865476           # 1 / sqrt(2)
_INV_SQRT_2PI = 0.3989422804014327        # 1 / sqrt(2 pi)


def lit(v: float) -> str:
    """``v`` rounded to float32, as an OpenCL C float literal that reads back exactly."""
    f = float(np.float32(v))
    if math.isnan(f):
        return "NAN"
    if math.isinf(f):
        return "INFINITY" if f > 0 else "(-INFINITY)"
    s = "%.9g" % f
    if "e" not in s and "." not in s and "n" not in s:
        s += ".0"
    s += "f"
    return f"({s})" if s.startswith("-") else s


def normalize(alg) -> algorithm:
    """``alg`` as an eltwise ``algorithm`` member; invalid_arguments for anything else."""
    try:
        a = algorithm(int(alg))
    except (TypeError, ValueError):
        raise invalid_arguments(
            f"eltwise: algorithm must be one of dnnl.algorithm.eltwise_*, got {alg!r}") from None
    if a not in SUPPORTED:
        raise invalid_arguments(
            f"eltwise: algorithm must be one of dnnl.algorithm.eltwise_*, got {a.name}")
    return a


def uses_dst(alg) -> bool:
    """Whether the backward of ``alg`` reads dst (ARG_DST) instead of src (ARG_SRC)."""
    return normalize(alg) in _DST_VARIANTS


def base_algorithm(alg) -> algorithm:
    """The algorithm whose forward formula ``alg`` computes (``relu`` for
    ``relu_use_dst_for_bwd``, ``alg`` itself otherwise)."""
    a = normalize(alg)
    return _DST_VARIANTS.get(a, a)


def _softplus(x: str, alpha_x: str) -> str:
    # log(1 + exp(t)) with t = alpha * x; for t past exp's overflow bound the value is t
    return (f"(({alpha_x}) < 88.72283172607421875f ? log1p(exp({alpha_x})) : ({alpha_x}))")


def _sigmoid(t: str) -> str:
    # exp(-t) overflowing to inf gives 1 / inf == 0, the limit
    return f"(1.0f / (1.0f + exp(-({t}))))"


def forward_expr(alg, x: str, alpha: float, beta: float) -> str:
    """OpenCL C float expression of eltwise ``alg`` applied to the float variable ``x``."""
    a = base_algorithm(alg)
    al, be = lit(alpha), lit(beta)
    X = f"({x})"
    if a == A.eltwise_relu:
        return f"({X} > 0.0f ? {X} : {X} * {al})"
    if a == A.eltwise_tanh:
        return f"tanh({x})"
    if a == A.eltwise_elu:
        return f"({X} > 0.0f ? {X} : {al} * expm1({x}))"
    if a == A.eltwise_square:
        return f"({X} * {X})"
    if a == A.eltwise_abs:
        return f"fabs({x})"
    if a == A.eltwise_sqrt:
        return f"sqrt({x})"
    if a == A.eltwise_linear:
        return f"({al} * {X} + {be})"
    if a == A.eltwise_soft_relu:
        return f"({_softplus(x, f'{al} * {X}')} / {al})"
    if a == A.eltwise_hardsigmoid:
        return f"fmin(fmax({al} * {X} + {be}, 0.0f), 1.0f)"
    if a == A.eltwise_hardswish:
        return f"({X} * fmin(fmax({al} * {X} + {be}, 0.0f), 1.0f))"
    if a == A.eltwise_logistic:
        return _sigmoid(x)
    if a == A.eltwise_exp:
        return f"exp({x})"
    if a == A.eltwise_gelu_tanh:
        return (f"(0.5f * {X} * (1.0f + tanh({lit(_SQRT_2_OVER_PI)} * {X}"
                f" * (1.0f + {lit(_GELU_C)} * {X} * {X}))))")
    if a == A.eltwise_gelu_erf:
        return f"(0.5f * {X} * (1.0f + erf({X} * {lit(_SQRT_HALF)})))"
    if a == A.eltwise_swish:
        return f"({X} * {_sigmoid(f'{al} * {X}')})"
    if a == A.eltwise_log:
        return f"log({x})"
    if a in (A.eltwise_clip, A.eltwise_clip_v2):
        # NaN gives alpha, as oneDNN's compare-and-select does
        return f"fmin(fmax({x}, {al}), {be})"
    if a == A.eltwise_pow:
        b = float(np.float32(beta))
        if b == 1.0:
            return f"({al} * {X})"
        if b == 2.0:
            return f"({al} * ({X} * {X}))"
        return f"({al} * pow({x}, {be}))"
    if a == A.eltwise_round:
        return f"rint({x})"
    if a == A.eltwise_mish:
        return f"({X} * tanh({_softplus(x, X)}))"
    raise AssertionError(a)  # pragma: no cover - SUPPORTED is exhaustive


def backward_expr(alg, dd: str, v: str, alpha: float, beta: float) -> str:
    """OpenCL C float expression of diff_src for eltwise ``alg`` from diff_dst ``dd`` and ``v``:
    src, or dst for the ``*_use_dst_for_bwd`` algorithms (see :func:`uses_dst`)."""
    a = normalize(alg)
    if a in NO_BACKWARD:
        raise invalid_arguments(
            f"eltwise: algorithm {a.name} has no backward propagation (oneDNN defines round "
            f"for forward_training and forward_inference only)")
    al, be = lit(alpha), lit(beta)
    D, V = f"({dd})", f"({v})"
    if a in (A.eltwise_relu, A.eltwise_relu_use_dst_for_bwd):
        return f"({V} > 0.0f ? {D} : {D} * {al})"
    if a == A.eltwise_tanh:
        return f"({D} * (1.0f - tanh({v})) * (1.0f + tanh({v})))"
    if a == A.eltwise_tanh_use_dst_for_bwd:
        return f"({D} * (1.0f - {V}) * (1.0f + {V}))"
    if a == A.eltwise_elu:
        return f"({D} * ({V} > 0.0f ? 1.0f : {al} * exp({v})))"
    if a == A.eltwise_elu_use_dst_for_bwd:
        return f"({D} * ({V} > 0.0f ? 1.0f : {V} + {al}))"
    if a == A.eltwise_square:
        return f"({D} * 2.0f * {V})"
    if a == A.eltwise_abs:
        return f"({V} > 0.0f ? {D} : ({V} < 0.0f ? -{D} : 0.0f))"
    if a == A.eltwise_sqrt:
        return f"({D} / (2.0f * sqrt({v})))"
    if a == A.eltwise_sqrt_use_dst_for_bwd:
        return f"({D} / (2.0f * {V}))"
    if a == A.eltwise_linear:
        return f"({D} * {al})"
    if a == A.eltwise_soft_relu:
        return f"({D} * {_sigmoid(f'{al} * {V}')})"
    if a == A.eltwise_hardsigmoid:
        u = f"({al} * {V} + {be})"
        return f"({u} <= 0.0f ? 0.0f : ({u} >= 1.0f ? 0.0f : {D} * {al}))"
    if a == A.eltwise_hardswish:
        u = f"({al} * {V} + {be})"
        return (f"({u} <= 0.0f ? 0.0f : ({u} >= 1.0f ? {D}"
                f" : {D} * (2.0f * {al} * {V} + {be})))")
    if a == A.eltwise_logistic:
        s = _sigmoid(v)
        return f"({D} * {s} * (1.0f - {s}))"
    if a == A.eltwise_logistic_use_dst_for_bwd:
        return f"({D} * {V} * (1.0f - {V}))"
    if a == A.eltwise_exp:
        return f"({D} * exp({v}))"
    if a == A.eltwise_exp_use_dst_for_bwd:
        return f"({D} * {V})"
    if a == A.eltwise_gelu_tanh:
        k, c = lit(_SQRT_2_OVER_PI), lit(_GELU_C)
        t = f"tanh({k} * {V} * (1.0f + {c} * {V} * {V}))"
        dg = f"({k} * (1.0f + {lit(3 * _GELU_C)} * {V} * {V}))"
        return f"({D} * 0.5f * (1.0f + {t}) * (1.0f + {V} * (1.0f - {t}) * {dg}))"
    if a == A.eltwise_gelu_erf:
        return (f"({D} * (0.5f + 0.5f * erf({V} * {lit(_SQRT_HALF)})"
                f" + {V} * {lit(_INV_SQRT_2PI)} * exp(-0.5f * {V} * {V})))")
    if a == A.eltwise_swish:
        s = _sigmoid(f"{al} * {V}")
        return f"({D} * ({s} + {al} * {V} * {s} * (1.0f - {s})))"
    if a == A.eltwise_log:
        return f"({D} / {V})"
    if a == A.eltwise_clip:
        return f"({D} * ({V} > {al} && {V} <= {be} ? 1.0f : 0.0f))"
    if a in (A.eltwise_clip_v2, A.eltwise_clip_v2_use_dst_for_bwd):
        return f"({D} * ({V} > {al} && {V} < {be} ? 1.0f : 0.0f))"
    if a == A.eltwise_pow:
        b = float(np.float32(beta))
        if b == 0.0:  # exactly 0 whatever the inputs; pow(., 0) == 1 keeps them read (a
            # kernel whose loads are dead crashed Intel's CPU runtime at process exit)
            return f"(0.0f * pow({D}, 0.0f) * pow({V}, 0.0f))"
        if b == 1.0:
            return f"({D} * {al})"
        if b == 2.0:
            return f"({D} * {lit(2.0 * float(np.float32(alpha)))} * {V})"
        return f"({D} * {lit(float(np.float32(alpha)) * b)} * pow({v}, {lit(b - 1.0)}))"
    if a == A.eltwise_mish:
        t = f"tanh({_softplus(v, V)})"
        return f"({D} * ({t} + {V} * {_sigmoid(v)} * (1.0f - {t} * {t})))"
    raise AssertionError(a)  # pragma: no cover - SUPPORTED is exhaustive
