"""Convolution and deconvolution shapes: the problem types (:class:`ConvGeometry`, the validated
sizes; :class:`ConvProblem`, one direction with layouts, what solvers and kernels take), output
sizes, validation, MIOpen's output-dim query.

Two dilation conventions meet here:

* oneDNN counts dilation from 0: ``d = 0`` is a dense kernel and the kernel covers
  ``(k - 1) * (d + 1) + 1`` input points (its *extent*). Every oneDNN-style function in this
  module (:func:`conv_output_dims`, :func:`deconv_output_dims`, :func:`validate_conv`) uses it.
* MIOpen, ONNX, PyTorch and cuDNN count from 1: ``dil = 1`` is dense and the extent is
  ``dil * (k - 1) + 1``. Only the ``miopen_*`` functions use it.

oneDNN rules (``padding_l``/``padding_r`` per spatial dim, may differ and may be negative):

* convolution:   ``out = (in - ext + pl + pr) // s + 1``
* deconvolution: ``out = (in - 1) * s + ext - pl - pr`` (+ an optional output padding, which is
  just a smaller ``padding_r``: oneDNN itself has no output-padding parameter)

Logical dims (oneDNN order, whatever the memory format):

=============  ==================================  ===========================================
tensor         dims                                notes
=============  ==================================  ===========================================
src            [N, IC, (D,) (H,) W]                ncw / nchw / ncdhw
weights        [OC, IC/G, k...] or                 a weights rank of spatial + 3 means groups
               [G, OC/G, IC/G, k...]               (oneDNN ``goihw``)
deconv weights same: [OC, IC, k...] or             note: ONNX / MIOpen / PyTorch transposed
               [G, OC/G, IC/G, k...]               weights are [IC, OC/G, k...] instead
bias           [OC]
dst            [N, OC, (D,) (H,) W]
=============  ==================================  ===========================================

Every error is :class:`pydnnl.error.invalid_arguments` (a ``ValueError``) whose message names
the argument and the dims involved.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .error import invalid_arguments

__all__ = [
    "ConvGeometry",
    "ConvProblem",
    "kernel_extent",
    "conv_output_dims",
    "deconv_output_dims",
    "validate_conv",
    "miopen_forward_output_dim",
    "miopen_forward_output_dim_nd",
    "miopen_output_spatial",
]

_SPATIAL_NAMES = {1: ("W",), 2: ("H", "W"), 3: ("D", "H", "W")}


def kernel_extent(k: int, d: int) -> int:
    """Input points a kernel of size ``k`` with oneDNN dilation ``d`` (0 = dense) covers."""
    return (k - 1) * (d + 1) + 1


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _dims(name: str, dims: Any, op: str) -> tuple[int, ...]:
    try:
        out = tuple(dims)
    except TypeError:
        raise invalid_arguments(
            f"{op}: {name} dims must be a sequence of ints, got {dims!r}") from None
    if not all(_is_int(v) for v in out):
        raise invalid_arguments(f"{op}: {name} dims must be ints, got {dims!r}")
    out = tuple(int(v) for v in out)
    if any(v <= 0 for v in out):
        raise invalid_arguments(f"{op}: {name} dims must be positive, got {list(out)}")
    return out


def _per_dim(name: str, value: Any, nsp: int, default: int, op: str) -> tuple[int, ...]:
    """A per-spatial-dim parameter: None -> default, an int -> broadcast, a sequence -> checked."""
    if value is None:
        return (default,) * nsp
    if _is_int(value):
        return (int(value),) * nsp
    try:
        vals = tuple(value)
    except TypeError:
        raise invalid_arguments(f"{op}: {name} must be an int or a sequence of {nsp} ints, "
                                f"got {value!r}") from None
    if len(vals) != nsp or not all(_is_int(v) for v in vals):
        raise invalid_arguments(f"{op}: {name} must have {nsp} int entries (one per spatial dim "
                                f"{'/'.join(_SPATIAL_NAMES[nsp])}), got {list(vals)}")
    return tuple(int(v) for v in vals)


@dataclass(frozen=True)
class ConvGeometry:
    """A validated convolution or deconvolution problem (oneDNN conventions, oneDNN dilation)."""

    mb: int
    groups: int
    ic: int                     # total input channels (src C)
    oc: int                     # total output channels (dst C)
    src_spatial: tuple[int, ...]
    dst_spatial: tuple[int, ...]
    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilates: tuple[int, ...]    # oneDNN convention: 0 = dense
    padding_l: tuple[int, ...]
    padding_r: tuple[int, ...]
    deconvolution: bool = False
    grouped_weights: bool = False  # weights were given as [G, OC/G, IC/G, k...]

    @property
    def ndims(self) -> int:
        """Rank of src/dst (3, 4 or 5)."""
        return 2 + len(self.kernel)

    @property
    def spatial_ndims(self) -> int:
        return len(self.kernel)

    @property
    def icg(self) -> int:
        """Input channels per group."""
        return self.ic // self.groups

    @property
    def ocg(self) -> int:
        """Output channels per group."""
        return self.oc // self.groups

    @property
    def extents(self) -> tuple[int, ...]:
        return tuple(kernel_extent(k, d) for k, d in zip(self.kernel, self.dilates))

    def as_convolution(self) -> ConvGeometry:
        """The convolution whose backward data is this deconvolution (src and dst, IC and OC
        exchanged; the sizes stay consistent); a convolution is its own."""
        if not self.deconvolution:
            return self
        return replace(self, ic=self.oc, oc=self.ic, src_spatial=self.dst_spatial,
                       dst_spatial=self.src_spatial, deconvolution=False)

    def src_dims(self) -> tuple[int, ...]:
        return (self.mb, self.ic, *self.src_spatial)

    def dst_dims(self) -> tuple[int, ...]:
        return (self.mb, self.oc, *self.dst_spatial)

    def weights_dims(self) -> tuple[int, ...]:
        """Weights dims in the form they were given (grouped or not)."""
        if self.grouped_weights:
            return self.grouped_weights_dims()
        return (self.oc, self.icg, *self.kernel)

    def grouped_weights_dims(self) -> tuple[int, ...]:
        """[G, OC/G, IC/G, k...] (deconvolution too: oneDNN keeps OC first)."""
        return (self.groups, self.ocg, self.icg, *self.kernel)

    def bias_dims(self) -> tuple[int, ...]:
        return (self.oc,)


@dataclass(frozen=True, kw_only=True)
class ConvProblem(ConvGeometry):
    """A convolution in one direction with every layout known: what the solvers and the kernel
    generators take (hashable; its ``repr`` is part of kernel-cache keys).

    The geometry is always a convolution's: a deconvolution is mapped onto the convolution of
    :meth:`ConvGeometry.as_convolution` (deconvolution forward is convolution backward data with
    a bias, backward data is convolution forward, backward weights exchanges src and diff_dst;
    the weights' two channel dims swap, which only permutes layout terms).

    ``kind``: ``fwd`` (writes dst), ``bwd_d`` (writes src = diff_src from dst = diff_dst),
    ``bwd_w`` (writes wei = diff_weights from src and dst = diff_dst). Layouts are
    :func:`pydnnl.kernels.conv_common.layout_of` tuples of the logical tensors
    src ``[N, G*ICg, in...]``, wei ``[G, OCg, ICg, k...]``, dst ``[N, G*OCg, out...]``;
    ``*_n`` are their storage sizes in elements. ``bias`` is the layout of the bias added to the
    written activation (fwd: OC entries; bwd_d: IC entries, deconvolution forward) or of the
    bias gradient (bwd_w: the channel sums of ``bias_of``: ``dst``, or ``src`` for
    deconvolution). ``post_ops``: ``("sum", scale, zero_point)`` / ``("eltwise", alg, alpha,
    beta)`` applied to the written activation.
    """

    kind: str
    src: tuple
    wei: tuple
    dst: tuple
    src_n: int
    wei_n: int
    dst_n: int
    bias: tuple | None = None
    bias_n: int = 0
    bias_of: str = "dst"
    post_ops: tuple = ()

    # the short names the solvers and kernel generators index with
    @property
    def src_sp(self) -> tuple[int, ...]:
        return self.src_spatial

    @property
    def dst_sp(self) -> tuple[int, ...]:
        return self.dst_spatial

    @property
    def nsp(self) -> int:
        return len(self.kernel)

    @property
    def P(self) -> int:
        """Output points per image."""
        return math.prod(self.dst_spatial)

    @property
    def PI(self) -> int:
        """Input points per image."""
        return math.prod(self.src_spatial)

    @property
    def K(self) -> int:
        """Kernel taps."""
        return math.prod(self.kernel)

    def is_1x1_dense(self) -> bool:
        """Every output point reads exactly the input point at the same place."""
        return (all(k == 1 for k in self.kernel) and all(s == 1 for s in self.strides)
                and all(p == 0 for p in self.padding_l) and self.src_sp == self.dst_sp)

    def describe(self) -> str:
        """benchdnn-like shape string."""
        names = ("d", "h", "w")[3 - self.nsp:]

        def dims(prefix: str, vals) -> str:
            return "".join(f"{prefix}{n}{v}" for n, v in zip(names, vals))

        return (f"g{self.groups}mb{self.mb}ic{self.ic}{dims('i', self.src_sp)}"
                f"oc{self.oc}{dims('o', self.dst_sp)}{dims('k', self.kernel)}"
                f"{dims('s', self.strides)}{dims('d', self.dilates)}{dims('p', self.padding_l)}")


def validate_conv(src_dims: Sequence[int], weights_dims: Sequence[int],
                  strides: Any = None, dilates: Any = None,
                  padding_l: Any = None, padding_r: Any = None, *,
                  groups: int | None = None, dst_dims: Sequence[int] | None = None,
                  bias_dims: Sequence[int] | None = None, deconvolution: bool = False,
                  output_padding: Any = None, op: str | None = None) -> ConvGeometry:
    """Check a (de)convolution problem with oneDNN's rules and return its :class:`ConvGeometry`.

    ``strides`` default 1, ``dilates`` default 0 (oneDNN: 0 = dense), ``padding_l`` default 0,
    ``padding_r`` defaults to ``padding_l``; each is an int (all spatial dims) or one int per
    spatial dim. Weights of rank ``src rank + 1`` carry groups (``[G, OC/G, IC/G, k...]``);
    weights of rank ``src rank`` are ``[OC, IC/G, k...]`` with ``groups`` (default 1).
    ``output_padding`` (deconvolution only) adds to the output size like ONNX's and PyTorch's;
    it must be smaller than the stride or the dilation, as in ONNX.
    ``dst_dims`` / ``bias_dims``, when given, must match.
    """
    op = op or ("deconvolution" if deconvolution else "convolution")
    src = _dims("src", src_dims, op)
    if len(src) not in (3, 4, 5):
        raise invalid_arguments(f"{op}: src must have 3, 4 or 5 dims [N, C, spatial...] "
                                f"(1-D, 2-D or 3-D), got {len(src)} dims {list(src)}")
    nsp = len(src) - 2
    wei = _dims("weights", weights_dims, op)
    if len(wei) == nsp + 3:
        grouped = True
    elif len(wei) == nsp + 2:
        grouped = False
    else:
        raise invalid_arguments(
            f"{op}: weights rank must be {nsp + 2} ([OC, IC/G, k...]) or {nsp + 3} "
            f"([G, OC/G, IC/G, k...]) for a {nsp}-D problem (src {list(src)}), "
            f"got {len(wei)} dims {list(wei)}")
    if groups is not None and (not _is_int(groups) or groups < 1):
        raise invalid_arguments(f"{op}: groups must be a positive int, got {groups!r}")
    if grouped:
        g, ocg, icg = wei[:3]
        if groups is not None and int(groups) != g:
            raise invalid_arguments(f"{op}: groups={groups} disagrees with grouped weights "
                                    f"{list(wei)} whose G dim is {g}")
        oc = g * ocg
        kernel = wei[3:]
    else:
        g = 1 if groups is None else int(groups)
        if wei[0] % g:
            raise invalid_arguments(f"{op}: weights OC dim {wei[0]} (weights {list(wei)}) is not "
                                    f"divisible by groups={g}")
        oc, icg = wei[0], wei[1]
        kernel = wei[2:]
    mb, ic = src[0], src[1]
    if ic != g * icg:
        raise invalid_arguments(
            f"{op}: channel/group mismatch: src has IC={ic} channels but weights {list(wei)} "
            f"with G={g} expect G*IC/G = {g}*{icg} = {g * icg}")

    st = _per_dim("strides", strides, nsp, 1, op)
    dl = _per_dim("dilates", dilates, nsp, 0, op)
    pl = _per_dim("padding_l", padding_l, nsp, 0, op)
    pr = _per_dim("padding_r", padding_r if padding_r is not None else pl, nsp, 0, op)
    if any(s < 1 for s in st):
        raise invalid_arguments(f"{op}: strides must be positive, got {list(st)}")
    if any(d < 0 for d in dl):
        raise invalid_arguments(f"{op}: dilates must be >= 0 (oneDNN convention, 0 = dense "
                                f"kernel), got {list(dl)}")
    names = _SPATIAL_NAMES[nsp]
    ext = tuple(kernel_extent(k, d) for k, d in zip(kernel, dl))
    insp = src[2:]
    if deconvolution:
        op_pad = _per_dim("output_padding", output_padding, nsp, 0, op)
        for i in range(nsp):
            if op_pad[i] < 0:
                raise invalid_arguments(f"{op}: output_padding must be >= 0, got {list(op_pad)}")
            if op_pad[i] and op_pad[i] >= st[i] and op_pad[i] >= dl[i] + 1:
                raise invalid_arguments(
                    f"{op}: output_padding[{names[i]}]={op_pad[i]} must be smaller than the "
                    f"stride {st[i]} or the dilation {dl[i] + 1} (1-based)")
        outsp = tuple((insp[i] - 1) * st[i] + ext[i] - pl[i] - pr[i] + op_pad[i]
                      for i in range(nsp))
        for i in range(nsp):
            if outsp[i] <= 0:
                raise invalid_arguments(
                    f"{op}: output size along {names[i]} is {outsp[i]} <= 0: "
                    f"(in {insp[i]} - 1) * stride {st[i]} + kernel extent {ext[i]} "
                    f"- padding_l {pl[i]} - padding_r {pr[i]}; the padding is too large")
    else:
        if output_padding is not None and any(
                _per_dim("output_padding", output_padding, nsp, 0, op)):
            raise invalid_arguments(f"{op}: output_padding applies to deconvolution only")
        outsp = []
        for i in range(nsp):
            span = insp[i] + pl[i] + pr[i]
            if span < ext[i]:
                if dl[i] > 0 and span >= kernel[i]:
                    raise invalid_arguments(
                        f"{op}: dilation too large for the input along {names[i]}: kernel "
                        f"{kernel[i]} with dilation {dl[i]} covers (k-1)*(d+1)+1 = {ext[i]} points "
                        f"but the padded input has only {insp[i]} + {pl[i]} + {pr[i]} = {span}")
                raise invalid_arguments(
                    f"{op}: non-positive output size along {names[i]}: kernel extent {ext[i]} "
                    f"(k={kernel[i]}, dilation {dl[i]}) exceeds the padded input "
                    f"{insp[i]} + {pl[i]} + {pr[i]} = {span}")
            outsp.append((span - ext[i]) // st[i] + 1)
        outsp = tuple(outsp)
    geom = ConvGeometry(mb, g, ic, oc, tuple(insp), tuple(outsp), tuple(kernel), st, dl, pl, pr,
                        deconvolution, grouped)
    if dst_dims is not None:
        dst = _dims("dst", dst_dims, op)
        if dst != geom.dst_dims():
            raise invalid_arguments(
                f"{op}: dst dims {list(dst)} do not match the {list(geom.dst_dims())} that src "
                f"{list(src)}, weights {list(wei)}, strides {list(st)}, dilates {list(dl)}, "
                f"padding_l {list(pl)} and padding_r {list(pr)} give")
    if bias_dims is not None:
        bia = tuple(bias_dims)
        if bia != (oc,):
            raise invalid_arguments(f"{op}: bias dims must be [OC] = [{oc}], got {list(bia)}")
    return geom


def conv_output_dims(src_dims: Sequence[int], weights_dims: Sequence[int], strides: Any = None,
                     dilates: Any = None, padding_l: Any = None, padding_r: Any = None,
                     groups: int | None = None) -> tuple[int, ...]:
    """dst dims [N, OC, out...] of a oneDNN convolution:
    ``out = (in - ((k-1)*(d+1)+1) + pl + pr) // s + 1``."""
    return validate_conv(src_dims, weights_dims, strides, dilates, padding_l, padding_r,
                         groups=groups, op="conv_output_dims").dst_dims()


def deconv_output_dims(src_dims: Sequence[int], weights_dims: Sequence[int], strides: Any = None,
                       dilates: Any = None, padding_l: Any = None, padding_r: Any = None,
                       groups: int | None = None, output_padding: Any = None) -> tuple[int, ...]:
    """dst dims [N, OC, out...] of a oneDNN deconvolution (weights [OC, IC, k...] or
    [G, OC/G, IC/G, k...]): ``out = (in-1)*s + ((k-1)*(d+1)+1) - pl - pr + output_padding``."""
    return validate_conv(src_dims, weights_dims, strides, dilates, padding_l, padding_r,
                         groups=groups, deconvolution=True, output_padding=output_padding,
                         op="deconv_output_dims").dst_dims()


# ---------------------------------------------------------------------------------------------
# MIOpen: miopenGetConvolution(Nd)ForwardOutputDim (dilation 1 = dense, symmetric pads)
# ---------------------------------------------------------------------------------------------
_MIOPEN_MODES = {"convolution": "convolution", "miopenconvolution": "convolution",
                 "0": "convolution", "transpose": "transpose", "miopentranspose": "transpose",
                 "1": "transpose"}
_MIOPEN_PADDING = {"default": "default", "miopenpaddingdefault": "default", "0": "default",
                   "same": "same", "miopenpaddingsame": "same", "1": "same",
                   "valid": "valid", "miopenpaddingvalid": "valid", "2": "valid"}


def _miopen_enum(table: dict, value: Any, what: str) -> str:
    key = getattr(value, "name", value)
    key = str(int(key)) if _is_int(key) else str(key).lower()
    if key not in table:
        raise invalid_arguments(f"miopen: unknown {what} {value!r}; expected one of "
                                f"{sorted(set(table.values()))}")
    return table[key]


def _c_div(a: int, b: int) -> int:
    """C integer division (truncation toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def _ceil_div(a: int, b: int) -> int:
    return -((-a) // b)


def miopen_forward_output_dim_nd(in_dims: Sequence[int], wei_dims: Sequence[int],
                                 pads: Sequence[int], strides: Sequence[int],
                                 dilations: Sequence[int], mode: Any = "convolution",
                                 groups: int = 1, trans_output_pads: Sequence[int] | None = None,
                                 padding_mode: Any = "default") -> tuple[int, ...]:
    """``miopenGetConvolutionNdForwardOutputDim``: output dims [n, c, spatial...].

    ``in_dims`` is [N, C, spatial...]. ``wei_dims`` is [K, C/groups, k...] in convolution mode
    and [C_in, C_out/groups, k...] in transpose mode. MIOpen conventions: dilation 1 = dense,
    one symmetric pad per spatial dim. ``mode`` is ``"convolution"`` or ``"transpose"``
    (``miopenConvolution`` / ``miopenTranspose``, or 0 / 1); ``padding_mode`` is
    ``"default"``, ``"same"`` or ``"valid"`` (same/valid apply to convolution mode with dilation
    1 only, as in MIOpen).
    """
    op = "miopen_forward_output_dim"
    mode = _miopen_enum(_MIOPEN_MODES, mode, "convolution mode")
    padding_mode = _miopen_enum(_MIOPEN_PADDING, padding_mode, "padding mode")
    xin = _dims("input", in_dims, op)
    wei = _dims("filter", wei_dims, op)
    nsp = len(xin) - 2
    if nsp < 1:
        raise invalid_arguments(f"{op}: input must be [N, C, spatial...], got {list(xin)}")
    if len(wei) != len(xin):
        raise invalid_arguments(f"{op}: filter rank {len(wei)} ({list(wei)}) must equal the input "
                                f"rank {len(xin)} ({list(xin)})")
    pads = _per_dim("pads", pads, nsp, 0, op)
    strides = _per_dim("strides", strides, nsp, 1, op)
    dilations = _per_dim("dilations", dilations, nsp, 1, op)
    tpads = _per_dim("trans_output_pads", trans_output_pads, nsp, 0, op)
    if not _is_int(groups) or groups < 1:
        raise invalid_arguments(f"{op}: group count must be a positive int, got {groups!r}")
    if any(p < 0 for p in pads):
        raise invalid_arguments(f"{op}: pads must be >= 0, got {list(pads)}")
    if any(s < 1 for s in strides):
        raise invalid_arguments(f"{op}: strides must be positive, got {list(strides)}")
    if any(d < 1 for d in dilations):
        raise invalid_arguments(f"{op}: dilations must be >= 1 (MIOpen convention, 1 = dense), "
                                f"got {list(dilations)}")
    n, c = xin[0], xin[1]
    wei_k, wei_c = wei[0], wei[1]
    ksp, insp = wei[2:], xin[2:]
    if mode == "convolution":
        if (groups == 1 and c != wei_c) or (groups > 1 and (c % wei_c or wei_k % (c // wei_c))):
            raise invalid_arguments(
                f"{op}: channels do not match for the filter: input C={c}, filter "
                f"[K={wei_k}, C/groups={wei_c}, ...], groups={groups}")
    else:
        if c != wei_k or (groups > 1 and wei_k % groups):
            raise invalid_arguments(
                f"{op}: channels do not match for the filter (transpose mode): input C={c}, "
                f"filter [C_in={wei_k}, C_out/groups={wei_c}, ...], groups={groups}")
        for i in range(nsp):
            if tpads[i] >= strides[i]:
                raise invalid_arguments(
                    f"{op}: output padding {list(tpads)} must be smaller than the strides "
                    f"{list(strides)} (MIOpen: invalid output padding)")
    dense = all(d == 1 for d in dilations)
    if padding_mode == "same" and mode == "convolution" and dense:
        return (n, wei_k, *(_ceil_div(insp[i], strides[i]) for i in range(nsp)))
    if padding_mode == "valid" and mode == "convolution" and dense:
        return (n, wei_k, *(_ceil_div(insp[i] - ksp[i] + 1, strides[i]) for i in range(nsp)))
    transpose = mode == "transpose"
    out = miopen_output_spatial(insp, ksp, pads, strides, dilations, transpose, tpads)
    return (n, wei_c * groups if transpose else wei_k, *(max(1, v) for v in out))


def miopen_output_spatial(in_sp: Sequence[int], kernel: Sequence[int], pads: Sequence[int],
                          strides: Sequence[int], dilations: Sequence[int],
                          transpose: bool = False,
                          out_pads: Sequence[int] | None = None) -> tuple[int, ...]:
    """MIOpen's output sizes before it clamps them to >= 1 (dilation 1 = dense, symmetric pads,
    no checks): ``(in + 2*pad - (1 + dil*(k-1))) / stride + 1`` (C division), transposed
    ``stride*(in-1) + 1 + dil*(k-1) - 2*pad + out_pad``."""
    out_pads = out_pads or (0,) * len(in_sp)
    if transpose:
        return tuple(s * (i - 1) + 1 + d * (k - 1) - 2 * p + a for i, k, p, s, d, a in
                     zip(in_sp, kernel, pads, strides, dilations, out_pads))
    return tuple(_c_div(i - (1 + d * (k - 1)) + 2 * p, s) + 1 for i, k, p, s, d in
                 zip(in_sp, kernel, pads, strides, dilations))


def miopen_forward_output_dim(n: int, c: int, h: int, w: int, k_out: int, c_per_group: int,
                              kh: int, kw: int, pad_h: int = 0, pad_w: int = 0,
                              stride_h: int = 1, stride_w: int = 1, dil_h: int = 1,
                              dil_w: int = 1, mode: Any = "convolution", groups: int = 1,
                              trans_output_pad: Sequence[int] = (0, 0),
                              padding_mode: Any = "default") -> tuple[int, int, int, int]:
    """``miopenGetConvolutionForwardOutputDim`` for a 2-D problem: ``(n, c, h, w)`` of the output.

    The filter is [k_out, c_per_group, kh, kw]: [K, C/groups, ...] in convolution mode,
    [C_in, C_out/groups, ...] in transpose mode (then the output has c_per_group * groups
    channels). Convolution: ``out = max(1, (in + 2*pad - (1 + dil*(k-1))) / stride + 1)``;
    transpose: ``out = max(1, stride*(in-1) + 1 + dil*(k-1) - 2*pad + out_pad)`` with
    ``out_pad < stride``.
    """
    return miopen_forward_output_dim_nd(
        (n, c, h, w), (k_out, c_per_group, kh, kw), (pad_h, pad_w), (stride_h, stride_w),
        (dil_h, dil_w), mode, groups, tuple(trans_output_pad), padding_mode)
