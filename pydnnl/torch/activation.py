"""Activation modules on pydnnl's eltwise primitives, ``Softmax``/``LogSoftmax`` on its
softmax primitives.

``inplace=True`` is accepted for PyTorch compatibility and ignored: the result is always a
new tensor (the input is left as it was).
"""
from __future__ import annotations

import functools
import math
import warnings

import torch
from torch.autograd.function import once_differentiable

from .. import (
    ARG_DIFF_DST,
    ARG_DIFF_SRC,
    ARG_DST,
    ARG_SRC,
    algorithm,
    eltwise_backward,
    eltwise_forward,
    prop_kind,
    softmax_backward,
    softmax_forward,
)
from ..error import invalid_arguments
from . import _function as F

_A = algorithm
_USE_DST = (_A.eltwise_tanh_use_dst_for_bwd, _A.eltwise_logistic_use_dst_for_bwd)


class _EltwisePrims:
    def __init__(self, eng, alg, alpha: float, beta: float, n: int, training: bool):
        self.eng, self.alg, self.alpha, self.beta = eng, alg, alpha, beta
        self.md = F.desc((n,))
        prop = prop_kind.forward_training if training else prop_kind.forward_inference
        self.fwd_pd = eltwise_forward.primitive_desc(eng, prop, alg, self.md, self.md, alpha,
                                                     beta)
        self.fwd = eltwise_forward(self.fwd_pd)

    @functools.cached_property
    def bwd(self):
        pd = eltwise_backward.primitive_desc(self.eng, self.alg, self.md, self.md, self.md,
                                             self.alpha, self.beta, self.fwd_pd)
        return eltwise_backward(pd)


def _run_forward(p, x):
    """``p.fwd`` (an eltwise or softmax) on ``x``: the result tensor."""
    dst = F.output(x.shape, p.eng)
    F.execute(p.eng, p.fwd, {ARG_SRC: F.memory_of(x, p.eng), ARG_DST: dst[0]})
    return F.result(dst, x)


def _run_backward(p, arg, v, dy):
    """``p.bwd`` from ``dy`` and the saved forward tensor ``v`` (argument ``arg``)."""
    eng = p.eng
    out = F.output(v.shape, eng)
    F.execute(eng, p.bwd, {arg: F.memory_of(v, eng),
                           ARG_DIFF_DST: F.memory_of(dy.contiguous(), eng),
                           ARG_DIFF_SRC: out[0]})
    return F.result(out, dy)


class _EltwiseFn(torch.autograd.Function):
    """``y = f(x)`` on a flat tensor. ``above``: Softplus's threshold, ``(beta, threshold)``:
    where ``beta * x > threshold`` PyTorch returns ``x`` itself (and passes the gradient)."""

    @staticmethod
    def forward(ctx, p: _EltwisePrims, above, x):
        y = _run_forward(p, x)
        mask = None
        if above is not None:
            mask = x * above[0] > above[1]
            y = torch.where(mask, x, y)
        ctx.p, ctx.mask = p, mask
        ctx.save_for_backward(y if p.alg in _USE_DST else x)
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        p, (v,) = ctx.p, ctx.saved_tensors
        dx = _run_backward(p, ARG_DST if p.alg in _USE_DST else ARG_SRC, v, dy)
        if ctx.mask is not None:
            dx = torch.where(ctx.mask, dy, dx)
        return None, None, dx


class _Eltwise(F.PydnnlModule):
    """Forward of the activation modules: ``_alg()`` gives ``(algorithm, alpha, beta)``,
    the class's ``_fixed`` unless the module's arguments choose them."""

    _fixed: tuple = ()

    def _alg(self):
        return self._fixed

    def _above(self):
        return None

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        F.check_input(f"{F.who(self)}: input", input, ())
        alg, alpha, beta = self._alg()
        if input.numel() == 0:
            return F.empty_result(tuple(input.shape), input)
        x = input.reshape(-1)
        training = F.grad_needed(input)
        n = x.shape[0]
        p = self._prims((n, training, int(alg), alpha, beta), lambda eng: _EltwisePrims(
            eng, alg, alpha, beta, n, training))
        return F.apply(_EltwiseFn, training, p, self._above(), x).reshape(input.shape)


def _init(self, engine, cls, *args, **kw):
    super(cls, self).__init__(*args, **kw)
    self._pydnnl_init(engine)


class _Inplace(_Eltwise):
    """The activations whose only argument is ``inplace`` (accepted, ignored)."""

    def __init__(self, inplace: bool = False, *, engine=None):
        _init(self, engine, _Inplace, inplace)


class ReLU(_Inplace, torch.nn.ReLU):
    """``torch.nn.ReLU`` (eltwise_relu). Extra keyword: ``engine=``."""

    _fixed = (_A.eltwise_relu, 0.0, 0.0)


class LeakyReLU(_Eltwise, torch.nn.LeakyReLU):
    """``torch.nn.LeakyReLU`` (eltwise_relu, alpha = negative_slope). Extra keyword:
    ``engine=``."""

    def __init__(self, negative_slope: float = 1e-2, inplace: bool = False, *, engine=None):
        _init(self, engine, LeakyReLU, negative_slope, inplace)

    def _alg(self):
        return _A.eltwise_relu, float(self.negative_slope), 0.0


class ELU(_Eltwise, torch.nn.ELU):
    """``torch.nn.ELU`` (eltwise_elu). Extra keyword: ``engine=``."""

    def __init__(self, alpha: float = 1.0, inplace: bool = False, *, engine=None):
        _init(self, engine, ELU, alpha, inplace)

    def _alg(self):
        return _A.eltwise_elu, float(self.alpha), 0.0


class Tanh(_Eltwise, torch.nn.Tanh):
    """``torch.nn.Tanh`` (eltwise_tanh_use_dst_for_bwd). Extra keyword: ``engine=``."""

    def __init__(self, *, engine=None):
        _init(self, engine, Tanh)

    _fixed = (_A.eltwise_tanh_use_dst_for_bwd, 0.0, 0.0)


class Sigmoid(_Eltwise, torch.nn.Sigmoid):
    """``torch.nn.Sigmoid`` (eltwise_logistic_use_dst_for_bwd). Extra keyword: ``engine=``."""

    def __init__(self, *, engine=None):
        _init(self, engine, Sigmoid)

    _fixed = (_A.eltwise_logistic_use_dst_for_bwd, 0.0, 0.0)


class GELU(_Eltwise, torch.nn.GELU):
    """``torch.nn.GELU``: ``approximate='none'`` is eltwise_gelu_erf, ``'tanh'``
    eltwise_gelu_tanh. Extra keyword: ``engine=``."""

    def __init__(self, approximate: str = "none", *, engine=None):
        _check_gelu(approximate)
        _init(self, engine, GELU, approximate)

    def _alg(self):
        _check_gelu(self.approximate)
        alg = _A.eltwise_gelu_tanh if self.approximate == "tanh" else _A.eltwise_gelu_erf
        return alg, 0.0, 0.0


def _check_gelu(approximate):
    if approximate not in ("none", "tanh"):
        raise invalid_arguments(
            f"GELU: approximate: expected 'none' or 'tanh', got {approximate!r}")


class SiLU(_Inplace, torch.nn.SiLU):
    """``torch.nn.SiLU`` (eltwise_swish, alpha 1). Extra keyword: ``engine=``."""

    _fixed = (_A.eltwise_swish, 1.0, 0.0)


class Mish(_Inplace, torch.nn.Mish):
    """``torch.nn.Mish`` (eltwise_mish). Extra keyword: ``engine=``."""

    _fixed = (_A.eltwise_mish, 0.0, 0.0)


class Hardswish(_Inplace, torch.nn.Hardswish):
    """``torch.nn.Hardswish`` (eltwise_hardswish, alpha 1/6, beta 1/2). Extra keyword:
    ``engine=``."""

    _fixed = (_A.eltwise_hardswish, 1.0 / 6.0, 0.5)


class Hardsigmoid(_Inplace, torch.nn.Hardsigmoid):
    """``torch.nn.Hardsigmoid`` (eltwise_hardsigmoid, alpha 1/6, beta 1/2). Extra keyword:
    ``engine=``."""

    _fixed = (_A.eltwise_hardsigmoid, 1.0 / 6.0, 0.5)


class Softplus(_Eltwise, torch.nn.Softplus):
    """``torch.nn.Softplus`` (eltwise_soft_relu, alpha = beta); where ``beta * x >
    threshold`` the input is returned as is, as PyTorch does (a ``torch.where`` on the
    result). Extra keyword: ``engine=``."""

    def __init__(self, beta: float = 1.0, threshold: float = 20.0, *, engine=None):
        _check_softplus(beta, threshold)
        _init(self, engine, Softplus, beta, threshold)

    def _alg(self):
        _check_softplus(self.beta, self.threshold)
        return _A.eltwise_soft_relu, float(self.beta), 0.0

    def _above(self):
        return float(self.beta), float(self.threshold)


def _check_softplus(beta, threshold):
    if not isinstance(beta, (int, float)) or beta == 0 or not math.isfinite(beta):
        raise invalid_arguments(f"Softplus: beta: expected a finite non-zero number, got "
                                f"{beta!r}")
    if not isinstance(threshold, (int, float)):
        raise invalid_arguments(f"Softplus: threshold: expected a number, got {threshold!r}")


class Hardtanh(_Eltwise, torch.nn.Hardtanh):
    """``torch.nn.Hardtanh`` (eltwise_clip_v2 from min_val to max_val: the gradient passes
    strictly inside, as PyTorch's). Extra keyword: ``engine=``."""

    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False,
                 min_value=None, max_value=None, *, engine=None):
        lo = min_val if min_value is None else min_value
        hi = max_val if max_value is None else max_value
        _check_hardtanh(lo, hi)
        _init(self, engine, Hardtanh, min_val, max_val, inplace, min_value, max_value)

    def _alg(self):
        _check_hardtanh(self.min_val, self.max_val)
        return _A.eltwise_clip_v2, float(self.min_val), float(self.max_val)


def _check_hardtanh(lo, hi):
    if not hi > lo:
        raise invalid_arguments(
            f"Hardtanh: expected max_val > min_val, got min_val={lo!r}, max_val={hi!r}")


class ReLU6(Hardtanh, torch.nn.ReLU6):
    """``torch.nn.ReLU6`` (eltwise_clip_v2 from 0 to 6). Extra keyword: ``engine=``."""

    def __init__(self, inplace: bool = False, *, engine=None):
        torch.nn.ReLU6.__init__(self, inplace)
        self._pydnnl_init(engine)


class _SoftmaxPrims:
    def __init__(self, eng, alg, shape, training: bool):
        self.eng, self.alg = eng, alg
        self.md = F.desc(shape)
        prop = prop_kind.forward_training if training else prop_kind.forward_inference
        self.fwd_pd = softmax_forward.primitive_desc(eng, prop, alg, self.md, self.md, 1)
        self.fwd = softmax_forward(self.fwd_pd)

    @functools.cached_property
    def bwd(self):
        pd = softmax_backward.primitive_desc(self.eng, self.alg, self.md, self.md, self.md,
                                             1, self.fwd_pd)
        return softmax_backward(pd)


class _SoftmaxFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, p: _SoftmaxPrims, x):
        y = _run_forward(p, x)
        ctx.p = p
        ctx.save_for_backward(y)
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        p, (y,) = ctx.p, ctx.saved_tensors
        return None, _run_backward(p, ARG_DST, y, dy)


class _Softmax(F.PydnnlModule):
    _alg = _A.softmax_accurate

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        cls = F.who(self)
        F.check_input(f"{cls}: input", input, ())
        nd = input.dim()
        dim = self.dim
        if dim is None:  # PyTorch's legacy implicit choice, with its warning
            dim = 0 if nd in (0, 1, 3) else 1
            warnings.warn(f"Implicit dimension choice for {cls.lower()} has been deprecated. "
                          f"Change the call to include dim=X as an argument.", stacklevel=2)
        lo = -max(nd, 1)
        if not isinstance(dim, int) or not lo <= dim < max(nd, 1):
            raise invalid_arguments(
                f"{cls}: dim: expected an int in [{lo}, {max(nd, 1) - 1}] for an input of "
                f"{nd} dims, got {self.dim!r}")
        if input.numel() == 0:
            return F.empty_result(tuple(input.shape), input)
        dim %= max(nd, 1)
        shape = tuple(input.shape) or (1,)
        # the softmax axis between the folded dims before and after it
        folded = (math.prod(shape[:dim]), shape[dim], math.prod(shape[dim + 1:]))
        x = input.reshape(folded)
        training = F.grad_needed(input)
        p = self._prims((folded, training), lambda eng: _SoftmaxPrims(eng, self._alg, folded,
                                                                      training))
        return F.apply(_SoftmaxFn, training, p, x).reshape(input.shape)


class Softmax(_Softmax, torch.nn.Softmax):
    """``torch.nn.Softmax(dim)`` (softmax_accurate). Extra keyword: ``engine=``."""

    _alg = _A.softmax_accurate

    def __init__(self, dim=None, *, engine=None):
        _init(self, engine, Softmax, dim)


class LogSoftmax(_Softmax, torch.nn.LogSoftmax):
    """``torch.nn.LogSoftmax(dim)`` (softmax_log). Extra keyword: ``engine=``."""

    _alg = _A.softmax_log

    def __init__(self, dim=None, *, engine=None):
        _init(self, engine, LogSoftmax, dim)
