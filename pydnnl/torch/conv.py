"""``Conv1d``/``Conv2d``/``Conv3d`` and ``ConvTranspose2d`` on pydnnl's convolution and
deconvolution primitives."""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as TF
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
    algorithm,
    convolution_backward_data,
    convolution_backward_weights,
    convolution_forward,
    deconvolution_backward_data,
    deconvolution_backward_weights,
    deconvolution_forward,
    prop_kind,
)
from ..error import invalid_arguments, unimplemented
from . import _function as F

_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


class _ConvPrims:
    """The three (de)convolution primitives of one problem; backward ones built on demand."""

    def __init__(self, eng, deconv: bool, src, wshape, wstrides, bias: bool, dst,
                 strides, dilates, pl, pr, training: bool):
        self.eng, self.deconv = eng, deconv
        self.src, self.dst = F.desc(src), F.desc(dst)
        # deconvolution weights are a permuted view of PyTorch's [IC, OC/G, k...]
        self.wei = F.desc(wshape, wstrides)
        self.bias = F.desc((dst[1],)) if bias else None
        self.geom = dict(strides=list(strides), dilates=list(dilates),
                         padding_l=list(pl), padding_r=list(pr))
        fwd = deconvolution_forward if deconv else convolution_forward
        prop = prop_kind.forward_training if training else prop_kind.forward_inference
        self.fwd_pd = fwd.primitive_desc(
            eng, prop, algorithm.convolution_auto, src_desc=self.src, weights_desc=self.wei,
            bias_desc=self.bias, dst_desc=self.dst, **self.geom)
        self.fwd = fwd(self.fwd_pd)

    @functools.cached_property
    def bwd_data(self):
        cls = deconvolution_backward_data if self.deconv else convolution_backward_data
        pd = cls.primitive_desc(self.eng, algorithm.convolution_auto,
                                diff_src_desc=self.src, weights_desc=self.wei,
                                diff_dst_desc=self.dst, hint_fwd_pd=self.fwd_pd,
                                **self.geom)
        return cls(pd)

    @functools.cached_property
    def bwd_weights(self):
        cls = (deconvolution_backward_weights if self.deconv
               else convolution_backward_weights)
        pd = cls.primitive_desc(self.eng, algorithm.convolution_auto, src_desc=self.src,
                                diff_weights_desc=self.wei, diff_bias_desc=self.bias,
                                diff_dst_desc=self.dst, hint_fwd_pd=self.fwd_pd,
                                **self.geom)
        return cls(pd)


class _ConvFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, p: _ConvPrims, view, x, weight, bias):
        eng = p.eng
        dst = F.output(p.dst.get_dims(), eng)
        args = {ARG_SRC: F.memory_of(x, eng),
                ARG_WEIGHTS: F.view_memory(weight, view, eng), ARG_DST: dst[0]}
        if bias is not None:
            args[ARG_BIAS] = F.memory_of(bias, eng)
        F.execute(eng, p.fwd, args)
        ctx.p, ctx.view = p, view
        ctx.save_for_backward(x, weight, bias)
        return F.result(dst, x)

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        p, view, (x, weight, bias) = ctx.p, ctx.view, ctx.saved_tensors
        eng = p.eng
        dym = F.memory_of(dy.contiguous(), eng)
        dx = dw = db = None
        if ctx.needs_input_grad[2]:
            out = F.output(x.shape, eng)
            F.execute(eng, p.bwd_data, {
                ARG_DIFF_DST: dym, ARG_WEIGHTS: F.view_memory(weight, view, eng),
                ARG_DIFF_SRC: out[0]})
            dx = F.result(out, x)
        if ctx.needs_input_grad[3] or (bias is not None and ctx.needs_input_grad[4]):
            wm, wout = F.output_view(weight.shape, view, eng)
            args = {ARG_SRC: F.memory_of(x, eng), ARG_DIFF_DST: dym, ARG_DIFF_WEIGHTS: wm}
            if bias is not None:
                bout = F.output(bias.shape, eng)
                args[ARG_DIFF_BIAS] = bout[0]
            F.execute(eng, p.bwd_weights, args)
            dw = F.result(wout, weight)
            if bias is not None:
                db = F.result(bout, bias)
        return None, None, dx, dw, db


def _check_common(cls: str, nd: int, in_channels, out_channels, kernel_size, stride, padding,
                  dilation, groups, padding_mode, transposed: bool):
    """Validate the constructor arguments PyTorch would reject, with pydnnl errors."""
    for name, v in (("in_channels", in_channels), ("out_channels", out_channels),
                    ("groups", groups)):
        if not isinstance(v, int) or v <= 0:
            raise invalid_arguments(f"{cls}: {name}: expected a positive int, got {v!r}")
    if in_channels % groups or out_channels % groups:
        raise invalid_arguments(
            f"{cls}: in_channels={in_channels} and out_channels={out_channels} must both be "
            f"divisible by groups={groups}")
    F.tuple_of(f"{cls}: kernel_size", kernel_size, nd, 1)
    s = F.tuple_of(f"{cls}: stride", stride, nd, 1)
    F.tuple_of(f"{cls}: dilation", dilation, nd, 1)
    if padding_mode not in _PADDING_MODES:
        raise invalid_arguments(
            f"{cls}: padding_mode: expected one of {_PADDING_MODES}, got {padding_mode!r}")
    if transposed:
        if padding_mode != "zeros":
            raise invalid_arguments(
                f"{cls}: padding_mode: expected 'zeros' (PyTorch's only mode for transposed "
                f"convolutions), got {padding_mode!r}")
        F.tuple_of(f"{cls}: padding", padding, nd, 0)
        return
    if isinstance(padding, str):
        if padding not in ("same", "valid"):
            raise invalid_arguments(
                f"{cls}: padding: expected an int, a tuple, 'same' or 'valid', got {padding!r}")
        if padding == "same" and any(v != 1 for v in s):
            raise invalid_arguments(
                f"{cls}: padding='same' needs stride 1 (as in PyTorch), got stride={stride!r}")
    else:
        F.tuple_of(f"{cls}: padding", padding, nd, 0)


class _ConvNd(F.PydnnlModule):
    """Constructor and forward of the convolution modules (``_nd`` spatial dims)."""

    _nd = 2

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 dilation=1, groups=1, bias=True, padding_mode="zeros", device=None,
                 dtype=None, *, engine=None):
        _check_common(F.who(self), self._nd, in_channels, out_channels, kernel_size, stride,
                      padding, dilation, groups, padding_mode, False)
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, device, dtype)
        self._pydnnl_init(engine)

    def _geometry(self):
        """``(padding_l, padding_r)`` of the convolution, before any explicit padding."""
        k, d = self.kernel_size, self.dilation
        if self.padding == "valid":
            return (0,) * self._nd, (0,) * self._nd
        if self.padding == "same":
            total = [d[i] * (k[i] - 1) for i in range(self._nd)]
            pl = tuple(t // 2 for t in total)
            return pl, tuple(t - a for t, a in zip(total, pl))
        return tuple(self.padding), tuple(self.padding)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        cls, nd = F.who(self), self._nd
        F.check_input(f"{cls}: input", input, (nd + 1, nd + 2))
        x = input.unsqueeze(0) if input.dim() == nd + 1 else input
        if x.shape[1] != self.in_channels:
            raise invalid_arguments(
                f"{cls}: input: expected {self.in_channels} channels (dim 1 of a batch, dim 0 "
                f"of one image), got shape {tuple(input.shape)}")
        wshape = (self.out_channels, self.in_channels // self.groups) + self.kernel_size
        F.check_param(f"{cls}: weight", self.weight, wshape)
        F.check_param(f"{cls}: bias", self.bias, (self.out_channels,))
        pl, pr = self._geometry()
        if self.padding_mode != "zeros":
            # PyTorch's non-zero padding modes: pad explicitly, then convolve unpadded
            for i in range(nd):
                if self.padding_mode == "reflect" and max(pl[i], pr[i]) >= x.shape[2 + i]:
                    raise invalid_arguments(
                        f"{cls}: padding_mode='reflect' needs padding < the input size, got "
                        f"padding {pl[i]},{pr[i]} for size {x.shape[2 + i]} of dim {2 + i}")
            pads = [v for i in reversed(range(nd)) for v in (pl[i], pr[i])]
            x = TF.pad(x, pads, mode=self.padding_mode)
            pl = pr = (0,) * nd
        out = self._out_size(x, pl, pr)
        if x.numel() == 0:
            return F.empty_result((x.shape[0], self.out_channels) + out, x, self.weight,
                                  self.bias).reshape(self._unbatch(input, out))
        training = F.grad_needed(x, self.weight, self.bias)
        g, has_bias = self.groups, self.bias is not None
        wdims = (((g, self.out_channels // g) + wshape[1:]) if g > 1 else wshape)
        view = _ConvView(wdims)
        dst = (x.shape[0], self.out_channels) + out
        key = (tuple(x.shape), training, has_bias, pl, pr)
        p = self._prims(key, lambda eng: _ConvPrims(
            eng, False, tuple(x.shape), wdims, None, has_bias, dst, self.stride,
            tuple(v - 1 for v in self.dilation), pl, pr, training))
        y = F.apply(_ConvFn, training, p, view, x, self.weight, self.bias)
        return y.reshape(self._unbatch(input, out))

    def _unbatch(self, input, out):
        lead = () if input.dim() == self._nd + 1 else (input.shape[0],)
        return lead + (self.out_channels,) + out

    def _out_size(self, x, pl, pr):
        out = []
        for i in range(self._nd):
            ext = self.dilation[i] * (self.kernel_size[i] - 1) + 1
            span = x.shape[2 + i] + pl[i] + pr[i] - ext
            if span < 0:
                raise invalid_arguments(
                    f"{F.who(self)}: input: spatial dim {2 + i} of size {x.shape[2 + i]} "
                    f"(padded {pl[i]}+{pr[i]}) is smaller than the dilated kernel's extent "
                    f"{ext}; got input shape {tuple(x.shape)}")
            out.append(span // self.stride[i] + 1)
        return tuple(out)


class _ConvView:
    """The logical pydnnl weights view of a PyTorch convolution weight (no data moved)."""

    def __init__(self, dims):
        self.dims = dims

    def __call__(self, w):
        return w.reshape(self.dims)


class _DeconvView:
    """PyTorch's ``[IC, OC/G, k...]`` as pydnnl's ``[OC, IC, k...]`` / ``[G, OC/G, IC/G,
    k...]`` (a transpose of the first dims)."""

    def __init__(self, groups: int):
        self.g = groups

    def __call__(self, w):
        if self.g == 1:
            return w.transpose(0, 1)
        icg = w.shape[0] // self.g
        return w.reshape((self.g, icg) + tuple(w.shape[1:])).transpose(1, 2)


class Conv1d(_ConvNd, torch.nn.Conv1d):
    """``torch.nn.Conv1d`` on pydnnl's convolution; non-zero ``padding_mode`` pads with
    ``torch.nn.functional.pad`` first. Extra keyword: ``engine=``."""

    _nd = 1


class Conv2d(_ConvNd, torch.nn.Conv2d):
    """``torch.nn.Conv2d`` on pydnnl's convolution; non-zero ``padding_mode`` pads with
    ``torch.nn.functional.pad`` first. Extra keyword: ``engine=``."""

    _nd = 2


class Conv3d(_ConvNd, torch.nn.Conv3d):
    """``torch.nn.Conv3d`` on pydnnl's convolution; non-zero ``padding_mode`` pads with
    ``torch.nn.functional.pad`` first. Extra keyword: ``engine=``."""

    _nd = 3


class ConvTranspose2d(F.PydnnlModule, torch.nn.ConvTranspose2d):
    """``torch.nn.ConvTranspose2d`` on pydnnl's deconvolution (``forward(input,
    output_size=None)`` as PyTorch's). Extra keyword: ``engine=``."""

    _nd = 2

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 output_padding=0, groups=1, bias=True, dilation=1, padding_mode="zeros",
                 device=None, dtype=None, *, engine=None):
        cls = "ConvTranspose2d"
        _check_common(cls, 2, in_channels, out_channels, kernel_size, stride, padding,
                      dilation, groups, padding_mode, True)
        op = F.tuple_of(f"{cls}: output_padding", output_padding, 2, 0)
        s = F.tuple_of(f"{cls}: stride", stride, 2, 1)
        d = F.tuple_of(f"{cls}: dilation", dilation, 2, 1)
        for i in range(2):
            if op[i] >= max(s[i], d[i]):
                raise invalid_arguments(
                    f"{cls}: output_padding: expected values smaller than the stride or the "
                    f"dilation (as in PyTorch), got output_padding={output_padding!r} with "
                    f"stride={stride!r}, dilation={dilation!r}")
        super().__init__(in_channels, out_channels, kernel_size, stride, padding,
                         output_padding, groups, bias, dilation, padding_mode, device, dtype)
        self._pydnnl_init(engine)

    def _out_padding(self, x, output_size):
        if output_size is None:
            return tuple(self.output_padding)
        size = list(output_size)
        if len(size) == 4:
            size = size[2:]
        elif len(size) == 3:
            size = size[1:]
        if len(size) != 2:
            raise invalid_arguments(
                f"{F.who(self)}: output_size: expected 2 spatial sizes (or a full shape), got "
                f"{output_size!r}")
        op = []
        for i in range(2):
            least = ((x.shape[2 + i] - 1) * self.stride[i] - 2 * self.padding[i]
                     + self.dilation[i] * (self.kernel_size[i] - 1) + 1)
            if not least <= size[i] < least + self.stride[i]:
                raise invalid_arguments(
                    f"{F.who(self)}: output_size: dim {i} must be in [{least}, "
                    f"{least + self.stride[i] - 1}] for input shape {tuple(x.shape)}, got "
                    f"{size[i]}")
            op.append(size[i] - least)
        return tuple(op)

    def forward(self, input: torch.Tensor, output_size=None) -> torch.Tensor:
        cls = F.who(self)
        F.check_input(f"{cls}: input", input, (3, 4))
        x = input.unsqueeze(0) if input.dim() == 3 else input
        if x.shape[1] != self.in_channels:
            raise invalid_arguments(
                f"{cls}: input: expected {self.in_channels} channels (dim 1 of a batch, dim 0 "
                f"of one image), got shape {tuple(input.shape)}")
        g = self.groups
        wshape = (self.in_channels, self.out_channels // g) + tuple(self.kernel_size)
        F.check_param(f"{cls}: weight", self.weight, wshape)
        F.check_param(f"{cls}: bias", self.bias, (self.out_channels,))
        op = self._out_padding(x, output_size)
        pl = tuple(self.padding)
        pr = tuple(pl[i] - op[i] for i in range(2))  # output_padding: a smaller padding_r
        out = F.output_sizes(cls, input, [
            (x.shape[2 + i] - 1) * self.stride[i] - pl[i] - pr[i]
            + self.dilation[i] * (self.kernel_size[i] - 1) + 1 for i in range(2)])
        lead = () if input.dim() == 3 else (input.shape[0],)
        if x.numel() == 0:
            return F.empty_result((x.shape[0], self.out_channels) + out, x, self.weight,
                                  self.bias).reshape(lead + (self.out_channels,) + out)
        if self.padding_mode != "zeros":  # changed after construction
            raise unimplemented(
                f"{cls}: padding_mode: only 'zeros' is implemented, got {self.padding_mode!r}")
        training = F.grad_needed(x, self.weight, self.bias)
        has_bias = self.bias is not None
        view = _DeconvView(g)
        v = view(torch.empty(wshape, device="meta"))
        dst = (x.shape[0], self.out_channels) + out
        key = (tuple(x.shape), training, has_bias, pl, pr)
        p = self._prims(key, lambda eng: _ConvPrims(
            eng, True, tuple(x.shape), tuple(v.shape), tuple(v.stride()), has_bias, dst,
            self.stride, tuple(d - 1 for d in self.dilation), pl, pr, training))
        y = F.apply(_ConvFn, training, p, view, x, self.weight, self.bias)
        return y.reshape(lead + (self.out_channels,) + out)
