"""Loopy generators of the data-movement kernels around convolution GEMMs.

* ``im2col``: gathers the input patches of a chunk of images into a dense column buffer
  ``col[n, g, ic, k..., o...]`` stored in any order of those dimensions (``order``), zeros
  where the kernel reads padding.
* ``col2im``: the adjoint: each input point sums the column entries of the (kernel tap,
  output point) pairs that read it (a gather, no atomics), then bias and post-ops.
* ``epilogue``: bias and post-ops applied to a GEMM result, in place or from a scratch
  accumulator into any destination layout.
* ``bias_grad``: ``diff_bias[c] = sum over images and points of t[n, c, sp...]`` as a
  work-group tree reduction per channel.

Run-time integer arguments (``n0``: first image of the chunk, ``col_off`` / ``acc_off``:
offsets into the scratchpad) let one kernel serve every chunk of a plan.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .conv_common import (
    INDEX_DTYPE,
    MIN_LANES,
    RT_LANES,
    _extent,
    apply_postops,
    clamp_into,
    col2im_column,
    decompose,
    domain_rt,
    finish,
    grid,
    grid_rt,
    guarded_load,
    hoist_group_indices,
    make_args,
    offset,
    plain_strides,
    postop_arg_specs,
    prod,
    product_values,
    rt_value_args,
    runtime_output_guards,
    split_fast,
    sym_plain_layout,
    tag_grid,
)
from .copy_source import (
    bias_grad_source,
    col2im_source,
    im2col_baked_source,
    im2col_rt_source,
    im2col_source,
    splitk_reduce_source,
)
from .sizevars import ceil_range, free_vars, is_var, size_var, symbolize


def _storage_order(layout: tuple, sizes=None) -> list[int]:
    """Dimensions from the outermost to the innermost in storage (by outer stride); dims of
    size 1 first (their place does not matter, and the innermost launch axis needs extent)."""
    _, per = layout
    order = sorted(range(len(per)), key=lambda d: (-per[d][1], d))
    return order if sizes is None else _units_first(order, sizes)


def _units_first(order, sizes) -> list[int]:
    return [d for d in order if sizes[d] == 1] + [d for d in order if sizes[d] != 1]


def _make_kernel(domain, insns, args, name, silenced=("v1_scheduler_fallback",)):
    import loopy as lp

    return lp.make_kernel(domain, insns, args, name=name, lang_version=(2018, 2),
                          target=lp.PyOpenCLTarget(), index_dtype=INDEX_DTYPE,
                          silenced_warnings=list(silenced))


@dataclass(frozen=True)
class Im2ColProblem:
    """``col[col_off + flat(order)] = src[n0 + n, g*ICg + ic, o*s - pl + k*(d+1)]``.

    The logical column dims are ``(n, g, ic, k_0.., o_0..)`` (nb images of the chunk);
    ``order`` lists them outermost first (a permutation of ``range(3 + 2*nsp)``).
    """

    nb: int
    groups: int
    icg: int
    src_sp: tuple
    dst_sp: tuple
    kernel: tuple
    strides: tuple
    dilates: tuple
    padding_l: tuple
    src: tuple
    src_n: int
    col_n: int
    order: tuple
    wg: int = 64
    per_item: int = 1  # elements per work-item (loops inside it; CPUs want many)
    # fewest work-items along axis 0 (the column's innermost dims flattened until they have
    # as many; baked sizes only): a work-group is at most that wide, GPUs want several warps
    lanes: int = MIN_LANES
    # > 0: the transposing copy into a column whose innermost dim is the output width while
    # src has channels innermost (nhwc): every work-item copies ``ic_block`` consecutive
    # channels of one point (one cache line read), neighbouring work-items neighbouring points
    # (contiguous stores); the plain order read one float per cache line, 5-10x slower
    ic_block: int = 0
    # run-time form (:func:`im2col_runtime`): per spatial dim, whether positions may fall
    # left of / right of the source (None: derived from the sizes, which are ints then)
    guards: tuple | None = None
    # the baked copy without channel blocks (``copy_source.im2col_baked_source``): values of
    # group axis 1 each work-item copies in a loop, and 32-bit index arithmetic (the caller
    # checks that the column chunk and the source have fewer than 2**31 elements); GPUs, see
    # ``heuristics.conv.copy_rows``
    rows_per_item: int = 1
    index32: bool = False


def _im2col_indices(p: Im2ColProblem):
    """(grid ranges, logical index exprs (n, g, ic, k..., o...), flat column offset expr)."""
    from pymbolic import var

    nsp = len(p.kernel)
    sizes = [p.nb, p.groups, p.icg, *p.kernel, *p.dst_sp]
    if not p.ic_block:
        order = _units_first(p.order, sizes)  # same storage; the innermost dim has extent
        ordered = [sizes[d] for d in order]
        if _is_runtime(p):
            ranges, parts, tag = grid_rt(ordered, p.per_item, p.wg)
        else:
            ranges, parts = grid(ordered, p.per_item, p.lanes)
            tag = None
        parts = parts[len(parts) - len(ordered):]
        pre = []
        if tag is not None:  # the group-id divisions once per work-item (see col2im)
            parts, pre, temps = hoist_group_indices(parts)
            pre = list(zip(pre, temps))
        logical = [None] * len(sizes)
        for d, e in zip(order, parts):
            logical[d] = e
        flat = 0
        for e, n in zip(parts, ordered):
            flat = flat * n + e
        return ranges, logical, flat, tag, pre
    # work-items run along the output points of the chunk (images and spatial dims
    # flattened: the column's innermost run), each copying the ``ic_block`` channels of its
    # point in a loop; work-groups over channel blocks (axis 1) and (group, tap) (axis 2)
    from .conv_common import decompose

    B = p.ic_block
    if _is_runtime(p):
        return _ic_block_rt(p)
    ranges = {"a0": p.nb * prod(p.dst_sp), "ici": B, "icb": p.icg // B, "g": p.groups,
              **{f"k{i}": v for i, v in enumerate(p.kernel)}}
    n_o = decompose(var("a0"), [p.nb, *p.dst_sp])
    logical = [n_o[0], var("g"), var("icb") * B + var("ici"),
               *[var(f"k{i}") for i in range(nsp)], *n_o[1:]]
    strides = [0] * len(sizes)
    st = 1
    for d in reversed(p.order):
        strides[d] = st
        st *= sizes[d]
    flat = sum(e * s_ for e, s_ in zip(logical, strides))
    return ranges, logical, flat, None, []


def _ic_block_rt(p: Im2ColProblem):
    """The channel-block copy with run-time sizes: work-items along the output width (no
    division per work-item), the height on group axis 1, the images, groups, channel blocks
    and taps on axis 2 (images outermost: constant divisors), further spatial dims looped."""
    from pymbolic import var

    nsp = len(p.kernel)
    B = p.ic_block
    sizes = [p.nb, p.groups, p.icg, *p.kernel, *p.dst_sp]
    ranges = {"a0": p.dst_sp[-1], "ici": B, "a1": p.dst_sp[-2] if nsp > 1 else 1}
    o = [None] * nsp
    o[-1] = var("a0")
    if nsp > 1:
        o[-2] = var("a1")
    for i in range(nsp - 2):
        ranges[f"o{i}"] = p.dst_sp[i]
        o[i] = var(f"o{i}")
    outer = [p.nb, p.groups, p.icg // B, *p.kernel]
    ranges["a2"] = _extent(outer)
    parts, pre, temps = hoist_group_indices(decompose(var("a2"), outer))
    n, g, icb, *k = parts
    logical = [n, g, icb * B + var("ici"), *k, *o]
    strides = [0] * len(sizes)
    st = 1
    for d in reversed(p.order):
        strides[d] = st
        st = st * sizes[d]
    flat = sum(e * s_ for e, s_ in zip(logical, strides))
    return ranges, logical, flat, "ic_block", list(zip(pre, temps))


def _is_runtime(p) -> bool:
    return bool(free_vars((p.nb, p.dst_sp, p.src_sp)))


def _im2col_guards(p: Im2ColProblem) -> tuple:
    """Per spatial dim: (positions may be < 0, positions may be >= the source size)."""
    if p.guards is not None:
        return p.guards
    out = []
    for i in range(len(p.kernel)):
        hi = ((p.dst_sp[i] - 1) * p.strides[i] - p.padding_l[i]
              + (p.kernel[i] - 1) * (p.dilates[i] + 1))
        out.append((p.padding_l[i] > 0, hi >= p.src_sp[i]))
    return tuple(out)


def build_im2col(p: Im2ColProblem):
    """The im2col kernel of ``p``: the CPU plans' channel-block copy with run-time sizes and
    the copies without channel blocks (baked or run-time sizes) from printers
    (:mod:`pydnnl.kernels.copy_source`: no loopy import or code generation in a first-ever
    creation), every other form from loopy."""
    src = im2col_source(p)
    if src is None:
        src = im2col_baked_source(p)
    if src is None:
        src = im2col_rt_source(p)
    return src if src is not None else build_im2col_loopy(p)


def build_im2col_loopy(p: Im2ColProblem):
    """The loopy kernel of ``p`` (a TranslationUnit)."""
    import loopy as lp
    from pymbolic import var
    from pymbolic.primitives import Comparison, If, LogicalAnd

    nsp = len(p.kernel)
    ranges, logical, flat, tag, hoisted = _im2col_indices(p)
    n, g, ic = logical[:3]
    k = logical[3:3 + nsp]
    o = logical[3 + nsp:]
    pos = [o[i] * p.strides[i] - p.padding_l[i] + k[i] * (p.dilates[i] + 1) for i in range(nsp)]
    conds, clamped = [], []
    for e, (lo, hi), n_ in zip(pos, _im2col_guards(p), p.src_sp):
        if lo:
            conds.append(Comparison(e, ">=", 0))
        if hi:
            conds.append(Comparison(e, "<", n_))
        # a valid address whatever the condition (see clamped_positions)
        clamped.append(clamp_into(e, n_) if lo or hi else e)
    cond = None if not conds else conds[0] if len(conds) == 1 else LogicalAnd(tuple(conds))
    at = [var("n0") + n, g * p.icg + ic]
    dst_at = var("col")[var("col_off") + flat]
    inames = frozenset(ranges)
    # run-time form: the group-id divisions computed once per work-item (the implicit-GEMM
    # zero-padding copy of a 56x56x64 image: 2.0x of baked with them inline, 1.0x hoisted)
    pre = [i for i, _ in hoisted]
    temps = [t for _, t in hoisted]
    after = frozenset(i.id for i in pre)
    if cond is None:
        insns = [lp.Assignment(dst_at, var("src")[offset(p.src, [*at, *pos])],
                               within_inames=inames, id="store", depends_on=after)]
    else:
        # an unconditional load from the clamped (always valid) position, then a select: the
        # compilers keep a vector load and blend instead of masking every lane
        safe = var("src")[offset(p.src, [*at, *clamped])]
        insns = [lp.Assignment(var("v"), safe, within_inames=inames, id="load",
                               depends_on=after),
                 lp.Assignment(dst_at, If(cond, var("v"), np.float32(0)), within_inames=inames,
                               id="store", depends_on=frozenset(["load"]))]
        temps.append(lp.TemporaryVariable("v", np.float32, shape=(),
                                          address_space=lp.AddressSpace.PRIVATE))
    insns = pre + insns
    args = make_args([("src", -1, False, True), ("col", -1, True, False),
                      ("n0", None), ("col_off", None)])
    args += rt_value_args(p, ranges, known=("n0", "col_off"))
    knl = _make_kernel(domain_rt(ranges), insns, args + temps, "pydnnl_conv_im2col",
                       silenced=("v1_scheduler_fallback", "write_race(store)"))
    if tag == "ic_block":  # run-time sizes: the guard of the partial work-group stays
        knl = lp.split_iname(knl, "a0", p.wg, inner_tag="l.0", outer_tag="g.0")
        knl = _hoisted_everywhere(lp.tag_inames(knl, {"a1": "g.1", "a2": "g.2"}), pre)
        return finish(knl)
    if p.ic_block:
        knl = split_fast(knl, "a0", ranges["a0"], p.wg, peel=True)
        outer = ["g", *[f"k{i}" for i in range(nsp)]]
        knl = lp.tag_inames(knl, {"icb": "g.1"})
        knl = lp.join_inames(knl, outer, "a2") if len(outer) > 1 else \
            lp.rename_iname(knl, outer[0], "a2")
        knl = lp.tag_inames(knl, {"a2": "g.2"})
        return finish(knl)
    if tag is not None:
        return finish(_hoisted_everywhere(tag(knl), pre))
    return finish(tag_grid(knl, ranges, p.wg))


def _hoisted_everywhere(knl, pre):
    """The hoisted index instructions (:func:`hoist_group_indices`) run in every work-item
    (outside its loops)."""
    import loopy as lp

    ids = [i.id for i in pre]
    if not ids:
        return knl
    return lp.add_inames_for_unused_hw_axes(knl, " or ".join(f"id:{i}" for i in ids))


def im2col_runtime(p: Im2ColProblem) -> tuple[Im2ColProblem, dict]:
    """The run-time-size form of ``p``: ``(problem, values)``, the problem's minibatch chunk
    ``nb``, spatial sizes ``src_sp`` / ``dst_sp`` and source strides (but unit ones) replaced
    by size variables, ``values`` the ints to bind at launch, next to ``src``, ``col``, ``n0``
    and ``col_off``::

        ip, sizes = im2col_runtime(Im2ColProblem(...))   # the problem with ints, as before
        plan.kernel("conv_im2col", ip, build_im2col, src=..., col=..., n0=0, col_off=off,
                    **sizes)

    One program then serves every minibatch and spatial size of the (groups, channels,
    kernel, strides, dilations, left pads (whether the lower bound is tested), column order,
    source layout class) class. Blocked sources keep their sizes: ``(p, {})``.
    """
    nsp = len(p.kernel)
    if not p.ic_block and p.order[-1] == 2 and p.icg < MIN_LANES:
        # a specialization: channels innermost but too few for the lanes (the 3 of an image),
        # which then run over taps and channels: baked, ResNet-50's conv1 copy takes 1.3 ms,
        # 2.0 ms with run-time sizes (AVX-512 Xeon, 2 cores)
        return p, {}
    lay = sym_plain_layout(p.src, "src", channels=p.groups * p.icg)
    if lay is None:
        return p, {}
    src, strides = lay
    values = {"nb": p.nb, **{f"is{i}": v for i, v in enumerate(p.src_sp)},
              **{f"os{i}": v for i, v in enumerate(p.dst_sp)}}
    sym, _ = symbolize(values)
    # the upper bound is always tested: whether the last positions pass the source's end
    # changes with the sizes' parity under strides (and with the right padding a caller's
    # zero-padding copy needs), and one compare and select per copied value costs nothing
    # measurable here, where another program per parity costs a compilation
    guards = tuple((lo, True) for lo, _ in _im2col_guards(p))
    q = replace(p, nb=sym["nb"], src_sp=tuple(sym[f"is{i}"] for i in range(nsp)),
                dst_sp=tuple(sym[f"os{i}"] for i in range(nsp)), src=src, src_n=-1, col_n=-1,
                guards=guards)
    return q, {**product_values(values, ["nb", *[f"os{i}" for i in range(nsp)]]), **strides}


@dataclass(frozen=True)
class Col2ImProblem:
    """``out[n0 + n, g*ICg + ic, i...] = post_ops(sum over taps of col[...] + bias)``.

    Column dims and ``order`` as in :class:`Im2ColProblem`; ``out`` is the layout of the
    written activation ``[N, G*ICg, in...]``; ``bias`` (IC entries) and ``post_ops`` optional.
    """

    nb: int
    groups: int
    icg: int
    src_sp: tuple
    dst_sp: tuple
    kernel: tuple
    strides: tuple
    dilates: tuple
    padding_l: tuple
    out: tuple
    out_n: int
    col_n: int
    order: tuple
    bias: tuple | None = None
    bias_n: int = 0
    post_ops: tuple = ()
    wg: int = 64
    per_item: int = 1
    # run-time form (:func:`col2im_runtime`): the dims of ``out`` from the outermost to the
    # innermost in storage (its strides are variables then) and, per spatial dim, whether the
    # output positions are tested against 0 and against the output's end (None: derived from
    # the int sizes)
    out_order: tuple | None = None
    guards: tuple | None = None


def _storage_grid(sizes, layout, rt_order, per_item, wg, runtime):
    """(ranges, per-dim index exprs in ``sizes``' order, tag) of a grid walking a tensor of
    ``sizes``: over ``rt_order`` with run-time sizes (``tag`` tags it), else over
    ``layout``'s storage order (``tag`` None: :func:`tag_grid` does)."""
    if runtime:
        order = list(rt_order)
        ranges, parts, tag = grid_rt([sizes[d] for d in order], per_item, wg)
    else:
        order = _storage_order(layout, sizes)
        ranges, parts = grid([sizes[d] for d in order], per_item)
        tag = None
    idx = [None] * len(sizes)
    for d, e in zip(order, parts[len(parts) - len(order):]):
        idx[d] = e
    return ranges, idx, tag


def build_col2im(p: Col2ImProblem):
    """The col2im kernel of ``p``: printed where :func:`~pydnnl.kernels.copy_source.
    col2im_source` covers it (no loopy in a first-ever creation), else loopy's."""
    src = col2im_source(p)
    return src if src is not None else build_col2im_loopy(p)


def build_col2im_loopy(p: Col2ImProblem):
    """The loopy kernel of ``p`` (a TranslationUnit)."""
    import loopy as lp
    from loopy.symbolic import Reduction
    from pymbolic import var
    from pymbolic.primitives import Comparison, If

    nsp = len(p.kernel)
    sizes = [p.nb, p.groups, p.icg, *p.kernel, *p.dst_sp]
    col_strides = [0] * len(sizes)
    st = 1
    for d in reversed(p.order):
        col_strides[d] = st
        st *= sizes[d]
    # iterate over the written tensor in its storage order: [n, c, sp...]
    out_sizes = [p.nb, p.groups * p.icg, *p.src_sp]
    runtime = _is_runtime(p)
    ranges, idx, tag = _storage_grid(out_sizes, p.out, p.out_order, p.per_item, p.wg, runtime)
    pre, temps = [], []
    if runtime:
        idx, pre, temps = hoist_group_indices(idx)
    lane_guard = None
    if runtime and is_var(ranges["a0"]):
        # a run-time width on the lanes: the last work-group computes its idle lanes at the
        # last point (clamped) and only their stores are masked; loopy's guard of the whole
        # work-item made the compiler mask every load (channels-first 3x3 stride 2, 56x56:
        # 1.0 ms with the guard, 0.37 ms baked)
        lane_guard = Comparison(var("a0"), "<", ranges["a0"])
        idx = [clamp_into(e, ranges["a0"]) if e == var("a0") else e for e in idx]
    n, c, i_sp = idx[0], idx[1], idx[2:]
    ks = [f"k{i}" for i in range(nsp)]
    cond, cidx = col2im_column(p, n, c, i_sp, ks)
    coff = var("col_off") + sum(e * s for e, s in zip(cidx, col_strides))
    val = var("col")[coff] if cond is None else If(cond, var("col")[coff], np.float32(0))
    value = Reduction("sum", tuple(ks), val) if nsp else val
    if lane_guard is not None:  # the sum unguarded, the store behind the lane test
        pre.append(lp.Assignment(var("v"), value, within_inames=frozenset(ranges), id="sum",
                                 depends_on=frozenset(i.id for i in pre)))
        temps.append(lp.TemporaryVariable("v", np.float32, shape=(),
                                          address_space=lp.AddressSpace.PRIVATE))
        value = var("v")
    if p.bias is not None:
        value = value + var("bias")[offset(p.bias, [c])]
    out_at = var("out")[offset(p.out, [var("n0") + n, c, *i_sp])]
    value = apply_postops(value, p.post_ops, out_at, at=[var("n0") + n, c, *i_sp])
    insn = lp.Assignment(out_at, value, within_inames=frozenset(ranges), id="store",
                         depends_on=frozenset(i.id for i in pre),
                         predicates=frozenset([lane_guard] if lane_guard is not None else []))
    has_sum = any(op[0] == "sum" for op in p.post_ops)
    specs = [("col", -1, False, True), ("out", -1, True, has_sum)]
    if p.bias is not None:
        specs.append(("bias", p.bias_n, False, True))
    specs += postop_arg_specs(p.post_ops) + [("n0", None), ("col_off", None)]
    dom = domain_rt({**ranges, **dict(zip(ks, p.kernel))})
    if lane_guard is not None:  # a0 up to the next whole work-group: the split adds no guard
        L = min(p.wg, RT_LANES)
        dom = dom.replace(f"0 <= a0 < {ranges['a0']}",
                          f"0 <= a0 and (exists e: a0 < {L}e and {L}e <= {ranges['a0']} + "
                          f"{L - 1})")
    args = make_args(specs) + rt_value_args(p, ranges, known=("n0", "col_off"))
    knl = _make_kernel(dom, [*pre, insn], args + temps, "pydnnl_conv_col2im",
                       silenced=("v1_scheduler_fallback", "write_race(store)"))
    knl = tag(knl) if runtime else tag_grid(knl, ranges, p.wg)
    hoisted = [i.id for i in pre if i.id != "sum"]
    if hoisted:  # the hoisted indices run in every work-item (outside its loops)
        knl = lp.add_inames_for_unused_hw_axes(knl, " or ".join(f"id:{i}" for i in hoisted))
    return finish(knl, p.post_ops)


def col2im_runtime(p: Col2ImProblem) -> tuple[Col2ImProblem, dict]:
    """The run-time-size form of ``p``: ``(problem, values)``, the chunk ``nb``, the spatial
    sizes ``src_sp`` (``is<i>``, the written activation's) and ``dst_sp`` (``os<i>``, the
    column's output points) and the strides of ``out`` (but unit ones and a channels-last
    point stride) replaced by size variables; bind ``values`` at launch next to ``col``,
    ``out``, ``bias``, ``n0`` and ``col_off``. Work-items run along the innermost dim of
    ``out`` (the width of channels-first, the channels of channels-last); no division by a
    run-time size per work-item. The upper bound of every output position is always tested
    (:func:`~pydnnl.kernels.conv_common.runtime_output_guards`), so sizes of either parity
    under strides share one program.

    ``(p, {})`` (baked) for blocked layouts of ``out``, binary post-ops (their operands'
    layouts bake sizes) and channels-last with fewer than 16 channels (the lanes would run
    over a few channels alone; baked, they run over points and channels flattened).
    """
    if any(op[0] == "binary" for op in p.post_ops):
        return p, {}
    C = p.groups * p.icg
    lay = sym_plain_layout(p.out, "out", channels=C)
    if lay is None:
        return p, {}
    nsp = len(p.kernel)
    strides = plain_strides(p.out)
    # storage order by stride alone (no "unit dims first": which dims have size 1 changes
    # with the sizes, and the program must not)
    order = tuple(sorted(range(2 + nsp), key=lambda d: (-strides[d], d)))
    if order[-1] == 1 and C < MIN_LANES:
        return p, {}
    out, out_strides = lay
    values = {"nb": p.nb, **{f"is{i}": v for i, v in enumerate(p.src_sp)},
              **{f"os{i}": v for i, v in enumerate(p.dst_sp)}}
    sym, _ = symbolize(values)
    q = replace(p, nb=sym["nb"], src_sp=tuple(sym[f"is{i}"] for i in range(nsp)),
                dst_sp=tuple(sym[f"os{i}"] for i in range(nsp)), out=out, out_n=-1, col_n=-1,
                out_order=order, guards=runtime_output_guards(p))
    return q, {**product_values(values, ["nb", *[f"is{i}" for i in range(nsp)]]),
               **out_strides}


@dataclass(frozen=True)
class EpilogueProblem:
    """``dst[n0 + n, c, sp...] = post_ops(acc[n, c, sp...] + bias[c])`` over a chunk.

    ``acc`` is None for in place (the accumulator is dst itself, at the same element);
    otherwise its layout is relative to the run-time ``acc_off``. ``sum_done``: the GEMM
    already added ``scale * dst_prior`` of the first post-op (a sum), so it is skipped here.
    """

    nb: int
    channels: int
    sp: tuple
    dst: tuple
    dst_n: int
    acc: tuple | None
    acc_n: int
    bias: tuple | None
    bias_n: int
    post_ops: tuple
    sum_done: bool = False
    wg: int = 64
    per_item: int = 1
    # the dims of dst from the outermost to the innermost in storage (run-time form, whose
    # strides are variables; None: from the strides)
    order: tuple | None = None


def build_epilogue(p: EpilogueProblem):
    """The epilogue kernel of ``p``: printed where :func:`~pydnnl.kernels.copy_source.
    epilogue_source` covers it (no loopy in a first-ever creation), else loopy's."""
    from .copy_source import epilogue_source

    src = epilogue_source(p)
    return src if src is not None else build_epilogue_loopy(p)


def build_epilogue_loopy(p: EpilogueProblem):
    """The loopy kernel of ``p`` (a TranslationUnit)."""
    import loopy as lp
    from pymbolic import var

    sizes = [p.nb, p.channels, *p.sp]
    runtime = bool(free_vars((p.nb, p.sp)))
    ranges, idx, tag = _storage_grid(sizes, p.dst, p.order, p.per_item, p.wg, runtime)
    n, c, sp = idx[0], idx[1], idx[2:]
    dst_at = var("dst")[offset(p.dst, [var("n0") + n, c, *sp])]
    if p.acc is None:
        value = dst_at
    else:
        value = var("acc")[var("acc_off") + offset(p.acc, [n, c, *sp])]
    if p.bias is not None:
        value = value + var("bias")[offset(p.bias, [c])]
    value = apply_postops(value, p.post_ops, dst_at, skip=1 if p.sum_done else 0,
                          at=[var("n0") + n, c, *sp])
    ops = p.post_ops[1:] if p.sum_done else p.post_ops
    insn = lp.Assignment(dst_at, value, within_inames=frozenset(ranges), id="store")
    reads_dst = p.acc is None or any(op[0] == "sum" for op in ops)
    specs = [("dst", -1, True, reads_dst)]
    if p.acc is not None:
        specs.append(("acc", -1, False, True))
    if p.bias is not None:
        specs.append(("bias", p.bias_n, False, True))
    specs += postop_arg_specs(p.post_ops) + [("n0", None), ("acc_off", None)]
    args = make_args(specs) + rt_value_args(p, ranges, known=("n0", "acc_off"))
    knl = _make_kernel(domain_rt(ranges), [insn], args, "pydnnl_conv_epilogue",
                       silenced=("v1_scheduler_fallback", "write_race(store)"))
    knl = tag(knl) if runtime else tag_grid(knl, ranges, p.wg)
    return finish(knl, p.post_ops)


def _points_layout(layout: tuple, sp: tuple):
    """The plain layout of ``[N, C, sp...]`` seen as ``[N, C, points]`` when its spatial dims
    fold into one (each stride the next one times its size), else None."""
    st = plain_strides(layout)
    if st is None:
        return None
    sps = st[2:]
    if any(sps[d] != sps[d + 1] * sp[d + 1] for d in range(len(sp) - 1)):
        return None
    return layout[0], ((1, st[0], ()), (1, st[1], ()), (1, sps[-1] if sps else 0, ()))


def channels_last_rows(layout: tuple, channels: int, sp: tuple, mb: int):
    """``(rows, offset)`` when the plain layout of ``[mb, channels, sp...]`` is rows of
    ``channels`` contiguous values, images and points dense (channels-last), else None."""
    t = _points_layout(layout, sp)
    if t is None:
        return None
    (sn, sc, spt) = (d[1] for d in t[1])
    P = prod(sp)
    if sc != 1 or (spt != channels and P > 1) or (sn != P * channels and mb > 1):
        return None
    return mb * P, t[0]


def epilogue_runtime(p: EpilogueProblem) -> tuple[EpilogueProblem, dict]:
    """The run-time-size form of ``p``: ``(problem, values)`` (bind ``values`` at launch):
    dst (and acc) seen as ``[nb, channels, points]`` with the chunk size ``nb``, the point
    count ``pts`` and the strides (but unit ones) as size variables; work-items run along
    the innermost dim of dst (channels for channels-last). ``(p, {})`` where that does not
    apply: blocked or non-folding layouts, binary post-ops (their operands' layouts bake
    sizes), points innermost (channels-first: see below)."""
    if any(op[0] == "binary" for op in p.post_ops):
        return p, {}
    dst = _points_layout(p.dst, p.sp)
    acc = None if p.acc is None else _points_layout(p.acc, p.sp)
    if dst is None or (p.acc is not None and acc is None):
        return p, {}
    strides = plain_strides(dst)
    order = tuple(sorted(range(3), key=lambda d: (-strides[d], d)))
    if order[-1] != 1:
        # a specialization: points innermost (channels-first) stay baked. The run-time grid
        # puts the point count alone on the lanes, one element per work-item, where the baked
        # kernel loops over ~64: 1.3-3x the baked kernel's time on ResNet-50's layers
        # (AVX-512 Xeon, 2 cores; hoisting its divisions and masking only the stores did not
        # help)
        return p, {}
    # (the point stride stays an argument here: baked as the channel count, the channels-last
    # epilogue of a 3x3 layer ran 4x slower)
    dst, values = sym_plain_layout(dst, "dst")
    if acc is not None:
        acc, acc_values = sym_plain_layout(acc, "acc")
        values.update(acc_values)
    sizes = {"nb": p.nb, "pts": prod(p.sp)}
    sym, _ = symbolize(sizes)
    q = replace(p, nb=sym["nb"], sp=(sym["pts"],), dst=dst, dst_n=-1, acc=acc, acc_n=-1,
                order=order)
    return q, {**product_values(sizes), **values}


@dataclass(frozen=True)
class BiasGradProblem:
    """``bias[c] = sum_{n, sp} t[n, c, sp...]`` (``t``: diff_dst of the convolution, or the
    src of the equivalent convolution for deconvolution)."""

    mb: int
    channels: int
    sp: tuple
    t: tuple
    t_n: int
    bias: tuple
    bias_n: int
    wg: int = 64


def build_bias_grad(p: BiasGradProblem):
    if free_vars((p.mb, p.sp)):
        # the run-time form's source from a printer where it covers it (kernels.copy_source:
        # no loopy import or code generation)
        src = bias_grad_source(p)
        return src if src is not None else _build_bias_grad_rt(p)
    import loopy as lp
    from loopy.symbolic import Reduction
    from pymbolic import var
    from pymbolic.primitives import Comparison

    NP = p.mb * prod(p.sp)
    L = max(1, min(p.wg, NP))
    J = -(-NP // L)
    j = var("jo") * L + var("jl")
    n, *sp = decompose(j, [p.mb, *p.sp])
    cond = Comparison(j, "<", NP) if J * L != NP else None
    val = guarded_load(cond, "t", offset(p.t, [n, var("c"), *sp]))
    insn = lp.Assignment(var("bias")[offset(p.bias, [var("c")])],
                         Reduction("sum", ("jl",), Reduction("sum", ("jo",), val)),
                         within_inames=frozenset(["c"]))
    args = make_args([("t", p.t_n, False, True), ("bias", p.bias_n, True, False)])
    insn = insn.copy(id="bias_sum")
    knl = _make_kernel("{[c, jo, jl]: 0 <= c < %d and 0 <= jo < %d and 0 <= jl < %d}"
                       % (p.channels, J, L), [insn], args, "pydnnl_conv_bias_grad",
                       silenced=("v1_scheduler_fallback", "write_race(bias_sum)"))
    knl = lp.tag_inames(knl, {"c": "g.0", "jl": "l.0"})
    # preprocessed here: the launch size must count the local reduction iname, which only
    # the preprocessed kernel shows (compiler.source_from_loopy reads sizes off the kernel)
    return lp.preprocess_program(finish(knl))


# points per lane and chunk of the run-time bias gradient: independent partial sums keep
# that many loads in flight (see _build_bias_grad_rt)
_BG_UNROLL = 4


def _build_bias_grad_rt(p: BiasGradProblem):
    """The run-time-size bias gradient (see :func:`bias_grad_runtime`): per channel, the
    lanes of a work-group take consecutive points; per image, a loop over whole chunks of
    ``4 * wg`` points (``pfull`` of them: no guard) into four partial sums per lane, then one
    guarded tail of under four blocks. One sum per lane, whose loop count is now a run-time
    value, ran 1.5-2.6x slower on the H200 than the baked kernel, whose compiler unrolls."""
    import loopy as lp
    from loopy.symbolic import Reduction
    from pymbolic import var
    from pymbolic.primitives import Comparison, If

    (P,) = p.sp
    L, U = p.wg, _BG_UNROLL
    c, jl, u = var("c"), var("jl"), var("u")
    part = var("part")
    full = var("t")[offset(p.t, [var("nn"), c, (var("jo") * U + u) * L + jl])]
    jt = var("pfull") + var("jr") * L + jl
    # the address stays inside t whatever the compiler speculates (see guarded_load)
    tail = If(Comparison(jt, "<", P),
              var("t")[offset(p.t, [var("nt"), c, clamp_into(jt, P)])], np.float32(0))
    lane_total = sum((part[i] for i in range(1, U)), part[0]) + Reduction(
        "sum", ("nt", "jr"), tail)
    insns = [
        lp.Assignment(part[var("ui")], np.float32(0),
                      within_inames=frozenset(["c", "jl", "ui"]), id="part_init"),
        lp.Assignment(part[u], part[u] + full,
                      within_inames=frozenset(["c", "jl", "nn", "jo", "u"]), id="part_add",
                      depends_on=frozenset(["part_init"])),
        lp.Assignment(var("bias")[offset(p.bias, [c])], Reduction("sum", ("jl",), lane_total),
                      within_inames=frozenset(["c"]), id="bias_sum",
                      depends_on=frozenset(["part_add"])),
    ]
    args = make_args([("t", -1, False, True), ("bias", p.bias_n, True, False)])
    args += rt_value_args(p) + [lp.ValueArg("pfull", np.int64),
                                lp.TemporaryVariable("part", np.float32, shape=(U,),
                                                     address_space=lp.AddressSpace.PRIVATE)]
    # the whole chunks in a domain of their own: none (fewer points than a chunk) must not
    # empty the tail's domain
    dom = [f"{{[c, jl, u, ui, nn, nt, jr]: 0 <= c < {p.channels} and 0 <= jl < {L} and "
           f"0 <= u, ui, jr < {U} and 0 <= nn < {p.mb} and 0 <= nt < {p.mb}}}",
           f"{{[jo]: {ceil_range('jo', size_var('pfull'), U * L)}}}"]
    knl = _make_kernel(dom, insns, args, "pydnnl_conv_bias_grad",
                       silenced=("v1_scheduler_fallback", "write_race(bias_sum)"))
    knl = lp.tag_inames(knl, {"c": "g.0", "jl": "l.0", "u": "unr", "ui": "unr", "jr": "unr"})
    # images outermost (one image's points are contiguous), the partial sums innermost
    knl = lp.prioritize_loops(knl, "nn,jo,u")
    knl = lp.prioritize_loops(knl, "nt,jr")
    return lp.preprocess_program(finish(knl))


def build_bias_grad_loopy(p: BiasGradProblem):
    """The loopy kernel of ``p`` (a TranslationUnit), never the printed source."""
    return _build_bias_grad_rt(p) if free_vars((p.mb, p.sp)) else build_bias_grad(p)


def bias_grad_runtime(p: BiasGradProblem) -> tuple[BiasGradProblem, dict]:
    """The run-time-size form of ``p``: ``(problem, values)``: t seen as ``[mb, channels,
    points]`` with ``mb``, the point count ``pts`` and t's strides (but unit ones) as size
    variables. ``(p, {})`` for blocked or non-folding layouts."""
    t = _points_layout(p.t, p.sp)
    if t is None:
        return p, {}
    t, values = sym_plain_layout(t, "t", channels=p.channels)
    sizes = {"mb": p.mb, "pts": prod(p.sp)}
    sym, _ = symbolize(sizes)
    q = replace(p, mb=sym["mb"], sp=(sym["pts"],), t=t, t_n=-1)
    chunk = _BG_UNROLL * p.wg
    return q, {**sizes, **values, "pfull": sizes["pts"] // chunk * chunk}


@dataclass(frozen=True)
class SplitKReduceProblem:
    """``c[c_off + i*ldc + j] = sum_t part[part_off + (t*m + i)*n + j] (+ beta * c[...])``:
    the slices of a split-k GEMM added into C; ``splits`` may be a size variable."""

    m: int
    n: int
    splits: object  # an int or a size variable
    ldc: int
    beta: float = 0.0
    wg: int = 64


def build_splitk_reduce(p: SplitKReduceProblem):
    """The split-k reduction of ``p``: printed (:func:`~pydnnl.kernels.copy_source.
    splitk_reduce_source`: no loopy in a first-ever creation) where it covers it, else
    loopy's."""
    src = splitk_reduce_source(p)
    return src if src is not None else build_splitk_reduce_loopy(p)


def build_splitk_reduce_loopy(p: SplitKReduceProblem):
    """The loopy kernel of ``p`` (a TranslationUnit)."""
    import loopy as lp
    from loopy.symbolic import Reduction
    from pymbolic import var

    i, j, t = var("i"), var("j"), var("t")
    part = var("part")[var("part_off") + (t * p.m + i) * p.n + j]
    value = Reduction("sum", ("t",), part)
    c_at = var("c")[var("c_off") + i * p.ldc + j]
    if p.beta != 0.0:
        value = value + (c_at if p.beta == 1.0 else np.float32(p.beta) * c_at)
    insn = lp.Assignment(c_at, value, within_inames=frozenset(["i", "j"]), id="store")
    args = make_args([("part", -1, False, True), ("c", -1, True, p.beta != 0.0),
                      ("part_off", None), ("c_off", None)]) + rt_value_args(p)
    knl = _make_kernel("{[i, j, t]: 0 <= i < %d and 0 <= j < %d and 0 <= t < %s}"
                       % (p.m, p.n, p.splits), [insn], args, "pydnnl_conv_splitk_reduce",
                       silenced=("v1_scheduler_fallback", "write_race(store)"))
    knl = split_fast(knl, "j", p.n, p.wg, peel=True)
    return finish(lp.tag_inames(knl, {"i": "g.1"}))


__all__ = ["Im2ColProblem", "build_im2col", "build_im2col_loopy", "im2col_runtime",
           "Col2ImProblem", "build_col2im", "col2im_runtime",
           "EpilogueProblem", "build_epilogue", "epilogue_runtime", "BiasGradProblem",
           "build_bias_grad", "build_bias_grad_loopy", "bias_grad_runtime", "channels_last_rows",
           "SplitKReduceProblem", "build_splitk_reduce", "build_splitk_reduce_loopy"]
