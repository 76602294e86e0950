"""``Linear`` on pydnnl's inner product primitives."""
from __future__ import annotations

import functools

import torch
from torch.autograd.function import once_differentiable

from .. import (
    ARG_BIAS,
    ARG_DIFF_BIAS,
    ARG_DIFF_DST,
    ARG_DIFF_SRC,
    ARG_DIFF_WEIGHTS,
    ARG_DST,
    ARG_SRC,
    ARG_WEIGHTS,
    inner_product_backward_data,
    inner_product_backward_weights,
    inner_product_forward,
    prop_kind,
)
from ..error import invalid_arguments
from . import _function as F


class _IPPrims:
    """Forward, backward-data and backward-weights inner products of one ``[N, K]`` input."""

    def __init__(self, eng, n: int, k: int, oc: int, bias: bool, training: bool):
        self.eng = eng
        self.src, self.wei, self.dst = F.desc((n, k)), F.desc((oc, k)), F.desc((n, oc))
        self.bias = F.desc((oc,)) if bias else None
        prop = prop_kind.forward_training if training else prop_kind.forward_inference
        self.fwd_pd = inner_product_forward.primitive_desc(eng, prop, self.src, self.wei,
                                                           self.bias, self.dst)
        self.fwd = inner_product_forward(self.fwd_pd)

    @functools.cached_property
    def bwd_data(self):
        pd = inner_product_backward_data.primitive_desc(self.eng, self.src, self.wei,
                                                        self.dst, self.fwd_pd)
        return inner_product_backward_data(pd)

    @functools.cached_property
    def bwd_weights(self):
        pd = inner_product_backward_weights.primitive_desc(
            self.eng, self.src, self.wei, self.bias, self.dst, self.fwd_pd)
        return inner_product_backward_weights(pd)


class _LinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, p: _IPPrims, x, weight, bias):
        eng = p.eng
        dst = F.output((x.shape[0], weight.shape[0]), eng)
        args = {ARG_SRC: F.memory_of(x, eng), ARG_WEIGHTS: F.memory_of(weight, eng),
                ARG_DST: dst[0]}
        if bias is not None:
            args[ARG_BIAS] = F.memory_of(bias, eng)
        F.execute(eng, p.fwd, args)
        ctx.p = p
        ctx.save_for_backward(x, weight, bias)
        return F.result(dst, x)

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        p, (x, weight, bias) = ctx.p, ctx.saved_tensors
        eng = p.eng
        dyc = dy.contiguous()
        dym = F.memory_of(dyc, eng)
        dx = dw = db = None
        if ctx.needs_input_grad[1]:
            out = F.output(x.shape, eng)
            F.execute(eng, p.bwd_data, {ARG_DIFF_DST: dym,
                                        ARG_WEIGHTS: F.memory_of(weight, eng),
                                        ARG_DIFF_SRC: out[0]})
            dx = F.result(out, x)
        if ctx.needs_input_grad[2] or (bias is not None and ctx.needs_input_grad[3]):
            wout = F.output(weight.shape, eng)
            args = {ARG_SRC: F.memory_of(x, eng), ARG_DIFF_DST: dym, ARG_DIFF_WEIGHTS: wout[0]}
            if bias is not None:
                bout = F.output(bias.shape, eng)
                args[ARG_DIFF_BIAS] = bout[0]
            F.execute(eng, p.bwd_weights, args)
            dw = F.result(wout, weight)
            if bias is not None:
                db = F.result(bout, bias)
        return None, dx, dw, db


class Linear(F.PydnnlModule, torch.nn.Linear):
    """``torch.nn.Linear`` computed by pydnnl's inner product (any leading dims).

    Same constructor, parameters, init and ``state_dict`` as ``torch.nn.Linear``, plus
    ``engine=`` (a pydnnl engine, ``"cpu"``/``"gpu"``, or None for the default engine).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None,
                 dtype=None, *, engine=None):
        super().__init__(in_features, out_features, bias, device, dtype)
        self._pydnnl_init(engine)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        name = f"{F.who(self)}: input"
        F.check_input(name, input, ())
        if input.dim() == 0 or input.shape[-1] != self.in_features:
            raise invalid_arguments(
                f"{name}: expected the last dim to be in_features={self.in_features}, got "
                f"shape {tuple(input.shape)}")
        F.check_param(f"{F.who(self)}: weight", self.weight,
                      (self.out_features, self.in_features))
        F.check_param(f"{F.who(self)}: bias", self.bias, (self.out_features,))
        lead = tuple(input.shape[:-1])
        x = input.reshape(-1, self.in_features)
        if x.numel() == 0:
            return F.empty_result(lead + (self.out_features,), input, self.weight, self.bias)
        training = F.grad_needed(input, self.weight, self.bias)
        n, has_bias = x.shape[0], self.bias is not None
        p = self._prims((n, training, has_bias), lambda eng: _IPPrims(
            eng, n, self.in_features, self.out_features, has_bias, training))
        y = F.apply(_LinearFn, training, p, x, self.weight, self.bias)
        return y.reshape(lead + (self.out_features,))
