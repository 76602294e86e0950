"""OpenCL C generators of the batch and layer normalization kernels.

Every tensor is addressed through its layout tuple (:func:`~pydnnl.kernels.reorder.layout_of`:
offset0 and, per logical dim, the outer block stride and the inner block terms), so plain
layouts with any strides and blocked layouts (``nChw16c``) are read and written in place.

Batch normalization (logical dims ``[N, C, spatial...]``, reduction index ``r = n * S + sp``
over ``R = N * S`` values per channel):

- :func:`build_bn_reduce`: per-channel partial sums over chunks of ``r`` into a scratch array
  ``part[(g * C + c) * 2 + {0, 1}]``. Forward: sums of ``x - K[c]`` and ``(x - K[c])^2``
  with the shift ``K[c] = x[0, c, 0...]`` (a one-pass variance without the cancellation of
  raw sums). Backward: sums of ``dy`` and ``dy * (x - mean[c])``. Lanes run along the
  channels where channels are the innermost dim in memory (``nhwc``, ``nc``, blocked), else
  along ``r`` with a local-memory tree per work-group (``nchw``).
- :func:`build_bn_finalize`: one work-item per channel adds the partials (or reads the given
  statistics), writes mean/variance or diff_scale/diff_shift, and leaves four coefficients
  per channel in scratch: ``m, a, b, d``.
- :func:`build_bn_apply`: one work-item per element in the source's memory order. Forward:
  ``y = (x - m) * a + b`` (with ``fuse_norm_add_relu`` plus ``src_1``, read in dst's layout;
  then ReLU, and the workspace mask ``y > 0`` in training). Backward: ``diff_src = a * dy +
  b * (x - m) + d`` with ``dy`` gated by the mask, which ``fuse_norm_add_relu`` also stores
  as ``diff_src_1`` (in diff_dst's layout).

Layer normalization (rows = every leading index, ``C`` = the last dim):

- :func:`build_ln_fwd` and :func:`build_ln_bwd`: one work-group per row, local-memory
  reductions (mean, then the centred sum of squares, from cache; backward the sums of
  ``g = dy * gamma`` and ``g * xhat``).
- :func:`build_ln_ss_reduce` and :func:`build_ln_ss_finalize`: diff_scale/diff_shift as
  column sums over chunks of rows, then a sum of the chunk partials.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .clhelpers import lane_reduce
from .source import KernelSource

# -- layout helpers ----------------------------------------------------------------------------


def offset_expr(layout: tuple, idx: list[str]) -> str:
    """OpenCL C expression of the storage offset of the element with indices ``idx``."""
    off0, per_dim = layout
    terms = [str(off0)] if off0 else []
    for x, (blk, stride, inner) in zip(idx, per_dim):
        outer = f"({x} / {blk})" if blk > 1 else x
        if stride:
            terms.append(f"{outer} * {stride}")
        for mod, div, s in inner:
            t = f"({x} % {mod})"
            if div > 1:
                t = f"({t} / {div})"
            terms.append(f"{t} * {s}")
    return "(" + " + ".join(terms) + ")" if terms else "0"


def min_stride(layout: tuple, d: int) -> int:
    """The smallest storage step of dim ``d`` (its innermost block's stride, if blocked)."""
    blk, stride, inner = layout[1][d]
    return min([s for _m, _q, s in inner] + ([stride] if stride or not inner else []))


def memory_order(layout: tuple, dims) -> tuple[int, ...]:
    """Dims from the outermost to the innermost in storage (size-1 dims first)."""
    keys = [(dims[d] > 1, -min_stride(layout, d), d) for d in range(len(dims))]
    return tuple(d for _b, _s, d in sorted(keys, key=lambda k: (k[0], k[1], k[2])))


def _decompose(var: str, sizes: list[int], names: list[str]) -> str:
    """C statements splitting ``var`` (row-major over ``sizes``) into ``names``."""
    if len(sizes) == 1:
        return f"const int {names[0]} = {var};"
    tmp = f"q_{names[0]}"
    lines = [f"int {tmp} = {var};"]
    for i in range(len(sizes) - 1, 0, -1):
        lines.append(f"const int {names[i]} = {tmp} % {sizes[i]}; {tmp} /= {sizes[i]};")
    lines.append(f"const int {names[0]} = {tmp};")
    return "\n    ".join(lines)


def logical_layout(dims) -> tuple:
    """The layout tuple of a dense row-major tensor of ``dims`` (the workspace's indexing)."""
    return (0, tuple((1, st, ()) for st in _row_major_strides(dims)))


def plain_groups(dims, layouts: list, keep: int) -> tuple | None:
    """Dims merged into runs that are contiguous in every layout, outermost first in the
    memory order of ``layouts[0]``: ``((size, has_keep, (stride per layout, ...)), ...)``.
    Dim ``keep`` stays a run of its own; None when a layout is blocked."""
    for lay in layouts:
        if any(blk > 1 or inner for blk, _s, inner in lay[1]):
            return None
    groups: list[list] = []
    for d in memory_order(layouts[0], dims):
        if dims[d] == 1 and d != keep:
            continue
        strides = [lay[1][d][1] for lay in layouts]
        if groups and d != keep and not groups[-1][1] and all(
                g == s * dims[d] for g, s in zip(groups[-1][2], strides)):
            groups[-1][0] *= dims[d]
            groups[-1][2] = strides
            continue
        groups.append([dims[d], d == keep, strides])
    return tuple((g[0], g[1], tuple(g[2])) for g in groups)


def _group_offsets(groups, idx: list[str], which: int, off0: int) -> str:
    terms = [str(off0)] if off0 else []
    terms += [f"{i} * {g[2][which]}" for i, g in zip(idx, groups) if g[2][which]]
    return "(" + " + ".join(terms) + ")" if terms else "0"


def bn_runtime_groups(dims, layouts: list) -> tuple[tuple, dict] | None:
    """The run-time form of :func:`plain_groups` (``keep`` = the channels): ``(groups,
    values)`` with every group size but the channels' a size argument ``bn_g<k>`` and every
    stride that depends on them (not 0, not 1, not the channel count of a channels-last
    layout) an argument ``bn_s<layout>_<k>``; ``values`` binds them. One program then serves
    every minibatch and spatial size of the layouts' class (the group structure). None for
    blocked layouts."""
    from .sizevars import size_var

    groups = plain_groups(dims, layouts, keep=1)
    if groups is None:
        return None
    C = dims[1]
    cg = next((g for g in groups if g[1]), None)
    values, out = {}, []
    for k, (size, keep, strides) in enumerate(groups):
        if not keep:
            values[f"bn_g{k}"] = int(size)
            size = size_var(f"bn_g{k}")
        st = []
        for j, s in enumerate(strides):
            c_last = cg is not None and cg[2][j] == 1 and s == C
            if s in (0, 1) or (keep and cg[2][j] == 1) or c_last:
                st.append(s)
            else:
                values[f"bn_s{j}_{k}"] = int(s)
                st.append(size_var(f"bn_s{j}_{k}"))
        out.append((size, keep, tuple(st)))
    return tuple(out), values


def _size_args(groups) -> list[str]:
    """``const int`` parameters of the size variables of run-time ``groups`` (or of a whole
    problem)."""
    from .sizevars import free_vars

    if groups is None:
        return []
    return [f"const int {n}" for n in free_vars(groups if not isinstance(groups, tuple)
                                                 else list(groups))]


def _cdiv(a, b: int) -> str:
    return str(a // b) if isinstance(a, int) else f"(({a}) / {b})"


def _cmod(a, b: int) -> str:
    return str(a % b) if isinstance(a, int) else f"(({a}) % {b})"


def _f(v: float) -> str:
    return repr(float(v)) + "f"


_TREE = """
    for (int s = {L} / 2; s > 0; s >>= 1) {{
        if (l < s) {{ {body} }}
        barrier(CLK_LOCAL_MEM_FENCE);
    }}"""


def _tree(L: int, arrays: list[str]) -> str:
    body = " ".join(f"{a}[l] += {a}[l + s];" for a in arrays)
    return _TREE.format(L=L, body=body)


# -- batch normalization -----------------------------------------------------------------------


@dataclass(frozen=True)
class BnReduce:
    """Per-channel partial sums (see the module docstring). ``lanes`` is ``"c"`` (work-items
    along channels, ``wg`` of them per group) or ``"r"`` (a work-group of ``wg`` per channel
    and chunk); ``groups`` chunks of ``chunk`` values of ``r`` each."""

    dims: tuple[int, ...]
    x: tuple                  # layout of src
    dy: tuple | None = None   # layout of diff_dst (backward)
    mean: tuple | None = None  # layout of the [C] mean (backward)
    ws: bool = False          # backward: mask dy by the ReLU workspace
    lanes: str = "r"
    wg: int = 64
    groups: int = 1
    x_dt: str = "f32"         # storage of src: f32, bf16, f16 (arithmetic in f32)
    dy_dt: str = "f32"        # storage of diff_dst
    tree: bool = False        # "r" runs kernel: sum the lanes in local memory, one partial
                              # per group (GPUs: the finish then adds groups, not groups * wg)
    # run-time form (:func:`bn_reduce_runtime`): the plain groups of x[, dy][, ws] with sizes
    # and strides as arguments, ``chunk`` (rows or runs per chunk) and ``groups`` variables
    rt_groups: tuple | None = None
    chunk: object = None
    # CPU form of the ``c`` lanes (:func:`_bn_reduce_vec`): one work-item per chunk and block
    # of ``vec * vec_k`` channels, ``vec_k`` float<vec> sums each (0: the lanes form)
    vec: int = 0
    vec_k: int = 1


def _bn_sizes(dims) -> tuple[int, int, int, list[int]]:
    N, C = dims[0], dims[1]
    sp = list(dims[2:])
    return N, C, math.prod(sp), sp


def _bn_index(dims, r: str) -> tuple[str, list[str]]:
    """C statements naming ``n`` and the spatial indices of reduction index ``r``, and the
    logical index list (with ``c``)."""
    N, C, S, sp = _bn_sizes(dims)
    names = ["n"] + [f"s{i}" for i in range(len(sp))]
    code = _decompose(r, [N] + sp, names)
    return code, ["n", "c"] + names[1:]


def build_bn_reduce(p: BnReduce) -> KernelSource:
    fast = (_bn_reduce_runs if p.lanes == "r" else _bn_reduce_rows)(p)
    if fast is not None:
        return fast
    if p.rt_groups is not None:
        raise ValueError("BnReduce: a run-time form needs the plain-layout kernels")
    helpers, ld, _ = _bn_types(p.x_dt, p.dy_dt)
    N, C, S, sp = _bn_sizes(p.dims)
    R = N * S
    chunk = -(-R // p.groups)
    bwd = p.dy is not None
    code, idx = _bn_index(p.dims, "r")
    x_off = offset_expr(p.x, idx)
    args = [f"__global const {_STORE_T[p.x_dt]} *restrict src"]
    if bwd:
        args.append(f"__global const {_STORE_T[p.dy_dt]} *restrict diff_dst")
        args.append("__global const float *restrict mean")
        if p.ws:
            args.append("__global const uchar *restrict ws")
        lin = " + ".join(f"{v} * {st}" for v, st in zip(
            idx, _row_major_strides(p.dims)) if st) or "0"
        dy_val = f"{ld[p.dy_dt]}(diff_dst[{offset_expr(p.dy, idx)}])"
        if p.ws:
            dy_val = f"(ws[{lin}] ? {dy_val} : 0.0f)"
        shift = f"mean[{offset_expr(p.mean, ['c'])}]"
        body = f"""
        const float x = {ld[p.x_dt]}(src[{x_off}]) - k;
        const float dy = {dy_val};
        a0 += dy; a1 += dy * x;"""
    else:
        zero = ["0"] * len(idx)
        zero[1] = "c"
        shift = f"{ld[p.x_dt]}(src[{offset_expr(p.x, zero)}])"
        body = f"""
        const float x = {ld[p.x_dt]}(src[{x_off}]) - k;
        a0 += x; a1 += x * x;"""
    args += ["__global float *restrict part", "const int p_off"]
    name = "pydnnl_bn_reduce"
    if p.lanes == "c":
        src = helpers + f"""
__kernel void __attribute__((reqd_work_group_size({p.wg}, 1, 1)))
{name}({", ".join(args)})
{{
    const int c = get_global_id(0);
    const int g = get_global_id(1);
    if (c >= {C}) return;
    const float k = {shift};
    float a0 = 0.0f, a1 = 0.0f;
    const int r_end = min({R}, (g + 1) * {chunk});
    for (int r = g * {chunk}; r < r_end; ++r) {{
    {code}{body}
    }}
    part[p_off + (g * {C} + c) * 2] = a0;
    part[p_off + (g * {C} + c) * 2 + 1] = a1;
}}
"""
        gsize = (-(-C // p.wg) * p.wg, p.groups)
    else:
        L = p.wg
        src = helpers + f"""
__kernel void __attribute__((reqd_work_group_size({L}, 1, 1)))
{name}({", ".join(args)})
{{
    __local float l0[{L}], l1[{L}];
    const int l = get_local_id(0);
    const int g = get_group_id(0);
    const int c = get_global_id(1);
    const float k = {shift};
    float a0 = 0.0f, a1 = 0.0f;
    const int r_end = min({R}, (g + 1) * {chunk});
    for (int r = g * {chunk} + l; r < r_end; r += {L}) {{
    {code}{body}
    }}
    l0[l] = a0; l1[l] = a1;
    barrier(CLK_LOCAL_MEM_FENCE);{_tree(L, ["l0", "l1"])}
    if (l == 0) {{
        part[p_off + (g * {C} + c) * 2] = l0[0];
        part[p_off + (g * {C} + c) * 2 + 1] = l1[0];
    }}
}}
"""
        gsize = (L * p.groups, C)
    return KernelSource(name, src, gsize, (p.wg, 1), _arg_names(args))


UNROLL = 4  # independent partial sums per work-item in the runs reduction


def bn_reduce_partials(p: BnReduce) -> int:
    """How many partial rows (of ``2 * C`` floats) the reduction kernel of ``p`` writes:
    one per chunk, or one per chunk and lane for the runs kernel (no local reduction)."""
    return p.groups * p.wg if p.lanes == "r" and not p.tree \
        and _bn_reduce_lays(p)[1] is not None else p.groups


def _bn_reduce_lays(p: BnReduce):
    lays = [p.x] + ([p.dy] if p.dy is not None else []) + (
        [logical_layout(p.dims)] if p.ws else [])
    if p.rt_groups is not None:
        return lays, p.rt_groups
    return lays, plain_groups(p.dims, lays, keep=1)


def _rt_launch(name: str, src: str, sizes, local, args) -> KernelSource:
    """A kernel whose global size per axis (``sizes``, ints or size expressions) is rounded
    up to whole work-groups (``local``): fixed, or a grid over its size arguments."""
    from .sizevars import is_var

    if not any(is_var(v) for v in sizes):
        return KernelSource(name, src, tuple(-(-v // w) * w for v, w in zip(sizes, local)),
                            tuple(local), _arg_names(args))
    grid = tuple(f"(({v}) + {w - 1}) // {w} * {w}" if is_var(v) else str(-(-v // w) * w)
                 for v, w in zip(sizes, local))
    return KernelSource(name, src, None, tuple(local), _arg_names(args), grid=grid)


def _fl(v) -> str:
    """OpenCL C float of a count: a constant, or a size argument converted."""
    return f"{v}.0f" if isinstance(v, int) else f"((float)({v}))"


def bn_reduce_runtime(p: BnReduce) -> tuple[BnReduce, dict] | None:
    """The run-time form of the plain-layout reduction ``p``: the minibatch, the spatial
    sizes and the strides built from them (:func:`bn_runtime_groups`), the chunk length and
    the chunk count as arguments (``bn_chunk``, ``bn_ngroups``); ``values`` binds them. None
    (baked) where the plain kernels do not apply, and for a channels-innermost layout whose
    rows are not one run (the row index would be split by run-time sizes per element)."""
    from .sizevars import size_var

    lays, groups = _bn_reduce_lays(p)
    if groups is None:
        return None
    if p.lanes == "c" and (not groups[-1][1] or any(st != 1 for st in groups[-1][2][:2])
                           or len(groups) > 2):
        return None
    found = bn_runtime_groups(tuple(p.dims), lays)
    if found is None:
        return None
    rt, values = found
    if p.lanes == "r":
        red = [g for g in groups if not g[1]]
        outer = math.prod(g[0] for g in red[:-1]) if red else 1
    else:
        outer = math.prod(g[0] for g in groups[:-1]) if len(groups) > 1 else 1
    values.update(bn_chunk=-(-outer // p.groups), bn_ngroups=p.groups)
    q = BnReduce(**{**p.__dict__, "dims": (-1, p.dims[1]) + (-1,) * (len(p.dims) - 2),
                    "x": (p.x[0], ()), "dy": None if p.dy is None else (p.dy[0], ()),
                    "rt_groups": rt, "chunk": size_var("bn_chunk"),
                    "groups": size_var("bn_ngroups")})
    return q, values


def _bn_reduce_runs(p: BnReduce) -> KernelSource | None:
    """The ``r``-lanes reduction over plain layouts: work-items along the innermost run of
    the reduction dims (contiguous loads), a uniform loop over the outer runs, ``UNROLL``
    independent sums per work-item, one partial per lane (no barrier)."""
    lays, groups = _bn_reduce_lays(p)
    if groups is None:
        return None
    C, L = p.dims[1], p.wg
    cg = next(i for i, g in enumerate(groups) if g[1])
    red = [g for g in groups if not g[1]]
    if not red:
        red = [(1, False, (0,) * len(lays))]
    inner, outer = red[-1], red[:-1]
    S_in, O = inner[0], math.prod(g[0] for g in outer)
    rt = p.rt_groups is not None
    chunk = p.chunk if rt else -(-O // p.groups)
    names = [f"o{k}" for k in range(len(outer))]
    dec = _decompose("o", [g[0] for g in outer], names) if outer else ""
    allg = outer + [inner, groups[cg]]
    idx = names + ["i", "c"]
    x_off = _group_offsets(allg, idx, 0, p.x[0])
    bwd = p.dy is not None
    helpers, ld, _ = _bn_types(p.x_dt, p.dy_dt)
    args = [f"__global const {_STORE_T[p.x_dt]} *restrict src"]
    if bwd:
        args += [f"__global const {_STORE_T[p.dy_dt]} *restrict diff_dst",
                 "__global const float *restrict mean"]
        if p.ws:
            args.append("__global const uchar *restrict ws")
        dy_val = f"{ld[p.dy_dt]}(diff_dst[{_group_offsets(allg, idx, 1, p.dy[0])}])"
        if p.ws:
            dy_val = f"(ws[{_group_offsets(allg, idx, 2, 0)}] ? {dy_val} : 0.0f)"
        shift = f"mean[{offset_expr(p.mean, ['c'])}]"
        body = f"""
            const float x = {ld[p.x_dt]}(src[{x_off}]) - k;
            const float dy = {dy_val};
            a0 += dy; a1 += dy * x;"""
    else:
        shift = f"{ld[p.x_dt]}(src[{p.x[0]} + c * {groups[cg][2][0]}])"
        body = f"""
            const float x = {ld[p.x_dt]}(src[{x_off}]) - k;
            a0 += x; a1 += x * x;"""
    args += ["__global float *restrict part", "const int p_off"]
    if rt:
        args += _size_args(p)
    U = UNROLL
    full = _cdiv(S_in, L * U)
    tail0 = f"{full} * {L * U}" if rt else str(S_in // (L * U) * L * U)
    unrolled = body.replace("a0 +=", "a0[u] +=").replace("a1 +=", "a1[u] +=")
    name = "pydnnl_bn_reduce"
    if p.tree:
        store = f"""
    __local float l0[{L}], l1[{L}];
    l0[l] = s0; l1[l] = s1;
    barrier(CLK_LOCAL_MEM_FENCE);{_tree(L, ["l0", "l1"])}
    if (l == 0) {{
        part[p_off + (g * {C} + c) * 2] = l0[0];
        part[p_off + (g * {C} + c) * 2 + 1] = l1[0];
    }}"""
    else:
        store = f"""
    part[p_off + ((g * {L} + l) * {C} + c) * 2] = s0;
    part[p_off + ((g * {L} + l) * {C} + c) * 2 + 1] = s1;"""
    src = helpers + f"""
__kernel void __attribute__((reqd_work_group_size({L}, 1, 1)))
{name}({", ".join(args)})
{{
    const int l = get_local_id(0);
    const int g = get_group_id(0);
    const int c = get_global_id(1);
    const float k = {shift};
    float a0[{U}], a1[{U}];
    for (int u = 0; u < {U}; ++u) {{ a0[u] = 0.0f; a1[u] = 0.0f; }}
    const int o_end = min({O}, (g + 1) * {chunk});
    for (int o = g * {chunk}; o < o_end; ++o) {{
        {dec}
        for (int j = 0; j < {full}; ++j) {{
            #pragma unroll
            for (int u = 0; u < {U}; ++u) {{
            const int i = (j * {U} + u) * {L} + l;{unrolled}
            }}
        }}
        for (int i = {tail0} + l; i < {S_in}; i += {L}) {{
            const int u = 0;{unrolled}
        }}
    }}
    float s0 = 0.0f, s1 = 0.0f;
    for (int u = 0; u < {U}; ++u) {{ s0 += a0[u]; s1 += a1[u]; }}{store}
}}
"""
    if rt:
        return _rt_launch(name, src, (L * p.groups, C), (L, 1), args)
    return KernelSource(name, src, (L * p.groups, C), (L, 1), _arg_names(args))


def _bn_reduce_rows_walk(p: BnReduce, lays, groups):
    """What the channels-innermost reductions walk: the outer groups of rows (one row where
    there are none), their row count, whether it is a run-time size, the rows per chunk and
    the outer groups' index names."""
    outer = list(groups[:-1]) or [(1, False, (0,) * len(lays))]
    R = math.prod(g[0] for g in outer)
    rt = p.rt_groups is not None
    chunk = p.chunk if rt else -(-R // p.groups)
    return outer, R, rt, chunk, [f"o{k}" for k in range(len(outer))]


def _bn_reduce_rows(p: BnReduce) -> KernelSource | None:
    """The ``c``-lanes reduction over plain layouts whose innermost run is the channels
    (``nhwc``, ``nc``): work-item ``c`` of a work-group walks a chunk of ``chunk`` rows (the
    other runs, uniform across the lanes) with ``UNROLL`` independent sums over consecutive
    rows, one partial per chunk. A work-group covers ``wg`` consecutive channels, so on a CPU
    runtime its vectors read the same rows one after the other (from cache when the chunk's
    rows fit in it, see ``bn_reduce_params``)."""
    lays, groups = _bn_reduce_lays(p)
    if groups is None or not groups[-1][1] or any(st != 1 for st in groups[-1][2][:2]):
        return None
    if p.vec:
        return _bn_reduce_vec(p, lays, groups)
    C, L = p.dims[1], p.wg
    outer, R, rt, chunk, names = _bn_reduce_rows_walk(p, lays, groups)
    bwd = p.dy is not None
    helpers, ld, _ = _bn_types(p.x_dt, p.dy_dt)
    args = [f"__global const {_STORE_T[p.x_dt]} *restrict src"]
    idx = names + ["c"]
    allg = outer + [groups[-1]]
    x_off = _group_offsets(allg, idx, 0, p.x[0])
    if bwd:
        args += [f"__global const {_STORE_T[p.dy_dt]} *restrict diff_dst",
                 "__global const float *restrict mean"]
        if p.ws:
            args.append("__global const uchar *restrict ws")
        dy_val = f"{ld[p.dy_dt]}(diff_dst[{_group_offsets(allg, idx, 1, p.dy[0])}])"
        if p.ws:
            dy_val = f"(ws[{_group_offsets(allg, idx, 2, 0)}] ? {dy_val} : 0.0f)"
        shift = f"mean[{offset_expr(p.mean, ['c'])}]"
        acc = """
                const float dy = {dy};
                a0[u] += dy; a1[u] += dy * x;"""
    else:
        shift = f"{ld[p.x_dt]}(src[{p.x[0]} + c])"
        dy_val = ""
        acc = """
                a0[u] += x; a1[u] += x * x;"""
    args += ["__global float *restrict part", "const int p_off"]
    if rt:
        args += _size_args(p)
    U = UNROLL
    dec = _decompose("r", [g[0] for g in outer], names)
    name = "pydnnl_bn_reduce"
    src = helpers + f"""
__kernel void __attribute__((reqd_work_group_size({L}, 1, 1)))
{name}({", ".join(args)})
{{
    const int c = get_global_id(0);
    const int g = get_global_id(1);
    if (c >= {C}) return;
    const float k = {shift};
    float a0[{U}], a1[{U}];
    for (int u = 0; u < {U}; ++u) {{ a0[u] = 0.0f; a1[u] = 0.0f; }}
    const int r_beg = g * {chunk};
    const int r_end = min({R}, r_beg + {chunk});
    for (int r0 = r_beg; r0 < r_end; r0 += {U}) {{
        #pragma unroll
        for (int u = 0; u < {U}; ++u) {{
            const int r = r0 + u;
            if (r < r_end) {{
                {dec}
                const float x = {ld[p.x_dt]}(src[{x_off}]) - k;{acc.format(dy=dy_val)}
            }}
        }}
    }}
    part[p_off + (g * {C} + c) * 2] = {" + ".join(f"a0[{u}]" for u in range(U))};
    part[p_off + (g * {C} + c) * 2 + 1] = {" + ".join(f"a1[{u}]" for u in range(U))};
}}
"""
    return _rt_launch(name, src, (C, p.groups), (L, 1), args)


def _bn_reduce_vec(p: BnReduce, lays, groups) -> KernelSource:
    """The channels-innermost reduction with one work-item per (block of ``vec * vec_k``
    channels, chunk of rows): ``vec_k`` ``float<vec>`` sums per statistic walking the chunk's
    rows (each row's block is ``vec_k`` contiguous vectors), one partial per chunk; the
    channels past the last whole vector (``C % vec``) in scalars by the last block. Intel's
    CPU runtime runs the lanes form's work-group of 256 channels as 16 vectors one after
    the other over the same rows, its chunk of 64 rows one work-group each."""
    from .reduction import _CTYPE, io_preamble, ld, ptr_decl

    V, K = p.vec, max(1, p.vec_k)
    if p.ws and groups[-1][2][2] != 1:
        raise ValueError("BnReduce vec: the workspace needs stride 1 along the channels")
    C = p.dims[1]
    B = V * K
    nblk = -(-C // B)
    cv = C // V * V              # channels in whole vectors
    outer, R, rt, chunk, names = _bn_reduce_rows_walk(p, lays, groups)
    bwd = p.dy is not None
    idx = names + ["0"]
    allg = outer + [groups[-1]]
    dts = (p.x_dt,) + ((p.dy_dt,) if bwd else ())
    args = [ptr_decl("src", p.x_dt, True)]
    if bwd:
        args += [ptr_decl("diff_dst", p.dy_dt, True), "__global const float *restrict mean"]
        if p.ws:
            args.append("__global const uchar *restrict ws")
    args += ["__global float *restrict part", "const int p_off"]
    if rt:
        args += _size_args(p)
    dec = _decompose("r", [g[0] for g in outer], names)
    ptrs = [f"__global const {_CTYPE[p.x_dt]} *xr = src + "
            f"((size_t){_group_offsets(allg, idx, 0, p.x[0])});"]
    if bwd:
        ptrs.append(f"__global const {_CTYPE[p.dy_dt]} *dr = diff_dst + "
                    f"((size_t){_group_offsets(allg, idx, 1, p.dy[0])});")
        if p.ws:
            ptrs.append(f"__global const uchar *wr = ws + "
                        f"((size_t){_group_offsets(allg, idx, 2, 0)});")

    def acc(w: int, at: str, sfx: str) -> str:
        T = f"float{w}" if w > 1 else "float"
        x = f"{ld('xr', p.x_dt, at, w)} - k{sfx}"
        if not bwd:
            return f"{{ const {T} x = {x}; a0{sfx} += x; a1{sfx} += x * x; }}"
        dy = ld("dr", p.dy_dt, at, w)
        if p.ws:
            dy = (f"select(({T})0.0f, {dy}, convert_int{w}(vload{w}(0, wr + {at})) != 0)"
                  if w > 1 else f"(wr[{at}] ? {dy} : 0.0f)")
        return f"{{ const {T} x = {x}; const {T} dy = {dy}; a0{sfx} += dy; a1{sfx} += dy * x; }}"

    def shift(w: int, c: str) -> str:
        if bwd:
            return f"vload{w}(0, mean + {c})" if w > 1 else f"mean[{c}]"
        return ld("src", p.x_dt, f"{p.x[0]} + {c}", w)

    def always(k: int) -> bool:
        """Whether vector ``k`` of every block is whole."""
        return (nblk - 1) * B + (k + 1) * V <= C

    T = f"float{V}"
    decl = "\n    ".join(
        f"{T} a0_{k} = 0.0f, a1_{k} = 0.0f; const {T} k_{k} = "
        + (shift(V, f"c0 + {k * V}") if always(k) else
           f"(c0 + {(k + 1) * V} <= {C}) ? {shift(V, f'c0 + {k * V}')} : ({T})0.0f")
        + ";" for k in range(K))
    steps = " ".join(acc(V, f"c0 + {k * V}", f"_{k}") if always(k) else
                     f"if (c0 + {(k + 1) * V} <= {C}) {acc(V, f'c0 + {k * V}', f'_{k}')}"
                     for k in range(K))
    stores = []
    for k in range(K):
        for lane in range(V):
            c = f"c0 + {k * V + lane}"
            st_ = (f"part[p_off + (g * {C} + {c}) * 2] = a0_{k}.s{lane:x}; "
                   f"part[p_off + (g * {C} + {c}) * 2 + 1] = a1_{k}.s{lane:x};")
            stores.append(st_ if always(k) else f"if (c0 + {(k + 1) * V} <= {C}) {{ {st_} }}")
    sep = "\n            "
    body = f"""
    {decl}
    for (int r = r_beg; r < r_end; ++r) {{
        {dec}
        {sep.join(ptrs)}
        {steps}
    }}
    {(chr(10) + "    ").join(stores)}"""
    if cv < C:
        # the scalar channels: the last block (whose first channel is below cv)
        body += f"""
    if (c0 + {B} >= {C}) {{
        for (int c = {cv}; c < {C}; ++c) {{
            const float k_s = {shift(1, "c")};
            float a0_s = 0.0f, a1_s = 0.0f;
            for (int r = r_beg; r < r_end; ++r) {{
                {dec}
                {sep.join(ptrs)}
                {acc(1, "c", "_s")}
            }}
            part[p_off + (g * {C} + c) * 2] = a0_s;
            part[p_off + (g * {C} + c) * 2 + 1] = a1_s;
        }}
    }}"""
    name = "pydnnl_bn_reduce"
    src = f"""{io_preamble(dts, V)}
__kernel void __attribute__((reqd_work_group_size(1, 1, 1)))
{name}({", ".join(args)})
{{
    const int c0 = get_global_id(0) * {B};
    const int g = get_global_id(1);
    const int r_beg = g * {chunk};
    const int r_end = min({R}, r_beg + {chunk});{body}
}}
"""
    return _rt_launch(name, src, (nblk, p.groups), (1, 1), args)


def _row_major_strides(dims) -> list[int]:
    out, s = [], 1
    for v in reversed(dims):
        out.append(s)
        s *= v
    return out[::-1]


def _arg_names(args: list[str]) -> tuple[str, ...]:
    return tuple(a.split()[-1].lstrip("*") for a in args)


_STORE_T = {"f32": "float", "bf16": "ushort", "f16": "ushort"}


def _bn_types(*dts: str | None) -> tuple[str, dict, dict]:
    """Batch normalization data storage: the load/store helper definitions (oneDNN's
    rounding, ``clhelpers``) of ``dts`` and per type the loader's and storer's names ("" for
    f32, whose values are used as they are)."""
    from ..memory.data_types import data_type
    from .clhelpers import load_helper, store_helper

    defs, ld, st = [], {"f32": ""}, {"f32": ""}
    for dt in dict.fromkeys(d for d in dts if d and d != "f32"):
        lname, ldef, _, _ = load_helper(data_type[dt])
        sname, sdef, _, _ = store_helper(data_type[dt])
        defs += [ldef, sdef]
        ld[dt], st[dt] = lname, sname
    return "".join(d + "\n" for d in defs), ld, st


@dataclass(frozen=True)
class BnFinalize:
    """Per channel: statistics (from ``groups`` partials or given) to the coefficients
    ``coef[k_off + {0, C, 2C, 3C} + c] = m, a, b, d``; see the module docstring.

    ``mode``: ``"fwd_stats"`` (partials of the shifted sums; writes mean/variance when
    ``write_stats``), ``"fwd_given"`` (reads mean/variance), ``"bwd"`` (reads mean/variance;
    with ``groups`` partials of ``dy`` sums it forms diff_scale/diff_shift, written where
    asked, and the full-gradient coefficients unless ``global_stats``)."""

    C: int
    R: int
    mode: str
    eps: float
    stat: tuple                # layout of mean and variance ([C])
    var: tuple | None = None   # layout of variance when it differs from mean's
    scale: tuple | None = None
    shift: tuple | None = None
    groups: int = 0
    write_stats: bool = False
    diff_scale: tuple | None = None
    diff_shift: tuple | None = None
    global_stats: bool = False
    wg: int = 64
    x: tuple | None = None     # fwd_stats: src layout (the shift K[c])
    ndims: int = 4
    x_dt: str = "f32"          # fwd_stats: storage of src
    # run-time form (:func:`bn_finalize_runtime`): ``R``, ``groups`` and the channel stride of
    # ``x`` are size variables (``bn_count``, ``bn_nparts``, ``bn_xc``)


def bn_finalize_runtime(p: BnFinalize) -> tuple[BnFinalize, dict]:
    """``p`` with the value count per channel, the partial count and (``fwd_stats``) src's
    channel stride, where not 1, as arguments, and the values that bind them; one program
    then serves every minibatch and spatial size."""
    from .sizevars import size_var

    values, fields = {}, {}
    if p.R:
        values["bn_count"], fields["R"] = int(p.R), size_var("bn_count")
    if p.groups:
        values["bn_nparts"], fields["groups"] = int(p.groups), size_var("bn_nparts")
    if p.x is not None:
        off, per_dim = p.x
        blk, st, inner = per_dim[1]
        if blk > 1 or inner:
            return p, {}
        if st != 1:
            values["bn_xc"], st = int(st), size_var("bn_xc")
        fields["x"] = (off, tuple((1, st if d == 1 else 0, ()) for d in range(len(per_dim))))
    return BnFinalize(**{**p.__dict__, **fields}), values


def build_bn_finalize(p: BnFinalize) -> KernelSource:
    C, R = p.C, p.R
    var_l = p.var or p.stat
    args = []
    helpers, ld, _ = _bn_types(p.x_dt)
    if p.mode == "fwd_stats":
        args.append(f"__global const {_STORE_T[p.x_dt]} *restrict src")
    args.append("__global float *restrict mean" if p.mode == "fwd_stats"
                else "__global const float *restrict mean")
    args.append("__global float *restrict variance" if p.mode == "fwd_stats"
                else "__global const float *restrict variance")
    if p.scale is not None:
        args.append("__global const float *restrict scale")
    if p.shift is not None and p.mode != "bwd":
        args.append("__global const float *restrict shift")
    if p.diff_scale is not None:
        args.append("__global float *restrict diff_scale")
    if p.diff_shift is not None:
        args.append("__global float *restrict diff_shift")
    args += ["__global float *restrict coef", "const int p_off", "const int k_off"]
    args += _size_args(p)
    m_at, v_at = offset_expr(p.stat, ["c"]), offset_expr(var_l, ["c"])
    gamma = f"scale[{offset_expr(p.scale, ['c'])}]" if p.scale is not None else "1.0f"
    beta = (f"shift[{offset_expr(p.shift, ['c'])}]"
            if p.shift is not None and p.mode != "bwd" else "0.0f")
    sums = f"""
    float s0 = 0.0f, s1 = 0.0f;
    for (int g = 0; g < {p.groups}; ++g) {{
        s0 += coef[p_off + (g * {C} + c) * 2];
        s1 += coef[p_off + (g * {C} + c) * 2 + 1];
    }}"""
    if p.mode == "fwd_stats":
        zero = ["0"] * p.ndims
        zero[1] = "c"
        body = f"""{sums}
    const float k = {ld[p.x_dt]}(src[{offset_expr(p.x, zero)}]);
    const float ms = s0 / {_fl(R)};
    const float v = fmax(s1 / {_fl(R)} - ms * ms, 0.0f);
    const float m = k + ms;"""
        if p.write_stats:
            body += f"""
    mean[{m_at}] = m;
    variance[{v_at}] = v;"""
        body += f"""
    const float a = {gamma} * rsqrt(v + {_f(p.eps)});
    coef[k_off + c] = m; coef[k_off + {C} + c] = a;
    coef[k_off + {2 * C} + c] = {beta}; coef[k_off + {3 * C} + c] = 0.0f;"""
    elif p.mode == "fwd_given":
        body = f"""
    const float m = mean[{m_at}];
    const float a = {gamma} * rsqrt(variance[{v_at}] + {_f(p.eps)});
    coef[k_off + c] = m; coef[k_off + {C} + c] = a;
    coef[k_off + {2 * C} + c] = {beta}; coef[k_off + {3 * C} + c] = 0.0f;"""
    else:
        body = f"""
    const float m = mean[{m_at}];
    const float is = rsqrt(variance[{v_at}] + {_f(p.eps)});
    const float a = {gamma} * is;"""
        if not isinstance(p.groups, int) or p.groups:
            body += sums + """
    const float dshift = s0, dscale = s1 * is;"""
            if p.diff_scale is not None:
                body += f"\n    diff_scale[{offset_expr(p.diff_scale, ['c'])}] = dscale;"
            if p.diff_shift is not None:
                body += f"\n    diff_shift[{offset_expr(p.diff_shift, ['c'])}] = dshift;"
        if p.global_stats:
            body += f"""
    coef[k_off + c] = m; coef[k_off + {C} + c] = a;
    coef[k_off + {2 * C} + c] = 0.0f; coef[k_off + {3 * C} + c] = 0.0f;"""
        else:
            body += f"""
    coef[k_off + c] = m; coef[k_off + {C} + c] = a;
    coef[k_off + {2 * C} + c] = -a * is * dscale / {_fl(R)};
    coef[k_off + {3 * C} + c] = -a * dshift / {_fl(R)};"""
    name = "pydnnl_bn_finalize"
    src = helpers + f"""
__kernel void __attribute__((reqd_work_group_size({p.wg}, 1, 1)))
{name}({", ".join(args)})
{{
    const int c = get_global_id(0);
    if (c >= {C}) return;{body}
}}
"""
    return KernelSource(name, src, (-(-C // p.wg) * p.wg,), (p.wg,), _arg_names(args))


@dataclass(frozen=True)
class BnApply:
    """The elementwise pass (see the module docstring), one work-item per element in the
    memory order of ``x``. Forward: ``out = (x - m) * a + b`` (plus ``src1`` with ``add``),
    ``relu`` then clamps and, with ``ws``, writes the mask. Backward (``dy`` given): ``out = a *
    dy + b * (x - m) + d``, dy masked by the workspace when ``ws`` (and, with ``add``, stored
    as ``diff_src1``)."""

    dims: tuple[int, ...]
    x: tuple
    out: tuple
    dy: tuple | None = None
    relu: bool = False
    ws: bool = False
    # fuse_norm_add_relu: forward adds ``src1`` (out's layout and type) before the ReLU;
    # backward stores the gated dy as ``diff_src1`` (dy's layout and type)
    add: bool = False
    wg: int = 256
    x_dt: str = "f32"          # storage of src
    dy_dt: str = "f32"         # storage of diff_dst
    out_dt: str = "f32"        # storage of dst (diff_src)
    # run-time form (:func:`bn_runtime_groups` over x, out[, dy][, ws]; plain layouts): sizes
    # and strides as kernel arguments, ``wg`` x ``rows`` the work-group as given
    groups: tuple | None = None
    rows: int = 0
    # plain layouts: outer runs (rows) per work-item, ``per_item`` independent loads each
    per_item: int = 1
    # CPU form (:func:`_bn_apply_vec`): one work-item walks whole innermost runs in
    # ``float<vec>`` vectors (0: the per-element form above), about ``vec_values`` values
    # (up to 16 runs) per work-item; plain layouts, stride 1 along the run, no workspace
    vec: int = 0
    vec_values: int = 16384


def bn_apply_shape(wg: int, inner: int, outer: int) -> tuple[int, int]:
    """(lanes, rows) of the plain elementwise pass's work-group: lanes along the innermost
    run (a power of two up to ``wg``), rows filling the group up to ``wg`` work-items."""
    lanes = max(1, min(wg, 1 << max(0, (inner - 1).bit_length())))
    return lanes, max(1, min(wg // lanes, outer))


def build_bn_apply(p: BnApply) -> KernelSource:
    if p.vec:
        return _bn_apply_vec(p)
    fast = _bn_apply_runs(p)
    if fast is not None:
        return fast
    dims = p.dims
    order = memory_order(p.x, dims)
    total = math.prod(dims)
    names = ["n", "c"] + [f"s{i}" for i in range(len(dims) - 2)]
    code = _decompose("i", [dims[d] for d in order], [names[d] for d in order])
    lin = " + ".join(f"{v} * {st}" for v, st in zip(names, _row_major_strides(dims)) if st)
    helpers, st, args, body = _bn_apply_parts(
        p, offset_expr(p.x, names), offset_expr(p.dy, names) if p.dy is not None else None,
        lin, offset_expr(p.out, names))
    name = "pydnnl_bn_apply"
    src = helpers + f"""
__kernel void __attribute__((reqd_work_group_size({p.wg}, 1, 1)))
{name}({", ".join(args)})
{{
    const int i = get_global_id(0);
    if (i >= {total}) return;
    {code}{body}
    dst[{offset_expr(p.out, names)}] = {st[p.out_dt]}(y);
}}
"""
    return KernelSource(name, src, (-(-total // p.wg) * p.wg,), (p.wg,), _arg_names(args))


def _bn_apply_parts(p: BnApply, x_at: str, dy_at: str | None, ws_at: str | None,
                    out_at: str):
    """What both elementwise-pass kernels share: ``(helpers, store helpers, arguments,
    body computing y)`` from the offsets of src, diff_dst (backward), the workspace and dst
    (where ``add`` reads src1)."""
    C = p.dims[1]
    helpers, ld, st = _bn_types(p.x_dt, p.dy_dt, p.out_dt)
    bwd = p.dy is not None
    args = [f"__global const {_STORE_T[p.x_dt]} *restrict src"]
    if bwd:
        args.append(f"__global const {_STORE_T[p.dy_dt]} *restrict diff_dst")
    if p.ws:
        args.append(f"__global {'const ' if bwd else ''}uchar *restrict ws")
    if p.add:
        args.append(f"__global {_STORE_T[p.dy_dt]} *restrict diff_src1" if bwd else
                    f"__global const {_STORE_T[p.out_dt]} *restrict src1")
    args += ["__global const float *restrict coef", "const int k_off",
             f"__global {_STORE_T[p.out_dt]} *restrict dst"]
    x_val = f"{ld[p.x_dt]}(src[{x_at}])"
    if bwd:
        dy = f"{ld[p.dy_dt]}(diff_dst[{dy_at}])"
        if p.ws:
            dy = f"(ws[{ws_at}] ? {dy} : 0.0f)"
        body = f"""
    const float dy = {dy};
    const float y = coef[k_off + {C} + c] * dy
        + coef[k_off + {2 * C} + c] * ({x_val} - coef[k_off + c]) + coef[k_off + {3 * C} + c];"""
        if p.add:
            body += f"\n    diff_src1[{dy_at}] = {st[p.dy_dt]}(dy);"
    else:
        body = f"""
    float y = ({x_val} - coef[k_off + c]) * coef[k_off + {C} + c] + coef[k_off + {2 * C} + c];"""
        if p.add:
            body += f"\n    y += {ld[p.out_dt]}(src1[{out_at}]);"
        if p.relu:
            body += "\n    y = fmax(y, 0.0f);"
        if p.ws:
            body += f"\n    ws[{ws_at}] = y > 0.0f ? 1 : 0;"
    return helpers, st, args, body


def _bn_apply_runs(p: BnApply) -> KernelSource | None:
    """The elementwise pass over plain layouts: axis 0 along the innermost run (contiguous
    vectors), axis 1 over the outer runs (offsets and the channel uniform per row)."""
    lays = [p.x, p.out] + ([p.dy] if p.dy is not None else []) + (
        [logical_layout(p.dims)] if p.ws else [])
    groups = p.groups if p.groups is not None else plain_groups(p.dims, lays, keep=1)
    if groups is None:
        return None
    inner, outer = groups[-1], groups[:-1]
    rt = p.groups is not None
    S_in, O = inner[0], math.prod(g[0] for g in outer)
    names = [("c" if g[1] else f"o{k}") for k, g in enumerate(outer)]
    dec = _decompose("o", [g[0] for g in outer], names) if outer else ""
    idx = names + ["c" if inner[1] else "i"]
    allg = list(outer) + [inner]
    bwd = p.dy is not None
    out_at = _group_offsets(allg, idx, 1, p.out[0])
    helpers, st, args, body = _bn_apply_parts(
        p, _group_offsets(allg, idx, 0, p.x[0]),
        _group_offsets(allg, idx, 2, p.dy[0]) if bwd else None,
        _group_offsets(allg, idx, 3 if bwd else 2, 0) if p.ws else None, out_at)
    # rows per work-group: a short innermost run (nhwc's channels) takes several rows per
    # group, so that a group still holds ``p.wg`` work-items
    U = max(1, p.per_item)
    wg, rows = (p.wg, p.rows) if rt else bn_apply_shape(p.wg, S_in, -(-O // U) if U > 1 else O)
    args += _size_args(p.groups)
    name = "pydnnl_bn_apply"
    if U == 1:
        main = f"""
    const int o = get_global_id(1);
    if ({idx[-1]} >= {S_in} || o >= {O}) return;
    {dec}{body}
    dst[{out_at}] = {st[p.out_dt]}(y);"""
    else:
        # rows o = U * id + u; no row guard where the baked factors of the row count (the
        # channels) are a multiple of U, as every row count of the class then is
        baked = math.prod(int(g[0]) for g in outer if isinstance(g[0], int))
        guard = "" if baked % U == 0 else f"\n        if (o >= {O}) break;"
        main = f"""
    if ({idx[-1]} >= {S_in} || get_global_id(1) * {U} >= {O}) return;
    #pragma unroll
    for (int u = 0; u < {U}; ++u) {{
        const int o = get_global_id(1) * {U} + u;{guard}
        {dec}{body}
        dst[{out_at}] = {st[p.out_dt]}(y);
    }}"""
    src = helpers + f"""
__kernel void __attribute__((reqd_work_group_size({wg}, {rows}, 1)))
{name}({", ".join(args)})
{{
    const int {idx[-1]} = get_global_id(0);{main}
}}
"""
    if rt:
        items = O if U == 1 else f"((({O}) + {U - 1}) // {U})"
        grid = tuple(f"(({v}) + {w - 1}) // {w} * {w}" if not isinstance(v, int)
                     else str(-(-v // w) * w) for v, w in ((S_in, wg), (items, rows)))
        return KernelSource(name, src, None, (wg, rows), _arg_names(args), grid=grid)
    items = -(-O // U)
    return KernelSource(name, src, (-(-S_in // wg) * wg, -(-items // rows) * rows), (wg, rows),
                        _arg_names(args))


def bn_apply_vec_ok(dims, x: tuple, out: tuple, dy: tuple | None, ws: bool) -> bool:
    """Whether the vector-run elementwise pass (:attr:`BnApply.vec`) applies: plain layouts
    whose innermost run (:func:`plain_groups`) has stride 1 in each, and no workspace."""
    if ws:
        return False
    lays = [x, out] + ([dy] if dy is not None else [])
    groups = plain_groups(tuple(dims), lays, keep=1)
    return groups is not None and all(s == 1 for s in groups[-1][2])


def _bn_apply_vec(p: BnApply) -> KernelSource:
    """The elementwise pass with one work-item per innermost run (a few runs, about
    ``p.vec_values`` values, per work-item), walking each run in ``float<vec>`` vectors and
    the run's tail in scalars. The channel is uniform per run (``nchw``: the coefficients
    are scalars) or the run's own index (``nhwc``, ``nc``: the coefficients are vector
    loads). Intel's CPU runtime vectorizes the per-element form across work-items of a
    2-D grid whose rows (3136 values at 56x56) leave a partly masked work-group per row."""
    from .reduction import _CTYPE, io_preamble, ld, ptr_decl, st

    V = p.vec
    bwd = p.dy is not None
    if V not in (2, 4, 8, 16) or p.ws:
        raise ValueError("BnApply vec: vec in 2..16, no workspace")
    lays = [p.x, p.out] + ([p.dy] if bwd else [])
    groups = p.groups if p.groups is not None else plain_groups(p.dims, lays, keep=1)
    if groups is None or any(s != 1 for s in groups[-1][2]):
        raise ValueError("BnApply vec: plain layouts with stride 1 along the innermost run")
    C = p.dims[1]
    inner, outer = groups[-1], groups[:-1]
    S_in = inner[0]
    O = math.prod(g[0] for g in outer) if outer else 1
    c_inner = bool(inner[1])
    names = [("c" if g[1] else f"o{k}") for k, g in enumerate(outer)]
    dec = _decompose("o", [g[0] for g in outer], names) if outer else ""
    zero = names + ["0"]
    allg = list(outer) + [inner]
    x_at = _group_offsets(allg, zero, 0, p.x[0])
    o_at = _group_offsets(allg, zero, 1, p.out[0])
    dy_at = _group_offsets(allg, zero, 2, p.dy[0]) if bwd else None
    dts = (p.x_dt, p.out_dt) + ((p.dy_dt,) if bwd or p.add else ())
    args = [ptr_decl("src", p.x_dt, True)]
    if bwd:
        args.append(ptr_decl("diff_dst", p.dy_dt, True))
    if p.add:
        args.append(ptr_decl("diff_src1", p.dy_dt, False) if bwd
                    else ptr_decl("src1", p.out_dt, True))
    args += ["__global const float *restrict coef", "const int k_off",
             ptr_decl("dst", p.out_dt, False)]
    args += _size_args(p.groups)
    rp = f"max(1, min(16, {p.vec_values} / ({S_in})))"
    nk = 4 if bwd else 3

    def coef(k: int, w: int) -> str:
        if not c_inner:
            return f"k{k}"
        return f"vload{w}(0, cf + {k * C} + i)" if w > 1 else f"cf[{k * C} + i]"

    def body(w: int) -> str:
        x = ld("x_r", p.x_dt, "i", w)
        if bwd:
            dy = ld("dy_r", p.dy_dt, "i", w)
            out = (f"{coef(1, w)} * {dy} + {coef(2, w)} * ({x} - {coef(0, w)})"
                   f" + {coef(3, w)}")
            return st("dst_r", p.out_dt, "i", out, w)
        y = f"({x} - {coef(0, w)}) * {coef(1, w)} + {coef(2, w)}"
        if p.add:
            y = f"{y} + {ld('s1_r', p.out_dt, 'i', w)}"
        if p.relu:
            y = f"fmax({y}, 0.0f)"
        return st("dst_r", p.out_dt, "i", y, w)

    ptrs = f"""
        __global const {_CTYPE[p.x_dt]} *x_r = src + ((size_t){x_at});
        __global {_CTYPE[p.out_dt]} *dst_r = dst + ((size_t){o_at});"""
    if bwd:
        ptrs += f"""
        __global const {_CTYPE[p.dy_dt]} *dy_r = diff_dst + ((size_t){dy_at});"""
    if p.add and not bwd:
        ptrs += f"""
        __global const {_CTYPE[p.out_dt]} *s1_r = src1 + ((size_t){o_at});"""
    if c_inner:
        ptrs += """
        __global const float *cf = coef + k_off;"""
    else:
        ptrs += "".join(f"\n        const float k{k} = coef[k_off + {k * C} + c];"
                        for k in range(nk))
    loops = f"""
        const int vend = ({S_in}) / {V} * {V};
        for (int i = 0; i < vend; i += {V}) {{ {body(V)} }}
        for (int i = vend; i < {S_in}; ++i) {{ {body(1)} }}"""
    if p.add and bwd:
        raise ValueError("BnApply vec: the backward's diff_src1 needs the workspace")
    name = "pydnnl_bn_apply"
    src = f"""{io_preamble(dts, V)}
__kernel void __attribute__((reqd_work_group_size(1, 1, 1)))
{name}({", ".join(args)})
{{
    const int rp = {rp};
    const int r0 = get_global_id(0) * rp;
    const int r1 = min(r0 + rp, {O});
    for (int o = r0; o < r1; ++o) {{
        {dec}{ptrs}{loops}
    }}
}}
"""
    if p.groups is not None:
        py_rp = f"max(1, min(16, {p.vec_values} // ({S_in})))"
        return KernelSource(name, src, None, (1,), _arg_names(args),
                            grid=(f"(({O}) + {py_rp} - 1) // {py_rp}",))
    n_rp = max(1, min(16, p.vec_values // S_in))
    return KernelSource(name, src, (-(-O // n_rp),), (1,), _arg_names(args))


# -- layer normalization -----------------------------------------------------------------------


@dataclass(frozen=True)
class LnRows:
    """One work-group of ``wg`` (a power of two) per row of a layer normalization.

    Forward (``dy`` None): ``global_stats`` reads mean/variance, else computes them in two
    passes over the row (the mean, then the sum of ``(x - mean)^2``) and writes them when
    ``write_stats``; ``dst = (x - mean) *
    rsqrt(var + eps) * gamma + beta``. Backward: ``diff_src = rsqrt(var + eps) * (g - mean(g)
    - xhat * mean(g * xhat))`` with ``g = dy * gamma`` (``g`` alone when ``global_stats``).
    Work-items combine their sums once per row: sub-group reductions when ``subgroup`` (the
    work-group is one sub-group: one SIMD vector on CPU runtimes), else a local-memory tree.
    ``cache`` > 0 (at least ``ceil(C / wg)``): each work-item keeps its ``cache`` values of the
    row (src, and diff_dst backward) in private registers, so global memory is read once per
    element (a GPU whose caches would otherwise be asked for the row a second time).
    ``xdt``, ``dydt``, ``odt``: storage types of src, diff_dst and the output (``"f32"``,
    ``"f16"``, ``"bf16"``); statistics, scale and shift are f32. ``ss_rows`` > 0 (backward
    with computed statistics, no ``cache``): a work-group walks ``ss_rows`` consecutive rows
    and adds each column's ``dy * xhat`` and ``dy`` into its own partial rows
    ``part[p_off + g * 2C + {0, C} + c]`` (planar: a lane's vector of columns is contiguous;
    :class:`LnScaleShiftFinalize` with ``planar``), so diff_scale/diff_shift need no second
    read of src and diff_dst."""

    dims: tuple[int, ...]
    x: tuple
    out: tuple
    stat: tuple
    var: tuple
    eps: float
    dy: tuple | None = None
    scale: tuple | None = None
    shift: tuple | None = None
    global_stats: bool = False
    write_stats: bool = False
    wg: int = 64
    subgroup: bool = False
    xdt: str = "f32"
    dydt: str = "f32"
    odt: str = "f32"
    cache: int = 0
    ss_rows: int = 0  # backward: rows per work-group that also sum diff_scale/diff_shift
    # independent partial sums per lane in the row-sum loops without ``cache`` (a lane's
    # adds then form ``accs`` dependency chains instead of one)
    accs: int = 1
    # forward only, > 0 (CPUs): one work-item per row walking it in ``floatV`` vectors of
    # ``vec`` values (``accs`` vector sums, a scalar tail); ``wg``, ``subgroup`` and ``cache``
    # are then unused. Needs every row plain with stride 1 along C (:func:`ln_vec_ok`)
    vec: int = 0
    # with ``vec``: consecutive rows each work-item walks (fewer, longer work-items: Intel's
    # runtime pays a fixed cost per work-group)
    vec_rows: int = 1


# the size variables of the run-time forms (never ``rows``, ``args`` or ``kernel``: Plan.launch's
# own parameters): the row count, and the row chunks of the scale/shift gradient
LN_ROWS, LN_GROUPS = "nrows", "ngroups"


def ln_runtime_form(p):
    """The run-time-size form of ``p``: ``(problem, values)`` with the leading dims merged
    into one dim of ``nrows`` rows, a size variable bound at launch. Applies where every
    tensor is plain and its leading dims lie back to back (dense batch x sequence x C rows:
    ``tnc``, ``ntc``, any row-major tensor), so that a row's offset is ``row * stride`` with
    the baked row stride (the innermost leading dim's: C, the channel count, in dense
    tensors); the kernel divides by nothing run-time. One program then serves every batch
    and sequence length of the class (C, layouts' inner strides, data types, work-group).
    ``(p, {})`` otherwise (blocked or permuted leading dims: their sizes stay baked).
    ``p`` an :class:`LnScaleShiftReduce` (the GPUs' scale/shift gradient): the same, and its
    chunk count the size variable ``ngroups`` too."""
    from .sizevars import is_var, size_var

    nd = len(p.dims)
    if is_var(p.dims[0]) or nd < 2:
        return p, {}
    lead = [d for d in range(nd - 1) if p.dims[d] > 1]
    if not lead:
        return p, {}
    full = [lay for lay in (p.x, getattr(p, "out", None), p.dy) if lay is not None]
    stats = [lay for lay in (p.stat, p.var) if lay is not None]
    for lay in full + stats:
        if any(blk != 1 or inner for blk, _s, inner in lay[1]):
            return p, {}
        for a, b in zip(lead, lead[1:]):
            if lay[1][a][1] != lay[1][b][1] * p.dims[b]:
                return p, {}

    def row(lay, last: bool):
        terms = ((1, lay[1][lead[-1]][1], ()),) + ((lay[1][-1],) if last else ())
        return (lay[0], terms)

    from dataclasses import replace

    rows = math.prod(p.dims[:-1])
    if isinstance(p, LnScaleShiftReduce):
        q = replace(p, dims=(size_var(LN_ROWS), p.dims[-1]), x=row(p.x, True),
                    dy=row(p.dy, True), stat=row(p.stat, False), var=row(p.var, False),
                    groups=size_var(LN_GROUPS))
        return q, {LN_ROWS: int(rows), LN_GROUPS: int(p.groups)}
    q = replace(p, dims=(size_var(LN_ROWS), p.dims[-1]), x=row(p.x, True),
                out=row(p.out, True), dy=None if p.dy is None else row(p.dy, True),
                stat=row(p.stat, False), var=row(p.var, False))
    return q, {LN_ROWS: int(rows)}


def _ln_index(dims) -> tuple[str, list[str], list[str]]:
    lead = list(dims[:-1])
    names = [f"t{i}" for i in range(len(lead))]
    return _decompose("row", lead, names), names + ["c"], names


def build_ln_fwd(p: LnRows) -> KernelSource:
    if p.vec:
        return _build_ln_fwd_vec(p)
    return _build_ln_rows(p)


def ln_vec_ok(x: tuple, out: tuple) -> bool:
    """Whether the vector-row forward applies: src and dst plain, stride 1 along C."""
    return all(not any(blk != 1 or inner for blk, _s, inner in lay[1]) and lay[1][-1][1] == 1
               for lay in (x, out))


def _row_walk(names: list[str], body, C: int, V: int, A: int, ind: str) -> str:
    """C statements walking a row of ``C`` values in ``floatV`` vectors: ``body(w, sfx, T)``
    adds into ``names`` + ``sfx`` at column ``c`` (``A`` vector sums, a vector step, then
    scalars); the partial sums end in the floats ``names``. ``ind``: the lines' indent."""
    T = f"float{V}"
    main, vend = C // (A * V) * (A * V), C // V * V
    decl = " ".join(f"{T} {n}_v{k} = 0.0f;" for n in names for k in range(A))
    steps = " ".join(f"{{ const int c = c0 + {k * V}; {body(V, f'_v{k}', T)} }}"
                     for k in range(A))
    out = f"{decl}\n{ind}for (int c0 = 0; c0 < {main}; c0 += {A * V}) {{ {steps} }}"
    if vend > main:
        out += f"\n{ind}for (int c = {main}; c < {vend}; c += {V}) {{ {body(V, '_v0', T)} }}"
    for n in names:
        tot = " + ".join(f"{n}_v{k}" for k in range(A))
        out += f"\n{ind}{T} {n}_t = {tot};\n{ind}float {n} = {lane_reduce(n + '_t', V)};"
    if vend < C:
        out += f"\n{ind}for (int c = {vend}; c < {C}; ++c) {{ {body(1, '', 'float')} }}"
    return out


def _build_ln_fwd_vec(p: LnRows) -> KernelSource:
    """The forward with one work-item per row in ``floatV`` vectors (:attr:`LnRows.vec`).
    Intel's CPU runtime runs a 16-lane work-group per row through its work-item vectorizer,
    whose strided loops cost more than an explicit vector loop: 32x128x1024 training kernel
    0.82-0.83 -> 0.67-0.69 ms."""
    from .reduction import io_preamble, ld, ptr_decl, st
    from .sizevars import free_vars

    V, A, RP = p.vec, max(1, p.accs), max(1, p.vec_rows)
    if V not in (2, 4, 8, 16) or p.dy is not None or not ln_vec_ok(p.x, p.out):
        raise ValueError("LnRows vec: forward, vec in 2..16, src/dst plain with stride 1 on C")
    C = p.dims[-1]
    runtime = bool(free_vars(p))
    rows = LN_ROWS if runtime else math.prod(p.dims[:-1])
    code, idx, lead = _ln_index(p.dims)
    base_x = offset_expr(p.x, lead + ["0"])
    base_o = offset_expr(p.out, lead + ["0"])
    stats_out = not p.global_stats
    args = [ptr_decl("src", p.xdt, True).replace("restrict ", "")]
    if stats_out and p.write_stats:
        args += ["__global float *restrict mean", "__global float *restrict variance"]
    elif not stats_out:
        args += ["__global const float *restrict mean", "__global const float *restrict variance"]
    if p.scale is not None:
        args.append("__global const float *restrict scale")
    if p.shift is not None:
        args.append("__global const float *restrict shift")
    args.append(ptr_decl("dst", p.odt, False).replace("restrict ", ""))
    args += [f"const int {n}" for n in free_vars(p)]
    m_at = f"mean[{offset_expr(p.stat, lead)}]"
    v_at = f"variance[{offset_expr(p.var, lead)}]"
    # scale and shift: plain f32 vectors of C (``_vec`` in the primitive), stride 1
    vend = C // V * V

    def walk(names: list[str], body) -> str:
        return _row_walk(names, body, C, V, A, "    ")

    def x_at(w):
        return ld("src_r", p.xdt, "c", w)
    if p.global_stats:
        stats = f"""
    const float m = {m_at};
    const float is = rsqrt({v_at} + {_f(p.eps)});"""
    else:
        stats = f"""
    {walk(["a0"], lambda w, k, t: f"a0{k} += {x_at(w)};")}
    const float m = a0 / {C}.0f;
    {walk(["a1"], lambda w, k, t: f"const {t} d = {x_at(w)} - m; a1{k} += d * d;")}
    const float v = a1 / {C}.0f;
    const float is = rsqrt(v + {_f(p.eps)});"""
        if p.write_stats:
            stats += f"""
    {m_at} = m; {v_at} = v;"""

    def out_stmt(w):
        gam = (f"vload{w}(0, scale + c)" if w > 1 else "scale[c]") if p.scale is not None else ""
        bet = (f"vload{w}(0, shift + c)" if w > 1 else "shift[c]") if p.shift is not None else ""
        val = f"({x_at(w)} - m) * is" + (f" * {gam}" if gam else "") + (f" + {bet}" if bet else "")
        return st("dst_r", p.odt, "c", val, w)
    body = f"""{stats}
    for (int c = 0; c < {vend}; c += {V}) {{ {out_stmt(V)} }}"""
    if vend < C:
        body += f"""
    for (int c = {vend}; c < {C}; ++c) {{ {out_stmt(1)} }}"""
    from .reduction import _CTYPE
    name = "pydnnl_ln_fwd"
    src = f"""{io_preamble((p.xdt, p.odt), V)}
__kernel void __attribute__((reqd_work_group_size(1, 1, 1)))
{name}({", ".join(args)})
{{
    const int r0 = get_global_id(1) * {RP};
    const int r1 = min(r0 + {RP}, {rows});
    for (int row = r0; row < r1; ++row) {{
    {code}
    __global const {_CTYPE[p.xdt]} *src_r = src + ((size_t){base_x});
    __global {_CTYPE[p.odt]} *dst_r = dst + ((size_t){base_o});{body}
    }}
}}
"""
    if runtime:
        return KernelSource(name, src, None, (1, 1), _arg_names(args),
                            grid=("1", f"({rows} + {RP - 1}) // {RP}"))
    return KernelSource(name, src, (1, -(-rows // RP)), (1, 1), _arg_names(args))


def build_ln_bwd(p: LnRows) -> KernelSource:
    if p.vec:
        return _build_ln_bwd_vec(p)
    return _build_ln_rows(p)


def _build_ln_bwd_vec(p: LnRows) -> KernelSource:
    """The backward with one work-item per chunk of rows (``ss_rows`` where it also sums
    diff_scale/diff_shift into its own planar partial row, else ``vec_rows``), each row
    walked in ``float<vec>`` vectors (``accs`` vector sums per statistic, a scalar tail):
    the sums of ``g = dy * gamma`` and ``g * (x - m)``, then diff_src (and the partial rows'
    ``dy * xhat`` and ``dy``, read and written back from L1) from a second read of the row
    from cache. The CPU form (:func:`ln_bwd_vec`), as the vector-row forward."""
    from .reduction import _CTYPE, io_preamble, ld, ptr_decl, st
    from .sizevars import free_vars

    V, A = p.vec, max(1, p.accs)
    if V not in (2, 4, 8, 16) or p.dy is None or p.cache or not ln_vec_ok(p.x, p.out) \
            or not ln_vec_ok(p.dy, p.dy):
        raise ValueError("LnRows vec backward: vec in 2..16, src/dst/diff_dst plain with "
                         "stride 1 on C, no cache")
    C = p.dims[-1]
    runtime = bool(free_vars(p))
    rows = LN_ROWS if runtime else math.prod(p.dims[:-1])
    code, idx, lead = _ln_index(p.dims)
    ss = bool(p.ss_rows) and not p.global_stats
    RP = p.ss_rows if ss else max(1, p.vec_rows)
    args = [ptr_decl("src", p.xdt, True).replace("restrict ", ""),
            ptr_decl("diff_dst", p.dydt, True).replace("restrict ", ""),
            "__global const float *restrict mean", "__global const float *restrict variance"]
    if p.scale is not None:
        args.append("__global const float *restrict scale")
    args.append(ptr_decl("dst", p.odt, False).replace("restrict ", ""))
    if ss:
        args += ["__global float *restrict part", "const int p_off"]
    args += [f"const int {n}" for n in free_vars(p)]
    m_at = f"mean[{offset_expr(p.stat, lead)}]"
    v_at = f"variance[{offset_expr(p.var, lead)}]"
    vend = C // V * V

    def gam(w):
        if p.scale is None:
            return ""
        return f" * vload{w}(0, scale + c)" if w > 1 else " * scale[c]"

    def x_at(w):
        return ld("src_r", p.xdt, "c", w)

    def dy_at(w):
        return ld("dy_r", p.dydt, "c", w)

    def sum_body(w, k, t):
        return (f"const {t} g = {dy_at(w)}{gam(w)}; "
                f"a0{k} += g; a1{k} += g * ({x_at(w)} - m);")

    def walk(body) -> str:
        return _row_walk(["a0", "a1"], body, C, V, A, "        ")

    def out_body(w) -> str:
        t = f"float{w}" if w > 1 else "float"
        if p.global_stats:
            return st("dst_r", p.odt, "c", f"is * {dy_at(w)}{gam(w)}", w)
        text = (f"const {t} dyv = {dy_at(w)}; const {t} g = dyv{gam(w)}; "
                f"const {t} xh = ({x_at(w)} - m) * is; "
                + st("dst_r", p.odt, "c", "is * (g - mg - xh * mgx)", w))
        if ss:
            if w > 1:
                text += (f" vstore{w}(vload{w}(0, pr + c) + dyv * xh, 0, pr + c);"
                         f" vstore{w}(vload{w}(0, pr + {C} + c) + dyv, 0, pr + {C} + c);")
            else:
                text += f" pr[c] += dyv * xh; pr[{C} + c] += dyv;"
        return text

    body = f"""
        const float m = {m_at};
        const float is = rsqrt({v_at} + {_f(p.eps)});"""
    if not p.global_stats:
        body += f"""
        {walk(sum_body)}
        const float mg = a0 / {C}.0f;
        const float mgx = a1 * is / {C}.0f;"""
    body += f"""
        for (int c = 0; c < {vend}; c += {V}) {{ {out_body(V)} }}"""
    if vend < C:
        body += f"""
        for (int c = {vend}; c < {C}; ++c) {{ {out_body(1)} }}"""
    pre = ""
    if ss:
        pre = f"""
    __global float *pr = part + p_off + grp * {2 * C};
    for (int c = 0; c < {2 * C}; ++c) pr[c] = 0.0f;"""
    name = "pydnnl_ln_bwd"
    base = lambda lay: offset_expr(lay, lead + ["0"])  # noqa: E731
    src = f"""{io_preamble((p.xdt, p.dydt, p.odt), V)}
__kernel void __attribute__((reqd_work_group_size(1, 1, 1)))
{name}({", ".join(args)})
{{
    const int grp = get_global_id(1);{pre}
    const int r0 = grp * {RP};
    const int r1 = min(r0 + {RP}, {rows});
    for (int row = r0; row < r1; ++row) {{
        {code}
        __global const {_CTYPE[p.xdt]} *src_r = src + ((size_t){base(p.x)});
        __global const {_CTYPE[p.dydt]} *dy_r = diff_dst + ((size_t){base(p.dy)});
        __global {_CTYPE[p.odt]} *dst_r = dst + ((size_t){base(p.out)});{body}
    }}
}}
"""
    if runtime:
        return KernelSource(name, src, None, (1, 1), _arg_names(args),
                            grid=("1", f"({rows} + {RP - 1}) // {RP}"))
    return KernelSource(name, src, (1, -(-rows // RP)), (1, 1), _arg_names(args))


def _ln_sums(p: LnRows, names: list[str]) -> tuple[str, str]:
    """(local declarations, statements) making each of ``names`` its row-wide sum."""
    return _lane_sums(p.wg, p.subgroup, names)


def _build_ln_rows(p: LnRows) -> KernelSource:
    from .reduction import io_preamble, ld, ptr_decl, st
    from .sizevars import free_vars

    C, L = p.dims[-1], p.wg
    runtime = bool(free_vars(p))  # :func:`ln_runtime_form`: dims (nrows, C)
    rows = LN_ROWS if runtime else math.prod(p.dims[:-1])
    code, idx, lead = _ln_index(p.dims)
    xl, ol, dl = p.x, p.out, p.dy
    xn, on, dn = "src", "dst", "diff_dst"
    if runtime:
        # each row's base pointers once per row (a size_t offset), the elements indexed by c
        # alone: with ``row * C`` in every element's index the forward kernel ran 2-3% slower
        # than the baked one on Intel's CPU runtime (32x512x1024, kernel time, 100 launches
        # interleaved); with the bases, within 0.5%
        from .reduction import _CTYPE

        bases = []
        for lay, name, dt_, const in ((xl, "src", p.xdt, True), (ol, "dst", p.odt, False),
                                      (dl, "diff_dst", p.dydt, True)):
            if lay is None:
                continue
            off0, (rterm, cterm) = lay
            q = "const " if const else ""
            bases.append(f"__global {q}{_CTYPE[dt_]} *{name}_r = {name} + "
                         f"((size_t)t0 * {rterm[1]} + {off0});")
        code += "\n    " + "\n    ".join(bases)
        xl, ol = (0, ((1, 0, ()), xl[1][1])), (0, ((1, 0, ()), ol[1][1]))
        dl = None if dl is None else (0, ((1, 0, ()), dl[1][1]))
        xn, on, dn = "src_r", "dst_r", "diff_dst_r"
    x_at = ld(xn, p.xdt, offset_expr(xl, idx))
    m_at = f"mean[{offset_expr(p.stat, lead)}]"
    v_at = f"variance[{offset_expr(p.var, lead)}]"
    gamma = f"scale[{offset_expr(p.scale, ['c'])}]" if p.scale is not None else "1.0f"
    beta = f"shift[{offset_expr(p.shift, ['c'])}]" if p.shift is not None else "0.0f"
    out_off = offset_expr(ol, idx)
    bwd = p.dy is not None
    stats_out = not bwd and not p.global_stats
    args = [ptr_decl("src", p.xdt, True).replace("restrict ", "")]
    if bwd:
        args.append(ptr_decl("diff_dst", p.dydt, True).replace("restrict ", ""))
    if stats_out and not p.write_stats:
        pass
    elif stats_out:
        args += ["__global float *restrict mean", "__global float *restrict variance"]
    else:
        args += ["__global const float *restrict mean", "__global const float *restrict variance"]
    if p.scale is not None:
        args.append("__global const float *restrict scale")
    if p.shift is not None and not bwd:
        args.append("__global const float *restrict shift")
    args.append(ptr_decl("dst", p.odt, False).replace("restrict ", ""))
    loop = f"for (int c = l; c < {C}; c += {L})"
    N = p.cache
    if N and N * L < C:
        raise ValueError(f"LnRows cache {N} x wg {L} < C {C}")
    if N:
        # unrolled walk over the work-item's values; j is constant after unrolling, so the
        # private arrays live in registers
        loop = (f"#pragma unroll\n    for (int j = 0; j < {N}; ++j) "
                f"if (l + j * {L} < {C}) {{ const int c = l + j * {L};")
    end = " }" if N else ""
    local = ""

    def sums(names: list[str], body) -> str:
        """The row walk of ``body(suffix)`` (a statement adding into ``names`` + suffix at
        column ``c``), split over ``p.accs`` partial sums per lane where no ``cache`` is kept."""
        A = p.accs
        main = C // (A * L) * (A * L)
        if N or A <= 1 or not main:
            return f"{loop} {{ {body('')} }}{end}"
        parts = [f"_{k}" for k in range(1, A)]
        decl = " ".join(f"float {n}{sfx} = 0.0f;" for n in names for sfx in parts)
        steps = " ".join(f"{{ const int c = c0{f' + {k * L}' if k else ''}; "
                         f"{body(f'_{k}' if k else '')} }}" for k in range(A))
        tail = (f"\n    for (int c = {main} + l; c < {C}; c += {L}) {{ {body('')} }}"
                if main < C else "")
        fold = " ".join(f"{n} += " + " + ".join(f"{n}{sfx}" for sfx in parts) + ";"
                        for n in names)
        return (f"{decl}\n    for (int c0 = l; c0 < {main}; c0 += {A * L}) {{ {steps} }}"
                f"{tail}\n    {fold}")
    if not bwd:
        if p.global_stats:
            stats = f"""
    const float m = {m_at};
    const float is = rsqrt({v_at} + {_f(p.eps)});"""
        else:
            # two passes: the mean, then the centred sum of squares (a shifted one-pass sum
            # lost up to ten ulps of the output where the row's first value lies far from
            # its mean); the second pass reads registers (``cache``) or the row from cache
            local, red0 = _ln_sums(p, ["a0"])
            _, red1 = _ln_sums(p, ["a1"])
            if not p.subgroup:  # every lane has read the first sum before it is overwritten
                red1 = "\n    barrier(CLK_LOCAL_MEM_FENCE);" + red1
            pre, x_first, x_again = "", x_at, x_at
            if N:
                pre, x_first, x_again = f"float xv[{N}];\n    ", f"(xv[j] = {x_at})", "xv[j]"
            stats = f"""
    float a0 = 0.0f, a1 = 0.0f;
    {pre}{sums(["a0"], lambda k: f"a0{k} += {x_first};")}{red0}
    const float m = a0 / {C}.0f;
    {sums(["a1"], lambda k: f"const float d = {x_again} - m; a1{k} += d * d;")}{red1}
    const float v = a1 / {C}.0f;
    const float is = rsqrt(v + {_f(p.eps)});"""
            if p.write_stats:
                stats += f"""
    if (l == 0) {{ {m_at} = m; {v_at} = v; }}"""
        if N and not p.global_stats:
            x_at = "xv[j]"
        body = f"""{stats}
    {loop}
        {st(on, p.odt, out_off, f"({x_at} - m) * is * {gamma} + {beta}")}{end}"""
    else:
        dy_at = ld(dn, p.dydt, offset_expr(dl, idx))
        head = f"""
    const float m = {m_at};
    const float is = rsqrt({v_at} + {_f(p.eps)});"""
        if p.global_stats:
            body = head + f"""
    {loop}
        {st(on, p.odt, out_off, f"is * {dy_at} * {gamma}")}{end}"""
        else:
            local, red = _ln_sums(p, ["a0", "a1"])
            if N:
                # with ss_rows: the raw dy kept too, and each lane's columns of dy * xhat and
                # dy summed over the group's rows in registers (s0, s1: see the walk below)
                dv, dsum = "", ""
                if p.ss_rows:
                    dv = f" float dv[{N}];"
                    dsum = " s0[j] += dv[j] * xv[j] * is; s1[j] += dv[j];"
                body = head + f"""
    float a0 = 0.0f, a1 = 0.0f;
    float gv[{N}], xv[{N}];{dv}
    {loop}
        {"dv[j] = " + dy_at + "; gv[j] = dv[j]" if dv else "gv[j] = " + dy_at} * {gamma};
        xv[j] = {x_at} - m;
        a0 += gv[j]; a1 += gv[j] * xv[j];{end}{red}
    const float mg = a0 / {C}.0f;
    const float mgx = a1 * is / {C}.0f;
    {loop}
        {st(on, p.odt, out_off, "is * (gv[j] - mg - xv[j] * is * mgx)")}{dsum}{end}"""
            else:
                acc = ""
                if p.ss_rows:
                    # each lane adds into its own columns of the group's partial row (no
                    # other lane touches them: no barrier), which stays in L1
                    acc = f"""
        part[pb + c] += dyv * xh; part[pb + {C} + c] += dyv;"""
                body = head + f"""
    float a0 = 0.0f, a1 = 0.0f;
    {sums(["a0", "a1"], lambda k: f"const float g = {dy_at} * {gamma}; "
                                  f"a0{k} += g; a1{k} += g * ({x_at} - m);")}{red}
    const float mg = a0 / {C}.0f;
    const float mgx = a1 * is / {C}.0f;
    {loop} {{
        const float dyv = {dy_at};
        const float g = dyv * {gamma};
        const float xh = ({x_at} - m) * is;
        {st(on, p.odt, out_off, "is * (g - mg - xh * mgx)")}{acc}
    }}"""
    name = "pydnnl_ln_bwd" if bwd else "pydnnl_ln_fwd"
    attr = f"__attribute__((reqd_work_group_size({L}, 1, 1)))"
    if p.subgroup:
        attr += f" __attribute__((intel_reqd_sub_group_size({L})))"
    ss = p.ss_rows and bwd and not p.global_stats
    if ss:
        # the local-memory tree's sums are read by every lane before the next row writes them
        barrier = "" if p.subgroup else "\n    barrier(CLK_LOCAL_MEM_FENCE);"
        args += ["__global float *restrict part", "const int p_off"]
        groups = (f"({rows} + {p.ss_rows - 1}) // {p.ss_rows}" if runtime
                  else -(-rows // p.ss_rows))
        if N:  # registers hold the lane's columns of the partial row, written at the end
            init = (f"float s0[{N}], s1[{N}];\n    #pragma unroll\n    for (int j = 0; j < {N}; "
                    f"++j) {{ s0[j] = 0.0f; s1[j] = 0.0f; }}")
            fin = f"\n    {loop} part[pb + c] = s0[j]; part[pb + {C} + c] = s1[j];{end}"
        else:  # each lane adds into its columns of the partial row in memory (L1)
            init = (f"for (int c = l; c < {C}; c += {L}) {{ part[pb + c] = 0.0f; "
                    f"part[pb + {C} + c] = 0.0f; }}")
            fin = ""
        walk = f"""
    const int grp = get_group_id(1);
    const int pb = p_off + grp * {2 * C};
    {init}
    const int r_end = min({rows}, (grp + 1) * {p.ss_rows});
    for (int row = grp * {p.ss_rows}; row < r_end; ++row) {{
    {code}{body}{barrier}
    }}{fin}"""
    else:
        groups = rows
        walk = f"""
    const int row = get_group_id(1);
    {code}{body}"""
    args += [f"const int {n}" for n in free_vars(p)]
    src = f"""{io_preamble((p.xdt, p.dydt, p.odt))}
__kernel void {attr}
{name}({", ".join(args)})
{{
    {local}
    const int l = get_local_id(0);{walk}
}}
"""
    if runtime:
        return KernelSource(name, src, None, (L, 1), _arg_names(args), grid=(str(L), str(groups)))
    return KernelSource(name, src, (L, groups), (L, 1), _arg_names(args))


@dataclass(frozen=True)
class LnScaleShiftReduce:
    """Partial column sums of ``dy * xhat`` and ``dy`` over ``groups`` chunks of rows into
    ``part[p_off + (g * C + c) * 2 + {0, 1}]``; ``wg`` work-items along the columns."""

    dims: tuple[int, ...]
    x: tuple
    dy: tuple
    stat: tuple
    var: tuple
    eps: float
    groups: int = 1
    wg: int = 64
    xdt: str = "f32"
    dydt: str = "f32"
    col_loop: bool = False


def build_ln_ss_reduce(p: LnScaleShiftReduce) -> KernelSource:
    from .reduction import io_preamble, ld, ptr_decl
    from .sizevars import free_vars

    C = p.dims[-1]
    runtime = bool(free_vars(p))  # :func:`ln_runtime_form`: rows and chunks as arguments
    rows = LN_ROWS if runtime else math.prod(p.dims[:-1])
    chunk = "chunk" if runtime else -(-rows // p.groups)
    code, idx, lead = _ln_index(p.dims)
    args = [ptr_decl("src", p.xdt, True), ptr_decl("diff_dst", p.dydt, True),
            "__global const float *restrict mean", "__global const float *restrict variance",
            "__global float *restrict part", "const int p_off"]
    args += [f"const int {n}" for n in free_vars(p)]
    pre = (f"\n    const int chunk = ({LN_ROWS} + {LN_GROUPS} - 1) / {LN_GROUPS};"
           if runtime else "")
    name = "pydnnl_ln_ss_reduce"
    x_at = ld("src", p.xdt, offset_expr(p.x, idx))
    dy_at = ld("diff_dst", p.dydt, offset_expr(p.dy, idx))
    if p.col_loop:
        # one work-group per chunk of rows walking every column block: each block's rows
        # are re-touched next block at the neighbouring cache line (pages stay hot)
        head = f"""
    const int l = get_local_id(0);
    const int g = get_group_id(1);{pre}
    const int r_end = min({rows}, (g + 1) * {chunk});
    for (int c = l; c < {C}; c += {p.wg}) {{"""
        tail = "\n    }"
        gsize = (p.wg, p.groups)
    else:
        head = f"""
    const int c = get_global_id(0);
    const int g = get_global_id(1);
    if (c >= {C}) return;{pre}
    const int r_end = min({rows}, (g + 1) * {chunk});
    {{"""
        tail = "\n    }"
        gsize = (-(-C // p.wg) * p.wg, p.groups)
    src = f"""{io_preamble((p.xdt, p.dydt))}
__kernel void __attribute__((reqd_work_group_size({p.wg}, 1, 1)))
{name}({", ".join(args)})
{{{head}
    float a0 = 0.0f, a1 = 0.0f;
    for (int row = g * {chunk}; row < r_end; ++row) {{
    {code}
        const float is = rsqrt(variance[{offset_expr(p.var, lead)}] + {_f(p.eps)});
        const float dy = {dy_at};
        a0 += dy * ({x_at} - mean[{offset_expr(p.stat, lead)}]) * is;
        a1 += dy;
    }}
    part[p_off + (g * {C} + c) * 2] = a0;
    part[p_off + (g * {C} + c) * 2 + 1] = a1;{tail}
}}
"""
    if runtime:
        return KernelSource(name, src, None, (p.wg, 1), _arg_names(args),
                            grid=(str(gsize[0]), LN_GROUPS))
    return KernelSource(name, src, gsize, (p.wg, 1), _arg_names(args))


@dataclass(frozen=True)
class LnScaleShiftFinalize:
    """``diff_scale[c]``, ``diff_shift[c]`` (where given) = sums of the partials."""

    C: int
    groups: int  # or the size variable ``ngroups`` (bound at launch)
    diff_scale: tuple | None
    diff_shift: tuple | None
    wg: int = 64
    planar: bool = False  # partials at p_off + g * 2C + {0, C} + c (LnRows.ss_rows)


def build_ln_ss_finalize(p: LnScaleShiftFinalize) -> KernelSource:
    from .sizevars import free_vars

    C = p.C
    args = ["__global const float *restrict part", "const int p_off"]
    args += [f"const int {n}" for n in free_vars(p)]  # ``groups`` the size variable ngroups
    out = ""
    if p.diff_scale is not None:
        args.append("__global float *restrict diff_scale")
        out += f"\n    diff_scale[{offset_expr(p.diff_scale, ['c'])}] = s0;"
    if p.diff_shift is not None:
        args.append("__global float *restrict diff_shift")
        out += f"\n    diff_shift[{offset_expr(p.diff_shift, ['c'])}] = s1;"
    i0, i1 = ((f"g * {2 * C} + c", f"g * {2 * C} + {C} + c") if p.planar
              else (f"(g * {C} + c) * 2", f"(g * {C} + c) * 2 + 1"))
    name = "pydnnl_ln_ss_finalize"
    src = f"""
__kernel void __attribute__((reqd_work_group_size({p.wg}, 1, 1)))
{name}({", ".join(args)})
{{
    const int c = get_global_id(0);
    if (c >= {C}) return;
    float s0 = 0.0f, s1 = 0.0f;
    for (int g = 0; g < {p.groups}; ++g) {{
        s0 += part[p_off + {i0}];
        s1 += part[p_off + {i1}];
    }}{out}
}}
"""
    return KernelSource(name, src, (-(-C // p.wg) * p.wg,), (p.wg,), _arg_names(args))


# -- batch normalization, one work-group per channel -------------------------------------------


@dataclass(frozen=True)
class BnFused:
    """Batch normalization with statistics in one kernel: one work-group of ``wg`` lanes per
    channel reads the channel's values once for its sums, combines them, then normalizes the
    same values again, which are still in the core's caches (a channel of a few hundred KiB
    up to a few MiB), so memory sees one read and one write per element.

    Forward (``dy`` None): shifted sums of ``x - K`` and its square (``K = x[0, c, 0...]``),
    mean and variance written when ``write_stats``, ``dst = (x - m) * a + b`` (plus ``src1``
    with ``add``; then ReLU and the workspace mask). Backward: sums of ``dy`` and ``dy * (x -
    mean)`` (dy masked by the workspace), diff_scale/diff_shift where given, ``diff_src = a *
    dy + b * (x - m) + d`` (``b = d = 0`` with ``global_stats``; the masked dy stored as
    ``diff_src1`` with ``add``). Plain layouts whose channel's values lie in
    contiguous runs (``nchw``): lanes along a run, each run summed on its own before being
    added to the channel's total (shorter sums, smaller rounding error).
    """

    dims: tuple[int, ...]
    x: tuple
    out: tuple
    stat: tuple
    eps: float
    dy: tuple | None = None
    scale: tuple | None = None
    shift: tuple | None = None
    relu: bool = False
    ws: bool = False
    add: bool = False         # fuse_norm_add_relu: src1 / diff_src1 as in :class:`BnApply`
    write_stats: bool = False
    global_stats: bool = False
    diff_scale: tuple | None = None
    diff_shift: tuple | None = None
    wg: int = 16
    subgroup: bool = False
    x_dt: str = "f32"
    dy_dt: str = "f32"
    out_dt: str = "f32"
    # run-time form (:func:`bn_runtime_groups` over x, out[, dy][, ws]): sizes and strides
    # as kernel arguments, ``dims`` then only gives C and the rank
    groups: tuple | None = None


def _bn_fused_groups(dims, lays: list, groups=None):
    """(plain groups, channel group, inner run, outer runs) when every layout is plain and
    the innermost reduction run is contiguous in all of them, else None."""
    if groups is None:
        groups = plain_groups(dims, lays, keep=1)
    if groups is None:
        return None
    red = [g for g in groups if not g[1]]
    if not red or any(s != 1 for s in red[-1][2]) or red[-1] is not groups[-1]:
        return None
    cg = next(g for g in groups if g[1])
    return groups, cg, red[-1], red[:-1]


def bn_fused_run(dims, lays: list) -> int:
    """The contiguous run length the fused kernel's lanes walk over ``lays`` (0: the kernel
    does not apply: a blocked layout, or channels innermost in memory)."""
    g = _bn_fused_groups(dims, lays)
    return g[2][0] if g else 0


def _lane_sums(L: int, subgroup: bool, names: list[str]) -> tuple[str, str]:
    """(local declarations, statements) making each of ``names`` the sum over the group."""
    if subgroup:
        return "", "".join(f"\n    {n} = sub_group_reduce_add({n});" for n in names)
    arrays = [f"l{k}" for k in range(len(names))]
    local = "__local float " + ", ".join(f"{a}[{L}]" for a in arrays) + ";"
    stores = " ".join(f"{a}[l] = {n};" for a, n in zip(arrays, names))
    loads = " ".join(f"{n} = {a}[0];" for a, n in zip(arrays, names))
    return local, f"""
    {stores}
    barrier(CLK_LOCAL_MEM_FENCE);{_tree(L, arrays)}
    {loads}"""


def build_bn_fused(p: BnFused) -> KernelSource:
    bwd = p.dy is not None
    lays = [p.x, p.out] + ([p.dy] if bwd else []) + ([logical_layout(p.dims)] if p.ws else [])
    found = _bn_fused_groups(p.dims, lays, p.groups)
    if found is None:
        raise ValueError("BnFused: layouts without a contiguous run per channel")
    _groups, cg, inner, outer = found
    C, L, U = p.dims[1], p.wg, UNROLL
    S_in = inner[0]
    O = math.prod(g[0] for g in outer)
    names = [f"o{k}" for k in range(len(outer))]
    dec = _decompose("o", [g[0] for g in outer], names) if outer else ""
    allg = list(outer) + [inner, cg]
    idx = names + ["i", "c"]
    rt = p.groups is not None
    offs = {0: p.x[0], 1: p.out[0]}
    if bwd:
        offs[2] = p.dy[0]
    if p.ws:
        offs[len(offs)] = 0

    def at(which: int) -> str:
        # run-time strides: the row's offset once per row (``xo<which>``), then ``+ i``:
        # inline, the products of run-time strides in every address cost the CPU
        # compiler its contiguous vectors (nchw 16x64x56x56 forward 1.7 ms against 1.13 ms
        # baked; hoisted 1.15 ms, same process, Intel's CPU runtime)
        if rt:
            return f"xo{which} + i"
        return _group_offsets(allg, idx, which, offs[which])

    if rt:
        row = names + ["0", "c"]
        dec += "".join(f"\n        const int xo{w} = {_group_offsets(allg, row, w, off)};"
                       for w, off in offs.items())
    x_at, out_at = at(0), at(1)
    # the values per channel: baked, or (run-time sizes) a float computed once
    R = "rcount" if rt else f"{math.prod(p.dims) // C}.0f"
    helpers, ld, st = _bn_types(p.x_dt, p.dy_dt, p.out_dt)
    x_val = f"{ld[p.x_dt]}(src[{x_at}])"
    args = [f"__global const {_STORE_T[p.x_dt]} *restrict src"]
    gamma = f"scale[{offset_expr(p.scale, ['c'])}]" if p.scale is not None else "1.0f"
    beta = f"shift[{offset_expr(p.shift, ['c'])}]" if p.shift is not None else "0.0f"
    m_at, v_at = f"mean[{offset_expr(p.stat, ['c'])}]", f"variance[{offset_expr(p.stat, ['c'])}]"
    if bwd:
        args.append(f"__global const {_STORE_T[p.dy_dt]} *restrict diff_dst")
        args += ["__global const float *restrict mean", "__global const float *restrict variance"]
        if p.scale is not None:
            args.append("__global const float *restrict scale")
        if p.ws:
            args.append("__global const uchar *restrict ws")
        if p.diff_scale is not None:
            args.append("__global float *restrict diff_scale")
        if p.diff_shift is not None:
            args.append("__global float *restrict diff_shift")
        if p.add:
            args.append(f"__global {_STORE_T[p.dy_dt]} *restrict diff_src1")
        dy = f"{ld[p.dy_dt]}(diff_dst[{at(2)}])"
        if p.ws:
            # the load unconditional, then a select: Intel's CPU compiler drops the store of
            # one lane (diff_src left unwritten) when the load sits under the mask's condition
            dy = f"select(0.0f, {dy}, (int)ws[{at(3)}])"
        head = f"""
    const float k = {m_at};"""
        acc = f"""
                const float x = {x_val} - k;
                const float dy = {dy};
                a0[u] += dy; a1[u] += dy * x;"""
        stats = f"""
    const float m = k;
    const float is = rsqrt({v_at} + {_f(p.eps)});
    const float a = {gamma} * is;"""
        outs = ""
        if p.diff_scale is not None:
            outs += f" diff_scale[{offset_expr(p.diff_scale, ['c'])}] = t1 * is;"
        if p.diff_shift is not None:
            outs += f" diff_shift[{offset_expr(p.diff_shift, ['c'])}] = t0;"
        if outs:
            stats += f"\n    if (l == 0) {{{outs} }}"
        if p.global_stats:
            stats += "\n    const float b = 0.0f, d = 0.0f;"
        else:
            stats += f"""
    const float b = -a * is * (t1 * is) / {R};
    const float d = -a * t0 / {R};"""
        apply = f"""
            const float dy = {dy};
            const float y = a * dy + b * ({x_val} - m) + d;"""
        if p.add:
            apply += f"\n            diff_src1[{at(2)}] = {st[p.dy_dt]}(dy);"
    else:
        if p.write_stats:
            args += ["__global float *restrict mean", "__global float *restrict variance"]
        if p.scale is not None:
            args.append("__global const float *restrict scale")
        if p.shift is not None:
            args.append("__global const float *restrict shift")
        if p.ws:
            args.append("__global uchar *restrict ws")
        if p.add:
            args.append(f"__global const {_STORE_T[p.out_dt]} *restrict src1")
        zero = _group_offsets(allg, ["0"] * len(names) + ["0", "c"], 0, p.x[0])
        head = f"""
    const float k = {ld[p.x_dt]}(src[{zero}]);"""
        acc = f"""
                const float x = {x_val} - k;
                a0[u] += x; a1[u] += x * x;"""
        stats = f"""
    const float ms = t0 / {R};
    const float v = fmax(t1 / {R} - ms * ms, 0.0f);
    const float m = k + ms;
    const float a = {gamma} * rsqrt(v + {_f(p.eps)});
    const float b = {beta};"""
        if p.write_stats:
            stats += f"\n    if (l == 0) {{ {m_at} = m; {v_at} = v; }}"
        apply = f"""
            float y = ({x_val} - m) * a + b;"""
        if p.add:
            apply += f"\n            y += {ld[p.out_dt]}(src1[{out_at}]);"
        if p.relu:
            apply += "\n            y = fmax(y, 0.0f);"
        if p.ws:
            apply += f"\n            ws[{at(2)}] = y > 0.0f ? 1 : 0;"
    args.append(f"__global {_STORE_T[p.out_dt]} *restrict dst")
    local, red = _lane_sums(L, p.subgroup, ["t0", "t1"])
    full = _cdiv(S_in, L * U)
    full_u = full * U if not rt else f"({full} * {U})"
    per_l, rem_l = _cdiv(S_in, L), _cmod(S_in, L)
    last = S_in // L * L if not rt else f"({per_l} * {L})"
    # loops with trip counts uniform across the lanes (``j``, then the lane's offset): a
    # loop bound that depends on the lane (``i = l; i < S; i += L``) is run with masked
    # loads and stores on a CPU runtime (measured 5x slower stores on the EPYC)
    tail = ""
    if rt or S_in % L:
        tail = f"""
        {{
            const int i = {last} + l;
            if (i < {S_in}) {{{apply}
            dst[{out_at}] = {st[p.out_dt]}(y);
            }}
        }}"""
    args += _size_args(p.groups)
    rdef = f"\n    const float rcount = (float)({O}) * (float)({S_in});" if rt else ""
    attr = f"__attribute__((reqd_work_group_size({L}, 1, 1)))"
    if p.subgroup:
        attr += f" __attribute__((intel_reqd_sub_group_size({L})))"
    name = "pydnnl_bn_fused"
    src = helpers + f"""
__kernel void {attr}
{name}({", ".join(args)})
{{
    {local}
    const int l = get_local_id(0);
    const int c = get_group_id(1);{rdef}{head}
    float t0 = 0.0f, t1 = 0.0f;
    for (int o = 0; o < {O}; ++o) {{
        {dec}
        float a0[{U}], a1[{U}];
        for (int u = 0; u < {U}; ++u) {{ a0[u] = 0.0f; a1[u] = 0.0f; }}
        for (int j = 0; j < {full}; ++j) {{
            #pragma unroll
            for (int u = 0; u < {U}; ++u) {{
                const int i = (j * {U} + u) * {L} + l;{acc}
            }}
        }}
        for (int j = {full_u}; j < {per_l}; ++j) {{
            const int i = j * {L} + l, u = 0;{acc}
        }}
        if ({rem_l} && {last} + l < {S_in}) {{
            const int i = {last} + l, u = 0;{acc}
        }}
        t0 += {" + ".join(f"a0[{u}]" for u in range(U))};
        t1 += {" + ".join(f"a1[{u}]" for u in range(U))};
    }}{red}{stats}
    for (int o = 0; o < {O}; ++o) {{
        {dec}
        for (int j = 0; j < {per_l}; ++j) {{
            const int i = j * {L} + l;{apply}
            dst[{out_at}] = {st[p.out_dt]}(y);
        }}{tail}
    }}
}}
"""
    return KernelSource(name, src, (L, C), (L, 1), _arg_names(args))
