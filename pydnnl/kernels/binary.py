"""Loopy generator of binary kernels (``dst = src0 op src1``, either source broadcast along
dims of size 1; ``dst = src2 ? src0 : src1`` for ``binary_select``, ``src2`` an s8 condition
read through its own layout), and the index-space helpers the sum and concat generators share.

Every kernel here walks a logical index space ``dims`` whose tensors are described by
reorder-style :func:`~pydnnl.kernels.reorder.layout_of` tuples: a broadcast dimension is a term
of stride 0 (:func:`broadcast_layout`). Callers first reduce the space with :func:`collapse`:
dims of size 1 go, the dims are put in the destination's storage order, and neighbours that
every tensor stores as one run merge, so a contiguous problem is one dimension and a
per-channel broadcast on NCHW is three (N, C, HW).

Two launch shapes (:func:`grid`):

- **flat**: one work-item per element of the whole space; work-item ``i`` finds its position
  by division by constants (one index per dim), work-groups of ``wg`` consecutive elements.
- **rows**: work-items run along the innermost dim (``j``: consecutive addresses, no division
  per element) and every index of the outer dims comes from the work-group id, so it is
  uniform over the work-group: a broadcast operand's offset is computed once per run, and
  consecutive work-items (SIMD lanes on CPU runtimes) read and write consecutive addresses.
  Long rows (``inner >= wg``): ``ceil(inner / wg)`` work-groups per row, one work-group axis
  (Intel's CPU runtime ran a second group axis 1.5-2x slower than one, see
  :mod:`pydnnl.runtime.heuristics.binary`). Short rows (``inner < wg``): work-groups of
  ``inner x (wg // inner)`` work-items, ``wg // inner`` rows each, local axis 0 along the row.

Data types: every buffer is f32, bf16 or f16 (``dts``, oneDNN's ``data_type`` values); bf16 and
f16 buffers are ``ushort`` in OpenCL, read and written through the load/store helpers of
:mod:`pydnnl.kernels.clhelpers` (oneDNN's rounding: f16 round to nearest even by
``vstore_half_rte``, bf16 round to nearest even), and the arithmetic runs in f32.

Pure: no engine, no argument maps.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..constants import algorithm
from ..memory.data_types import data_type
from . import post_ops as po
from .reorder import _offset_expr
from .sizevars import SIZE_DTYPE, ceil_range, free_vars, is_var, size_var

BINARY_ALGS = (algorithm.binary_add, algorithm.binary_mul, algorithm.binary_max,
               algorithm.binary_min, algorithm.binary_div, algorithm.binary_sub,
               algorithm.binary_ge, algorithm.binary_gt, algorithm.binary_le,
               algorithm.binary_lt, algorithm.binary_eq, algorithm.binary_ne,
               algorithm.binary_select)
SELECT = algorithm.binary_select  # the ternary one: a fourth tensor, src2 (s8), picks the source


@dataclass(frozen=True)
class BinaryProblem:
    """``dst = src0 op src1`` over logical ``dims`` (already collapsed).

    ``layouts`` and ``sizes`` hold (src0, src1, dst), and for ``binary_select`` a fourth entry,
    the s8 condition src2 (``dst = src2 != 0 ? src0 : src1``): each tensor's layout over
    ``dims`` (a broadcast dim has a zero term) and its storage elements. ``rows`` picks the
    rows launch shape (see the module docstring), ``wg`` the work-items per work-group along the
    fastest axis. With ``scales`` the kernel reads ``scale0`` / ``scale1`` (one float each)
    and computes ``(scale0 * src0) op (scale1 * src1)``; ``post_ops`` then apply to the result
    (a sum entry reads dst's previous content)."""

    alg: int
    dims: tuple[int, ...]
    layouts: tuple
    sizes: tuple[int, ...]
    wg: int = 256
    rows: bool = False
    iters: int = 1  # elements per work-item (see grid)
    post_ops: tuple = ()  # a kernels.post_ops chain; binary operands over ``dims``
    scales: tuple[bool, bool] = (False, False)  # common scale of src0 / src1 (one float each)
    dts: tuple[int, int, int] = (3, 3, 3)  # data_type of src0, src1, dst (3: f32)


ARG_NAMES = ("src0", "src1", "dst", "src2")


# -- layouts and index spaces (shared with the sum and concat generators) ----------------------
def dense_layout(offset0: int) -> tuple:
    """The layout of a 1-D dense run from ``offset0`` (a flat-storage view)."""
    return (int(offset0), ((1, 1, ()),))


def broadcast_layout(layout: tuple, src_dims, dst_dims) -> tuple:
    """``layout`` over ``src_dims`` seen over ``dst_dims``: every dim where the source has 1
    and the destination more reads index 0 (a zero term)."""
    off, per_dim = layout
    out = tuple((1, 0, ()) if s == 1 and d != 1 else t
                for t, s, d in zip(per_dim, src_dims, dst_dims))
    return (off, out)


def _plain_stride(term) -> int | None:
    blk, stride, inner = term
    return stride if blk == 1 and not inner else None


def collapse(dims, layouts, order_by: int = -1, keep=()) -> tuple[tuple, tuple, tuple]:
    """Reduce the index space ``dims`` shared by ``layouts``: drop dims of size 1, order the
    rest by ``layouts[order_by]``'s outer strides (outermost first) and merge neighbours every
    layout stores as one run (a broadcast pair merges too: both strides 0). Dims listed in
    ``keep`` never merge. Returns ``(dims, layouts, positions)``: ``positions[d]`` is where
    original dim ``d`` went (None if dropped)."""
    nd = len(dims)
    ref = layouts[order_by][1]

    def sort_key(d):
        blk, stride, inner = ref[d]
        return (-stride, d)

    live = [d for d in range(nd) if dims[d] > 1 or d in keep]
    live.sort(key=sort_key)
    # groups of original dims, outermost first
    groups: list[list[int]] = []
    for d in live:
        if groups:
            prev = groups[-1][-1]
            ok = prev not in keep and d not in keep
            for lay in layouts:
                a, b = _plain_stride(lay[1][prev]), _plain_stride(lay[1][d])
                if a is None or b is None or a != b * dims[d]:
                    ok = False
                    break
            if ok:
                groups[-1].append(d)
                continue
        groups.append([d])
    if not groups:  # a single element
        return (1,), tuple((lay[0], ((1, 0, ()),)) for lay in layouts), tuple([None] * nd)
    new_dims = tuple(math.prod(dims[d] for d in g) for g in groups)
    new_layouts = []
    for lay in layouts:
        terms = []
        for g in groups:
            if len(g) == 1:
                terms.append(lay[1][g[0]])
            else:  # the innermost member's stride steps the merged dim
                terms.append((1, lay[1][g[-1]][1], ()))
        new_layouts.append((lay[0], tuple(terms)))
    positions = [None] * nd
    for k, g in enumerate(groups):
        for d in g:
            positions[d] = k
    return new_dims, tuple(new_layouts), tuple(positions)


def _decompose(flat, dims) -> list:
    """Per-dim indices of a row-major flat index over ``dims`` (division by constants)."""
    from pymbolic.primitives import FloorDiv, Remainder

    out, inner = [], 1
    for k in range(len(dims) - 1, -1, -1):
        e = flat if inner == 1 else FloorDiv(flat, inner)
        if k > 0:
            e = Remainder(e, dims[k])
        out.append(e)
        inner *= dims[k]
    return out[::-1]


def grid(dims, rows: bool, wg: int = 256, iters: int = 1):
    """``(domain, inames, idx)``: the loopy domain over ``dims`` for the launch shape and the
    index expression of every dim. ``iters``: elements per work-item along the fastest index
    (``wg`` apart, so each step stays coalesced; unrolled by :func:`schedule`) in the flat and
    long-row shapes."""
    from pymbolic import var
    from pymbolic.primitives import FloorDiv, Remainder

    n = math.prod(dims)
    if rows and len(dims) > 1:
        inner = dims[-1]
        outer = n // inner
        if inner >= wg:  # long rows: work-group g covers part `g % gpr` of row `g // gpr`
            iters = max(1, min(iters, inner // wg))
            span = wg * iters
            gpr = -(-inner // span)
            g, lane, k = var("g"), var("l"), var("k")
            cond = f" and {span} * (g mod {gpr}) + {wg} * k + l < {inner}" if inner % span else ""
            domain = (f"{{[g, k, l]: 0 <= g < {outer * gpr} and 0 <= k < {iters} and "
                      f"0 <= l < {wg}{cond}}}")
            o = FloorDiv(g, gpr) if gpr > 1 else g
            j = wg * k + lane
            if gpr > 1:
                j = span * Remainder(g, gpr) + j
            return domain, ("g", "k", "l"), _decompose(o, dims[:-1]) + [j]
        per = max(1, wg // inner)  # short rows: `per` whole rows per work-group
        groups = -(-outer // per)
        cond = f" and {per} * g + r < {outer}" if outer % per else ""
        domain = (f"{{[g, r, l]: 0 <= g < {groups} and 0 <= r < {per} and 0 <= l < {inner}"
                  f"{cond}}}")
        o = per * var("g") + var("r") if per > 1 else var("g")
        return domain, ("g", "r", "l"), _decompose(o, dims[:-1]) + [var("l")]
    return f"{{[i]: 0 <= i < {n}}}", ("i",), _decompose(var("i"), dims)


def schedule(knl, dims, rows: bool, wg: int, iters: int = 1):
    """Tag the inames of :func:`grid` (built with the same ``rows``, ``wg`` and ``iters``):
    work-groups on ``g.0`` only, the fastest index on ``l.0``, a work-item's elements
    unrolled (independent loads all in flight)."""
    import loopy as lp

    n = math.prod(dims)
    if rows and len(dims) > 1:
        return _tag_rows(knl, dims, wg)
    wg = max(1, min(wg, n))
    iters = max(1, min(iters, -(-n // wg)))
    if iters == 1:
        return lp.split_iname(knl, "i", wg, inner_tag="l.0", outer_tag="g.0")
    knl = lp.split_iname(knl, "i", wg, inner_tag="l.0", outer_iname="i_blk")
    return lp.split_iname(knl, "i_blk", iters, outer_tag="g.0", inner_tag="unr")


def offset(layout: tuple, idx):
    """The storage offset of the element at ``idx`` in ``layout``."""
    return _offset_expr(layout, idx)


# -- data types ----------------------------------------------------------------------------------
F32 = int(data_type.f32)
TYPES = (data_type.f32, data_type.bf16, data_type.f16)  # what these kernels read and write


def storage(dt: int):
    """numpy type of one stored element of ``dt`` (bf16 and f16: raw ``ushort``)."""
    if data_type(dt) not in TYPES:
        raise ValueError(f"kernel data type {data_type(dt).name}: f32, bf16 or f16 only")
    return np.float32 if dt == F32 else np.uint16


def load(dt: int, expr):
    """``expr`` (an element of a ``dt`` buffer) as f32."""
    from pymbolic import var

    from .clhelpers import load_helper

    return expr if dt == F32 else var(load_helper(data_type(dt))[0])(expr)


def store(dt: int, expr):
    """The f32 value ``expr`` converted for a ``dt`` buffer (oneDNN's rounding)."""
    from pymbolic import var

    from .clhelpers import store_helper

    return expr if dt == F32 else var(store_helper(data_type(dt))[0])(expr)


def type_helpers(loads=(), stores=()) -> list[tuple]:
    """The helpers (:func:`pydnnl.kernels.clhelpers.register_helpers`) that :func:`load` of the
    types ``loads`` and :func:`store` of ``stores`` call."""
    from .clhelpers import load_helper, store_helper

    out = {}
    for dt in loads:
        if dt != F32:
            h = load_helper(data_type(dt))
            out[h[0]] = h
    for dt in stores:
        if dt != F32:
            h = store_helper(data_type(dt))
            out[h[0]] = h
    return list(out.values())


def global_arg(name: str, size: int | None, output: bool = False, input: bool = True,
               dt: int = F32):
    """A buffer argument of data type ``dt`` (``size`` None: unsized, for reads guarded by a
    condition loopy's bounds check cannot follow)."""
    import loopy as lp

    return lp.GlobalArg(name, storage(dt), shape=None if size is None else (int(size),),
                        is_output=output, is_input=input)


# -- run-time sizes ------------------------------------------------------------------------------
# Size variables of the run-time form (never ``rows``, ``args`` or ``kernel``: Plan.launch's own
# parameters): ``bd<k>`` collapsed dim k, ``bs<t>_<k>`` tensor t's stride of dim k, ``bouter``
# the product of the dims before the last.


def _dense_stride(terms, dims, k) -> bool:
    """Whether stride ``k`` of a plain layout is the product of the extents of its dims of
    smaller non-zero stride (then it is a function of those dims only)."""
    s = terms[k][1]
    inner = [j for j, t in enumerate(terms) if 0 < t[1] < s]
    return s == math.prod(dims[j] for j in inner), inner


def runtime_form(p: BinaryProblem, rt) -> tuple[BinaryProblem, dict]:
    """The run-time-size form of ``p``: ``(problem, values)`` with the collapsed dims ``rt``
    (those that change with the minibatch and spatial sizes), the strides that depend on them,
    and the launch counts replaced by size variables; ``values`` the ints to bind at launch.
    One program then serves every problem of the class (algorithm, data types, post-ops,
    broadcast pattern, baked dims and strides). ``(p, {})`` where the form does not apply:

    - a blocked layout or a binary post-op (operands read through their own layouts);
    - several dims in the flat shape (one element per work-item found by division by every
      dim but the outermost: a run-time divisor per element runs 4-150x slower on Intel's CPU
      runtime) take only the outermost at run time;
    - a last dim shorter than a work-group keeps its length (work-groups of whole rows, as
      many as fit), only the outer dims run-time.
    """
    nd = len(p.dims)
    rt = {k for k in rt if 0 <= k < nd}
    if nd > 1 and not p.rows:
        rt &= {0}
    if not rt or po.has_binary(p.post_ops):
        return p, {}
    for _off, terms in p.layouts:
        if any(blk != 1 or inner for blk, _s, inner in terms):
            return p, {}
    if nd > 1:
        # a specialization: the row length (the last dim, on the lanes) stays baked. Run-time
        # rows of any length (work-groups per row from the group id, the row's end a lane test)
        # ran 3x slower than baked on Intel's CPU runtime (per channel on 8x256x56x56: 3.3 ms
        # against 1.1; 16x512x768 + 1x1x768: 3.6 against 1.0), with the group divisions hoisted
        # and the loads clamped 5 ms; a new minibatch (or outer size) reuses the program, a new
        # row length (H*W of a channels-first per-channel operand) makes one
        rt.discard(nd - 1)
        if not rt:
            return p, {}
    values: dict = {}
    dims = list(p.dims)
    for k in sorted(rt):
        values[f"bd{k}"] = int(p.dims[k])
        dims[k] = size_var(f"bd{k}")
    layouts = []
    for t, (off, terms) in enumerate(p.layouts):
        new = []
        for k, (blk, s, inner) in enumerate(terms):
            if s not in (0, 1):
                dense, below = _dense_stride(terms, p.dims, k)
                if not dense or any(j in rt for j in below):
                    values[f"bs{t}_{k}"] = int(s)
                    s = size_var(f"bs{t}_{k}")
            new.append((blk, s, inner))
        layouts.append((off, tuple(new)))
    if nd > 1 and p.rows:
        if any(k in rt for k in range(nd - 1)):
            values["bouter"] = math.prod(p.dims[:-1])
    from dataclasses import replace

    return replace(p, dims=tuple(dims), layouts=tuple(layouts),
                   sizes=(None,) * len(p.sizes)), values


def launch_vars(dims, rows: bool) -> set[str]:
    """The launch-count variables :func:`grid_rt` reads for ``dims`` besides the dims."""
    out = set()
    if len(dims) > 1 and rows:
        if any(is_var(d) for d in dims[:-1]):
            out.add("bouter")
    return out


def _affine_total(dims):
    """The product of ``dims`` with at most one size variable (affine for isl)."""
    const = math.prod(d for d in dims if not is_var(d))
    names = [d for d in dims if is_var(d)]
    assert len(names) <= 1, dims
    return const if not names else (names[0] if const == 1 else const * names[0])


def grid_rt(dims, rows: bool, wg: int, iters: int = 1):
    """:func:`grid` over ``dims`` of :func:`runtime_form` (size variables): ``(domain, inames,
    idx, predicates)``. One dim, or the flat shape: run-time only the outermost dim (no division
    by it). Several: the rows shape over rows of baked length; the outer indices come from the
    work-group id (divisions of group ids only, uniform over a work-group)."""
    from pymbolic import var
    from pymbolic.primitives import FloorDiv, Remainder

    if len(dims) == 1 or not rows:  # flat: only the outermost dim run-time, no division by it
        total = _affine_total(dims)
        return f"{{[i]: {ceil_range('i', total)}}}", ("i",), _decompose(var("i"), dims), ()
    inner = dims[-1]
    outer = var("bouter") if any(is_var(d) for d in dims[:-1]) else math.prod(dims[:-1])
    g, lane = var("g"), var("l")
    if inner >= wg:  # long rows, their length baked
        iters = max(1, min(iters, inner // wg))
        span = wg * iters
        gpr = -(-inner // span)
        cond = f" and {span} * (g mod {gpr}) + {wg} * k + l < {inner}" if inner % span else ""
        gmax = f"{gpr} * bouter" if is_var(outer) else str(gpr * outer)
        domain = (f"{{[g, k, l]: 0 <= g < {gmax} and 0 <= k < {iters} and "
                  f"0 <= l < {wg}{cond}}}")
        o = FloorDiv(g, gpr) if gpr > 1 else g
        j = wg * var("k") + lane
        if gpr > 1:
            j = span * Remainder(g, gpr) + j
        return domain, ("g", "k", "l"), _decompose(o, dims[:-1]) + [j], ()
    per = max(1, wg // inner)  # short rows of baked length: `per` whole rows per work-group
    domain = (f"{{[g, r, l]: {ceil_range('g', outer, per)} and 0 <= r < {per} and "
              f"0 <= l < {inner} and {per} * g + r < {outer}}}")
    o = per * g + var("r") if per > 1 else g
    return domain, ("g", "r", "l"), _decompose(o, dims[:-1]) + [lane], ()


def schedule_rt(knl, dims, rows: bool, wg: int, iters: int = 1):
    """Tag the inames of :func:`grid_rt`."""
    import loopy as lp

    if len(dims) == 1 or not rows:
        if iters == 1:
            return lp.split_iname(knl, "i", wg, inner_tag="l.0", outer_tag="g.0")
        knl = lp.split_iname(knl, "i", wg, inner_tag="l.0", outer_iname="i_blk")
        return lp.split_iname(knl, "i_blk", iters, outer_tag="g.0", inner_tag="unr")
    return _tag_rows(knl, dims, wg)


def _tag_rows(knl, dims, wg: int):
    """Tags of the rows form: work-groups on ``g.0``, the row on ``l.0``; short rows stack
    several per work-group (``l.1``), long ones unroll a work-item's elements."""
    import loopy as lp

    tags = {"g": "g.0", "l": "l.0"}
    if dims[-1] < wg:
        tags["r"] = "l.1"
    else:
        tags["k"] = "unr"
    return lp.tag_inames(knl, tags)


# -- the binary kernel -------------------------------------------------------------------------
def kernel_name(p: BinaryProblem) -> str:
    return "pydnnl_" + algorithm(p.alg).name


def build_binary(p: BinaryProblem):
    """loopy TranslationUnit ``(src0, src1, dst)``, and ``src2`` (s8) for ``binary_select``."""
    import loopy as lp
    from pymbolic import var
    from pymbolic.primitives import Comparison, If

    from .clhelpers import register_helpers

    alg = algorithm(p.alg)
    if alg not in BINARY_ALGS:
        raise ValueError(f"binary kernel: {alg.name} is not a binary algorithm")
    runtime = bool(free_vars(p))
    if runtime:
        domain, inames, idx, preds = grid_rt(p.dims, p.rows, p.wg, p.iters)
    else:
        domain, inames, idx = grid(p.dims, p.rows, p.wg, p.iters)
        preds = ()
    d0, d1, dd = p.dts
    a = load(d0, var("src0")[offset(p.layouts[0], idx)])
    b = load(d1, var("src1")[offset(p.layouts[1], idx)])
    args = [global_arg("src0", p.sizes[0], dt=d0), global_arg("src1", p.sizes[1], dt=d1)]
    if p.scales[0]:
        a = var("scale0")[0] * a
        args.append(global_arg("scale0", 1))
    if p.scales[1]:
        b = var("scale1")[0] * b
        args.append(global_arg("scale1", 1))
    dst = var("dst")[offset(p.layouts[2], idx)]
    if alg == SELECT:  # oneDNN: any non-zero s8 value selects src0 (scaled, as the other algs)
        if len(p.layouts) != 4:
            raise ValueError("binary kernel: binary_select needs src2's layout (4 layouts)")
        cond = var("src2")[offset(p.layouts[3], idx)]
        args.append(lp.GlobalArg("src2", np.int8, shape=None if p.sizes[3] is None
                                 else (int(p.sizes[3]),), is_output=False, is_input=True))
        result = If(Comparison(cond, "!=", 0), a, b)
    else:
        result = po.binary_value(alg, a, b)
    value = po.apply(result, p.post_ops, prior=load(dd, dst), at=idx)
    insn = lp.Assignment(dst, store(dd, value), within_inames=frozenset(inames),
                         predicates=frozenset(preds))
    args.append(global_arg("dst", p.sizes[2], output=True, input=po.reads_prior(p.post_ops),
                           dt=dd))
    args += po.loopy_args(p.post_ops)
    if runtime:
        names = set(free_vars(p)) | launch_vars(p.dims, p.rows)
        args += [lp.ValueArg(n, SIZE_DTYPE) for n in sorted(names)]
    knl = lp.make_kernel(domain, [insn], args, name=kernel_name(p), lang_version=(2018, 2),
                         target=lp.PyOpenCLTarget())
    knl = schedule_rt(knl, p.dims, p.rows, p.wg, p.iters) if runtime else \
        schedule(knl, p.dims, p.rows, p.wg, p.iters)
    own = () if alg == SELECT else (("binary", int(alg), (), (), 0),)
    helpers = {h[0]: h for h in po.helpers(own)
               + po.helpers(tuple(p.post_ops))
               + type_helpers((d0, d1, dd) if po.reads_prior(p.post_ops) else (d0, d1), (dd,))}
    return register_helpers(knl, list(helpers.values())) if helpers else knl


# -- the CPU vector-row form ---------------------------------------------------------------------
_VEC_OPS = {algorithm.binary_add: "({a}) + ({b})", algorithm.binary_sub: "({a}) - ({b})",
            algorithm.binary_mul: "({a}) * ({b})", algorithm.binary_div: "({a}) / ({b})",
            algorithm.binary_max: "fmax({a}, {b})", algorithm.binary_min: "fmin({a}, {b})"}


@dataclass(frozen=True)
class BinaryVecProblem:
    """``dst = src0 op src1`` with one work-item per run of rows (CPUs): each row (the
    innermost collapsed dim, ``dims[-1]``) walked in ``float<vec>`` vectors, then a scalar
    tail; each source either runs along the row (stride 1) or is one value per row (stride 0,
    a per-channel operand of ``nchw``). ``dims``, ``layouts`` (src0, src1, dst, plain) and
    the row length are baked; the row count (``bouter``, the product of ``dims[:-1]``) is a
    kernel argument, so a new minibatch reuses the program. ``rows_per_item`` consecutive rows
    per work-item."""

    alg: int
    dims: tuple[int, ...]
    layouts: tuple
    vec: int = 16
    rows_per_item: int = 1
    scales: tuple[bool, bool] = (False, False)
    dts: tuple[int, int, int] = (3, 3, 3)


def vec_form_ok(alg, dims, layouts, post_ops=(), dts=(F32, F32, F32)) -> bool:
    """Whether :class:`BinaryVecProblem` covers a collapsed problem: an arithmetic or max/min
    algorithm, no post-ops, f32/bf16/f16, plain layouts, at least two dims, dst and every
    source of stride 1 or 0 along the last dim (dst 1)."""
    if algorithm(alg) not in _VEC_OPS or post_ops or len(dims) < 2 or len(layouts) != 3:
        return False
    if any(data_type(d) not in TYPES for d in dts):
        return False
    for _off, terms in layouts:
        if any(blk != 1 or inner for blk, _s, inner in terms):
            return False
    return layouts[2][1][-1][1] == 1 and all(lay[1][-1][1] in (0, 1) for lay in layouts[:2])


def build_binary_vec(p: BinaryVecProblem):
    """OpenCL source of :class:`BinaryVecProblem` (a :class:`KernelSource`)."""
    from .normalization import _decompose as decompose
    from .reduction import _CTYPE, io_preamble, ld, ptr_decl, st
    from .source import KernelSource

    if not vec_form_ok(p.alg, p.dims, p.layouts, (), p.dts):
        raise ValueError("binary vec form: arithmetic or max/min, plain layouts, rows of "
                         "stride 1 (dst) or 0/1 (sources)")
    V, RP = p.vec, max(1, p.rows_per_item)
    inner = int(p.dims[-1])
    outer = [int(d) for d in p.dims[:-1]]
    names = [f"i{k}" for k in range(len(outer))]
    dec = decompose("o", outer, names)
    dt = [data_type(d).name for d in p.dts]

    def base(t: int) -> str:
        off, terms = p.layouts[t]
        parts = [str(off)] if off else []
        parts += [f"(size_t){n} * {s}" for n, (_b, s, _i) in zip(names, terms) if s]
        return " + ".join(parts) or "0"
    args = [ptr_decl("src0", dt[0], True), ptr_decl("src1", dt[1], True)]
    if p.scales[0]:
        args.append("__global const float *restrict scale0")
    if p.scales[1]:
        args.append("__global const float *restrict scale1")
    args += [ptr_decl("dst", dt[2], False), "const int bouter"]
    stride = [p.layouts[t][1][-1][1] for t in range(2)]
    pre = [f"scale{t}[0] * " if p.scales[t] else "" for t in range(2)]
    lines = []
    for t in range(2):
        lines.append(f"__global const {_CTYPE[dt[t]]} *s{t} = src{t} + {base(t)};")
        if not stride[t]:
            lines.append(f"const float u{t} = {pre[t]}{ld(f's{t}', dt[t], '0')};")
    lines.append(f"__global {_CTYPE[dt[2]]} *d = dst + {base(2)};")

    def val(t: int, w: int) -> str:
        return f"u{t}" if not stride[t] else f"{pre[t]}{ld(f's{t}', dt[t], 'j', w)}"

    def body(w: int) -> str:
        v = _VEC_OPS[algorithm(p.alg)].format(a=val(0, w), b=val(1, w))
        return st("d", dt[2], "j", v, w)
    vend = inner // V * V
    loops = f"for (int j = 0; j < {vend}; j += {V}) {{ {body(V)} }}"
    if vend < inner:
        loops += f"\n        for (int j = {vend}; j < {inner}; ++j) {{ {body(1)} }}"
    name = kernel_name(p)
    sep = "\n        "
    src = f"""{io_preamble(tuple(dt), V)}
__kernel void __attribute__((reqd_work_group_size(1, 1, 1)))
{name}({", ".join(args)})
{{
    const int r0 = get_global_id(0) * {RP};
    const int r1 = min(r0 + {RP}, bouter);
    for (int o = r0; o < r1; ++o) {{
        {dec}
        {sep.join(lines)}
        {loops}
    }}
}}
"""
    arg_names = tuple(a.split()[-1].lstrip("*") for a in args)
    return KernelSource(name, src, None, (1,), arg_names,
                        grid=(f"(bouter + {RP - 1}) // {RP}",))
