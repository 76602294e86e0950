"""Loopy generator of reorder kernels: any layout and data type to any other, with scales.

One work-item per logical element: ``dst[off_dst(x)] = cvt(src[off_src(x)])``, where each
offset is a sum of per-dimension terms read off the memory descs (strides and inner blocks), so
plain, strided and blocked layouts share one generator. With attributes the value is
``src_scale * (src - src_zp) / dst_scale + dst_zp`` (oneDNN v3 reorder semantics).

int8 RNN quantization (oneDNN's ``rnn_data_qparams`` / ``rnn_weights_qparams`` reorders) is
``x * scale + shift`` for data, with the product and the sum each rounded to f32, and
``x * scale[masked index]`` for weights; the destination's saturating round-half-even
conversion to u8/s8 follows.

The f32 reorder between plain layouts (every staging reorder of a convolution's first creation)
is printed without loopy, with loopy's text (:mod:`~pydnnl.kernels.reorder_source`);
:func:`build_reorder_loopy` keeps the other forms.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..memory.data_types import data_type
from ..memory.desc import MemoryDesc


@dataclass(frozen=True)
class ReorderProblem:
    """Everything a reorder kernel depends on (hashable: the kernel-cache key)."""

    dims: tuple[int, ...]
    src_dt: data_type
    dst_dt: data_type
    src_layout: tuple  # (offset0, per dim: (block, stride, ((modulus, divisor, stride), ...)))
    dst_layout: tuple
    src_nelems: int  # storage elements of each buffer
    dst_nelems: int
    src_scale_mask: int | None = None
    dst_scale_mask: int | None = None
    src_zp_mask: int | None = None
    dst_zp_mask: int | None = None
    beta: float = 0.0  # dst = convert(value) + beta * dst (accumulate; f32 only)
    #: RNN data quantization: ``src * rnn_scale + rnn_shift`` (two f32 scalar arguments)
    rnn_data: bool = False
    #: RNN weights quantization: ``src * rnn_wscale[e]``, e the index over the masked dims of
    #: an f32 array argument (mask 0: one scale)
    rnn_weights_mask: int | None = None
    #: the kernel takes ``src_off``, ``dst_off`` (added to the layouts' offsets) and ``d0``
    #: (dims[0]) as int64 arguments: one program for every placement and outer size (see
    #: :func:`runtime_form`)
    runtime: bool = False

    @classmethod
    def between(cls, src: MemoryDesc, dst: MemoryDesc, beta: float = 0.0) -> "ReorderProblem":
        """The reorder from ``src``'s layout and data type to ``dst``'s (no scales)."""
        return cls(dims=tuple(src.dims), src_dt=src.data_type, dst_dt=dst.data_type,
                   src_layout=layout_of(src), dst_layout=layout_of(dst),
                   src_nelems=src.nelems_physical(), dst_nelems=dst.nelems_physical(),
                   beta=beta)

    @classmethod
    def f32(cls, dims, src_layout: tuple, src_nelems: int, dst_layout: tuple,
            dst_nelems: int) -> "ReorderProblem":
        """A float32 copy between two layouts given as :func:`layout_of` tuples."""
        return cls(dims=tuple(dims), src_dt=data_type.f32, dst_dt=data_type.f32,
                   src_layout=src_layout, dst_layout=dst_layout, src_nelems=src_nelems,
                   dst_nelems=dst_nelems)


def contiguous_copy(p: ReorderProblem) -> tuple[int, int, int] | None:
    """``(src_offset, dst_offset, count)`` in elements when ``p`` copies one contiguous range
    to another unchanged (same data type, no scales, no accumulation, both layouts dense
    row-major over the same dims): a buffer copy then does it without a kernel. Else None."""
    if p.src_dt != p.dst_dt or p.beta != 0.0 or _scaled(p):
        return None
    count = 1
    for d in range(len(p.dims) - 1, -1, -1):
        for layout in (p.src_layout, p.dst_layout):
            blk, stride, inner = layout[1][d]
            if p.dims[d] > 1 and (blk != 1 or inner or stride != count):
                return None
        count *= p.dims[d]
    return p.src_layout[0], p.dst_layout[0], count


def runtime_form(p: ReorderProblem) -> ReorderProblem | None:
    """The problem's kernel-cache form with run-time offsets and outer size (offsets 0,
    dims[0] 1), or None where dim 0 is blocked on either side or a scale, zero point or RNN
    weights scale varies along dim 0 (its operand is then sized by it). RNN data
    quantization (two scalars) and masks without dim 0 keep their operands' sizes."""
    masks = (p.src_scale_mask, p.dst_scale_mask, p.src_zp_mask, p.dst_zp_mask,
             p.rnn_weights_mask)
    if p.runtime or not p.dims or any(m is not None and m & 1 for m in masks):
        return None
    for layout in (p.src_layout, p.dst_layout):
        blk, _stride, inner = layout[1][0]
        if blk != 1 or inner:
            return None
    return replace(p, dims=(1,) + tuple(p.dims[1:]), src_layout=(0, p.src_layout[1]),
                   dst_layout=(0, p.dst_layout[1]), src_nelems=0, dst_nelems=0, runtime=True)


def _scaled(p: ReorderProblem) -> bool:
    """Whether any scale, zero point or RNN quantization applies."""
    return (p.src_scale_mask is not None or p.dst_scale_mask is not None
            or p.src_zp_mask is not None or p.dst_zp_mask is not None or p.rnn_data
            or p.rnn_weights_mask is not None)


# x * scale + shift with each operation rounded to f32 (as oneDNN's rnn_data_reorder): a
# contracted fma would round once and resolve some ties of the quantization differently
# (NVIDIA's OpenCL compiler contracts the plain expression; Intel's CPU runtime and PoCL did not)
_RNN_DATA = ("pd_rnn_quantize_data",
             "static inline float pd_rnn_quantize_data(float x, float scale, float shift) {\n"
             "#pragma OPENCL FP_CONTRACT OFF\n"
             "    float p = x * scale;\n    return p + shift;\n}",
             (np.float32, np.float32, np.float32), np.float32)


def _check_rnn(p: ReorderProblem) -> None:
    if not (p.rnn_data or p.rnn_weights_mask is not None):
        return
    if p.rnn_data and p.rnn_weights_mask is not None:
        raise ValueError("reorder: rnn_data and rnn_weights_mask exclude each other")
    if (p.src_scale_mask is not None or p.dst_scale_mask is not None
            or p.src_zp_mask is not None or p.dst_zp_mask is not None or p.beta != 0.0):
        raise ValueError("reorder: RNN quantization takes no scales, zero points or beta")
    if p.src_dt != data_type.f32 or p.dst_dt not in (data_type.u8, data_type.s8):
        raise ValueError(f"reorder: RNN quantization converts f32 to u8/s8, got "
                         f"{p.src_dt.name} -> {p.dst_dt.name}")


def layout_of(md: MemoryDesc) -> tuple:
    """Hashable description of ``md``'s offset function: (offset0, per-dim terms)."""
    blk = md.block_sizes()
    per_dim = tuple((blk[d], md.strides[d], tuple(md.inner_terms(d))) for d in range(len(md.dims)))
    return (md.offset0, per_dim)


def _offset_expr(layout: tuple, idx):
    from pymbolic.primitives import FloorDiv, Remainder

    offset0, per_dim = layout
    expr = offset0
    for d, (blk, stride, inner) in enumerate(per_dim):
        x = idx[d]
        outer = FloorDiv(x, blk) if blk > 1 else x
        expr = expr + outer * stride if stride else expr
        for mod, div, s in inner:
            term = Remainder(x, mod)
            if div > 1:
                term = FloorDiv(term, div)
            expr = expr + term * s
    return expr


def _masked_index(mask: int, dims, idx):
    expr, n = 0, 1
    for d in range(len(dims) - 1, -1, -1):
        if mask >> d & 1:
            expr = expr + idx[d] * n
            n *= dims[d]
    return expr, n


def _pick_local_dim(p: ReorderProblem, dims) -> int:
    """The dim with the smallest dst stride: consecutive work-items write consecutive elements."""
    best, best_stride = len(dims) - 1, None
    for d, (_blk, stride, inner) in enumerate(p.dst_layout[1]):
        if dims[d] == 1:
            continue
        s = min([t[2] for t in inner] + [stride]) if inner else stride
        if best_stride is None or s < best_stride:
            best, best_stride = d, s
    return best


def build_reorder(p: ReorderProblem, params: dict | None = None):
    """The reorder kernel of ``p``: printed without loopy where
    :func:`~pydnnl.kernels.reorder_source.reorder_source` covers it (f32 between plain layouts;
    the same text as loopy's), else :func:`build_reorder_loopy`'s."""
    from .reorder_source import reorder_source

    src = reorder_source(p, params)
    return src if src is not None else build_reorder_loopy(p, params)


def build_reorder_loopy(p: ReorderProblem, params: dict | None = None):
    """loopy TranslationUnit ``reorder(src, dst[, src_zp, src_scale, dst_scale, dst_zp]
    [, rnn_scale, rnn_shift | rnn_wscale])``."""
    import loopy as lp
    from pymbolic import var

    from .clhelpers import compute_type, load_helper, register_helpers, store_helper

    params = dict(params or {})
    wg = int(params.get("wg", 32))
    nd = len(p.dims)
    names = [f"i{d}" for d in range(nd)]
    idx = [var(n) for n in names]
    # a run-time outer size: decisions take it as large, the domain takes the argument
    dims = ((1 << 20,) + tuple(p.dims[1:])) if p.runtime else tuple(p.dims)
    bounds = ["d0" if p.runtime and d == 0 else v for d, v in enumerate(p.dims)]
    domain = "{[" + ",".join(names) + "]: " + " and ".join(
        f"0 <= {n} < {v}" for n, v in zip(names, bounds)) + "}"
    src_size, dst_size = (None, None) if p.runtime else ((p.src_nelems,), (p.dst_nelems,))

    _check_rnn(p)
    same = p.src_dt == p.dst_dt and not _scaled(p)
    if p.beta != 0.0 and not (p.src_dt == p.dst_dt == data_type.f32):
        raise ValueError("reorder with beta (accumulate) needs f32 src and dst")
    args = [lp.GlobalArg("src", _np_storage(p.src_dt), shape=src_size),
            lp.GlobalArg("dst", _np_storage(p.dst_dt), shape=dst_size, is_output=True)]
    src_off = _offset_expr(p.src_layout, idx)
    if p.runtime:
        src_off = src_off + var("src_off")
    src_val = var("src")[src_off]
    helpers = []
    if same:
        value = src_val
    else:
        ct = compute_type(p.src_dt, p.dst_dt)
        ld, st = load_helper(p.src_dt, ct), store_helper(p.dst_dt, ct)
        helpers += [ld, st]
        value = var(ld[0])(src_val)
        if p.rnn_data:
            helpers.append(_RNN_DATA)
            value = var(_RNN_DATA[0])(value, var("rnn_scale"), var("rnn_shift"))
            args += [lp.ValueArg("rnn_scale", np.float32), lp.ValueArg("rnn_shift", np.float32)]
        if p.rnn_weights_mask is not None:
            e, n = _masked_index(p.rnn_weights_mask, p.dims, idx)
            args.append(lp.GlobalArg("rnn_wscale", np.float32, shape=(n,)))
            value = value * var("rnn_wscale")[e]
        for name, mask, kind in (("src_zp", p.src_zp_mask, "zp"),
                                 ("src_scale", p.src_scale_mask, "scale"),
                                 ("dst_scale", p.dst_scale_mask, "scale"),
                                 ("dst_zp", p.dst_zp_mask, "zp")):
            if mask is None:
                continue
            e, n = _masked_index(mask, p.dims, idx)
            args.append(lp.GlobalArg(name, np.int32 if kind == "zp" else np.float32, shape=(n,)))
            term = var(name)[e]
            if name == "src_zp":
                value = value - term
            elif name == "src_scale":
                value = value * term
            elif name == "dst_scale":
                value = value / term
            else:
                value = value + term
        value = var(st[0])(value)
    dst_off = _offset_expr(p.dst_layout, idx)
    if p.runtime:
        dst_off = dst_off + var("dst_off")
    if p.beta != 0.0:
        value = value + (var("dst")[dst_off] if p.beta == 1.0
                         else np.float32(p.beta) * var("dst")[dst_off])
        args[1] = lp.GlobalArg("dst", _np_storage(p.dst_dt), shape=dst_size, is_output=True,
                               is_input=True)
    if p.runtime:
        args += [lp.ValueArg(n, np.int64) for n in ("src_off", "dst_off", "d0")]
    insn = lp.Assignment(var("dst")[dst_off], value, within_inames=frozenset(names))
    knl = lp.make_kernel(domain, [insn], args, name="pydnnl_reorder",
                         lang_version=(2018, 2), target=lp.PyOpenCLTarget())
    ld_dim = _pick_local_dim(p, dims)
    others = sorted((d for d in range(nd) if d != ld_dim), key=lambda d: -dims[d])
    tags = {}
    inner = names[ld_dim]
    if dims[ld_dim] >= wg:
        knl = lp.split_iname(knl, inner, wg, inner_tag="l.0", outer_tag="g.0")
    else:
        tags[inner] = "l.0"
    for k, d in enumerate(others[:2]):
        tags[names[d]] = f"g.{k + 1}" if dims[ld_dim] >= wg else f"g.{k}"
    knl = lp.tag_inames(knl, tags)
    if helpers:
        knl = register_helpers(knl, helpers)
    return knl


def _np_storage(dt: data_type):
    return np.uint16 if dt in (data_type.f16, data_type.bf16) else dt.storage_dtype
