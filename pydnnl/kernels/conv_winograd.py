"""Loopy generators of the Winograd F(2x2, 3x3) transforms (Lavin & Gray 2016).

With the 4x4 input tile ``d``, the 3x3 filter ``g`` and the 2x2 output tile ``Y``::

    U = G g G^T          (filter transform, 4x4 per (g, oc, ic))
    V = B^T d B          (input transform, 4x4 per (image tile, g, ic))
    M[xi, nu] = sum_ic U[xi, nu][oc, ic] V[xi, nu][ic, tile]   (16 GEMMs per group)
    Y = A^T M A          (output transform, then bias and post-ops)

Scratch buffers (float32, run-time offsets): ``V[16][G][T][ICg]``, ``U[16][G][ICg][OCg]``,
``M[16][G][T][OCg]`` with ``T = nb * TH * TW`` tiles of the chunk, so each of the 16 * G GEMMs
is ``M[T, OCg] = V[T, ICg] @ U[ICg, OCg]``, all row-major.

Sizes at run time (:func:`winograd_runtime`): the tile stages (input, output, dy) of plain
activation layouts take the spatial sizes, tile counts, the chunk's tile count and the
activation strides (but a unit one) as arguments, so one program serves every spatial size and
minibatch of its (stage, channels, padding, layout class, post-ops) class; the filter and
weight-gradient transforms have no spatial size at all. Blocked layouts and binary post-ops
(whose operand layouts bake sizes) keep baked sizes. The tile stages run work-groups along the
channels of one tile (work-group axis 1 is the tile), so the run-time divisions that split a
tile index into image, row and column are uniform across a work-group.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .conv_common import (
    INDEX_DTYPE,
    RT_CLAMP,
    apply_postops,
    bounds_condition,
    decompose,
    finish,
    guarded_load,
    make_args,
    offset,
    plain_strides,
    postop_arg_specs,
    rt_clamp_helper,
    split_fast,
    sym_plain_layout,
)
from .conv_winograd_source import winograd_source
from .sizevars import ceil_range, is_var, size_var, symbolize, value_args

BT = ((1, 0, -1, 0), (0, 1, 1, 0), (0, -1, 1, 0), (0, 1, 0, -1))
G_ = ((1.0, 0.0, 0.0), (0.5, 0.5, 0.5), (0.5, -0.5, 0.5), (0.0, 0.0, 1.0))
AT = ((1, 1, 1, 0), (0, 1, -1, -1))
# F(3x3, 2x2) for backward weights: a 2x2 diff_dst tile correlated with the 4x4 input patch
# gives the 3x3 weight gradient; the input transform is B^T above, the diff_dst tile goes
# through G2 (exact integers) and the summed products through A2^T (the F(2,3) filter
# matrix transposed)
G2 = ((1, 0), (1, 1), (1, -1), (0, -1))
AT2 = ((1.0, 0.5, 0.5, 0.0), (0.0, 0.5, -0.5, 0.0), (0.0, 0.5, 0.5, 1.0))


@dataclass(frozen=True)
class WinogradProblem:
    """One transform kernel. ``stage`` is ``filter``, ``input``, ``output`` (forward), ``dy``
    or ``wgrad`` (backward weights). The filter and wgrad stages ignore the spatial fields
    (give ``nb=0``, empty tuples: one program per channel class). In the run-time form
    (:func:`winograd_runtime`) ``src_sp`` / ``dst_sp`` and the activation strides are size
    variables, ``nb`` is 0 and ``padding_r`` is set."""

    stage: str
    nb: int
    groups: int
    icg: int
    ocg: int
    src_sp: tuple  # (H, W)
    dst_sp: tuple  # (OH, OW)
    padding_l: tuple
    act: tuple | None = None  # src layout (input stage) or dst layout (output stage)
    act_n: int = 0
    wei: tuple | None = None  # weights layout (filter stage)
    wei_n: int = 0
    bias: tuple | None = None
    bias_n: int = 0
    post_ops: tuple = ()
    wg: int = 64
    #: filter stage: read tap (2 - a, 2 - b) for (a, b) (backward data as a forward
    #: convolution with the flipped filter)
    flip: bool = False
    #: wgrad stage: the products come in this many partial sums (slices of the tiles); the
    #: size variable ``nslices`` takes the count at run time (GPUs, whose count follows the
    #: tile count)
    slices: int = 1
    #: wgrad stage: the products are stored ``[OCg][ICg]`` (False) or ``[ICg][OCg]`` (True,
    #: see :func:`wgrad_along_oc`)
    along_oc: bool = False
    #: run-time form only: the right padding (which loads of the input stage need an upper
    #: bounds test: with sizes unknown it cannot be told from them)
    padding_r: tuple = ()

    @property
    def runtime(self) -> bool:
        return bool(self.dst_sp) and is_var(self.dst_sp[0])

    @property
    def tiles(self) -> tuple:
        if self.runtime:
            return (size_var("tiles_h"), size_var("tiles_w"))
        return (-(-self.dst_sp[0] // 2), -(-self.dst_sp[1] // 2))

    @property
    def T(self):
        if self.runtime:
            return size_var("ntiles")
        th, tw = self.tiles
        return self.nb * th * tw


def wgrad_along_oc(wei: tuple) -> bool:
    """Whether backward weights stores its products ``[ICg][OCg]`` and runs the gradient
    transform along output channels: weights closer together along OC than IC (gkio), so
    that adjacent work-items read adjacent products and write adjacent weights. (Along IC
    into gkio weights, 2 KB apart: the 512x512 transform took 22-35 ms on the 2-core Xeon;
    16 x 16 work-groups through a local tile 7-16 ms; along OC 1.3-3.6 ms, the batched GEMM
    unchanged.)"""
    st = plain_strides(wei)
    return st is not None and st[1] < st[2]


def winograd_runtime(p: WinogradProblem) -> tuple[WinogradProblem, dict]:
    """The run-time-size form of tile stage ``p``: ``(problem, values)``, the problem's spatial
    sizes, tile counts, tiles of the chunk and activation strides (but a unit one) replaced by
    size variables, ``values`` the ints to bind at launch next to the buffers, ``n0`` and the
    offsets::

        q, sizes = winograd_runtime(WinogradProblem("input", ...))  # with ints, as before
        plan.kernel("conv_winograd", q, build_winograd, src=..., v=..., n0=c0, v_off=off,
                    **sizes)

    Blocked activations, binary post-ops (their operands' layouts bake the sizes), the filter
    and wgrad stages (no spatial sizes) and problems already in run-time form: ``(p, {})``.
    """
    if p.stage not in ("input", "output", "dy") or p.runtime:
        return p, {}
    if any(op[0] == "binary" for op in p.post_ops):
        return p, {}
    lay = sym_plain_layout(p.act, "act")
    if lay is None:
        return p, {}
    act, strides = lay
    (H, W), (OH, OW) = p.src_sp, p.dst_sp
    TH, TW = p.tiles
    values = {"in_h": H, "in_w": W, "out_h": OH, "out_w": OW, "tiles_h": TH, "tiles_w": TW,
              "ntiles": p.T}
    sym, _ = symbolize(values)
    # stride 1, 3x3: OH = H + pl + pr - 2
    pr = (OH - H - p.padding_l[0] + 2, OW - W - p.padding_l[1] + 2)
    q = replace(p, nb=0, src_sp=(sym["in_h"], sym["in_w"]), dst_sp=(sym["out_h"], sym["out_w"]),
                act=act, act_n=-1, padding_r=pr)
    return q, {**values, **strides}


def build_winograd(p: WinogradProblem):
    # the commonest problems' source comes from a printer (kernels.conv_winograd_source:
    # the same kernels without loopy's code generation)
    src = winograd_source(p)
    if src is not None:
        return src
    return build_winograd_loopy(p)


def build_winograd_loopy(p: WinogradProblem):
    """The loopy kernel of ``p`` (a TranslationUnit)."""
    if p.stage == "filter":
        return _build_filter(p)
    if p.stage == "input":
        return _build_input(p)
    if p.stage == "output":
        return _build_output(p)
    if p.stage == "dy":
        return _build_dy(p)
    if p.stage == "wgrad":
        return _build_wgrad(p)
    raise ValueError(f"winograd: unknown stage {p.stage!r}")


# a work-group along channels narrower than this is widened to p.wg with a peeled partial
# group rather than shrunk to a divisor of the channel count
_MIN_WG = 16


def _tile_wg(channels: int, wg: int) -> int:
    """Work-group size along ``channels``: the largest divisor of it up to ``wg`` (no partial
    group), unless that is narrower than ``min(channels, _MIN_WG)``."""
    best = max(d for d in range(1, min(wg, channels) + 1) if channels % d == 0)
    return best if best >= min(channels, _MIN_WG) else min(wg, channels)


def _tile_kernel(p: WinogradProblem, channels: int, insns, args, temps, name):
    """A launch over (tile of the chunk: work-group axis 1, group x channel: axis 0)."""
    import loopy as lp

    GC = p.groups * channels
    dom = "{[c, t]: 0 <= c < %d and %s}" % (GC, ceil_range("t", p.T))
    knl = lp.make_kernel(dom, insns, args + value_args((p, p.tiles, p.T)) + temps, name=name,
                         lang_version=(2018, 2), target=lp.PyOpenCLTarget(),
                         index_dtype=INDEX_DTYPE,
                         silenced_warnings=["v1_scheduler_fallback"])
    knl = split_fast(knl, "c", GC, _tile_wg(GC, p.wg), peel=True)
    return lp.tag_inames(knl, {"t": "g.1"})


_TILE_INAMES = frozenset(["c", "t"])


def _tile_loads(p: WinogradProblem, names, array: str, at, conds_of):
    """Loads of the tile stages: ``names[a][b] = array[at(pos)]`` where ``conds_of(a, b, pos)``
    (comparisons, all or none) holds, else 0, with ``pos = (row, col)`` expressions.

    Run-time form: the positions are clamped into the tensor (uniform across a work-group: they
    depend on the tile alone), every load is unconditional and a select zeroes the padding (a
    guarded load of the baked form on the 56x56 dy transform: +20% time with run-time sizes).
    Baked form: a guarded load (:func:`guarded_load`). Returns (instructions, temporaries)."""
    import loopy as lp
    from pymbolic import var
    from pymbolic.primitives import If, LogicalAnd

    insns, temps = [], []
    sizes = p.src_sp if p.stage == "input" else p.dst_sp
    for a, row in enumerate(names):
        for b, name in enumerate(row):
            pos, conds = conds_of(a, b)
            cond = None if not conds else (conds[0] if len(conds) == 1
                                           else LogicalAnd(tuple(conds)))
            if cond is None:
                insns.append(lp.Assignment(var(name), var(array)[at(pos)],
                                           within_inames=_TILE_INAMES, id=f"ld{a}{b}"))
            elif not p.runtime:
                insns.append(lp.Assignment(var(name), guarded_load(cond, array, at(pos)),
                                           within_inames=_TILE_INAMES, id=f"ld{a}{b}"))
            else:
                cl = [var(RT_CLAMP)(e, n - 1) for e, n in zip(pos, sizes)]
                insns.append(lp.Assignment(var(f"r_{name}"), var(array)[at(cl)],
                                           within_inames=_TILE_INAMES, id=f"rd{a}{b}"))
                insns.append(lp.Assignment(var(name), If(cond, var(f"r_{name}"), np.float32(0)),
                                           within_inames=_TILE_INAMES, id=f"ld{a}{b}",
                                           depends_on=frozenset([f"rd{a}{b}"])))
                temps.append(f"r_{name}")
    return insns, _temps(temps)


def _finish_tile(knl, p: WinogradProblem, post_ops: tuple = ()):
    from .clhelpers import register_helpers

    knl = finish(knl, post_ops)
    if p.runtime and p.stage in ("input", "dy"):
        knl = register_helpers(knl, [rt_clamp_helper()])
    return knl


def _tile_grid(p: WinogradProblem, channels: int):
    """Index expressions of a :func:`_tile_kernel` work-item: ``(n, th, tw, g, c, t)``, ``t``
    the tile's index in the chunk (image, tile row, tile column; decomposed once per
    work-group's tile: run-time divisions stay out of the per-element work)."""
    from pymbolic import var

    TH, TW = p.tiles
    t = var("t")
    n, th, tw = decompose(t, [p.nb, TH, TW])
    g, c = (0, var("c")) if p.groups == 1 else decompose(var("c"), [p.groups, channels])
    return n, th, tw, g, c, t


def _combo(coeffs, terms):
    """sum of c * t over nonzero coefficients (pymbolic), with +-1 kept as add/subtract."""
    expr = None
    for c, t in zip(coeffs, terms):
        if c == 0:
            continue
        term = t if c == 1 else (-t if c == -1 else np.float32(c) * t)
        expr = term if expr is None else expr + term
    return expr if expr is not None else np.float32(0)


def _temps(names):
    import loopy as lp

    return [lp.TemporaryVariable(n, np.float32, shape=(), address_space=lp.AddressSpace.PRIVATE)
            for n in names]


def _divisor_at_most(n: int, cap: int) -> int:
    return max(d for d in range(1, min(n, cap) + 1) if n % d == 0)


# work-group edge of the filter and wgrad transforms along each channel dim
_CH_TILE = 16


def _channel_kernel(p: WinogradProblem, fast: int, slow: int, insns, args, temps, name,
                    wei_strides: tuple | None, extra_domains: list | tuple = ()):
    """A launch over (group, ``slow`` channels, ``fast`` channels) for the filter and wgrad
    transforms: inames ``g``, ``b`` (slow) and ``a`` (fast, work-item axis 0, the transformed
    buffer's contiguous dim). ``wei_strides``: the weights' strides along ``(a, b)`` (None:
    blocked). Work-groups run along ``a`` (up to ``p.wg``), or, where the weights are closer
    together along ``b`` (backward data's flipped filter and the weight gradient of gkio
    weights), over 16 x 16 channels, so that each tap's weights are read or written 16 to a
    cache line instead of one: 512x512 weights, flipped filter transform 18.6 ms in groups of
    64 along ``a``, 6.4 ms in 16 x 16 (64 x 16: 9.1, 32 x 8: 9.3); weight-gradient transform
    24.1 ms, 8.7 ms (13.5, 19.1). Divisors of the channel counts: no partial group.
    ``extra_domains``: those of inames the instructions reduce over."""
    import loopy as lp

    dom = ["{[g, b, a]: 0 <= g < %d and 0 <= b < %d and 0 <= a < %d}" % (p.groups, slow, fast),
           *extra_domains]
    # one group: the stores' addresses have no group term, which loopy reports as a race
    # across the group iname (it has one value)
    quiet = ["v1_scheduler_fallback"] + (["write_race(st*)"] if p.groups == 1 else [])
    knl = lp.make_kernel(dom, insns, args + temps, name=name, lang_version=(2018, 2),
                         target=lp.PyOpenCLTarget(), index_dtype=INDEX_DTYPE,
                         silenced_warnings=quiet)
    if fast * slow < _MIN_WG:  # few channels a group (depthwise): work-items along groups
        knl = lp.split_iname(knl, "g", _divisor_at_most(p.groups, p.wg), inner_tag="l.0",
                             outer_tag="g.0")
        return lp.tag_inames(knl, {"a": "g.1", "b": "g.2"})
    across = wei_strides is not None and wei_strides[1] < wei_strides[0]
    ta, tb = (_CH_TILE, _CH_TILE) if across else (p.wg, 1)
    knl = lp.split_iname(knl, "a", _divisor_at_most(fast, ta), inner_tag="l.0",
                         outer_tag="g.0")
    if across:
        knl = lp.split_iname(knl, "b", _divisor_at_most(slow, tb), inner_tag="l.1",
                             outer_tag="g.1")
    else:
        knl = lp.tag_inames(knl, {"b": "g.1"})
    return lp.tag_inames(knl, {"g": "g.2"})


_CH_INAMES = frozenset(["g", "a", "b"])
_TR_INAMES = frozenset(["g", "ao", "ai", "bo", "bi"])


def _transposes(fast: int, slow: int, wei_strides: tuple | None) -> bool:
    """Whether the filter / wgrad transform goes through a local 16 x 16 tile: the weights
    run along the slow channel dim and both channel counts fill whole tiles."""
    return (wei_strides is not None and wei_strides[1] < wei_strides[0]
            and fast % _CH_TILE == 0 and slow % _CH_TILE == 0)


def _tr_indices():
    """``(a, b, a_swapped, b_swapped)`` of a transposing work-item: its own channels, and the
    ones it moves between the weights and the local tile (local ids exchanged)."""
    from pymbolic import var

    ao, ai, bo, bi = var("ao"), var("ai"), var("bo"), var("bi")
    t = _CH_TILE
    return ao * t + ai, bo * t + bi, ao * t + bi, bo * t + ai


def _tr_kernel(p: WinogradProblem, fast: int, slow: int, insns, args, temps, name):
    """The launch of a transposing filter / wgrad transform: work-groups of 16 x 16 channels
    (``ai`` along ``a``: work-item axis 0, ``bi``: axis 1), weights moved through the local
    tile ``tl[tap][16][17]`` by work-items with exchanged local ids, so that adjacent
    work-items touch adjacent weights and adjacent transformed values (backward data's
    flipped filter of 512x512 gkio weights: 20-34 ms along ``a`` alone, 6.4 ms in 16 x 16
    work-groups without the tile, 3.5-7.7 ms with it; the machine was noisy)."""
    import loopy as lp

    t = _CH_TILE
    dom = ("{[g, bo, bi, ao, ai]: 0 <= g < %d and 0 <= bo < %d and 0 <= ao < %d "
           "and 0 <= bi < %d and 0 <= ai < %d}" % (p.groups, slow // t, fast // t, t, t))
    tl = lp.TemporaryVariable("tl", np.float32, shape=(9, t, t + 1),
                              address_space=lp.AddressSpace.LOCAL)
    knl = lp.make_kernel(dom, insns, args + temps + [tl], name=name, lang_version=(2018, 2),
                         target=lp.PyOpenCLTarget(), index_dtype=INDEX_DTYPE,
                         silenced_warnings=["v1_scheduler_fallback"])
    return lp.tag_inames(knl, {"ai": "l.0", "bi": "l.1", "ao": "g.0", "bo": "g.1", "g": "g.2"})


def _build_filter(p: WinogradProblem):
    import loopy as lp
    from pymbolic import var

    G, ICg, OCg = p.groups, p.icg, p.ocg
    st = plain_strides(p.wei)
    wst = None if st is None else (st[1], st[2])
    tr = _transposes(OCg, ICg, wst)
    w = [[var(f"w{a}{b}") for b in range(3)] for a in range(3)]
    tap = (lambda a: 2 - a) if p.flip else (lambda a: a)
    g = var("g")
    if tr:
        inames = _TR_INAMES
        oc, ic, oc_sw, ic_sw = _tr_indices()
        # work-item (ai, bi) fetches the weight of (oc, ic) = (bi, ai) of the tile and keeps
        # it at tl[tap][bi][ai]; it then transforms its own (ai, bi) = tl[tap][ai][bi]
        insns = [lp.Assignment(var("tl")[a * 3 + b, var("bi"), var("ai")],
                               var("wei")[offset(p.wei, [g, oc_sw, ic_sw, tap(a), tap(b)])],
                               within_inames=inames, id=f"fe{a}{b}")
                 for a in range(3) for b in range(3)]
        insns += [lp.Assignment(w[a][b], var("tl")[a * 3 + b, var("ai"), var("bi")],
                                within_inames=inames, id=f"ld{a}{b}",
                                depends_on=frozenset(f"fe{x}{y}" for x in range(3)
                                                     for y in range(3)))
                  for a in range(3) for b in range(3)]
    else:
        inames = _CH_INAMES
        ic, oc = var("b"), var("a")
        insns = [lp.Assignment(w[a][b], var("wei")[offset(p.wei, [g, oc, ic, tap(a), tap(b)])],
                               within_inames=inames, id=f"ld{a}{b}")
                 for a in range(3) for b in range(3)]
    base = var("u_off") + (g * ICg + ic) * OCg + oc
    for xi in range(4):
        for nu in range(4):
            coeffs, terms = [], []
            for a in range(3):
                for b in range(3):
                    coeffs.append(G_[xi][a] * G_[nu][b])
                    terms.append(w[a][b])
            insns.append(lp.Assignment(var("u")[base + (xi * 4 + nu) * G * ICg * OCg],
                                       _combo(coeffs, terms), within_inames=inames,
                                       depends_on=frozenset(f"ld{a}{b}" for a in range(3)
                                                            for b in range(3))))
    args = make_args([("wei", p.wei_n, False, True), ("u", -1, True, False), ("u_off", None)])
    temps = _temps([f"w{a}{b}" for a in range(3) for b in range(3)])
    if tr:
        return _tr_kernel(p, OCg, ICg, insns, args, temps, "pydnnl_conv_winograd_filter")
    return _channel_kernel(p, OCg, ICg, insns, args, temps, "pydnnl_conv_winograd_filter", wst)


def _build_input(p: WinogradProblem):
    import loopy as lp
    from pymbolic import var
    from pymbolic.primitives import Comparison, LogicalAnd

    G, ICg = p.groups, p.icg
    TH, TW = p.tiles
    T = p.T
    n, th, tw, g, ic, t = _tile_grid(p, ICg)
    names = [[f"d{a}{b}" for b in range(4)] for a in range(4)]
    d = [[var(nm) for nm in row] for row in names]
    H, W = p.src_sp

    def conds_of(a, b):
        pos = [th * 2 - p.padding_l[0] + a, tw * 2 - p.padding_l[1] + b]
        if p.runtime:
            # the last tile's row reads up to OH - 1 - pl + a = H + pr - 3 + a
            conds = [Comparison(e, ">=", 0) for e, k, pl in
                     zip(pos, (a, b), p.padding_l) if k - pl < 0]
            conds += [Comparison(e, "<", n_) for e, k, pr, n_ in
                      zip(pos, (a, b), p.padding_r, (H, W)) if k >= 3 - pr]
            return pos, conds
        lo_hi = [(-p.padding_l[0] + a, (TH - 1) * 2 - p.padding_l[0] + a),
                 (-p.padding_l[1] + b, (TW - 1) * 2 - p.padding_l[1] + b)]
        cond = bounds_condition(pos, lo_hi, (H, W))
        return pos, ([] if cond is None else list(cond.children) if isinstance(cond, LogicalAnd)
                     else [cond])

    insns, rtemps = _tile_loads(p, names, "src", lambda pos: offset(
        p.act, [var("n0") + n, g * ICg + ic, *pos]), conds_of)
    base = var("v_off") + (g * T + t) * ICg + ic
    for xi in range(4):
        for nu in range(4):
            coeffs, terms = [], []
            for a in range(4):
                for b in range(4):
                    coeffs.append(BT[xi][a] * BT[nu][b])
                    terms.append(d[a][b])
            insns.append(lp.Assignment(var("v")[base + (xi * 4 + nu) * G * T * ICg],
                                       _combo(coeffs, terms), within_inames=_TILE_INAMES,
                                       depends_on=frozenset(f"ld{a}{b}" for a in range(4)
                                                            for b in range(4))))
    args = make_args([("src", -1, False, True), ("v", -1, True, False), ("n0", None),
                      ("v_off", None)])
    temps = _temps([f"d{a}{b}" for a in range(4) for b in range(4)]) + rtemps
    return _finish_tile(_tile_kernel(p, ICg, insns, args, temps, "pydnnl_conv_winograd_input"),
                        p)


def _build_output(p: WinogradProblem):
    import loopy as lp
    from pymbolic import var
    from pymbolic.primitives import Comparison

    G, OCg = p.groups, p.ocg
    T = p.T
    OH, OW = p.dst_sp
    n, th, tw, g, oc, t = _tile_grid(p, OCg)
    rt = p.runtime
    m = [[var(f"m{a}{b}") for b in range(4)] for a in range(4)]
    base = var("m_off") + (g * T + t) * OCg + oc
    insns = [lp.Assignment(m[a][b], var("mm")[base + (a * 4 + b) * G * T * OCg],
                           within_inames=_TILE_INAMES, id=f"ld{a}{b}")
             for a in range(4) for b in range(4)]
    c = g * OCg + oc
    bias = var("bias")[offset(p.bias, [c])] if p.bias is not None else None
    for i in range(2):
        for j in range(2):
            coeffs, terms = [], []
            for a in range(4):
                for b in range(4):
                    coeffs.append(AT[i][a] * AT[j][b])
                    terms.append(m[a][b])
            value = _combo(coeffs, terms)
            if bias is not None:
                value = value + bias
            oh, ow = th * 2 + i, tw * 2 + j
            dst_at = var("dst")[offset(p.act, [var("n0") + n, c, oh, ow])]
            value = apply_postops(value, p.post_ops, dst_at, at=[var("n0") + n, c, oh, ow])
            preds = []
            if i == 1 and (rt or OH % 2):
                preds.append(Comparison(oh, "<", OH))
            if j == 1 and (rt or OW % 2):
                preds.append(Comparison(ow, "<", OW))
            # the four stores write different elements: no ordering among them
            others = frozenset((f"st{a}{b}", "any") for a in range(2) for b in range(2)
                               if (a, b) != (i, j))
            insns.append(lp.Assignment(dst_at, value, within_inames=_TILE_INAMES,
                                       predicates=frozenset(preds), id=f"st{i}{j}",
                                       no_sync_with=others,
                                       depends_on=frozenset(f"ld{a}{b}" for a in range(4)
                                                            for b in range(4))))
    has_sum = any(op[0] == "sum" for op in p.post_ops)
    specs = [("mm", -1, False, True), ("dst", -1, True, has_sum)]
    if p.bias is not None:
        specs.append(("bias", p.bias_n, False, True))
    specs += postop_arg_specs(p.post_ops) + [("n0", None), ("m_off", None)]
    temps = _temps([f"m{a}{b}" for a in range(4) for b in range(4)])
    knl = _tile_kernel(p, OCg, insns, make_args(specs), temps, "pydnnl_conv_winograd_output")
    return finish(knl, p.post_ops)


def _build_dy(p: WinogradProblem):
    """Backward weights: ``U = G2 dy G2^T`` of every 2x2 diff_dst tile, ``U[16][G][T][OCg]``."""
    import loopy as lp
    from pymbolic import var
    from pymbolic.primitives import Comparison

    G, OCg = p.groups, p.ocg
    T = p.T
    OH, OW = p.dst_sp
    n, th, tw, g, oc, t = _tile_grid(p, OCg)
    rt = p.runtime
    names = [[f"d{a}{b}" for b in range(2)] for a in range(2)]
    d = [[var(nm) for nm in row] for row in names]

    def conds_of(a, b):
        pos = [th * 2 + a, tw * 2 + b]
        conds = []
        if a == 1 and (rt or OH % 2):
            conds.append(Comparison(pos[0], "<", OH))
        if b == 1 and (rt or OW % 2):
            conds.append(Comparison(pos[1], "<", OW))
        return pos, conds

    insns, rtemps = _tile_loads(p, names, "dy", lambda pos: offset(
        p.act, [var("n0") + n, g * OCg + oc, *pos]), conds_of)
    base = var("u_off") + (g * T + t) * OCg + oc
    for xi in range(4):
        for nu in range(4):
            coeffs = [G2[xi][a] * G2[nu][b] for a in range(2) for b in range(2)]
            terms = [d[a][b] for a in range(2) for b in range(2)]
            insns.append(lp.Assignment(var("u")[base + (xi * 4 + nu) * G * T * OCg],
                                       _combo(coeffs, terms), within_inames=_TILE_INAMES,
                                       depends_on=frozenset(f"ld{a}{b}" for a in range(2)
                                                            for b in range(2))))
    args = make_args([("dy", -1, False, True), ("u", -1, True, False), ("n0", None),
                      ("u_off", None)])
    temps = _temps([f"d{a}{b}" for a in range(2) for b in range(2)]) + rtemps
    return _finish_tile(_tile_kernel(p, OCg, insns, args, temps, "pydnnl_conv_winograd_dy"), p)


def _build_wgrad(p: WinogradProblem):
    """Backward weights: ``dW = A2^T M A2`` with ``M`` the 16 products summed over the
    slices, ``M[16][G][S][OCg][ICg]`` (``[ICg][OCg]`` where ``p.along_oc``); writes the
    weights layout."""
    import loopy as lp
    from pymbolic import var

    G, ICg, OCg, S = p.groups, p.icg, p.ocg, p.slices
    g = var("g")
    if p.along_oc:
        fast, slow, oc, ic = OCg, ICg, var("a"), var("b")
        at_m = ic * OCg + oc
    else:
        fast, slow, oc, ic = ICg, OCg, var("b"), var("a")
        at_m = oc * ICg + ic
    m = [[var(f"m{a}{b}") for b in range(4)] for a in range(4)]
    insns = []
    rt = is_var(S)

    def at(a, b, sl):
        return var("mm")[var("m_off") + (((a * 4 + b) * G + g) * S + sl) * OCg * ICg + at_m]

    for a in range(4):
        for b in range(4):
            if rt:
                from loopy.symbolic import Reduction

                expr = Reduction("sum", ("sl",), at(a, b, var("sl")))
            else:
                expr = at(a, b, 0)
                for sl in range(1, S):
                    expr = expr + at(a, b, sl)
            insns.append(lp.Assignment(m[a][b], expr, within_inames=_CH_INAMES,
                                       id=f"ld{a}{b}"))
    for i in range(3):
        for j in range(3):
            coeffs = [AT2[i][a] * AT2[j][b] for a in range(4) for b in range(4)]
            terms = [m[a][b] for a in range(4) for b in range(4)]
            others = frozenset((f"st{x}{y}", "any") for x in range(3) for y in range(3)
                               if (x, y) != (i, j))
            insns.append(lp.Assignment(var("wei")[offset(p.wei, [g, oc, ic, i, j])],
                                       _combo(coeffs, terms), within_inames=_CH_INAMES,
                                       id=f"st{i}{j}", no_sync_with=others,
                                       depends_on=frozenset(f"ld{a}{b}" for a in range(4)
                                                            for b in range(4))))
    args = make_args([("mm", -1, False, True), ("wei", p.wei_n, True, False), ("m_off", None)])
    args += value_args(S)
    temps = _temps([f"m{a}{b}" for a in range(4) for b in range(4)])
    st = plain_strides(p.wei)
    wst = None if st is None else ((st[1], st[2]) if p.along_oc else (st[2], st[1]))
    return _channel_kernel(p, fast, slow, insns, args, temps, "pydnnl_conv_winograd_wgrad", wst,
                           [f"{{[sl]: 0 <= sl < {S}}}"] if rt else [])


__all__ = ["WinogradProblem", "build_winograd", "build_winograd_loopy", "winograd_runtime",
           "wgrad_along_oc", "BT", "AT", "G_", "G2", "AT2"]
