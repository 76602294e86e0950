"""Pieces the convolution kernel generators share: layout terms, index arithmetic, fused
bias and post-ops.

A *layout* here is the hashable tuple of :func:`pydnnl.kernels.reorder.layout_of`:
``(offset0, ((block, stride, inner_terms), ...))``, one entry per logical dimension, so every
kernel addresses plain, strided and blocked tensors through the same per-dimension offset
terms. Convolution kernels see logical tensors in oneDNN order: activations ``[N, C, sp...]``
and weights always grouped ``[G, OC/G, IC/G, k...]`` (an ungrouped weights desc gets a leading
dimension of size 1 and stride 0; deconvolution swaps the two channel dimensions, which only
swaps two entries of the tuple).
"""
from __future__ import annotations

import math

import numpy as np

from ..memory.desc import MemoryDesc
from . import post_ops as _po
from .reorder import _offset_expr, layout_of

__all__ = ["layout_of", "offset", "grouped_layout", "swap_channel_dims", "plain_strides",
           "decompose", "postop_helpers", "apply_postops", "postop_arg_specs", "c_float",
           "clamped_positions"]


# 64-bit index arithmetic: Intel's and PoCL's CPU compilers keep contiguous vector loads and
# stores with it (with int32 they fell back to gathers in the GEMM kernels: 3x slower)
INDEX_DTYPE = np.int64


def offset(layout: tuple, idx):
    """The storage offset expression of logical index ``idx`` (pymbolic expressions)."""
    return _offset_expr(layout, idx)


def grouped_layout(md: MemoryDesc, grouped: bool) -> tuple:
    """Layout of weights seen as ``[G, OC/G, IC/G, k...]``: ungrouped gets a unit G dim."""
    lay = layout_of(md)
    if grouped:
        return lay
    off0, per = lay
    return (off0, ((1, 0, ()),) + per)


def swap_channel_dims(layout: tuple) -> tuple:
    """Grouped weights ``[G, A, B, k...]`` -> ``[G, B, A, k...]`` (same storage)."""
    off0, per = layout
    per = list(per)
    per[1], per[2] = per[2], per[1]
    return (off0, tuple(per))


def plain_strides(layout: tuple) -> tuple[int, ...] | None:
    """Per-dimension strides of a layout without inner blocks, else None."""
    off0, per = layout
    if any(blk != 1 or inner for blk, _, inner in per):
        return None
    return tuple(stride for _, stride, _ in per)


def decompose(flat, sizes):
    """Index expressions of a row-major flattening of ``sizes`` (last fastest) from ``flat``."""
    from pymbolic.primitives import FloorDiv, Remainder

    out = []
    inner = 1
    for k in range(len(sizes) - 1, -1, -1):
        e = flat if inner == 1 else FloorDiv(flat, inner)
        if k > 0:
            e = Remainder(e, sizes[k])
        out.append(e)
        inner *= sizes[k]
    return list(reversed(out))


# fewest work-items along axis 0 worth a work-group: a smaller last dim (the 3 channels of an
# image in nhwc) is flattened with the dims before it (conv1's col2im ran 3 work-items per
# group and 20x slower than its GEMM)
MIN_LANES = 16


def grid(sizes, per_item: int = 1, min_lanes: int = MIN_LANES) -> tuple[dict, list]:
    """A launch over dims ``sizes`` (outermost first, the last contiguous in storage).

    Returns ``(ranges, exprs)``: iname ``a0`` runs along the last dim (work-item axis 0), or
    along the last dims flattened while they have fewer than ``min_lanes`` elements; inames
    ``s0, s1, ...`` are loops inside each work-item over the dims before it, as many as it
    takes to give a work-item about ``per_item`` elements (a work-group per few elements
    costs more than the copy on CPU runtimes); ``a1`` is the next dim (group axis 1) and
    ``a2`` all outer dims flattened (group axis 2, decomposed with divisions uniform across
    a work-group). Returns the index expression of every dim. Neighbouring work-items touch
    neighbouring elements, so CPU runtimes vectorise.
    """
    sizes = [int(v) for v in sizes] or [1]
    lane_dims = [sizes.pop()]
    while sizes and prod(lane_dims) < min_lanes:
        lane_dims.insert(0, sizes.pop())
    ranges, exprs = _grid(sizes + [prod(lane_dims)], per_item)
    if len(lane_dims) == 1:
        return ranges, exprs
    return ranges, exprs[:-1] + decompose(exprs[-1], lane_dims)


def _grid(sizes: list[int], per_item: int) -> tuple[dict, list]:
    from pymbolic import var

    inner, rest = sizes[-1], sizes[:-1]
    loops = []
    work = 1
    while rest and work * rest[-1] <= max(per_item, 1) and len(rest) > 1:
        work *= rest[-1]
        loops.insert(0, rest.pop())
    if not rest:
        rest = [1]
    outer = rest[:-1]
    ranges = {"a0": inner, "a1": rest[-1], "a2": prod(outer)}
    names = [f"s{i}" for i in range(len(loops))]
    ranges.update(zip(names, loops))
    exprs = ((decompose(var("a2"), outer) if outer else []) + [var("a1")]
             + [var(n) for n in names] + [var("a0")])
    # the dims given: drop the leading unit dim a2 stands for when ``sizes`` had fewer
    return ranges, exprs[len(exprs) - len(sizes):] if len(exprs) > len(sizes) else exprs


def tag_grid(knl, ranges: dict, wg: int):
    """Tags of a :func:`grid` launch."""
    import loopy as lp

    knl = split_fast(knl, "a0", ranges["a0"], wg, peel=True)
    return lp.tag_inames(knl, {"a1": "g.1", "a2": "g.2"})


def domain(ranges: dict) -> str:
    return "{[" + ", ".join(ranges) + "]: " + " and ".join(
        f"0 <= {k} < {v}" for k, v in ranges.items()) + "}"


def c_float(v: float) -> str:
    """An OpenCL C float literal."""
    if math.isnan(v):
        return "NAN"
    if math.isinf(v):
        return "INFINITY" if v > 0 else "(-INFINITY)"
    return repr(float(np.float32(v))) + "f"


def postop_helpers(post_ops: tuple) -> list[tuple]:
    """C helpers of a post-op chain (see :mod:`pydnnl.kernels.post_ops`)."""
    return _po.helpers(post_ops)


def apply_postops(value, post_ops: tuple, prior=None, skip: int = 0, at=None):
    """``value`` after the post-ops (the first ``skip`` left out); ``prior`` reads the
    destination's previous content, ``at`` is the destination position ``[n, c, sp...]``
    (binary operands)."""
    return _po.apply(value, post_ops, prior, skip, at)


def postop_arg_specs(post_ops: tuple) -> list[tuple]:
    """:func:`make_args` specs of the chain's binary operands (``po<i>_src1``)."""
    return _po.arg_specs(post_ops)


def bounds_condition(pos_exprs, lo_hi, sizes):
    """``0 <= pos < size`` for every dim where the static range ``lo_hi`` may leave it."""
    from pymbolic.primitives import Comparison, LogicalAnd

    conds = []
    for e, (lo, hi), n in zip(pos_exprs, lo_hi, sizes):
        if lo < 0:
            conds.append(Comparison(e, ">=", 0))
        if hi >= n:
            conds.append(Comparison(e, "<", n))
    if not conds:
        return None
    return conds[0] if len(conds) == 1 else LogicalAnd(tuple(conds))


def output_guards(p) -> tuple:
    """Per spatial dim of a backward-data gather (:func:`output_positions`): (an output
    position may be < 0, one may be past the output's end), from ``p``'s int sizes."""
    out = []
    for d in range(len(p.kernel)):
        lo = -(p.kernel[d] - 1) * (p.dilates[d] + 1) + p.padding_l[d]
        hi = p.src_sp[d] - 1 + p.padding_l[d]
        out.append((lo < 0, hi >= p.dst_sp[d] * p.strides[d]))
    return tuple(out)


def runtime_output_guards(p) -> tuple:
    """:func:`output_guards` for a run-time-size form: the lower test as the constants say,
    the upper one always (whether the last input positions reach past the output changes with
    the sizes' parity under strides; one compare per tap costs nothing measurable, another
    program per parity a compilation)."""
    return tuple((lo, True) for lo, _ in output_guards(p))


def output_positions(p, i_sp, ks, guards=None):
    """For input position ``i_sp`` and kernel tap inames ``ks``: the output positions that
    read it (backward data / col2im) and the condition that such an output exists.
    ``guards``: per spatial dim, whether to test the lower and the upper bound (default
    :func:`output_guards`; sizes that are size variables need them given)."""
    from pymbolic import var
    from pymbolic.primitives import Comparison, FloorDiv, LogicalAnd, Remainder

    if guards is None:
        guards = output_guards(p)
    conds, o = [], []
    for d in range(len(i_sp)):
        num = i_sp[d] + p.padding_l[d] - var(ks[d]) * (p.dilates[d] + 1)
        s = p.strides[d]
        lo, hi = guards[d]
        if lo:
            conds.append(Comparison(num, ">=", 0))
        if s == 1:
            od = num
            if hi:
                conds.append(Comparison(num, "<", p.dst_sp[d]))
        else:
            conds.append(Comparison(Remainder(num, s), "==", 0))
            od = FloorDiv(num, s)
            if hi:
                conds.append(Comparison(num, "<", p.dst_sp[d] * s))
        o.append(od)
    cond = None if not conds else conds[0] if len(conds) == 1 else LogicalAnd(tuple(conds))
    return cond, o


def guarded(cond, value):
    from pymbolic.primitives import If

    return value if cond is None else If(cond, value, np.float32(0))


def guarded_load(cond, array: str, off, size: int | None = None):
    """``array[off]`` where ``cond`` holds, else 0; the address stays inside the array.

    The index itself is clamped too (to ``[0, size - 1]``, or ``>= 0`` when the size is not
    known): Intel's CPU compiler was seen to speculate a guarded load at an out-of-range
    address and return garbage (wrong sums, not a fault). The clamp is a C helper: loopy folded
    an ``If`` index to a constant, and OpenCL's ``max`` has no (long, int) overload. Kernels
    using this turn loopy's static bounds check off (it cannot see through the helper); the
    Oclgrind tests check the accesses instead.
    """
    from pymbolic import var
    from pymbolic.primitives import If

    if cond is None:
        return var(array)[off]
    hi = int(size) - 1 if size is not None and size > 0 else -1
    return If(cond, var(array)[var(clamp_helper(hi)[0])(off)], np.float32(0))


def clamped_positions(pos_exprs, lo_hi, sizes) -> list:
    """``pos_exprs`` with each dim that the static range ``lo_hi`` may take outside
    ``[0, size)`` clamped into it (the :func:`clamp_helper` call).

    A load guarded by :func:`bounds_condition` can then use the clamped positions as its
    address: it stays inside the tensor however the compiler speculates, and, unlike a clamp
    of the flat offset, keeps the address an affine function of the channel index, so work-items
    running along channels still load contiguously (the vectorised im2col of a padded 3x3 layer
    ran 3.7x faster than with the flat clamp)."""
    from pymbolic import var

    out = []
    for e, (lo, hi), n in zip(pos_exprs, lo_hi, sizes):
        out.append(var(clamp_helper(int(n) - 1)[0])(e) if lo < 0 or hi >= n else e)
    return out


def clamp_helper(hi: int) -> tuple:
    """The (name, C definition, arg type, result type) of the index clamp to ``[0, hi]``
    (``hi < 0``: no upper bound)."""
    t = "long" if INDEX_DTYPE == np.int64 else "int"
    name = f"pd_clamp_idx_{hi}" if hi >= 0 else "pd_clamp_idx"
    upper = f" x = x > {hi} ? {hi} : x;" if hi >= 0 else ""
    code = f"static inline {t} {name}({t} x) {{ x = x < 0 ? 0 : x;{upper} return x; }}"
    return name, code, INDEX_DTYPE, INDEX_DTYPE


def clamp_helpers_used(exprs) -> list[tuple]:
    """The clamp helpers the expressions call."""
    import re

    names = set()
    for e in exprs:
        names.update(re.findall(r"pd_clamp_idx(?:_(\d+))?\(", str(e)))
    return [clamp_helper(int(h) if h else -1) for h in sorted(names)]


def make_args(specs):
    """loopy argument list from ``(name, nelems, is_output, is_input)`` (f32 elements; a fifth
    entry names another numpy element type: a post-op operand's, :func:`postop_arg_specs`)
    and ``(name, None)`` (an integer value argument of :data:`INDEX_DTYPE`: offsets into
    large buffers). ``nelems < 0``: the array is indexed with run-time offsets,
    so loopy's static bounds check cannot apply (the plans check those offsets)."""
    import loopy as lp

    out = []
    for spec in specs:
        name, n = spec[0], spec[1]
        if n is None:
            out.append(lp.ValueArg(name, INDEX_DTYPE))
        else:
            is_out, is_in = spec[2], spec[3]
            shape = None if n < 0 else (max(int(n), 1),)
            dtype = spec[4] if len(spec) > 4 else np.float32
            out.append(lp.GlobalArg(name, dtype, shape=shape,
                                    is_output=is_out, is_input=is_in))
    return out


def finish(knl, post_ops: tuple = ()):
    """Register the post-op and index-clamp helpers a kernel calls."""
    import loopy as lp

    from .clhelpers import register_helpers

    exprs = [e for insn in knl.default_entrypoint.instructions for e in (
        [insn.expression] if hasattr(insn, "expression")
        else [ex for _, ex in getattr(insn, "iname_exprs", ())])]
    helpers = postop_helpers(post_ops) + clamp_helpers_used(exprs)
    if any(f"{RT_CLAMP}(" in str(e) for e in exprs):
        helpers.append(rt_clamp_helper())
    if any(h[0].startswith("pd_clamp_idx") for h in helpers):
        knl = lp.set_options(knl, enforce_array_accesses_within_bounds="no_check")
    return register_helpers(knl, helpers) if helpers else knl


def split_fast(knl, iname: str, size: int, wg: int, outer_axis: int = 0, peel: bool = False):
    """Spread ``iname`` over work-groups of ``wg`` work-items (axis 0) and groups.

    ``peel``: when ``size`` is no multiple of ``wg``, the last (partial) work-group gets code
    of its own, guarded by the local id alone. Intel's CPU OpenCL compiler drops the guard
    ``size-1 - wg*gid(0) - lid(0) >= 0`` of a loop-free kernel with a constant ``size``: every
    work-item of the partial group stored, past the end of the tensor (a 1-D ncw convolution
    epilogue applied its post-op twice and overwrote host memory). The copy and epilogue
    kernels, which have no loop, ask for it.
    """
    import loopy as lp

    wg = max(1, min(wg, size))
    slabs = (0, 1) if peel and size % wg else (0, 0)
    return lp.split_iname(knl, iname, wg, inner_tag="l.0", outer_tag=f"g.{outer_axis}",
                          slabs=slabs)


def prod(xs) -> int:
    return int(np.prod(xs)) if len(xs) else 1


# -- sizes at run time (see pydnnl/kernels/sizevars.py) -----------------------------------------

RT_CLAMP = "pd_clamp_rt"
# what a run-time extent counts as when a launch structure is chosen (never its value: the
# structure, and so the program, must be the same for every value)
NOMINAL_EXTENT = 16
# work-group width along a run-time dim (spatial): one CPU vector, so that a short row (7
# points) idles at most one vector's lanes
RT_LANES = 16


def rt_clamp_helper() -> tuple:
    """The C helper clamping an index into ``[0, hi]`` with ``hi`` a run-time value."""
    t = "long" if INDEX_DTYPE == np.int64 else "int"
    code = (f"static inline {t} {RT_CLAMP}({t} x, {t} hi) {{ x = x > hi ? hi : x; "
            f"return x < 0 ? 0 : x; }}")
    return RT_CLAMP, code, (INDEX_DTYPE, INDEX_DTYPE), INDEX_DTYPE


def clamp_into(e, n):
    """``e`` clamped into ``[0, n - 1]``; ``n`` an int or a size expression."""
    from pymbolic import var

    from .sizevars import is_var

    if not is_var(n):
        return var(clamp_helper(int(n) - 1)[0])(e)
    return var(RT_CLAMP)(e, n - 1)


def product_name(names) -> str:
    """The size variable carrying the product of the size variables ``names``."""
    return "_x_".join(sorted(names))


def product_values(values: dict, names=None) -> dict:
    """``values`` (size name -> int) plus the product of every subset of two or more of
    ``names`` (default: all of them), named by :func:`product_name`: the flattened extents
    :func:`grid_rt` may ask for."""
    from itertools import combinations

    out = dict(values)
    names = sorted(values if names is None else names)
    for r in range(2, len(names) + 1):
        for sub in combinations(names, r):
            out[product_name(sub)] = prod([int(values[n]) for n in sub])
    return out


def _extent(sizes: list):
    """The product of ``sizes`` (ints and size variables): an int, or a constant times one size
    variable (the product of the variables, see :func:`product_name`), affine for isl."""
    from pymbolic import var

    from .sizevars import is_var

    const = prod([v for v in sizes if not is_var(v)])
    names = [v.name for v in sizes if is_var(v)]
    if not names:
        return const
    v = var(names[0]) if len(names) == 1 else var(product_name(names))
    return v if const == 1 else const * v


def grid_rt(sizes, per_item: int = 1, wg: int = 64):
    """:func:`grid` for extents that may be size variables (each a single
    :func:`~pydnnl.kernels.sizevars.size_var`): one launch structure whatever their values.

    Axis 0 runs along the last dim (with the dims before it while it is a constant under
    :data:`MIN_LANES`; alone, :data:`RT_LANES` wide, when it is a run-time one); loops inside each
    work-item cover constant dims before it up to ``per_item`` elements; then, while a
    work-item has fewer, the next run-time dim is split into a loop of that many and its outer
    part (work-group axis 1); axis 2 runs over the other dims flattened (decomposed once per
    work-item). Flattened run-time dims take their product as a size variable
    (:func:`product_name`; bind :func:`product_values`). Returns ``(ranges, exprs, tag)``:
    the iname extents (ints or expressions), the index expression of every dim, and the
    function that splits and tags the inames of the kernel made over them.
    """
    from pymbolic import var

    from .sizevars import is_var

    sizes = list(sizes) or [1]
    n = len(sizes)
    nl = 1
    # a run-time last dim stays alone on the lanes: the divisions that would split a flattened
    # index run lane by lane on CPUs (a division by a run-time value does not vectorise: the
    # channel-block copy of a 3x3 layer ran 4x slower with them); divisions of the group ids
    # (axis 2) are uniform across a work-group and cost nothing measurable
    if not is_var(sizes[-1]):
        while nl < n and not is_var(sizes[n - nl - 1]) and prod(sizes[n - nl:]) < MIN_LANES:
            nl += 1
    lane = sizes[n - nl:]
    rest = list(range(n - nl))
    loops, work = [], 1
    while len(rest) > 1 and not is_var(sizes[rest[-1]]) \
            and work * sizes[rest[-1]] <= max(per_item, 1):
        work *= sizes[rest[-1]]
        loops.insert(0, rest.pop())
    split = 0
    if rest and is_var(sizes[rest[-1]]) and work * 2 <= per_item:
        split = per_item // work  # a loop of this many along the run-time dim
    ranges = {"a0": _extent(lane)}
    exprs: list = [None] * n
    if nl == 1:
        exprs[n - 1] = var("a0")
    else:
        for d, e in zip(range(n - nl, n), decompose(var("a0"), lane)):
            exprs[d] = e
    names = [f"s{i}" for i in range(len(loops))]
    for d, nm in zip(loops, names):
        ranges[nm] = sizes[d]
        exprs[d] = var(nm)
    if rest:
        d1 = rest.pop()
        ranges["a1"] = sizes[d1]
        exprs[d1] = var("a1")
    else:
        ranges["a1"] = 1
    ranges["a2"] = _extent([sizes[d] for d in rest])
    for d, e in zip(rest, decompose(var("a2"), [sizes[d] for d in rest]) if rest else []):
        exprs[d] = e

    def tag(knl):
        import loopy as lp

        if is_var(ranges["a0"]):  # the guard of the partial work-group stays (a run-time size)
            knl = lp.split_iname(knl, "a0", min(wg, RT_LANES), inner_tag="l.0", outer_tag="g.0")
        else:
            knl = split_fast(knl, "a0", ranges["a0"], wg, peel=True)
        if split > 1:
            knl = lp.split_iname(knl, "a1", split, outer_iname="a1_out", inner_iname="a1_in",
                                 outer_tag="g.1")
            return lp.tag_inames(knl, {"a2": "g.2"})
        return lp.tag_inames(knl, {"a1": "g.1", "a2": "g.2"})

    return ranges, exprs, tag


def domain_rt(ranges: dict) -> str:
    """:func:`domain` with extents that may be affine size expressions."""
    return "{[" + ", ".join(ranges) + "]: " + " and ".join(
        f"0 <= {k} < {v}" for k, v in ranges.items()) + "}"


def rt_value_args(*objs, known=()) -> list:
    """loopy integer arguments for the size variables of ``objs`` not in ``known``."""
    import loopy as lp

    from .sizevars import SIZE_DTYPE, free_vars

    names = sorted(set().union(*[set(free_vars(o)) for o in objs]) - set(known))
    return [lp.ValueArg(nm, SIZE_DTYPE) for nm in names]


def sym_plain_layout(layout: tuple, name: str, keep_unit: bool = True, channels: int = 0):
    """A plain layout with its strides (and a non-zero offset) as size variables
    ``<name>_d<i>`` / ``<name>_off0``: ``(layout, values)``, or None for a blocked layout. A
    unit stride stays baked (contiguous vector accesses need it at compile time), and so
    does, for an activation ``[N, C, sp...]`` with unit channel stride, a last spatial stride
    equal to ``channels`` (channels-last: no spatial size enters it; baked, the compiler sees
    that the taps and channels of one row are contiguous: conv1's im2col ran 1.5x slower
    with it as an argument)."""
    from .sizevars import size_var

    strides = plain_strides(layout)
    if strides is None:
        return None
    off0 = layout[0]
    values = {}
    if off0:
        values[f"{name}_off0"] = int(off0)
        off0 = size_var(f"{name}_off0")
    per = []
    for d, st in enumerate(strides):
        if (st == 1 and keep_unit) or (channels and d == len(strides) - 1 and d >= 2
                                       and strides[1] == 1 and st == channels):
            per.append((1, st, ()))
        else:
            values[f"{name}_d{d}"] = int(st)
            per.append((1, size_var(f"{name}_d{d}"), ()))
    return (off0, tuple(per)), values


def hoist_group_indices(exprs: list, inames=("a2",), prefix: str = "gi"):
    """Index expressions that divide group ids by run-time sizes (the outer dims
    :func:`grid_rt` flattens onto axis 2) computed once per work-item into private
    temporaries: ``(exprs, instructions, temporaries)``; the kernel's other instructions
    depend on the returned ones. Left inline, the compiler may recompute the 64-bit divisions
    at every tap and point of a work-item's loops (col2im of a 14x14 layer: 1.5x slower)."""
    import re

    import loopy as lp
    from pymbolic import var
    from pymbolic.mapper.dependency import DependencyMapper
    from pymbolic.primitives import Variable

    from .sizevars import is_var

    dep = DependencyMapper(composite_leaves=False)
    out, insns, temps = [], [], []
    for i, e in enumerate(exprs):
        if not is_var(e) or isinstance(e, Variable):
            out.append(e)
            continue
        names = {v.name for v in dep(e)}
        used = names & set(inames)
        # only group ids and sizes (no lane or loop iname) and a division to save
        if (not used or any(re.fullmatch(r"a[01]|s\d+", n) for n in names)
                or ("FloorDiv" not in repr(e) and "Remainder" not in repr(e))):
            out.append(e)
            continue
        name = f"{prefix}{i}"
        insns.append(lp.Assignment(var(name), e, within_inames=frozenset(used),
                                   id=f"{name}_set"))
        temps.append(lp.TemporaryVariable(name, INDEX_DTYPE, shape=(),
                                          address_space=lp.AddressSpace.PRIVATE))
        out.append(var(name))
    return out, insns, temps


def col2im_column(p, n, c, i_sp, ks):
    """col2im's read of the column buffer for input point (n, channel ``c``, spatial
    positions ``i_sp``) at taps ``ks`` (C loop names): ``(cond, cidx)``, the condition that
    the tap meets an output point (None: always) and the column index (n, group, channel in
    the group, taps..., output positions...), clamped into range whatever the condition. One
    group keeps the channel as it is (no division per work-item, so loads along channels
    stay recognisably contiguous)."""
    from pymbolic import var
    from pymbolic.primitives import FloorDiv, Remainder

    g, ic = (0, c) if p.groups == 1 else (FloorDiv(c, p.icg), Remainder(c, p.icg))
    cond, o = output_positions(p, i_sp, ks, p.guards)
    if cond is not None:  # a valid address whatever the condition (see clamped_positions)
        o = [clamp_into(e, n_) for e, n_ in zip(o, p.dst_sp)]
    return cond, [n, g, ic, *[var(k) for k in ks], *o]
