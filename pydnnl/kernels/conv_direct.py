"""Loopy generators of direct convolution kernels: forward, backward data, backward weights.

One work-item computes a small register tile: ``tile`` output channels (forward, backward
data) of one output point, or ``tile`` output channels of one weight element (backward
weights), as a sum over the kernel taps. Axis 0 of the launch runs along the innermost spatial
dimension (width), so CPU runtimes vectorise across neighbouring output points with
contiguous loads; axis 1 runs over the other spatial dimensions and axis 2 over (image,
group, channel tile). Backward weights runs axis 0 over (input channel, tap) and axis 1 over
(group, channel tile). Every tensor is addressed through its
per-dimension layout terms, so plain, strided and blocked layouts share the kernels. Bias and
post-ops (sum, eltwise) are applied before the single store of forward and backward-data
results (deconvolution forward is convolution backward data with a bias).
"""
from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

import numpy as np

from ..conv_shapes import ConvProblem
from .conv_common import (
    INDEX_DTYPE,
    _extent,
    apply_postops,
    bounds_condition,
    clamp_into,
    decompose,
    finish,
    guarded_load,
    make_args,
    offset,
    output_positions,
    postop_arg_specs,
    prod,
    product_name,
    rt_value_args,
    split_fast,
)
from .sizevars import is_var


class DirectParams(NamedTuple):
    """Tuning parameters of a direct kernel."""

    tile: int = 1  # channels per work-item (a register tile)
    wg: int = 16  # work-group size along axis 0
    wtile: int = 1  # points along the width per work-item (forward, backward data)
    index64: bool = True  # 64-bit index arithmetic


def build_direct(p: ConvProblem, params: DirectParams, guards: tuple | None = None):
    """The direct kernel of ``p`` in direction ``p.kind`` (printed as C text by
    :mod:`pydnnl.kernels.conv_direct_source` where it covers the problem, else a loopy
    TranslationUnit): ``fwd``
    writes dst, ``bwd_d`` src (diff_src), ``bwd_w`` wei (arguments src, wei, dst[, bias]; the
    bias is added to the written activation, so backward weights takes none).

    ``guards`` (the run-time form, :func:`direct_runtime`, whose sizes are size variables):
    per spatial dim, whether the input positions (fwd, bwd_w) or output positions (bwd_d)
    are tested against 0 and against the end; None: derived from the int sizes."""
    from .conv_direct_source import direct_source

    src = direct_source(p, params, guards)
    return src if src is not None else build_direct_loopy(p, params, guards)


def build_direct_loopy(p: ConvProblem, params: DirectParams, guards: tuple | None = None):
    """:func:`build_direct` through loopy (a TranslationUnit), whatever the printer covers:
    the forms it does not (binary post-ops, register tiles along the width), and the
    printed kernels' tests."""
    return _loopy_from_spec(direct_spec(p, params, guards), p, params)


def direct_runtime(p: ConvProblem, padded: bool,
                   params: DirectParams | None = None) -> tuple[ConvProblem, dict, tuple | None]:
    """The run-time-size form of the direct kernel's problem ``p``: ``(problem, values,
    guards)``: the minibatch ``mb``, the spatial sizes (``is<i>`` of src, ``os<i>`` of dst)
    and the activations' strides and offsets (but unit ones) as size variables; bind
    ``values`` at launch; pass ``(problem, params, guards)`` to :func:`build_direct`.

    ``padded``: the solver copied the input into a zero-padded tensor wherever the kernel
    would read outside it (``_prepad``), so forward and backward weights test no bounds for
    any size (and backward data with unit strides neither); otherwise the lower bound is
    tested as the constants say and the upper bound always (whether the last positions pass
    the end changes with the sizes' parity under strides).

    ``(p, {}, None)`` (baked) for blocked activations, binary post-ops (their operands'
    layouts bake sizes), widths smaller than one work-group of ``params`` (forward and
    backward data: its last work-group moves back to end at the last point) and register
    tiles along the width (``wtile`` > 1).
    """
    from .conv_common import runtime_output_guards, sym_plain_layout
    from .sizevars import symbolize

    if any(op[0] == "binary" for op in p.post_ops):
        return p, {}, None
    t = params or DirectParams()
    if p.kind != "bwd_w":
        width = (p.src_sp if p.kind == "bwd_d" else p.dst_sp)[-1]
        if t.wtile > 1 or width < t.wg:
            return p, {}, None
    src = sym_plain_layout(p.src, "src", channels=p.ic)
    dst = sym_plain_layout(p.dst, "dst", channels=p.oc)
    if src is None or dst is None:
        return p, {}, None
    nsp = len(p.kernel)
    if p.kind == "bwd_d":
        if padded and all(s == 1 for s in p.strides):
            guards = ((False, False),) * nsp
        else:
            guards = runtime_output_guards(p)
    elif padded:
        guards = ((False, False),) * nsp
    else:
        guards = tuple((pl > 0, True) for pl in p.padding_l)
    values = {"mb": p.mb, **{f"is{i}": v for i, v in enumerate(p.src_sp)},
              **{f"os{i}": v for i, v in enumerate(p.dst_sp)}}
    sym, _ = symbolize(values)
    q = replace(p, mb=sym["mb"], src_spatial=tuple(sym[f"is{i}"] for i in range(nsp)),
                dst_spatial=tuple(sym[f"os{i}"] for i in range(nsp)), src=src[0], src_n=-1,
                dst=dst[0], dst_n=-1, padding_r=())
    # (padding_r: the kernels never read it, the sizes fix it: () keeps it out of the key)
    # the flattened outer spatial extents the launch takes (axis 1)
    outer = {"src": [f"is{i}" for i in range(nsp - 1)], "dst": [f"os{i}" for i in range(nsp - 1)]}
    for names in outer.values():
        if len(names) > 1:
            values[product_name(names)] = prod([values[n] for n in names])
    return q, {**values, **src[1], **dst[1]}, guards


def _is_runtime(p) -> bool:
    from .sizevars import free_vars

    return bool(free_vars((p.mb, p.src_spatial, p.dst_spatial)))


def _in_bounds(pos, guards, sizes):
    """``0 <= pos`` / ``pos < size`` per dim where ``guards`` asks (None when none)."""
    from pymbolic.primitives import Comparison, LogicalAnd

    conds = []
    for e, (lo, hi), n in zip(pos, guards, sizes):
        if lo:
            conds.append(Comparison(e, ">=", 0))
        if hi:
            conds.append(Comparison(e, "<", n))
    if not conds:
        return None
    return conds[0] if len(conds) == 1 else LogicalAnd(tuple(conds))


def _load(cond, array: str, layout: tuple, at: list, pos: list, sizes, n: int):
    """``array`` at logical index ``at + pos`` where ``cond`` holds, else 0. Baked: the flat
    offset clamped into the array (:func:`guarded_load`); run-time sizes: each position
    clamped into its dim (the array's size is not known)."""
    from pymbolic import var
    from pymbolic.primitives import If

    if cond is None or not _is_runtime_sizes(sizes):
        return guarded_load(cond, array, offset(layout, [*at, *pos]), n)
    clamped = [clamp_into(e, s) for e, s in zip(pos, sizes)]
    return If(cond, var(array)[offset(layout, [*at, *clamped])], np.float32(0))


def _is_runtime_sizes(sizes) -> bool:
    from .sizevars import free_vars

    return bool(free_vars(tuple(sizes)))


def _src_range(p) -> list[tuple[int, int]]:
    """Lowest and highest input index each spatial dim of the forward reads."""
    return [(-p.padding_l[i], (p.dst_sp[i] - 1) * p.strides[i] - p.padding_l[i]
             + (p.kernel[i] - 1) * (p.dilates[i] + 1)) for i in range(len(p.kernel))]


def _domain(ranges: dict) -> str:
    # (extents may be affine size expressions: "0 <= q < 8*mb")
    names = ", ".join(ranges)
    cond = " and ".join(f"0 <= {k} < {v}" for k, v in ranges.items())
    return "{[" + names + "]: " + cond + "}"


def _arg_specs(p: ConvProblem, out: str, reads_out: bool) -> list:
    """:func:`make_args` specs of the arrays (the sizes' arguments follow them)."""
    specs = [("src", p.src_n, out == "src", out != "src" or reads_out),
             ("wei", p.wei_n, out == "wei", out != "wei" or reads_out),
             ("dst", p.dst_n, out == "dst", out != "dst" or reads_out)]
    if p.bias is not None and p.kind != "bwd_w":
        specs.append(("bias", p.bias_n, False, True))
    return specs + postop_arg_specs(p.post_ops)


def _has_sum(p: ConvProblem) -> bool:
    return any(op[0] == "sum" for op in p.post_ops)


def _split_sum(expr):
    """``(the tap sum, rest)``: ``rest`` is ``expr`` (the sum, then bias and post-ops) with
    the temporary ``v`` in place of the sum."""
    from loopy.symbolic import IdentityMapper, Reduction
    from pymbolic import var

    found = []

    class _Sub(IdentityMapper):
        def map_reduction(self, e):
            found.append(e)
            return var("v")

    rest = _Sub()(expr)
    assert len(found) == 1 and isinstance(found[0], Reduction)
    return found[0], rest


def _make(domain, insn, args, name, p, t: DirectParams, fast, fast_size, tile_iname,
          reduce_order):
    import loopy as lp
    from pymbolic import var
    from pymbolic.primitives import Comparison, If

    # a unit spatial axis (1-D problems) is a launch axis the store does not index
    insns = [insn.copy(id="store")]
    runtime = is_var(fast_size)
    wg = max(1, t.wg if runtime else min(t.wg, fast_size))
    if runtime:
        # a run-time width (at least one work-group, see direct_runtime) on the lanes: the
        # last work-group moves back to end at the last point (its first lanes compute points
        # of the group before, which store them: the duplicates' stores alone are masked);
        # the loads stay contiguous and unmasked. loopy's guard around the whole work-item
        # made the compiler mask every load (depthwise 3x3 forward, 56x56: 1.39x of baked),
        # clamping each lane's point made them gathers (1.54x)
        from loopy.symbolic import SubstitutionMapper
        from pymbolic.mapper.substitutor import make_subst_func

        own = var(f"{fast}o") * wg
        start = If(Comparison(own, "<", fast_size - wg), own, fast_size - wg)
        sub = SubstitutionMapper(make_subst_func({fast: start + var(f"{fast}l")}))
        domain = domain.replace("{[" + f"{fast}, ", "{[" + f"{fast}o, {fast}l, ").replace(
            f"0 <= {fast} < {fast_size}",
            f"0 <= {fast}l < {wg} and 0 <= {fast}o and {wg}*{fast}o <= {fast_size} - 1")
        within = (insn.within_inames - {fast}) | {f"{fast}o", f"{fast}l"}
        red, rest = _split_sum(insn.expression)
        insns = [lp.Assignment(var("v"), sub(red), within_inames=within, id="sum"),
                 insn.copy(id="store", assignee=sub(insn.assignee), expression=sub(rest),
                           within_inames=within, depends_on=frozenset(["sum"]),
                           predicates=frozenset([Comparison(start + var(f"{fast}l"), ">=",
                                                                 own)]))]
        args = [*args, lp.TemporaryVariable("v", np.float32, shape=(),
                                            address_space=lp.AddressSpace.PRIVATE)]
    knl = lp.make_kernel(domain, insns, args, name=name,
                         lang_version=(2018, 2), target=lp.PyOpenCLTarget(),
                         index_dtype=INDEX_DTYPE if t.index64 else np.int32,
                         silenced_warnings=["v1_scheduler_fallback", "write_race(store)"])
    if runtime:
        knl = lp.tag_inames(knl, {f"{fast}o": "g.0", f"{fast}l": "l.0"})
    elif t.wtile > 1 and fast != "x" and fast_size > wg:
        # work-item j of a group owns points j, j + wg, ..., j + (wtile-1)*wg: a register tile
        # along the width whose loads stay contiguous across the group
        knl = lp.split_iname(knl, fast, wg * t.wtile, outer_tag="g.0")
        knl = lp.split_iname(knl, f"{fast}_inner", wg, outer_tag="ilp", inner_tag="l.0")
    else:
        knl = split_fast(knl, fast, fast_size, t.wg)
    tags = {"q": "g.1"} if fast == "x" else {"r": "g.1", "q": "g.2"}
    if t.tile > 1:
        tags[tile_iname] = "ilp"
    knl = lp.tag_inames(knl, tags)
    if len(reduce_order) > 1:
        knl = lp.prioritize_loops(knl, ",".join(reduce_order))
    return finish(knl, p.post_ops)


class DirectSpec(NamedTuple):
    """One direct kernel as index expressions, for loopy (:func:`_make`) and the printer
    (:mod:`pydnnl.kernels.conv_direct_source`): each work-item of the launch inames
    (``fast`` along axis 0, then ``r`` and ``q``, or ``q`` alone) and tile entry ``t`` sums
    ``term`` over ``red`` (outermost first), then stores ``rest(sum)`` at ``assignee``."""

    name: str
    ranges: dict
    term: object
    red: tuple
    rest: object  # the sum -> the stored value (bias, post-ops)
    assignee: object
    out: str  # the written array
    reads_out: bool  # whether the store reads it first (a sum post-op)
    fast: str
    fast_size: object
    arg_specs: list  # :func:`make_args` specs


def _loopy_from_spec(sp: DirectSpec, p: ConvProblem, params: DirectParams):
    import loopy as lp
    from loopy.symbolic import Reduction

    value = sp.rest(Reduction("sum", sp.red, sp.term))
    launch = frozenset([sp.fast, "q", "t"] + ([] if sp.fast == "x" else ["r"]))
    insn = lp.Assignment(sp.assignee, value, within_inames=launch)
    args = make_args(sp.arg_specs) + rt_value_args(p, sp.ranges)
    return _make(_domain(sp.ranges), insn, args, sp.name, p, params, sp.fast, sp.fast_size,
                 "t", list(sp.red))


def direct_spec(p: ConvProblem, params: DirectParams, guards=None) -> DirectSpec:
    """The :class:`DirectSpec` of ``p`` in direction ``p.kind`` (see :func:`build_direct`)."""
    spec = {"fwd": _spec_fwd, "bwd_d": _spec_bwd_d, "bwd_w": _spec_bwd_w}.get(p.kind)
    if spec is None:
        raise ValueError(f"direct convolution: unknown direction {p.kind!r}")
    return spec(p, params, guards)


def _biased(p: ConvProblem, out_at, at: list):
    """The stored value as a function of the sum: bias of channel ``at[1]``, then the
    post-ops (their prior term ``out_at``, their operands at position ``at``)."""
    from pymbolic import var

    def rest(value):
        if p.bias is not None:
            value = value + var("bias")[offset(p.bias, [at[1]])]
        return apply_postops(value, p.post_ops, out_at, at=at)
    return rest


def _spec_fwd(p: ConvProblem, params: DirectParams, guards=None) -> DirectSpec:
    from pymbolic import var

    nsp = len(p.kernel)
    T = params.tile
    NB = p.ocg // T
    Q = p.groups * NB * p.mb
    ks = [f"k{i}" for i in range(nsp)]
    W, R = p.dst_sp[-1], _extent(list(p.dst_sp[:-1]))
    ranges = {"w": W, "r": R, "q": Q, "t": T, "ic": p.icg, **{k: v for k, v in zip(ks, p.kernel)}}
    qv, t, ic = var("q"), var("t"), var("ic")
    n, g, ob = decompose(qv, [p.mb, p.groups, NB])
    oc = ob * T + t if T > 1 else ob
    o = decompose(var("r"), list(p.dst_sp[:-1])) + [var("w")]
    pos = [o[i] * p.strides[i] - p.padding_l[i] + var(ks[i]) * (p.dilates[i] + 1)
           for i in range(nsp)]
    if guards is None:
        cond = bounds_condition(pos, _src_range(p), p.src_sp)
    else:
        cond = _in_bounds(pos, guards, p.src_sp)
    x = _load(cond, "src", p.src, [n, g * p.icg + ic], pos, p.src_sp, p.src_n)
    w = var("wei")[offset(p.wei, [g, oc, ic, *[var(k) for k in ks]])]
    c = g * p.ocg + oc
    dst_at = var("dst")[offset(p.dst, [n, c, *o])]
    return DirectSpec("pydnnl_conv_direct_fwd", ranges, x * w, tuple(["ic"] + ks),
                      _biased(p, dst_at, [n, c, *o]), dst_at, "dst", _has_sum(p), "w", W,
                      _arg_specs(p, "dst", _has_sum(p)))


def _spec_bwd_d(p: ConvProblem, params: DirectParams, guards=None) -> DirectSpec:
    from pymbolic import var

    nsp = len(p.kernel)
    T = params.tile
    NB = p.icg // T
    Q = p.groups * NB * p.mb
    ks = [f"k{i}" for i in range(nsp)]
    W, R = p.src_sp[-1], _extent(list(p.src_sp[:-1]))
    ranges = {"w": W, "r": R, "q": Q, "t": T, "oc": p.ocg, **{k: v for k, v in zip(ks, p.kernel)}}
    qv, t, oc = var("q"), var("t"), var("oc")
    n, g, ib = decompose(qv, [p.mb, p.groups, NB])
    ic = ib * T + t if T > 1 else ib
    i_sp = decompose(var("r"), list(p.src_sp[:-1])) + [var("w")]
    cond, o = output_positions(p, i_sp, ks, guards)
    dy = _load(cond, "dst", p.dst, [n, g * p.ocg + oc], o, p.dst_sp, p.dst_n)
    w = var("wei")[offset(p.wei, [g, oc, ic, *[var(k) for k in ks]])]
    c = g * p.icg + ic
    out_at = var("src")[offset(p.src, [n, c, *i_sp])]
    return DirectSpec("pydnnl_conv_direct_bwd_data", ranges, dy * w, tuple(["oc"] + ks),
                      _biased(p, out_at, [n, c, *i_sp]), out_at, "src", _has_sum(p), "w", W,
                      _arg_specs(p, "src", _has_sum(p)))


def _spec_bwd_w(p: ConvProblem, params: DirectParams, guards=None) -> DirectSpec:
    from pymbolic import var

    nsp = len(p.kernel)
    K = prod(p.kernel)
    T = params.tile
    NB = p.ocg // T
    Q = p.groups * NB
    X = p.icg * K
    os_ = [f"o{i}" for i in range(nsp)]
    ranges = {"x": X, "q": Q, "t": T, "n": p.mb, **{o: v for o, v in zip(os_, p.dst_sp)}}
    xv, qv, t = var("x"), var("q"), var("t")
    g, ob = decompose(qv, [p.groups, NB])
    oc = ob * T + t if T > 1 else ob
    ic, *kk = decompose(xv, [p.icg, *p.kernel])
    n = var("n")
    pos = [var(os_[i]) * p.strides[i] - p.padding_l[i] + kk[i] * (p.dilates[i] + 1)
           for i in range(nsp)]
    if guards is None:
        cond = bounds_condition(pos, _src_range(p), p.src_sp)
    else:
        cond = _in_bounds(pos, guards, p.src_sp)
    x = _load(cond, "src", p.src, [n, g * p.icg + ic], pos, p.src_sp, p.src_n)
    dy = var("dst")[offset(p.dst, [n, g * p.ocg + oc, *[var(o) for o in os_]])]
    out_at = var("wei")[offset(p.wei, [g, oc, ic, *kk])]
    return DirectSpec("pydnnl_conv_direct_bwd_weights", ranges, x * dy, tuple(["n"] + os_),
                      lambda value: value, out_at, "wei", False, "x", X,
                      _arg_specs(p, "wei", False))


def largest_divisor_at_most(n: int, cap: int) -> int:
    """The largest divisor of ``n`` that is <= ``cap``."""
    for d in range(min(n, max(cap, 1)), 0, -1):
        if n % d == 0:
            return d
    return 1


__all__ = ["DirectParams", "DirectSpec", "build_direct", "build_direct_loopy", "direct_runtime",
           "direct_spec",
           "largest_divisor_at_most"]
