"""``MaxPool2d`` and ``AvgPool2d`` on pydnnl's pooling primitives."""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as TF
from torch.autograd.function import once_differentiable

from .. import (
    ARG_DIFF_DST,
    ARG_DIFF_SRC,
    ARG_DST,
    ARG_SRC,
    ARG_WORKSPACE,
    algorithm,
    memory,
    pooling_backward,
    pooling_forward,
    prop_kind,
)
from ..error import invalid_arguments, unimplemented
from . import _function as F


class _PoolPrims:
    """Forward and (on demand) backward pooling of one input shape."""

    def __init__(self, eng, alg, src, dst, strides, kernel, dilation, pl, pr, training):
        self.eng, self.alg = eng, alg
        self.src, self.dst = F.desc(src), F.desc(dst)
        self.geom = dict(strides=list(strides), kernel=list(kernel), dilation=list(dilation),
                         padding_l=list(pl), padding_r=list(pr))
        prop = prop_kind.forward_training if training else prop_kind.forward_inference
        self.fwd_pd = pooling_forward.primitive_desc(eng, prop, alg, self.src, self.dst,
                                                     **self.geom)
        self.fwd = pooling_forward(self.fwd_pd)

    @functools.cached_property
    def bwd(self):
        pd = pooling_backward.primitive_desc(self.eng, self.alg, self.src, self.dst,
                                             hint_fwd_pd=self.fwd_pd, **self.geom)
        return pooling_backward(pd)


class _PoolFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, p: _PoolPrims, x):
        eng = p.eng
        dst = F.output(p.dst.get_dims(), eng)
        args = {ARG_SRC: F.memory_of(x, eng), ARG_DST: dst[0]}
        ws_desc = p.fwd_pd.workspace_desc()
        ws = None if ws_desc.is_zero() else memory(ws_desc, eng)
        if ws is not None:  # max pooling in training: the winners, for the backward
            args[ARG_WORKSPACE] = ws
        F.execute(eng, p.fwd, args)
        ctx.p, ctx.ws = p, ws
        return F.result(dst, x)

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        p, eng = ctx.p, ctx.p.eng
        out = F.output(p.src.get_dims(), eng)
        args = {ARG_DIFF_DST: F.memory_of(dy.contiguous(), eng), ARG_DIFF_SRC: out[0]}
        if ctx.ws is not None:
            args[ARG_WORKSPACE] = ctx.ws
        F.execute(eng, p.bwd, args)
        return None, F.result(out, dy)


def _out_size(i, k, s, p, d, ceil_mode):
    """PyTorch's pooling output size (``pooling_output_shape``)."""
    ext = d * (k - 1) + 1
    num = i + 2 * p - ext + ((s - 1) if ceil_mode else 0)
    o = num // s + 1
    if ceil_mode and (o - 1) * s >= i + p:  # the last window must start inside
        o -= 1
    return o


class _Pool2d(F.PydnnlModule):
    def _check_args(self, cls, dilation):
        k = F.tuple_of(f"{cls}: kernel_size", self.kernel_size, 2, 1)
        s = F.tuple_of(f"{cls}: stride", self.stride if self.stride not in (None, [], ())
                       else self.kernel_size, 2, 1)
        p = F.tuple_of(f"{cls}: padding", self.padding, 2, 0)
        d = F.tuple_of(f"{cls}: dilation", dilation, 2, 1)
        for i in range(2):
            if p[i] > k[i] // 2:
                raise invalid_arguments(
                    f"{cls}: padding: expected at most half the kernel size (as in PyTorch), "
                    f"got padding={self.padding!r} for kernel_size={self.kernel_size!r}")
        return k, s, p, d

    def _pool(self, input, alg, k, s, p, d, pad_first=False):
        """Pool ``input`` (``[N, C, H, W]`` or ``[C, H, W]``) with PyTorch's geometry."""
        cls = F.who(self)
        F.check_input(f"{cls}: input", input, (3, 4))
        x = input.unsqueeze(0) if input.dim() == 3 else input
        out = F.output_sizes(cls, input, [
            _out_size(x.shape[2 + i], k[i], s[i], p[i], d[i], self.ceil_mode) for i in range(2)])
        pl = list(p)
        pr = [(out[i] - 1) * s[i] + d[i] * (k[i] - 1) + 1 - x.shape[2 + i] - p[i]
              for i in range(2)]
        if pad_first:  # zero padding pooled as data (see AvgPool2d.forward)
            x = TF.pad(x, [p[1], p[1], p[0], p[0]])
            pr = [pr[i] - p[i] for i in range(2)]
            pl = [0, 0]
        dst = (x.shape[0], x.shape[1]) + tuple(out)
        if x.numel() == 0:
            y = F.empty_result(dst, x)
        else:
            training = F.grad_needed(x)
            key = (tuple(x.shape), training, int(alg), tuple(pl), tuple(pr))
            prm = self._prims(key, lambda eng: _PoolPrims(
                eng, alg, tuple(x.shape), dst, s, k, [v - 1 for v in d], pl, pr, training))
            y = F.apply(_PoolFn, training, prm, x)
        return y.squeeze(0) if input.dim() == 3 else y


class MaxPool2d(_Pool2d, torch.nn.MaxPool2d):
    """``torch.nn.MaxPool2d`` on pydnnl's max pooling (the backward reads the forward's
    workspace). ``return_indices=True`` raises ``pydnnl.unimplemented``. Extra keyword:
    ``engine=``."""

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False,
                 ceil_mode=False, *, engine=None):
        if return_indices:
            raise unimplemented(
                "MaxPool2d: return_indices: expected False, got True (pydnnl's workspace "
                "holds window positions, not PyTorch's flat indices)")
        super().__init__(kernel_size, stride, padding, dilation, return_indices, ceil_mode)
        self._check_args("MaxPool2d", dilation)
        self._pydnnl_init(engine)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        cls = F.who(self)
        if self.return_indices:  # set after construction
            raise unimplemented(f"{cls}: return_indices: expected False, got True")
        k, s, p, d = self._check_args(cls, self.dilation)
        return self._pool(input, algorithm.pooling_max, k, s, p, d)


class AvgPool2d(_Pool2d, torch.nn.AvgPool2d):
    """``torch.nn.AvgPool2d`` on pydnnl's average pooling. ``divisor_override`` other than
    None raises ``pydnnl.unimplemented``. Extra keyword: ``engine=``."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False,
                 count_include_pad=True, divisor_override=None, *, engine=None):
        if divisor_override is not None:
            raise unimplemented(
                f"AvgPool2d: divisor_override: expected None, got {divisor_override!r}")
        super().__init__(kernel_size, stride, padding, ceil_mode, count_include_pad,
                         divisor_override)
        self._check_args("AvgPool2d", 1)
        self._pydnnl_init(engine)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        cls = F.who(self)
        if self.divisor_override is not None:
            raise unimplemented(
                f"{cls}: divisor_override: expected None, got {self.divisor_override!r}")
        k, s, p, d = self._check_args(cls, 1)
        F.check_input(f"{cls}: input", input, (3, 4))
        if not self.count_include_pad:
            return self._pool(input, algorithm.pooling_avg_exclude_padding, k, s, p, d)
        x = input.unsqueeze(0) if input.dim() == 3 else input
        beyond = any(
            (_out_size(x.shape[2 + i], k[i], s[i], p[i], 1, self.ceil_mode) - 1) * s[i]
            + k[i] > x.shape[2 + i] + 2 * p[i] for i in range(2))
        if not beyond:
            return self._pool(input, algorithm.pooling_avg_include_padding, k, s, p, d)
        # A ceil_mode window reaching past the right padding: PyTorch divides by its part
        # inside the padded input, which is what excluding the padding gives once the
        # padding zeros are part of the data.
        return self._pool(input, algorithm.pooling_avg_exclude_padding, k, s, p, d,
                          pad_first=True)
