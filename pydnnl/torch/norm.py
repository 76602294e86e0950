"""``BatchNorm1d/2d/3d`` and ``LayerNorm`` on pydnnl's normalization primitives."""
from __future__ import annotations

import math

import torch
from torch.autograd.function import once_differentiable

from .. import (
    ARG_DIFF_DST,
    ARG_DIFF_SCALE,
    ARG_DIFF_SHIFT,
    ARG_DIFF_SRC,
    ARG_DST,
    ARG_MEAN,
    ARG_SCALE,
    ARG_SHIFT,
    ARG_SRC,
    ARG_VARIANCE,
    batch_normalization_backward,
    batch_normalization_forward,
    layer_normalization_backward,
    layer_normalization_forward,
    normalization_flags,
    prop_kind,
)
from ..error import invalid_arguments
from . import _function as F

_FL = normalization_flags


class _NormPrims:
    """Forward and (on demand) backward normalization primitives of one input shape."""

    def __init__(self, eng, layer: bool, shape, eps: float, flags, training: bool):
        self.eng, self.layer, self.eps, self.flags = eng, layer, float(eps), flags
        self.md = F.desc(shape)
        prop = prop_kind.forward_training if training else prop_kind.forward_inference
        if layer:
            self.stat = F.desc(shape[:-1])
            self.fwd_pd = layer_normalization_forward.primitive_desc(
                eng, prop, self.md, self.md, self.stat, self.eps, flags)
            self.fwd = layer_normalization_forward(self.fwd_pd)
        else:
            self.fwd_pd = batch_normalization_forward.primitive_desc(
                eng, prop, self.md, self.md, self.eps, flags)
            self.fwd = batch_normalization_forward(self.fwd_pd)
        self._bwd = {}

    def bwd(self, full: bool):
        """``backward`` (with scale/shift gradients) when ``full``, else ``backward_data``."""
        b = self._bwd.get(full)
        if b is None:
            prop = prop_kind.backward if full else prop_kind.backward_data
            if self.layer:
                pd = layer_normalization_backward.primitive_desc(
                    self.eng, prop, self.md, self.md, self.md, self.stat, self.eps,
                    self.flags, self.fwd_pd)
                b = self._bwd[full] = layer_normalization_backward(pd)
            else:
                pd = batch_normalization_backward.primitive_desc(
                    self.eng, prop, self.md, self.md, self.md, self.eps, self.flags,
                    self.fwd_pd)
                b = self._bwd[full] = batch_normalization_backward(pd)
        return b


class _NormFn(torch.autograd.Function):
    """``y = norm(x) * scale + shift``; ``mean``/``var`` are inputs when the flags say
    ``use_global_stats``, else (training) outputs stored in ``stats``."""

    @staticmethod
    def forward(ctx, p: _NormPrims, stats: dict, x, scale, shift, mean, var):
        eng = p.eng
        dst = F.output(x.shape, eng)
        args = {ARG_SRC: F.memory_of(x, eng), ARG_DST: dst[0]}
        if scale is not None:
            args[ARG_SCALE] = F.memory_of(scale, eng)
        if shift is not None:
            args[ARG_SHIFT] = F.memory_of(shift, eng)
        outs = None
        if mean is not None:
            args[ARG_MEAN], args[ARG_VARIANCE] = F.memory_of(mean, eng), F.memory_of(var, eng)
        elif p.fwd_pd.get_prop_kind() == prop_kind.forward_training:
            sdims = p.fwd_pd.mean_desc().get_dims()
            outs = F.output(sdims, eng), F.output(sdims, eng)
            args[ARG_MEAN], args[ARG_VARIANCE] = outs[0][0], outs[1][0]
        F.execute(eng, p.fwd, args)
        y = F.result(dst, x)
        if outs is not None:
            mean, var = F.result(outs[0], x), F.result(outs[1], x)
            stats["mean"], stats["var"] = mean, var
        ctx.p = p
        ctx.save_for_backward(x, scale, mean, var)
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        p, (x, scale, mean, var) = ctx.p, ctx.saved_tensors
        eng = p.eng
        need = ctx.needs_input_grad
        full = scale is not None and (need[3] or need[4])
        bwd = p.bwd(full)
        dx = F.output(x.shape, eng)
        args = {ARG_SRC: F.memory_of(x, eng), ARG_MEAN: F.memory_of(mean, eng),
                ARG_VARIANCE: F.memory_of(var, eng),
                ARG_DIFF_DST: F.memory_of(dy.contiguous(), eng), ARG_DIFF_SRC: dx[0]}
        if scale is not None:
            args[ARG_SCALE] = F.memory_of(scale, eng)
        ds = dh = None
        if full:
            ds = F.output(scale.shape, eng)
            args[ARG_DIFF_SCALE] = ds[0]
            if p.flags & _FL.use_shift:
                dh = F.output(scale.shape, eng)
                args[ARG_DIFF_SHIFT] = dh[0]
        F.execute(eng, bwd, args)
        dx = F.result(dx, x)
        ds = F.result(ds, scale) if ds is not None and need[3] else None
        dh = F.result(dh, scale) if dh is not None and need[4] else None
        return None, None, dx if need[2] else None, ds, dh, None, None


class _BatchNorm(F.PydnnlModule):
    """Constructor and forward of the batch normalization modules, with PyTorch's
    running-stat rules."""

    _dims: tuple[int, ...] = (4,)

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, device=None, dtype=None, *, engine=None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device,
                         dtype)
        self._pydnnl_init(engine)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        cls = F.who(self)
        F.check_input(f"{cls}: input", input, self._dims)
        C = self.num_features
        if input.shape[1] != C:
            raise invalid_arguments(
                f"{cls}: input: expected num_features={C} channels in dim 1, got shape "
                f"{tuple(input.shape)}")
        affine = self.weight is not None
        F.check_param(f"{cls}: weight", self.weight, (C,))
        F.check_param(f"{cls}: bias", self.bias, (C,))
        batch_stats = self.training or (self.running_mean is None and self.running_var is None)
        per_channel = input.numel() // C
        if batch_stats and per_channel == 1:
            raise invalid_arguments(
                f"{cls}: input: expected more than 1 value per channel for batch statistics, "
                f"got shape {tuple(input.shape)}")
        if input.numel() == 0:
            return F.empty_result(tuple(input.shape), input, self.weight, self.bias)
        if not batch_stats:
            F.check_param(f"{cls}: running_mean", self.running_mean, (C,))
            F.check_param(f"{cls}: running_var", self.running_var, (C,))
        # PyTorch's rules (torch.nn.modules.batchnorm._BatchNorm.forward)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # cumulative moving average
                factor = 1.0 / float(self.num_batches_tracked)
        update = batch_stats and self.training and self.running_mean is not None
        x = input
        flags = _FL.none
        if affine:
            flags |= _FL.use_scale | _FL.use_shift
        if not batch_stats:
            flags |= _FL.use_global_stats
        grad = F.grad_needed(input, self.weight, self.bias)
        training = grad or update
        key = (tuple(x.shape), training, int(flags), float(self.eps))
        p = self._prims(key, lambda eng: _NormPrims(eng, False, tuple(x.shape), self.eps,
                                                    flags, training))
        stats = {}
        mean = var = None
        if not batch_stats:
            # copies: a later training step updates the buffers in place
            mean, var = self.running_mean.detach().clone(), self.running_var.detach().clone()
        y = _NormFn.apply(p, stats, x, self.weight, self.bias, mean, var)
        if update:
            with torch.no_grad():
                n = per_channel
                unbiased = stats["var"] * (n / (n - 1))
                self.running_mean.mul_(1 - factor).add_(
                    stats["mean"].to(self.running_mean.device), alpha=factor)
                self.running_var.mul_(1 - factor).add_(
                    unbiased.to(self.running_var.device), alpha=factor)
        return y


class BatchNorm1d(_BatchNorm, torch.nn.BatchNorm1d):
    """``torch.nn.BatchNorm1d`` (``[N, C]`` or ``[N, C, L]``) on pydnnl's batch
    normalization. Extra keyword: ``engine=``."""

    _dims = (2, 3)


class BatchNorm2d(_BatchNorm, torch.nn.BatchNorm2d):
    """``torch.nn.BatchNorm2d`` on pydnnl's batch normalization: batch statistics computed
    by the primitive in training, the running ones (``use_global_stats``) in eval. Extra
    keyword: ``engine=``."""

    _dims = (4,)


class BatchNorm3d(_BatchNorm, torch.nn.BatchNorm3d):
    """``torch.nn.BatchNorm3d`` on pydnnl's batch normalization. Extra keyword:
    ``engine=``."""

    _dims = (5,)


class LayerNorm(F.PydnnlModule, torch.nn.LayerNorm):
    """``torch.nn.LayerNorm`` on pydnnl's layer normalization: the ``normalized_shape``
    trailing dims are flattened into one. Extra keyword: ``engine=``."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True,
                 device=None, dtype=None, *, engine=None):
        shape = ((normalized_shape,) if isinstance(normalized_shape, int)
                 else tuple(normalized_shape))
        if not shape or not all(isinstance(d, int) and d > 0 for d in shape):
            raise invalid_arguments(
                f"LayerNorm: normalized_shape: expected a positive int or a non-empty tuple "
                f"of them, got {normalized_shape!r}")
        super().__init__(normalized_shape, eps, elementwise_affine, bias, device, dtype)
        self._pydnnl_init(engine)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        cls, ns = F.who(self), tuple(self.normalized_shape)
        F.check_input(f"{cls}: input", input, ())
        k = len(ns)
        if input.dim() < k or tuple(input.shape[input.dim() - k:]) != ns:
            raise invalid_arguments(
                f"{cls}: input: expected trailing dims normalized_shape={ns}, got shape "
                f"{tuple(input.shape)}")
        F.check_param(f"{cls}: weight", self.weight, ns)
        F.check_param(f"{cls}: bias", self.bias, ns)
        if input.numel() == 0:
            return F.empty_result(tuple(input.shape), input, self.weight, self.bias)
        C = math.prod(ns)
        x = input.reshape(-1, C)
        scale = None if self.weight is None else self.weight.reshape(C)
        shift = None if self.bias is None else self.bias.reshape(C)
        flags = _FL.none
        if scale is not None:
            flags |= _FL.use_scale
        if shift is not None:
            flags |= _FL.use_shift
        training = F.grad_needed(input, self.weight, self.bias)
        key = (tuple(x.shape), training, int(flags), float(self.eps))
        p = self._prims(key, lambda eng: _NormPrims(eng, True, tuple(x.shape), self.eps,
                                                    flags, training))
        y = _NormFn.apply(p, {}, x, scale, shift, None, None)
        return y.reshape(input.shape)
