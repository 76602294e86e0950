"""Loopy generators of implicit-GEMM convolution kernels.

An implicit GEMM is the GEMM of im2col + GEMM whose patch matrix is never written: every load
of the patch operand computes its address from (row, tap, channel). Kernels:

* ``igemm_data`` (:class:`IgemmDataProblem`): forward and backward data. Rows are points of a
  grid ``jsp`` (images and spatial positions), columns the written channels, the reduction runs
  over taps and then channels (innermost). Row ``(n, j)`` with tap ``u`` reads the activation
  ``a`` at position ``j * a_stride + a_off + u * a_step``; the written point is
  ``j * o_stride + o_off``. Forward: ``a`` = src, ``a_stride`` = strides, ``a_step`` =
  dilation + 1. Backward data with stride ``s`` runs one kernel per phase (input points of one
  residue modulo ``s``), whose valid taps form a progression: a stride-1 problem over diff_dst.
  Weights are read packed (:class:`WeiPackProblem`) in panels of ``cols`` channels.
* ``igemm_wei`` (:class:`IgemmWeiProblem`): backward weights. Rows are (tap, input channel),
  columns output channels, the reduction runs over images and output points (optionally split
  into ``splits`` slices whose partial sums :class:`WeiReduceProblem` adds).

Register tiles as in :mod:`pydnnl.kernels.gemm`: a work-item owns ``rows x cols`` results in
private ``float<vec>`` accumulators, loads ``cols`` contiguous values of the column operand
into vectors and broadcasts one value of the row operand per row. Each row's base address is
computed once, before the reduction (clamped rows past the end, never stored), so the inner
loop is affine address arithmetic with no bounds tests: callers pad the activations first
(the reads stay inside ``a``). Activations are addressed through plain strides (the solver
stages other layouts); outputs through any layout's terms, with bias and post-ops fused into
the store.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..constants import algorithm
from .conv_common import (
    INDEX_DTYPE,
    apply_postops,
    decompose,
    finish,
    grid,
    make_args,
    offset,
    plain_strides,
    postop_arg_specs,
    prod,
    tag_grid,
)
from .sizevars import ceil_range, is_var, value_args

# how register-tile loops are unrolled: #pragma unroll hints (loopy's own unrolling costs
# seconds of code generation per kernel)
_UNROLL = "unr_hint"


@dataclass(frozen=True)
class TileParams:
    """Register tile of one work-item and the work-group shape.

    ``rows`` x ``cols`` results, ``cols`` a multiple of ``vec`` (the float vector width);
    ``wg = (wg_n, wg_m)`` work-items along columns and rows; ``m_inner``: row tiles on launch
    axis 0 (consecutive work-groups share a column panel)."""

    rows: int = 4
    cols: int = 16
    vec: int = 8
    wg: tuple = (1, 1)
    m_inner: bool = True


@dataclass(frozen=True)
class PlainTensor:
    """An activation ``[N, C, sp...]`` with plain strides: ``off0 + n*sn + c*sc + sum
    pos_d * ssp_d``."""

    off0: int
    sn: int
    sc: int
    ssp: tuple


@dataclass(frozen=True)
class IgemmDataProblem:
    """Forward or one backward-data phase (see the module docstring); hashable.

    ``kch``: reduction channels per group (read from ``a``); ``nch``: written channels per
    group. ``taps[d]`` taps per dim (0: the phase reads nothing); weight tap
    ``wt0[d] + u * wstep[d]`` of a kernel of size ``kernel``. Packed weights live at
    ``wp_off`` of ``wp`` (:class:`WeiPackProblem` with the same ``cols``). ``out`` is the
    layout of the written activation ``[N, G*nch, sp...]``.
    """

    mb: int
    groups: int
    kch: int
    nch: int
    jsp: tuple
    a: PlainTensor
    a_stride: tuple
    a_off: tuple
    a_step: tuple
    taps: tuple
    kernel: tuple
    wt0: tuple
    wstep: tuple
    wp_off: int
    out: tuple
    out_n: int
    o_stride: tuple
    o_off: tuple
    bias: tuple | None = None
    bias_n: int = 0
    post_ops: tuple = ()
    tile: TileParams = TileParams()
    rows: object = None  # the row count mb * prod(jsp) when the sizes are size variables
    tall: bool = False  # run-time rows, at least a tile's (see _register_tile)


@dataclass(frozen=True)
class WeiPackProblem:
    """``wp[wp_off + (((g*npan + pan)*K + tap)*kch + kc)*cols + w]`` = the weight of group ``g``
    between written channel ``pan*cols + w`` and reduction channel ``kc`` at flat tap ``tap``
    (0 past ``nch``). ``transpose``: the written channels are the weights' input channels
    (backward data)."""

    groups: int
    kch: int
    nch: int
    kernel: tuple
    wei: tuple
    wei_n: int
    cols: int
    transpose: bool
    wp_off: int
    per_item: int = 64
    wg: int = 64


@dataclass(frozen=True)
class IgemmWeiProblem:
    """Backward weights: ``wei[g, oc, ic, tap] = sum_{n, o} dst[n, g*ocg+oc, o] *
    src[n, g*icg+ic, o*s - pl + tap*(d+1)]`` (``src`` padded so that every read is inside).

    Rows are (tap, ic), tap major; ``splits`` > 1: slice ``t`` of the (image, outer output
    point) range writes its sums to ``part[part_off + ((t*G + g)*K*icg + row)*ocg + oc]``."""

    mb: int
    groups: int
    icg: int
    ocg: int
    dst_sp: tuple
    kernel: tuple
    strides: tuple
    dilates: tuple
    padding_l: tuple
    src: PlainTensor
    dst: PlainTensor
    wei: tuple
    wei_n: int
    splits: int = 1
    part_off: int = 0
    tile: TileParams = TileParams()
    rows: object = None  # mb * prod(dst_sp[:-1]) when the sizes are size variables


@dataclass(frozen=True)
class WeiReduceProblem:
    """``wei[g, oc, ic, tap] = sum_t part[part_off + ((t*G + g)*K*icg + tap*icg + ic)*ocg +
    oc]``: the slices of a split backward-weights kernel added into the weights' layout."""

    groups: int
    icg: int
    ocg: int
    kernel: tuple
    splits: int
    part_off: int
    wei: tuple
    wei_n: int
    per_item: int = 64
    wg: int = 64


def _var(name):
    from pymbolic import var

    return var(name)


V_ = _var


def _make(domain, insns, args, name):
    import loopy as lp

    knl = lp.make_kernel(domain, insns, args, name=name, lang_version=(2018, 2),
                         target=lp.PyOpenCLTarget(), index_dtype=INDEX_DTYPE,
                         silenced_warnings=["v1_scheduler_fallback", "write_race(store)",
                                            "vectorize_failed", "unused_inames"])
    return lp.set_options(knl, enforce_variable_access_ordered="no_check")


def _tile_grid(knl, t: TileParams, io: str, jo: str):
    """Row tiles ``io`` and column tiles ``jo`` over the launch (work-items per ``wg``)."""
    import loopy as lp

    wn, wm = t.wg
    local = wn * wm > 1  # then both axes get local sizes (loopy wants no unused local axis)
    for iname, size, axis in ((jo, wn, 1 if t.m_inner else 0), (io, wm, 0 if t.m_inner else 1)):
        if not local:
            knl = lp.tag_inames(knl, {iname: f"g.{axis}"})
        else:
            knl = lp.split_iname(knl, iname, size, outer_tag=f"g.{axis}", inner_tag=f"l.{axis}")
    return knl


def _register_tile(t: TileParams, M: int, N: int, extra_outer: dict, k_inames: dict,
                   row_base, a_load, b_load, store, out_base=None, tall=False,
                   reads_out=False, vstore=None):
    """Instructions, domain and tags of a register-tile kernel (``k_inames``: the reduction
    loops, outermost first, not empty).

    ``row_base(r)``: the row operand's base address of (clamped) row ``r``; ``a_load(base)``
    the row operand value at a row's base (in the reduction inames); ``b_load(col)`` the
    column operand at column ``col``; ``store(r, col, acc)`` -> (assignee, value, extra
    predicates). ``out_base(r)``: a per-row part of the store address, computed once per row
    with the row bases (run-time sizes: their divisions stay out of the stores); ``store``
    then gets it as a fourth argument. ``tall``: the caller guarantees ``M >= rows``; the
    last row tile then moves up to end at row ``M`` (no clamped rows, no row guards: the rows
    it shares with the tile before are computed bit for bit alike and stored twice, or, where
    the store reads the output (``reads_out``: a sum post-op), stored by their own tile only).
    ``vstore``: the tile stores a vector of ``vec`` columns at a time (:func:`_vector_store`):
    ``vstore(r, col0, ob)`` -> (the C text of one vector's store, its index expressions as
    ``(name, expr)``, the arrays it reads, the array it writes).
    Returns (domain, insns, temps, tags, priorities)."""
    import loopy as lp
    from pymbolic.primitives import Comparison

    rm, nr, vw = t.rows, t.cols, t.vec
    nv = nr // vw
    nt = -(-N // nr)
    # a run-time row count: the row tiles' range is a constraint, every tile is guarded
    ragged = is_var(M) or -(-M // rm) * rm > M
    V = _var
    outer = {"io": (M, rm), "jo": nt, **extra_outer}
    small = {"ir": rm, "ii": rm, "jj": nv, "jv": vw, "iz": rm, "jz": nv, "vz": vw,
             "jb": nv, "vb": vw, "is": rm, "js": nv, **({} if vstore else {"vs": vw})}
    ranges = {**outer, **small, **k_inames}
    base = frozenset(outer)
    kset = frozenset(k_inames)

    def row(i):
        return V("io") * rm + i

    def col(j, v):
        return V("jo") * nr + j * vw + v

    from pymbolic.primitives import If

    r_ir = row(V("ir"))
    insns = []
    if tall:
        insns.append(lp.Assignment(V("r0"), If(Comparison(row(0) + rm, "<=", M), row(0),
                                               M - rm), id="r0", within_inames=base))
        r_ir = V("r0") + V("ir")
    elif ragged:
        r_ir = If(Comparison(r_ir, "<", M), r_ir, M - 1)
    acc = lambda i, j, v: V("acc")[V(i), V(j), V(v)]  # noqa: E731
    insns += [
        lp.Assignment(acc("iz", "jz", "vz"), 0, id="zero", within_inames=base | {"iz", "jz", "vz"}),
        lp.Assignment(V("rb")[V("ir")], row_base(r_ir), id="rbase",
                      within_inames=base | {"ir"}, depends_on=frozenset(["r0"] if tall else [])),
    ]
    insns.append(lp.Assignment(V("bv")[V("jb"), V("vb")], b_load(col(V("jb"), V("vb"))),
                               id="ldb", within_inames=base | kset | {"jb", "vb"}))
    insns.append(lp.Assignment(
        acc("ii", "jj", "jv"),
        acc("ii", "jj", "jv") + a_load(V("rb")[V("ii")]) * V("bv")[V("jj"), V("jv")],
        id="fma", depends_on=frozenset(["ldb", "zero", "rbase"]),
        within_inames=base | kset | {"ii", "jj", "jv"}))
    if out_base is not None:
        insns.append(lp.Assignment(V("ob")[V("ir")], out_base(r_ir), id="obase",
                                   within_inames=base | {"ir"},
                                   depends_on=frozenset(["r0"] if tall else [])))
    r_s = (V("r0") if tall else row(0)) + V("is")
    c_s = col(V("js"), 0 if vstore else V("vs"))
    ob_s = None if out_base is None else V("ob")[V("is")]
    if vstore:
        code, exprs, reads, writes = vstore(r_s, c_s, ob_s)
        preds = set()
    elif out_base is None:
        assignee, value, preds = store(r_s, c_s, acc("is", "js", "vs"))
    else:
        assignee, value, preds = store(r_s, c_s, acc("is", "js", "vs"), ob_s)
    preds = set(preds)
    if tall:
        if reads_out:
            preds.add(Comparison(r_s, ">=", row(0)))
    elif ragged:
        preds.add(Comparison(r_s, "<", M))
    if nt * nr > N:  # with vector stores, N is a multiple of the vector width
        preds.add(Comparison(c_s, "<", N))
    deps = frozenset(["fma"] + (["obase"] if out_base else []))
    if vstore:
        from loopy.symbolic import get_dependencies

        within = base | {"is", "js"}
        exprs = [*exprs, ("cacc", V("is") * nv + V("js"))]
        reads = set(reads) | {"acc"} | {v for _, e in exprs for v in get_dependencies(e)
                                        if v not in within}
        insns.append(lp.CInstruction(exprs, code, read_variables=frozenset(reads),
                                     assignees=(V(writes),), id="store",
                                     predicates=frozenset(preds), depends_on=deps,
                                     within_inames=frozenset(within)))
    else:
        insns.append(lp.Assignment(assignee, value, id="store", predicates=frozenset(preds),
                                   depends_on=deps, within_inames=base | {"is", "js", "vs"}))
    temps = [lp.TemporaryVariable("acc", np.float32, shape=(rm, nv, vw),
                                  address_space=lp.AddressSpace.PRIVATE),
             lp.TemporaryVariable("bv", np.float32, shape=(nv, vw),
                                  address_space=lp.AddressSpace.PRIVATE),
             lp.TemporaryVariable("rb", INDEX_DTYPE, shape=(rm,),
                                  address_space=lp.AddressSpace.PRIVATE)]
    if out_base is not None:
        temps.append(lp.TemporaryVariable("ob", INDEX_DTYPE, shape=(rm,),
                                          address_space=lp.AddressSpace.PRIVATE))
    if tall:
        temps.append(lp.TemporaryVariable("r0", INDEX_DTYPE, shape=(),
                                          address_space=lp.AddressSpace.PRIVATE))
    u = _UNROLL
    vec = "vec" if vw > 1 else "unr"
    tags = {"ii": u, "jj": u, "jv": vec, "iz": u, "jz": u, "vz": vec, "jb": u, "vb": "unr",
            "is": u, "js": u, "ir": u, **({} if vstore else {"vs": "unr"})}
    kord = ",".join(k_inames)
    prios = [f"{kord},ii,jj,jv", f"{kord},jb,vb"]
    return ranges, insns, temps, tags, prios


def _assemble(ranges, insns, temps, tags, prios, args, name, t: TileParams, post_ops=()):
    import loopy as lp

    dom = "{[" + ", ".join(ranges) + "]: " + " and ".join(
        ceil_range(k, *v) if isinstance(v, tuple) else ceil_range(k, v)
        for k, v in ranges.items()) + "}"
    knl = _make(dom, insns, args + temps, name)
    if t.vec > 1:
        knl = lp.tag_array_axes(knl, "acc", "c,c,vec")
        knl = lp.tag_array_axes(knl, "bv", "c,vec")
    knl = lp.tag_inames(knl, tags)
    for p in prios:
        knl = lp.prioritize_loops(knl, p)
    knl = _tile_grid(knl, t, "io", "jo")
    if "g" in ranges:
        knl = lp.tag_inames(knl, {"g": "g.2"})
    knl = finish(knl, post_ops)
    return lp.set_options(knl, enforce_array_accesses_within_bounds="no_check")


def build_igemm_data(p: IgemmDataProblem):
    """The forward / backward-data kernel of ``p`` (arguments a, wp, out[, bias]): printed
    where :mod:`pydnnl.kernels.conv_implicit_gemm_source` covers it (no loopy import or code
    generation in a first-ever creation), else from loopy."""
    from .conv_implicit_gemm_source import igemm_data_source, igemm_fill_source

    src = (igemm_data_source(p) if all(n > 0 for n in p.taps) else igemm_fill_source(p))
    return src if src is not None else build_igemm_data_loopy(p)


def build_igemm_data_loopy(p: IgemmDataProblem):
    """loopy TranslationUnit of the forward / backward-data kernel (arguments a, wp, out[,
    bias])."""
    if not all(n > 0 for n in p.taps):
        return _build_fill(p)
    nsp = len(p.jsp)
    V = _var
    t = p.tile
    K = prod(p.kernel)
    npan = -(-p.nch // t.cols)
    M = p.rows if p.rows is not None else p.mb * prod(p.jsp)
    us = [f"u{d}" for d in range(nsp)]
    k_inames = {**{u: n for u, n in zip(us, p.taps)}, "kc": p.kch}
    a = p.a
    kstr = [prod(p.kernel[d + 1:]) for d in range(nsp)]

    def row_base(r):
        n, *j = decompose(r, [p.mb, *p.jsp])
        return (a.off0 + n * a.sn + V("g") * (p.kch * a.sc)
                + sum((j[d] * p.a_stride[d] + p.a_off[d]) * a.ssp[d] for d in range(nsp)))

    def a_load(b):
        return V("a")[b + sum(V(us[d]) * (p.a_step[d] * a.ssp[d]) for d in range(nsp))
                      + V("kc") * a.sc]

    def b_load(col):
        tap = sum((p.wt0[d] + V(us[d]) * p.wstep[d]) * kstr[d] for d in range(nsp))
        pan_base = (V("g") * npan + V("jo")) * (K * p.kch * t.cols)
        return V("wp")[p.wp_off + pan_base + (tap * p.kch + V("kc")) * t.cols
                       + (col - V("jo") * t.cols)]

    def out_pos(r):
        n, *j = decompose(r, [p.mb, *p.jsp])
        return n, [j[d] * p.o_stride[d] + p.o_off[d] for d in range(nsp)]

    def store(r, col, accv, ob=None):
        c = V("g") * p.nch + col
        if ob is None:
            n, pos = out_pos(r)
            at = V("out")[offset(p.out, [n, c, *pos])]
        else:  # plain layout: the row's part plus the channel's
            n, pos = None, None
            at = V("out")[ob + c * p.out[1][1][1]]
        value = accv
        if p.bias is not None:
            value = value + V("bias")[offset(p.bias, [c])]
        return at, apply_postops(value, p.post_ops, at, at=None if n is None else [n, c, *pos]), ()

    def out_base(r):
        n, pos = out_pos(r)
        return offset(p.out, [n, 0, *pos])

    def vstore(r, col, ob):
        c = V("g") * p.nch + col
        if ob is None:
            n, pos = out_pos(r)
            oidx = offset(p.out, [n, c, *pos])
        else:
            oidx = ob + c
        exprs = [("oidx", oidx)]
        if p.bias is not None:
            exprs.append(("bidx", offset(p.bias, [c])))
        reads = {"out"} if has_sum else set()
        return (_vector_store(t.vec, p.bias is not None, p.post_ops), exprs,
                reads | ({"bias"} if p.bias is not None else set()), "out")

    has_sum = any(op[0] == "sum" for op in p.post_ops)
    ranges, insns, temps, tags, prios = _register_tile(
        t, M, p.nch, {"g": p.groups}, k_inames, row_base, a_load, b_load, store,
        out_base if is_var(M) else None, tall=p.tall, reads_out=has_sum,
        vstore=vstore if _vector_stores(p) else None)
    specs = [("a", -1, False, True), ("wp", -1, False, True), ("out", _n(p.out_n), True, has_sum)]
    if p.bias is not None:
        specs.append(("bias", p.bias_n, False, True))
    specs += postop_arg_specs(p.post_ops)
    return _assemble(ranges, insns, temps, tags, prios, make_args(specs) + value_args(p),
                     "pydnnl_conv_igemm_data", t, p.post_ops)


# eltwise post-ops whose C formula (eltwise_ops.forward_expr) is valid on a float vector
_VECTOR_ELTWISE = frozenset({int(algorithm.eltwise_relu)})


def _vector_stores(p: IgemmDataProblem) -> bool:
    """Whether the data kernel stores (and, under a sum post-op, reads) the output a vector
    of ``tile.vec`` channels at a time (``vload``/``vstore``) instead of lane by lane: output
    and bias with unit channel strides, no binary post-op, columns past the channel count
    (if any) in whole vectors. ResNet-50's stem (7x7/2, 64 channels, nhwc) on the 2-core
    AVX-512 Xeon with Intel's runtime, benchdnn min ms of interleaved rounds, lanes ->
    vectors: no post-op 1.07-1.15 -> 0.85-0.87, sum 1.24-1.45 -> 0.72-0.93 (the lane stores
    of the sum's read-modify-write behind the tall tile's row guard were not merged into
    vectors)."""
    vw = p.tile.vec
    if vw <= 1 or any(op[0] == "binary" or op[0] == "eltwise" and op[1] not in _VECTOR_ELTWISE
                      for op in p.post_ops):
        return False
    out = plain_strides(p.out)
    if out is None or out[1] != 1:
        return False
    if p.bias is not None:
        bias = plain_strides(p.bias)
        if bias is None or bias[0] != 1:
            return False
    return p.nch % vw == 0


def _vector_store(vw: int, bias: bool, post_ops: tuple) -> str:
    """C text storing ``acc[cacc]`` (plus ``bias[bidx...]``) through the chain to
    ``out[oidx...]``, ``vw`` lanes at once; eltwise entries (:data:`_VECTOR_ELTWISE`) as
    their formula on the vector (the helpers take a float: calling one per lane ran the
    stem with a ReLU at 1.7-1.8 ms, lane stores 1.2)."""
    from .eltwise_ops import forward_expr
    from .post_ops import apply_c

    t = f"float{vw}"
    lines = [f"{t} pv = acc[cacc]" + (f" + vload{vw}(0, bias + bidx);" if bias else ";")]
    for op in post_ops:
        if op[0] == "sum":
            lines.append(f"pv = {apply_c('pv', (op,), None, prior=f'vload{vw}(0, out + oidx)')};")
        else:  # eltwise (binary entries take the lane stores)
            _, alg, alpha, beta = op
            lines.append(f"pv = {forward_expr(alg, 'pv', alpha, beta)};")
    lines.append(f"vstore{vw}(pv, 0, out + oidx);")
    return "{ " + " ".join(lines) + " }"


def _n(nelems):
    """An array's element count for :func:`make_args`: -1 (no static bounds) when it is a
    run-time size."""
    return -1 if is_var(nelems) else nelems


def _vprod(xs):
    """The product of ints and size variables (an int when all are ints)."""
    if not any(is_var(x) for x in xs):
        return prod(xs)
    out = 1
    for x in xs:
        out = x if out == 1 else out * x
    return out


def _build_fill(p: IgemmDataProblem):
    """A phase no tap reaches: bias and post-ops of a zero sum. A work-group per image and
    outer position loops over the innermost positions and the channels (a register-tile
    launch of empty tiles cost a work-group per handful of stores; a launch over flattened
    points and channels was miscompiled by Intel's CPU compiler: stores past the tensor)."""
    import loopy as lp

    nsp = len(p.jsp)
    V = _var
    ranges = {"n": p.mb, "r": _vprod(p.jsp[:-1]), "w": p.jsp[-1], "c": p.groups * p.nch}
    j = [*decompose(V("r"), list(p.jsp[:-1])), V("w")]
    pos = [j[d] * p.o_stride[d] + p.o_off[d] for d in range(nsp)]
    c = V("c")
    at = V("out")[offset(p.out, [V("n"), c, *pos])]
    value = V("bias")[offset(p.bias, [c])] if p.bias is not None else np.float32(0)
    insn = lp.Assignment(at, apply_postops(value, p.post_ops, at, at=[V("n"), c, *pos]),
                         id="store",
                         within_inames=frozenset(ranges))
    has_sum = any(op[0] == "sum" for op in p.post_ops)
    specs = [("out", _n(p.out_n), True, has_sum)]
    if p.bias is not None:
        specs.append(("bias", p.bias_n, False, True))
    specs += postop_arg_specs(p.post_ops)
    knl = _make("{[" + ", ".join(ranges) + "]: " + " and ".join(
        ceil_range(k, v) for k, v in ranges.items()) + "}", [insn],
        make_args(specs) + value_args(p), "pydnnl_conv_igemm_fill")
    knl = lp.tag_inames(knl, {"r": "g.0", "n": "g.1"})
    knl = lp.prioritize_loops(knl, "w,c")
    return lp.set_options(finish(knl, p.post_ops), enforce_array_accesses_within_bounds="no_check")


def build_wei_pack(p: WeiPackProblem):
    """The kernel packing the weights for :func:`build_igemm_data` (arguments wei, wp):
    printed where :mod:`pydnnl.kernels.conv_implicit_gemm_source` covers it, else loopy's."""
    from .conv_implicit_gemm_source import wei_pack_source

    src = wei_pack_source(p)
    return src if src is not None else build_wei_pack_loopy(p)


def build_wei_pack_loopy(p: WeiPackProblem):
    """loopy TranslationUnit packing the weights for :func:`build_igemm_data` (arguments
    wei, wp)."""
    import loopy as lp
    from pymbolic.primitives import Comparison, If

    npan = -(-p.nch // p.cols)
    K = prod(p.kernel)
    sizes = [p.groups, npan, K, p.kch, p.cols]
    ranges, idx = grid(sizes, p.per_item)
    g, pan, tap, kc, w = idx
    ch = pan * p.cols + w
    taps = decompose(tap, list(p.kernel)) if p.kernel else []
    oc, ic = (kc, ch) if p.transpose else (ch, kc)
    from .conv_common import clamped_positions

    if npan * p.cols > p.nch:
        # a valid address for the padding columns too, then zero
        ch_safe = clamped_positions([ch], [(0, npan * p.cols - 1)], [p.nch])[0]
        oc_s, ic_s = (kc, ch_safe) if p.transpose else (ch_safe, kc)
        val = If(Comparison(ch, "<", p.nch), V_("wei")[offset(p.wei, [g, oc_s, ic_s, *taps])],
                 np.float32(0))
    else:
        val = V_("wei")[offset(p.wei, [g, oc, ic, *taps])]
    flat = (((g * npan + pan) * K + tap) * p.kch + kc) * p.cols + w
    insn = lp.Assignment(V_("wp")[p.wp_off + flat], val, id="store",
                         within_inames=frozenset(ranges))
    args = make_args([("wei", p.wei_n, False, True), ("wp", -1, True, False)])
    knl = _make("{[" + ", ".join(ranges) + "]: " + " and ".join(
        f"0 <= {k} < {v}" for k, v in ranges.items()) + "}", [insn], args,
        "pydnnl_conv_igemm_pack_wei")
    knl = tag_grid(knl, ranges, p.wg)
    return lp.set_options(finish(knl), enforce_array_accesses_within_bounds="no_check")


def build_igemm_wei(p: IgemmWeiProblem):
    """The backward-weights kernel of ``p`` (arguments src, dst, and wei or part): printed
    where :mod:`pydnnl.kernels.conv_implicit_gemm_source` covers it, else loopy's."""
    from .conv_implicit_gemm_source import igemm_wei_source

    src = igemm_wei_source(p)
    return src if src is not None else build_igemm_wei_loopy(p)


def build_igemm_wei_loopy(p: IgemmWeiProblem):
    """loopy TranslationUnit of the backward-weights kernel (arguments src, dst, and wei or
    part)."""
    from pymbolic.primitives import Comparison, If

    nsp = len(p.kernel)
    V = _var
    t = p.tile
    K = prod(p.kernel)
    M = K * p.icg
    R = p.rows if p.rows is not None else p.mb * prod(p.dst_sp[:-1])
    S = p.splits
    if is_var(R) and S > 1:
        raise ValueError("igemm backward weights: run-time sizes need splits == 1")
    if not is_var(R) and R % S:
        raise ValueError(f"igemm backward weights: splits {S} must divide images x outer "
                         f"output points {R}")
    RS = R if S == 1 else R // S
    s, d = p.src, p.dst
    # one launch axis over (slice, group): iname g runs over both
    outer = {"g": p.groups * S}
    gv, ts = (V("g"), 0) if S == 1 else (V("g") % p.groups, V("g") // p.groups)
    k_inames = {"q": RS, "w": p.dst_sp[-1]}
    q = ts * RS + V("q") if S > 1 else V("q")
    n, *o_out = decompose(q, [p.mb, *p.dst_sp[:-1]])
    o = [*o_out, V("w")]

    def row_base(r):
        tap, ic = decompose(r, [K, p.icg])
        taps = decompose(tap, list(p.kernel))
        return (s.off0 + gv * (p.icg * s.sc) + ic * s.sc
                + sum(taps[i] * ((p.dilates[i] + 1) * s.ssp[i]) for i in range(nsp)))

    def a_load(b):
        return V("src")[b + n * s.sn + sum((o[i] * p.strides[i] - p.padding_l[i]) * s.ssp[i]
                                           for i in range(nsp))]

    npad = -(-p.ocg // t.cols) * t.cols

    def b_load(col):
        if npad > p.ocg:
            col = If(Comparison(col, "<", p.ocg), col, p.ocg - 1)
        return V("dst")[d.off0 + n * d.sn + (gv * p.ocg + col) * d.sc
                        + sum(o[i] * d.ssp[i] for i in range(nsp))]

    def store(r, col, accv):
        if S > 1:
            at = V("part")[p.part_off + (V("g") * M + r) * p.ocg + col]
            return at, accv, ()
        tap, ic = decompose(r, [K, p.icg])
        taps = decompose(tap, list(p.kernel))
        return V("wei")[offset(p.wei, [gv, col, ic, *taps])], accv, ()

    ranges, insns, temps, tags, prios = _register_tile(
        t, M, p.ocg, outer, k_inames, row_base, a_load, b_load, store)
    specs = [("src", -1, False, True), ("dst", -1, False, True)]
    specs.append(("part", -1, True, False) if S > 1 else ("wei", p.wei_n, True, False))
    return _assemble(ranges, insns, temps, tags, prios, make_args(specs) + value_args(p),
                     "pydnnl_conv_igemm_wei", t)


def build_wei_reduce(p: WeiReduceProblem):
    """The kernel adding the split slices into the weights (arguments part, wei): printed
    where :mod:`pydnnl.kernels.conv_implicit_gemm_source` covers it, else loopy's."""
    from .conv_implicit_gemm_source import wei_reduce_source

    src = wei_reduce_source(p)
    return src if src is not None else build_wei_reduce_loopy(p)


def build_wei_reduce_loopy(p: WeiReduceProblem):
    """loopy TranslationUnit adding the split slices into the weights (arguments part, wei)."""
    import loopy as lp
    from loopy.symbolic import Reduction

    K = prod(p.kernel)
    sizes = [p.groups, p.icg * K, p.ocg]  # part's order: (g, tap, ic, oc)
    ranges, idx = grid(sizes, p.per_item)
    g, row, oc = idx
    tap, ic = decompose(row, [K, p.icg])
    taps = decompose(tap, list(p.kernel))
    M = K * p.icg
    part = V_("part")[p.part_off + ((V_("t") * p.groups + g) * M + row) * p.ocg + oc]
    insn = lp.Assignment(V_("wei")[offset(p.wei, [g, oc, ic, *taps])],
                         Reduction("sum", ("t",), part), id="store",
                         within_inames=frozenset(ranges))
    args = make_args([("part", -1, False, True), ("wei", p.wei_n, True, False)])
    rr = {**ranges, "t": p.splits}
    knl = _make("{[" + ", ".join(rr) + "]: " + " and ".join(
        f"0 <= {k} < {v}" for k, v in rr.items()) + "}", [insn], args,
        "pydnnl_conv_igemm_wei_reduce")
    knl = tag_grid(knl, ranges, p.wg)
    return lp.set_options(finish(knl), enforce_array_accesses_within_bounds="no_check")


def flops(p) -> int:
    """Multiply-adds x 2 of a data or weights kernel."""
    if isinstance(p, IgemmDataProblem):
        return 2 * p.mb * p.groups * prod(p.jsp) * prod(p.taps) * p.kch * p.nch
    return 2 * p.mb * p.groups * prod(p.dst_sp) * prod(p.kernel) * p.icg * p.ocg


__all__ = ["TileParams", "PlainTensor", "IgemmDataProblem", "WeiPackProblem",
           "IgemmWeiProblem", "WeiReduceProblem", "build_igemm_data", "build_igemm_data_loopy",
           "build_wei_pack", "build_wei_pack_loopy", "build_igemm_wei", "build_igemm_wei_loopy",
           "build_wei_reduce", "build_wei_reduce_loopy", "flops"]
