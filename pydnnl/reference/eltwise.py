"""numpy reference of oneDNN's eltwise algorithms in float64, written from the formulas of
oneDNN's "Eltwise" developer guide (v3), independently of the OpenCL expressions the kernels
use.

Conventions at the points where a derivative is not defined follow oneDNN: relu takes the
``s <= 0`` side (``alpha``) at 0; clip's derivative is 1 on ``alpha < s <= beta``, clip_v2's on
``alpha < s < beta``; abs has derivative 0 at 0; hardsigmoid/hardswish take the clamped side at
``alpha * s + beta`` equal to 0 or 1; pow with ``beta == 0`` has derivative 0. Round rounds
half to even and has no backward.
"""
from __future__ import annotations

import math

import numpy as np

from ..constants import algorithm
from ..error import invalid_arguments

try:  # scipy is optional: erf element by element otherwise
    from scipy.special import erf as _erf
except ImportError:  # pragma: no cover - depends on the environment
    _erf = np.vectorize(math.erf, otypes=[np.float64])

_SUFFIX = "_use_dst_for_bwd"


def _name(alg) -> str:
    try:
        a = algorithm(int(alg))
    except (TypeError, ValueError):
        raise invalid_arguments(f"eltwise reference: unknown algorithm {alg!r}") from None
    if not a.name.startswith("eltwise_"):
        raise invalid_arguments(f"eltwise reference: {a.name} is not an eltwise algorithm")
    return a.name[len("eltwise_"):]


def _sigmoid(t):
    # 1 / (1 + e^-t) written through tanh, which never overflows
    return 0.5 * (1.0 + np.tanh(0.5 * t))


def _softplus(t):
    # log(1 + e^t), stable for large |t|
    return np.logaddexp(0.0, t)


def eltwise_forward(alg, x, alpha: float = 0.0, beta: float = 0.0) -> np.ndarray:
    """dst of eltwise ``alg`` on ``x`` (float64)."""
    name = _name(alg)
    if name.endswith(_SUFFIX):
        name = name[: -len(_SUFFIX)]
    s = np.asarray(x, np.float64)
    a, b = float(alpha), float(beta)
    with np.errstate(all="ignore"):
        if name == "relu":
            return np.where(s > 0, s, a * s)
        if name == "tanh":
            return np.tanh(s)
        if name == "elu":
            return np.where(s > 0, s, a * np.expm1(s))
        if name == "square":
            return s * s
        if name == "abs":
            return np.abs(s)
        if name == "sqrt":
            return np.sqrt(s)
        if name == "linear":
            return a * s + b
        if name == "soft_relu":
            return _softplus(a * s) / a
        if name == "hardsigmoid":
            return np.clip(a * s + b, 0.0, 1.0)
        if name == "hardswish":
            return s * np.clip(a * s + b, 0.0, 1.0)
        if name == "logistic":
            return _sigmoid(s)
        if name == "exp":
            return np.exp(s)
        if name == "gelu_tanh":
            return 0.5 * s * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (s + 0.044715 * s**3)))
        if name == "gelu_erf":
            return 0.5 * s * (1.0 + _erf(s / math.sqrt(2.0)))
        if name == "swish":
            return s * _sigmoid(a * s)
        if name == "log":
            return np.log(s)
        if name in ("clip", "clip_v2"):
            return np.minimum(np.maximum(s, a), b)
        if name == "pow":
            return a * np.power(s, b)
        if name == "round":
            return np.rint(s)
        if name == "mish":
            return s * np.tanh(_softplus(s))
    raise invalid_arguments(f"eltwise reference: {alg!r} is not an eltwise algorithm")


def eltwise_backward(alg, diff_dst, v, alpha: float = 0.0, beta: float = 0.0) -> np.ndarray:
    """diff_src of eltwise ``alg`` (float64) from ``diff_dst`` and ``v``: src, or dst for the
    ``*_use_dst_for_bwd`` algorithms."""
    name = _name(alg)
    dd = np.asarray(diff_dst, np.float64)
    s = np.asarray(v, np.float64)
    a, b = float(alpha), float(beta)
    with np.errstate(all="ignore"):
        if name.endswith(_SUFFIX):
            d = s  # v is dst
            base = name[: -len(_SUFFIX)]
            if base == "relu":
                return np.where(d > 0, dd, a * dd)
            if base == "tanh":
                return dd * (1.0 - d * d)
            if base == "elu":
                return np.where(d > 0, dd, dd * (d + a))
            if base == "sqrt":
                return dd / (2.0 * d)
            if base == "logistic":
                return dd * d * (1.0 - d)
            if base == "exp":
                return dd * d
            if base == "clip_v2":
                return np.where((d > a) & (d < b), dd, 0.0)
        if name == "relu":
            return np.where(s > 0, dd, a * dd)
        if name == "tanh":
            return dd / np.cosh(s) ** 2
        if name == "elu":
            return np.where(s > 0, dd, dd * a * np.exp(s))
        if name == "square":
            return dd * 2.0 * s
        if name == "abs":
            return dd * np.sign(s)
        if name == "sqrt":
            return dd * 0.5 / np.sqrt(s)
        if name == "linear":
            return dd * a
        if name == "soft_relu":
            return dd * _sigmoid(a * s)
        if name == "hardsigmoid":
            u = a * s + b
            return np.where((u > 0) & (u < 1), dd * a, 0.0)
        if name == "hardswish":
            u = a * s + b
            return np.where(u >= 1, dd, np.where(u > 0, dd * (2.0 * a * s + b), 0.0))
        if name == "logistic":
            sg = _sigmoid(s)
            return dd * sg * (1.0 - sg)
        if name == "exp":
            return dd * np.exp(s)
        if name == "gelu_tanh":
            k = math.sqrt(2.0 / math.pi)
            t = np.tanh(k * (s + 0.044715 * s**3))
            dg = k * (1.0 + 3 * 0.044715 * s * s)
            return dd * (0.5 * (1.0 + t) + 0.5 * s * (1.0 - t * t) * dg)
        if name == "gelu_erf":
            cdf = 0.5 * (1.0 + _erf(s / math.sqrt(2.0)))
            pdf = np.exp(-0.5 * s * s) / math.sqrt(2.0 * math.pi)
            return dd * (cdf + s * pdf)
        if name == "swish":
            sg = _sigmoid(a * s)
            return dd * (sg + a * s * sg * (1.0 - sg))
        if name == "log":
            return dd / s
        if name == "clip":
            return np.where((s > a) & (s <= b), dd, 0.0)
        if name == "clip_v2":
            return np.where((s > a) & (s < b), dd, 0.0)
        if name == "pow":
            if b == 0.0:
                return np.zeros(np.broadcast(dd, s).shape)
            return dd * a * b * np.power(s, b - 1.0)
        if name == "mish":
            t = np.tanh(_softplus(s))
            return dd * (t + s * (1.0 - t * t) * _sigmoid(s))
        if name == "round":
            raise invalid_arguments("eltwise reference: round has no backward propagation")
    raise invalid_arguments(f"eltwise reference: {alg!r} is not an eltwise algorithm")
