"""Loopy generators of eltwise kernels (forward and backward), one algorithm per kernel with
alpha and beta baked in.

Two shapes of kernel:

- **flat** (:class:`EltwiseFlat`): every tensor dense, in one and the same storage order, with
  no block padding, so element ``i`` of one storage is element ``i`` of the others; a 1-D
  launch where work-group ``g`` covers ``wg * iters`` consecutive elements, ``wg`` consecutive
  work-items per step (coalesced on GPUs, one SIMD vector per step on CPU runtimes that
  vectorize across work-items).
- **strided** (:class:`EltwiseStrided`): any layouts, one work-item per logical element, every
  storage offset read off the memory descs' strides and inner blocks (plain, strided, blocked,
  mixed layouts); block padding is neither read nor written.

The element formula comes from :mod:`pydnnl.kernels.eltwise_ops` as an inline OpenCL helper;
forward, a post-op chain (binary entries: oneDNN's eltwise takes no others) is applied to it
before the store (:mod:`pydnnl.kernels.post_ops`).
Every buffer is f32, bf16 or f16 (``dts``); bf16/f16 are ``ushort`` buffers read and written
through the load/store helpers of :mod:`pydnnl.kernels.clhelpers` (oneDNN's rounding), the
formula runs in f32. Pure: no engine, no argument maps.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import eltwise_ops as ops
from . import post_ops as po
from .binary import F32, _decompose, load, storage, store, type_helpers
from .reorder import _offset_expr
from .sizevars import ceil_range, is_var, size_var, value_args


@dataclass(frozen=True)
class EltwiseFlat:
    """``out[o + i] = f(in[o' + i])`` for ``i < count`` (backward: ``f(diff_dst, data)``).

    ``offsets`` and ``sizes`` list each buffer's offset0 and storage elements in the kernel's
    argument order: forward ``(src, dst)``, backward ``(data, diff_dst, diff_src)``."""

    alg: int
    alpha: float
    beta: float
    backward: bool
    count: int  # or the size variable ``nelems`` (bound at launch: :func:`flat_runtime`)
    offsets: tuple[int, ...]
    sizes: tuple[int, ...]
    wg: int = 256
    iters: int = 1
    dts: tuple[int, ...] = ()  # data_type per buffer (argument order); empty: every one f32
    # forward only: a post-op chain (:mod:`pydnnl.kernels.post_ops`) applied before the store.
    # Binary operands are read over ``po_dims``, the destination's dims collapsed in its
    # storage order (outermost first; row-major, so element ``i`` of the flat walk is
    # position ``i`` there), the outermost given as 0: its extent follows from ``count`` and
    # is never divided by (``(0,)``: the operands are read at their offset0 + ``i``)
    post_ops: tuple = ()
    po_dims: tuple[int, ...] = (0,)
    # a run-time ``count`` known to be a whole number of ``wg * iters`` blocks (a class of
    # its own): the kernel then checks no bound, exactly the baked kernel's code
    whole: bool = False


@dataclass(frozen=True)
class EltwiseStrided:
    """Eltwise over logical ``dims`` with each buffer's :func:`~pydnnl.kernels.reorder.layout_of`
    tuple in ``layouts`` (argument order as in :class:`EltwiseFlat`)."""

    alg: int
    alpha: float
    beta: float
    backward: bool
    dims: tuple[int, ...]
    layouts: tuple
    sizes: tuple[int, ...]
    wg: int = 64
    dts: tuple[int, ...] = ()  # data_type per buffer (argument order); empty: every one f32
    post_ops: tuple = ()  # forward only; binary operands over ``dims`` (kernels.post_ops)


def arg_names(backward: bool) -> tuple[str, ...]:
    """The kernel's buffer arguments, in order."""
    return ("data", "diff_dst", "diff_src") if backward else ("src", "dst")


def _helper(p):
    """(name, C definition, argument types, result type) of the element function."""
    if p.backward:
        body = ops.backward_expr(p.alg, "dd", "v", p.alpha, p.beta)
        return ("pd_eltwise_bwd",
                f"static inline float pd_eltwise_bwd(float dd, float v) {{ return {body}; }}",
                (np.float32, np.float32), np.float32)
    body = ops.forward_expr(p.alg, "s", p.alpha, p.beta)
    return ("pd_eltwise_fwd", f"static inline float pd_eltwise_fwd(float s) {{ return {body}; }}",
            np.float32, np.float32)


def _dts(p) -> tuple[int, ...]:
    return p.dts or (F32,) * len(arg_names(p.backward))


def _args(lp, p):
    names = arg_names(p.backward)
    out = []
    for k, (n, size, dt) in enumerate(zip(names, p.sizes, _dts(p))):
        last = k == len(names) - 1
        out.append(lp.GlobalArg(n, storage(dt), shape=None if size is None else (int(size),),
                                is_output=last, is_input=not last))
    return out + po.loopy_args(p.post_ops) + value_args(p)


def flat_runtime(p: EltwiseFlat) -> tuple[EltwiseFlat, dict]:
    """The run-time-size form of ``p``: ``(problem, values)``, the element count a size
    variable ``nelems`` (bind ``values`` at launch). One program then serves every tensor of
    the (algorithm, alpha, beta, data types, offsets) class: the kernel divides nothing, its
    only run-time guard is ``i < nelems`` (unrolled steps on GPUs: one per step), and counts
    that are whole blocks (:func:`whole_blocks`) form a class without it."""
    from dataclasses import replace

    return (replace(p, count=size_var("nelems"), sizes=(None,) * len(p.sizes),
                    whole=whole_blocks(p)), {"nelems": int(p.count)})


def whole_blocks(p: EltwiseFlat) -> bool:
    """Whether ``p``'s count is a whole number of work-group blocks (``wg * iters``)."""
    return not is_var(p.count) and p.count > 0 and p.count % (p.wg * p.iters) == 0


def _value(p, idx_of, at=None):
    """The element expression (f32): ``idx_of(k)`` indexes buffer ``k``; forward, the post-op
    chain follows (``at``: the destination position its binary operands are read at)."""
    from pymbolic import var

    names, dts = arg_names(p.backward), _dts(p)

    def read(k):
        return load(dts[k], var(names[k])[idx_of(k)])

    if p.backward:
        return var("pd_eltwise_bwd")(read(1), read(0))
    return po.apply(var("pd_eltwise_fwd")(read(0)), p.post_ops, at=at)


def _store(p, value):
    return store(_dts(p)[-1], value)


def _finish(lp, tu, p):
    from .clhelpers import register_helpers

    dts = _dts(p)
    return register_helpers(tu, [_helper(p)] + po.helpers(p.post_ops)
                            + type_helpers(dts[:-1], dts[-1:]))


def _check_post_ops(p) -> None:
    if p.post_ops and p.backward:
        raise ValueError("eltwise kernel: post-ops are forward only")
    if po.reads_prior(p.post_ops):
        raise ValueError("eltwise kernel: a sum post-op is not implemented (oneDNN's eltwise "
                         "takes binary post-ops only)")


def kernel_name(p) -> str:
    return "pydnnl_eltwise_" + ("bwd" if p.backward else "fwd")


def build_flat(p: EltwiseFlat):
    """loopy TranslationUnit: forward ``(src, dst)`` or backward ``(data, diff_dst,
    diff_src)``."""
    import loopy as lp
    from pymbolic import var

    ops.normalize(p.alg)
    _check_post_ops(p)
    i = var("i")
    out = arg_names(p.backward)[-1]
    at = _decompose(i, p.po_dims) if po.has_binary(p.post_ops) else None
    insn = lp.Assignment(var(out)[p.offsets[-1] + i],
                         _store(p, _value(p, lambda k: p.offsets[k] + i, at)),
                         within_inames=frozenset(["i"]))
    knl = lp.make_kernel(f"{{[i]: {ceil_range('i', p.count)}}}", [insn], _args(lp, p),
                         name=kernel_name(p), lang_version=(2018, 2),
                         target=lp.PyOpenCLTarget())
    if is_var(p.count):
        if p.whole:
            block = p.wg * p.iters
            knl = lp.assume(knl, f"{p.count.name} mod {block} = 0 and {p.count.name} >= {block}")
        knl = lp.split_iname(knl, "i", p.wg, inner_tag="l.0", outer_iname="i_blk",
                             inner_iname="i_l")
        if p.iters > 1:
            knl = lp.split_iname(knl, "i_blk", p.iters, outer_tag="g.0", outer_iname="i_g",
                                 inner_iname="i_k", inner_tag="unr")
        else:
            knl = lp.tag_inames(knl, {"i_blk": "g.0"})
        return _finish(lp, knl, p)
    wg = max(1, min(p.wg, p.count))
    knl = lp.split_iname(knl, "i", wg, inner_tag="l.0", outer_iname="i_blk", inner_iname="i_l")
    iters = max(1, min(p.iters, -(-p.count // wg)))
    if iters > 1:
        # unrolled: the work-item's loads are independent and all in flight at once
        knl = lp.split_iname(knl, "i_blk", iters, outer_tag="g.0", outer_iname="i_g",
                             inner_iname="i_k", inner_tag="unr")
    else:
        knl = lp.tag_inames(knl, {"i_blk": "g.0"})
    return _finish(lp, knl, p)


def _pick_local_dim(dims, layout) -> int:
    """The dim with the smallest stride in the output: neighbouring work-items write
    neighbouring elements."""
    best, best_stride = len(dims) - 1, None
    for d, (_blk, stride, inner) in enumerate(layout[1]):
        if dims[d] == 1:
            continue
        s = min([t[2] for t in inner] + [stride]) if inner else stride
        if best_stride is None or s < best_stride:
            best, best_stride = d, s
    return best


def build_strided(p: EltwiseStrided):
    """loopy TranslationUnit with the arguments of :func:`build_flat`, any layouts."""
    import loopy as lp
    from pymbolic import var

    ops.normalize(p.alg)
    _check_post_ops(p)
    nd = len(p.dims)
    names = [f"i{d}" for d in range(nd)]
    idx = [var(n) for n in names]
    domain = "{[" + ",".join(names) + "]: " + " and ".join(
        f"0 <= {n} < {v}" for n, v in zip(names, p.dims)) + "}"
    out = arg_names(p.backward)[-1]
    insn = lp.Assignment(var(out)[_offset_expr(p.layouts[-1], idx)],
                         _store(p, _value(p, lambda k: _offset_expr(p.layouts[k], idx), idx)),
                         within_inames=frozenset(names))
    knl = lp.make_kernel(domain, [insn], _args(lp, p), name=kernel_name(p),
                         lang_version=(2018, 2), target=lp.PyOpenCLTarget())
    ld = _pick_local_dim(p.dims, p.layouts[-1])
    others = sorted((d for d in range(nd) if d != ld), key=lambda d: -p.dims[d])
    tags = {}
    split = p.dims[ld] >= p.wg
    if split:
        knl = lp.split_iname(knl, names[ld], p.wg, inner_tag="l.0", outer_tag="g.0")
    else:
        tags[names[ld]] = "l.0"
    first = 1 if split else 0
    for k, d in enumerate(others[:2]):
        tags[names[d]] = f"g.{first + k}"
    knl = lp.tag_inames(knl, tags)
    return _finish(lp, knl, p)
