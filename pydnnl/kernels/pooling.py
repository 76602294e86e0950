"""OpenCL C generator of pooling kernels (max, average with or without padding; forward and
backward; 1-D to 3-D through unit dims; any plain, strided or blocked layout).

Hand-written C rather than loopy: max pooling keeps oneDNN's tie rule (a point wins only when
strictly greater, so the first of equal values in (kd, kh, kw) order is recorded), which
loopy's ``argmax`` reduction (an ``>=`` update, order left to the reduction) does not promise,
and the backward gather walks a per-work-item range of windows, data-dependent loop bounds
that are plain C loops.

A 2-D range over the output (dst forward, diff_src backward): axis 0 walks the output's
innermost axis in memory (channels for nhwc, width for nchw, the channel block for nChw16c),
``get_global_id(0)`` used as that index directly, so addresses are linear in it and a CPU
runtime's SIMD lanes (consecutive work-items of axis 0) read consecutive addresses; axis 1
walks the other elements, whose index arithmetic is uniform across the lanes. Every offset is
a sum of per-dimension terms read off the memory descs (:func:`~pydnnl.kernels.reorder.
layout_of`), so blocked layouts are indexed in place; a blocked output's padded channels are
written 0. Data may be stored as f32, bf16 or f16 (``src_dt``, ``dst_dt``): loaded to f32,
computed in f32, rounded once on store with oneDNN's rules (``clhelpers``).

* forward: ``dst = max`` (``ws`` = the window index of the winner, ``(kd*KH + kh)*KW + kw``)
  or ``sum / denominator`` over the taps inside the source; straight-line taps, loads
  clamped inside the source and the padding masked by selects; where the lanes run along
  N or C (the window the same for a row's lanes), a window wholly inside the source takes
  plain loads (a branch uniform across the lanes).
* forward post-ops (eltwise and binary entries, :mod:`pydnnl.kernels.post_ops`) apply to the
  value as it is stored; a binary operand (``po<i>_src1``, f32, after the workspace) is read
  at the output element's position through its own layout, its strides run-time with dst's.
* bounds checks of the range only where it is rounded up to whole work-groups.
* backward, a gather with no atomics: ``diff_src[x] = sum`` over the windows ``o`` that
  cover ``x``, at most ``ceil(extent / stride)`` per dim, walked from the highest ``o = (x +
  pad_l) / stride`` down, of ``diff_dst[o]`` when ``ws[o] == k`` (max; the workspace read
  as u8) or ``diff_dst[o] / denominator(o)`` (averages). When the lanes run along a spatial
  dim, each work-item takes ``stride`` consecutive elements of it, so its windows are ``lane
  + constant`` and its taps constants (no division per lane, loads linear in the lane);
  where the dim has fewer windows than such candidates (global pooling), the lane walks its
  own window range instead.
* interior and edges (``PoolProblem.part``, :func:`interior_lanes`): where the lanes run
  along a strided width, the lanes whose windows lie inside the source (forward) or whose
  candidate windows all lie inside diff_dst (backward) can take a kernel of their own: the
  forward reads a lane's taps as ``vloadS(l0 + q, row)`` (consecutive lanes, consecutive
  vectors: no clamped stride-S loads, which a CPU runtime gathers), the backward drops the
  width's bounds checks (no masked loads); a second kernel walks the few edge lanes with the
  general code.
* sizes at run time (:func:`runtime_form`, plain layouts): the minibatch, the spatial sizes
  and the strides built from them are size variables (kernel arguments ``pool_*``), as are
  the range's lane count, row count and interior end (``pool_lanes``, ``pool_nrows``,
  ``pool_hi``, computed on the host); kernel, strides, dilation, padding, the channel count
  and a width the work-group shape is cut to stay baked. A tensor strided as another (the
  workspace as dst; dst as src at stride 1 with "same" padding) takes that one's arguments,
  so the compiler shares their address arithmetic as in a baked kernel, and the forward's
  taps inside the source are addressed from the window's first tap.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from . import post_ops as po
from .sizevars import free_vars, is_var, size_var
from .source import KernelSource

ALGS = ("max", "avg_p", "avg_np")


@dataclass(frozen=True)
class PoolProblem:
    """Everything a pooling kernel depends on; spatial tuples are (D, H, W), unit dims filling
    in for 1-D and 2-D problems. Layouts are :func:`layout_of` tuples over the five dims
    (N, C, D, H, W). Backward: ``src_*`` describe diff_src, ``dst_*`` diff_dst."""

    direction: str                  # "fwd" or "bwd"
    alg: str                        # one of ALGS
    workspace: str | None           # None, "uchar" or "int": the window-index type (max only)
    n: int
    c: int
    c_iter: int                     # channels the output walks (the padded ones are written 0)
    src_sp: tuple[int, int, int]
    dst_sp: tuple[int, int, int]
    kernel: tuple[int, int, int]
    strides: tuple[int, int, int]
    dilation: tuple[int, int, int]  # oneDNN's: 0 = dense
    pad_l: tuple[int, int, int]
    src_layout: tuple
    dst_layout: tuple
    ws_layout: tuple | None
    axes: tuple                     # output iteration axes, innermost first: (dim, size, mult)
    local: tuple[int, int] = (0, 0)  # work-group (lanes, rows); 0: the runtime chooses
    wide: bool = False              # 64-bit offsets
    src_dt: str = "f32"              # storage of src (backward: diff_src): f32, bf16, f16
    dst_dt: str = "f32"              # storage of dst (backward: diff_dst)
    part: str = "all"               # lanes walked: "all", "interior" or "edges" (see below)
    # run-time form (:func:`runtime_form`): the range's lane count, row count and interior end
    # as size variables (None: from the sizes), and whether the lanes' elements fill the lane
    # dim exactly (backward, ``vec`` elements per lane). A run-time row count is launched as
    # whole work-groups of rows (``rt_rest`` a multiple of the group's rows: no bounds check),
    # from row ``rt_r0`` where that is an argument (see :func:`row_launches`)
    rt_count: object = None
    rt_rest: object = None
    rt_r0: object = None
    rt_hi: object = None
    lane_exact: bool = True
    # forward only: a post-op chain (:mod:`pydnnl.kernels.post_ops`: eltwise and binary
    # entries) applied to each value before its store; a binary entry's layout is its
    # operand's over the five dims (a broadcast dim a zero term)
    post_ops: tuple = ()

    @property
    def out_dims(self) -> tuple[int, ...]:
        sp = self.dst_sp if self.direction == "fwd" else self.src_sp
        return (self.n, self.c_iter) + sp

    @property
    def total(self) -> int:
        t = 1
        for v in self.out_dims:
            t *= v
        return t


def iteration_axes(layout: tuple, dims: tuple[int, ...]) -> tuple:
    """Axes of the output walk, innermost (smallest stride) first: ``(dim, size, mult)``; a
    dim blocked once is split into its block (mult 1) and the blocks (mult = block size)."""
    _, per_dim = layout
    axes = []
    for d, (blk, stride, inner) in enumerate(per_dim):
        size = dims[d]
        if size == 1:
            continue
        if blk > 1 and len(inner) == 1 and size % blk == 0:
            axes.append((inner[0][2], d, blk, 1))
            axes.append((stride, d, size // blk, blk))
        else:
            s = min([t[2] for t in inner] + [stride]) if inner else stride
            axes.append((s, d, size, 1))
    axes.sort(key=lambda a: (a[0], -a[1]))
    return tuple((d, size, mult) for _, d, size, mult in axes)


_STORE_T = {"f32": "float", "bf16": "ushort", "f16": "ushort"}


def _type_helpers(*dts: str) -> tuple[str, dict, dict]:
    """The load/store helper definitions (oneDNN's rounding, ``clhelpers``) for ``dts``, and
    per type the loader's and storer's names."""
    from ..memory.data_types import data_type
    from .clhelpers import load_helper, store_helper

    defs, ld, st = [], {}, {}
    for dt in dict.fromkeys(dts):
        if dt == "f32":
            ld[dt] = st[dt] = ""
            continue
        lname, ldef, _, _ = load_helper(data_type[dt])
        sname, sdef, _, _ = store_helper(data_type[dt])
        defs += [ldef, sdef]
        ld[dt], st[dt] = lname, sname
    return "".join(d + "\n" for d in defs), ld, st


def _dim_term(x: str, blk: int, stride: int, inner: tuple, rest: str | None = None,
              lane: str | None = None) -> str:
    """The storage term of index ``x`` along one dim. With ``lane``, ``x = rest + lane`` where
    the walk's innermost axis is this dim's innermost block (``rest`` a multiple of the block,
    ``lane`` below it): the term is then written linear in the lane when the layout has that
    block, so consecutive work-items read consecutive addresses."""
    if lane is not None and blk > 1 and len(inner) == 1 and inner[0][:2] == (blk, 1):
        parts = [f"({rest} / {blk}) * {stride}"] if stride else []
        return " + ".join(parts + [f"{lane} * {inner[0][2]}"])
    parts = []
    if stride:
        parts.append(f"({x} / {blk}) * {stride}" if blk > 1 else f"{x} * {stride}")
    for mod, div, s in inner:
        t = f"({x} % {mod})"
        if div > 1:
            t = f"({t} / {div})"
        parts.append(f"{t} * {s}")
    return " + ".join(parts) if parts else "0"


def _offset(layout: tuple, names, dims=range(5), split: dict | None = None) -> str:
    """Offset expression of the element with logical indices ``names``; ``split`` maps a dim
    to its ``(rest, lane)`` pair (see :func:`_dim_term`)."""
    offset0, per_dim = layout
    terms = [str(offset0)] if offset0 and 0 in dims else []
    for d in dims:
        blk, stride, inner = per_dim[d]
        rest, lane = (split or {}).get(d, (None, None))
        t = _dim_term(names[d], blk, stride, inner, rest, lane)
        if t != "0":
            terms.append(f"({t})")
    return " + ".join(terms) if terms else "0"


@dataclass(frozen=True)
class Lanes:
    """How the 2-D range covers the output: axis 0 of the range walks ``dim`` (the output's
    innermost axis), ``vec`` consecutive elements per work-item (backward along a spatial dim:
    the stride, so the windows read are the same constants for every work-item), ``count``
    work-items; axis 1 walks the ``rest`` other elements."""

    dim: int
    size: int
    split: bool      # the axis is the inner block of a blocked dim
    vec: int
    count: int
    rest: int


def lanes_of(p: PoolProblem) -> Lanes:
    if not p.axes:
        return Lanes(1, 1, False, 1, 1, 1)
    d0, size0, _ = p.axes[0]
    split = any(d == d0 for d, _, _ in p.axes[1:])
    vec = p.strides[d0 - 2] if p.direction == "bwd" and d0 >= 2 else 1
    rest = 1
    for _, size, _ in p.axes[1:]:
        rest *= size
    count = p.rt_count if p.rt_count is not None else -(-size0 // vec)
    return Lanes(d0, size0, split, vec, count, p.rt_rest if p.rt_rest is not None else rest)


def _lane_guard(p: PoolProblem, ln: Lanes) -> bool:
    """Whether the last lane's ``vec`` elements run past the lane dim (backward)."""
    if is_var(ln.count):
        return not p.lane_exact
    return ln.count * ln.vec > ln.size


def _check(count, per: int) -> bool:
    """Whether a range of ``count`` work-items in groups of ``per`` (0: the runtime's) needs
    a bounds check (always where ``count`` is a size variable)."""
    return is_var(count) or not per or bool(count % per)


def _decompose(p: PoolProblem, it: str, ln: Lanes) -> tuple[list[str], dict, list[str]]:
    """Statements naming the output's logical index: x0..x4 from the work-item's ids (the
    lane dim's ``x`` excludes its lane part when split); returns (lines, split map, names)."""
    # bounds checks only where the range is rounded up to whole work-groups (a check the
    # compiler cannot drop masks every SIMD lane of the kernel on a CPU runtime)
    l0, l1 = p.local
    count = lane_count(p)
    check0 = _check(count, l0)
    check1 = p.rt_rest is None and _check(ln.rest, l1)
    if p.part == "all":
        lines = ["    const int l0 = get_global_id(0);"]
    elif p.part == "interior":
        lo, hi = interior_lanes(p)
        lines = [f"    const int l0 = get_global_id(0) + {lo};"]
    else:
        lo, hi = interior_lanes(p)
        lines = ["    const int e0 = get_global_id(0);",
                 f"    const int l0 = e0 < {lo} ? e0 : e0 + {hi - lo};"]
    if check0:
        lines.insert(1, f"    if (get_global_id(0) >= {count}) return;")
    lines.append(f"    {it} t = get_global_id(1){f' + {p.rt_r0}' if p.rt_r0 is not None else ''};")
    if check1:
        lines.append(f"    if (t >= {ln.rest}) return;")
    contrib: dict[int, list[str]] = {d: [] for d in range(5)}
    rest_axes = p.axes[1:]
    magic = set(_magic_divisors(p))
    for i, (d, size, mult) in enumerate(rest_axes, start=1):
        last = i == len(rest_axes)
        v = f"a{i}"
        if not last and str(size) in magic:
            # a run-time divisor: multiply by its reciprocal (Granlund-Montgomery, from the
            # host): an integer division takes tens of cycles per work-item, next to a few
            # loads per lane (nchw max backward 3x3/2 mb32ic64ih112 on Intel's CPU runtime:
            # about 200 cycles per SIMD vector in all), the multiply a few
            lines += [f"    const int q{i} = (int)(((ulong)t * {size}_m) >> {size}_sh);",
                      f"    const int {v} = t - q{i} * {size};",
                      f"    t = q{i};"]
            contrib[d].append(v if mult == 1 else f"{v} * {mult}")
            continue
        lines.append(f"    const {it} {v} = {'t' if last else f't % {size}'};")
        if not last:
            lines.append(f"    t /= {size};")
        contrib[d].append(v if mult == 1 else f"{v} * {mult}")
    names = [f"x{d}" for d in range(5)]
    split = {}
    for d in range(5):
        if d == ln.dim and ln.split:
            lines.append(f"    const {it} xr{d} = {' + '.join(contrib[d]) or '0'};")
            lines.append(f"    const {it} x{d} = xr{d} + l0;")
            split[d] = (f"xr{d}", "l0")
        elif d == ln.dim and p.axes:
            if ln.vec == 1:
                lines.append(f"    const {it} x{d} = l0;")
        else:
            lines.append(f"    const {it} x{d} = {' + '.join(contrib[d]) or '0'};")
    return lines, split, names


# vector widths of the strided width's loads and stores (no 16: PoCL builds no float16 code)
_VLOAD = (2, 3, 4, 8)
INTERIOR_MIN = 16


def _lane_cands(p: PoolProblem, r: int) -> list[tuple[int, int]] | None:
    """Backward along a spatial lane dim: the windows ``l0 + dq`` (and their taps ``k``) that
    cover element ``x = l0 * S + r``, or None where the dim has fewer windows than such
    candidates (global pooling: the lane walks its own window range)."""
    d = lanes_of(p).dim
    S, P, D, K, O = (v[d - 2] for v in (p.strides, p.pad_l, p.dilation, p.kernel, p.dst_sp))
    ext = (K - 1) * (D + 1) + 1
    cands = []
    for j in range(-(-ext // S)):
        t = (r + P) % S + S * j
        if t >= ext or t % (D + 1):
            continue
        cands.append(((r + P) // S - j, t // (D + 1)))
    return cands if is_var(O) or len(cands) <= O else None


def interior_lanes(p: PoolProblem) -> tuple[int, int] | None:
    """``(lo, hi)``: the lanes along a strided width whose windows lie wholly inside the
    source (forward) or whose candidate windows all lie inside diff_dst (backward);
    ``p.part == "interior"`` walks them with no bounds checks along the width (forward: with
    vector loads), ``"edges"`` the rest with the general code. None where the split does not
    apply: lanes not along the width, forward not on a plain stride-1 width of stride 2, 3, 4,
    or 8, backward of stride 1, or fewer than 16 interior lanes."""
    ln = lanes_of(p)
    if not p.axes or ln.dim != 4 or ln.split or p.strides[2] == 1:
        return None
    if p.rt_hi is not None:  # the run-time form of a split kernel: lo baked, hi an argument
        if p.direction == "bwd":
            lo = max(0, max(-dq for r in range(ln.vec) for dq, _ in _lane_cands(p, r)))
        else:
            lo = -(-p.pad_l[2] // p.strides[2])
        return lo, p.rt_hi
    if p.direction == "bwd":
        dqs = [dq for r in range(ln.vec) for dq, _ in (_lane_cands(p, r) or [(None, 0)])]
        if None in dqs:
            return None
        lo = max(0, max(-dq for dq in dqs))
        hi = min(ln.count, min(p.dst_sp[2] - dq for dq in dqs))
        return (lo, hi) if hi - lo >= INTERIOR_MIN else None
    if p.strides[2] not in _VLOAD or p.src_layout[1][4] != (1, 1, ()):
        return None
    S, P, D, K, I = p.strides[2], p.pad_l[2], p.dilation[2], p.kernel[2], p.src_sp[2]
    ext = (K - 1) * (D + 1) + 1
    lo = -(-P // S)
    hi = min(ln.count, (I - ext + P) // S + 1) if I - ext + P >= 0 else 0
    return (lo, hi) if hi - lo >= INTERIOR_MIN else None


def lane_count(p: PoolProblem) -> int:
    """Work-items along axis 0 of ``p``'s range (its part of the lanes)."""
    ln = lanes_of(p)
    if p.part == "all":
        return ln.count
    lo, hi = interior_lanes(p)
    return hi - lo if p.part == "interior" else lo + ln.count - hi


def _forward_interior_taps(p: PoolProblem, ld: dict) -> list[str]:
    """The window loop of the interior forward: depth and height rows skipped where outside
    (uniform across lanes), the width taps of a lane ``l0`` read as ``vloadS(l0 + q, row)``
    (consecutive lanes, consecutive vectors; no clamps, no gathers) and picked by element."""
    KD, KH, KW = p.kernel
    S, P, D = p.strides[2], p.pad_l[2], p.dilation[2]
    lines = []
    for depth, (a, xv, St, Pd, Dd, I) in enumerate(zip("dh", ("x2", "x3"), p.strides,
                                                     p.pad_l, p.dilation, p.src_sp)):
        ind = "    " * (depth + 1)
        lines += [f"{ind}for (int k{a} = 0; k{a} < {p.kernel[depth]}; ++k{a}) {{",
                  f"{ind}    const int i{a} = (int){xv} * {St} - {Pd} + k{a} * {Dd + 1};",
                  f"{ind}    if (i{a} < 0 || i{a} >= {I}) continue;"]
    ind = "            "
    src_i = ("x0", "x1", "id", "ih", "iw")
    lines.append(f"{ind}const __global {_STORE_T[p.src_dt]} *row = src + s_nc + "
                 f"{_offset(p.src_layout, src_i, (2, 3))};")
    qs = {}
    for kw in range(KW):
        q, rem = divmod(kw * (D + 1) - P, S)
        if q not in qs:
            qs[q] = f"w{len(qs)}"
            lines.append(f"{ind}const {_STORE_T[p.src_dt]}{S} {qs[q]} = vload{S}(l0 + ({q}), "
                         f"row);")
        v = f"{ld[p.src_dt]}({qs[q]}.s{rem:x})"
        if p.alg == "max":
            lines += [f"{ind}{{ const float v = {v};",
                      f"{ind}  const bool win = v > acc;",
                      f"{ind}  acc = win ? v : acc;",
                      f"{ind}  arg = win ? (kd * {KH} + kh) * {KW} + {kw} : arg; }}"]
        else:
            lines.append(f"{ind}acc += {v};")
    if p.alg == "avg_np":
        lines.append(f"{ind}cnt += {KW};")
    lines += ["        }", "    }"]
    return lines


def _inner_condition(p: PoolProblem) -> str | None:
    """C condition: the work-item's window lies wholly inside the source along every spatial
    dim that can overhang it (None where none can)."""
    conds = []
    for xv, S, P, D, K, I, O in zip(("x2", "x3", "x4"), p.strides, p.pad_l, p.dilation,
                                    p.kernel, p.src_sp, p.dst_sp):
        ext = (K - 1) * (D + 1) + 1
        if P > 0:
            conds.append(f"(int){xv} * {S} >= {P}")
        if is_var(O) or is_var(I) or (O - 1) * S - P + ext > I:
            conds.append(f"(int){xv} * {S} - {P} + {ext} <= {I}")
    return " && ".join(conds) or None


def _taps(p: PoolProblem, ld: dict, src_i: tuple, checked: bool) -> list[str]:
    """The forward's window loop; ``checked``: every load clamped inside the source and the
    padding masked by a select (no conditional loads: nchw 32x2048x7x7 global average pooling
    measured 1.7 ms this way against 3.2-12 ms with loads under the condition, Intel's CPU
    runtime), else plain loads (a window known to lie inside)."""
    KD, KH, KW = p.kernel
    body = []
    hoist = not checked and bool(free_vars(p.src_layout))
    if hoist:
        # run-time strides: the window's first tap once, each tap a uniform offset from it
        # (the taps' ``(x * S - P + k) * stride`` with a run-time stride is not distributed
        # by the compiler, so each tap's address would be a per-lane multiply-add)
        first = {d: f"((int){xv} * {S} - {P})" for d, xv, S, P in
                 zip((2, 3, 4), ("x2", "x3", "x4"), p.strides, p.pad_l)}
        body.append(f"    const __global {_STORE_T[p.src_dt]} *sb = src + s_nc + "
                    f"{_offset(p.src_layout, first, (2, 3, 4))};")
    for depth, (a, xv, S, P, D, I) in enumerate(zip("dhw", ("x2", "x3", "x4"), p.strides,
                                                     p.pad_l, p.dilation, p.src_sp)):
        ind = "    " * (depth + 1)
        body += [f"{ind}for (int k{a} = 0; k{a} < {p.kernel[depth]}; ++k{a}) {{"]
        if hoist:
            body += [f"{ind}    const int t{a} = k{a} * {D + 1};"]
        elif checked:
            body += [f"{ind}    const int r{a} = (int){xv} * {S} - {P} + k{a} * {D + 1};",
                     f"{ind}    const bool b{a} = r{a} >= 0 && r{a} < {I};",
                     f"{ind}    const int i{a} = clamp(r{a}, 0, {I - 1});"]
        else:
            body += [f"{ind}    const int i{a} = (int){xv} * {S} - {P} + k{a} * {D + 1};"]
    load = (f"{ld[p.src_dt]}(sb[{_offset(p.src_layout, ('', '', 'td', 'th', 'tw'), (2, 3, 4))}])"
            if hoist else
            f"{ld[p.src_dt]}(src[s_nc + {_offset(p.src_layout, src_i, (2, 3, 4))}])")
    ind = "                "
    if checked:
        body += [f"{ind}const bool inb = bd && bh && bw;",
                 f"{ind}const float u = {load};",
                 f"{ind}const float v = inb ? u : 0.0f;"]
    else:
        body += [f"{ind}const float v = {load};"]
    if p.alg == "max":
        body += [f"{ind}const bool win = {'inb && ' if checked else ''}v > acc;",
                 f"{ind}acc = win ? v : acc;",
                 f"{ind}arg = win ? (kd * {KH} + kh) * {KW} + kw : arg;"]
    else:
        body.append(f"{ind}acc += v;")
        if p.alg == "avg_np":
            body.append(f"{ind}cnt += {'inb' if checked else '1'};")
    body += ["            }", "        }", "    }"]
    return body


def _count_fn(name: str, k: int, s: int, d: int, pl: int) -> str:
    """``name(o, i)``: how many taps of window ``o`` land inside a source of ``i`` along one
    dim."""
    return (f"inline int {name}(int o, int i) {{\n"
            f"    const int start = o * {s} - {pl};\n"
            f"    const int lo = start >= 0 ? 0 : (-start + {d}) / {d + 1};\n"
            f"    if (i - 1 - start < 0) return 0;\n"
            f"    const int hi = min({k - 1}, (i - 1 - start) / {d + 1});\n"
            f"    return max(0, hi - lo + 1);\n"
            f"}}\n")


def _forward(p: PoolProblem, it: str) -> tuple[str, tuple[str, ...]]:
    KD, KH, KW = p.kernel
    ws = p.workspace
    helpers, ld, st = _type_helpers(p.src_dt, p.dst_dt)
    args = [f"__global const {_STORE_T[p.src_dt]} *restrict src",
            f"__global {_STORE_T[p.dst_dt]} *restrict dst"]
    names = ("src", "dst")
    if ws:
        args.append(f"__global {ws} *restrict ws")
        names += ("ws",)
    if po.reads_prior(p.post_ops):
        raise ValueError("pooling kernel: a sum post-op is not implemented (oneDNN's pooling "
                         "takes eltwise and binary ones)")
    for i, op in enumerate(p.post_ops):
        if op[0] == "binary":
            args.append(po.src1_c_arg(i, op))
            names += (po.src1_name(i),)
    ln = lanes_of(p)
    body, split, x = _decompose(p, it, ln)
    body.append(f"    const {it} o_off = {_offset(p.dst_layout, x, split=split)};")
    if ws:
        body.append(f"    const {it} w_off = {_offset(p.ws_layout, x, split=split)};")
    if p.c_iter > p.c:
        body.append(f"    if (x1 >= {p.c}) {{")
        body.append(f"        dst[o_off] = {st[p.dst_dt]}(0.0f);")
        if ws:
            body.append("        ws[w_off] = 0;")
        body.append("        return;")
        body.append("    }")
    src_i = ("x0", "x1", "id", "ih", "iw")
    s_split = {d: v for d, v in split.items() if d < 2}
    body.append(f"    const {it} s_nc = {_offset(p.src_layout, src_i, (0, 1), s_split)};")
    if p.alg == "max":
        body += ["    float acc = -FLT_MAX;", "    int arg = 0;"]
    else:
        body += ["    float acc = 0.0f;"]
        if p.alg == "avg_np":
            body.append("    int cnt = 0;")
    if p.part == "interior":
        body += _forward_interior_taps(p, ld)
    else:
        inner = _inner_condition(p) if ln.dim < 2 or not p.axes else None
        if inner:
            # lanes along N or C: every work-item of a row shares the window, so a window
            # wholly inside the source takes taps with no clamps and no masks (a branch
            # uniform across the SIMD lanes)
            body.append(f"    if ({inner}) {{")
            body += _taps(p, ld, src_i, checked=False)
            body.append("    } else {")
            body += _taps(p, ld, src_i, checked=True)
            body.append("    }")
        else:
            body += _taps(p, ld, src_i, checked=True)
    if p.alg == "avg_p":
        body.append(f"    acc = acc / {float(KD * KH * KW)!r}f;")
    elif p.alg == "avg_np":
        body.append("    acc = acc / (float)cnt;")
    value = po.apply_c("acc", p.post_ops,
                       lambda i, op: f"{po.src1_name(i)}[{_offset(op[2], x, split=split)}]")
    body.append(f"    dst[o_off] = {st[p.dst_dt]}({value});")
    if ws:
        body.append(f"    ws[w_off] = ({ws})arg;")
    # the chain's helpers, less the loaders the tensors' types brought already
    src = (helpers + "".join(h[1] + "\n" for h in po.helpers(p.post_ops) if h[1] not in helpers)
           + f"__kernel void pydnnl_pool_fwd({', '.join(args)})\n{{\n"
           + "\n".join(body) + "\n}\n")
    return src, names


def _backward(p: PoolProblem, it: str) -> tuple[str, tuple[str, ...]]:
    KD, KH, KW = p.kernel
    helpers, ld, st = _type_helpers(p.dst_dt, p.src_dt)
    args = [f"__global const {_STORE_T[p.dst_dt]} *restrict diff_dst",
            f"__global {_STORE_T[p.src_dt]} *restrict diff_src"]
    names = ("diff_dst", "diff_src")
    if p.alg == "max":
        args.append(f"__global const {p.workspace} *restrict ws")
        names += ("ws",)
    if p.alg == "avg_np":
        for name, k, s, d, pl in zip(("cnt_d", "cnt_h", "cnt_w"), p.kernel, p.strides,
                                     p.dilation, p.pad_l):
            helpers += _count_fn(name, k, s, d, pl)
    ln = lanes_of(p)
    body, split, x = _decompose(p, it, ln)
    o = ["x0", "x1", "od", "oh", "ow"]
    o_split = {d: v for d, v in split.items() if d < 2}
    body.append(f"    const {it} g_nc = {_offset(p.dst_layout, o, (0, 1), o_split)};")
    if p.alg == "max":
        body.append(f"    const {it} w_nc = {_offset(p.ws_layout, o, (0, 1), o_split)};")
    g_sp = _offset(p.dst_layout, o, (2, 3, 4))
    w_sp = _offset(p.ws_layout, o, (2, 3, 4)) if p.alg == "max" else ""
    lane_sp = ln.dim if ln.dim >= 2 and p.axes else None
    store = st[p.src_dt]
    # a work-item's ``vec`` consecutive elements stored as one vector (consecutive work-items'
    # stores then adjacent, not strided scatters)
    vstore = (lane_sp is not None and ln.vec in _VLOAD and p.c_iter == p.c
              and not _lane_guard(p, ln) and p.src_layout[1][lane_sp][:1] == (1,)
              and p.src_layout[1][lane_sp][1:] == (1, ()))
    if vstore:
        body += [f"    float res{r};" for r in range(ln.vec)]
    # per dim, the windows o covering x: x = o*S - P + k*(D+1) for some k < K; at most
    # ceil(extent / S) of them, the highest o = (x + P) / S first
    for r in range(ln.vec):
        lines = []
        if lane_sp is not None:
            lines.append(f"    {{ const {it} x{lane_sp} = l0 * {ln.vec} + {r};")
            if _lane_guard(p, ln):
                lines.append(f"    if (x{lane_sp} < {ln.size}) {{")
            else:
                lines.append("    {")
        else:
            lines.append("    { {")
        o_off = _offset(p.src_layout, x, split=split)
        if p.c_iter > p.c:
            lines.append(f"    if (x1 >= {p.c}) diff_src[{o_off}] = {store}(0.0f); else {{")
        else:
            lines.append("    {")
        lines.append("    float acc = 0.0f;")
        conds = []
        closers = []
        for depth, (a, P, K, S, D, O) in enumerate(zip(
                "dhw", p.pad_l, p.kernel, p.strides, p.dilation, p.dst_sp)):
            ind = "    " * (depth + 1)
            dim = depth + 2
            ext = (K - 1) * (D + 1) + 1
            nw = -(-ext // S) if is_var(O) else min(-(-ext // S), O)
            cands = _lane_cands(p, r) if dim == lane_sp else None
            if cands is not None:
                # the lane's element is x = l0 * S + r: its windows are l0 + const, at
                # taps that are constants
                lines.append(f"{ind}for (int j{a} = 0; j{a} < {len(cands)}; ++j{a}) {{")
                sel_o = "0"
                sel_k = "0"
                for i, (dq, k) in reversed(list(enumerate(cands))):
                    sel_o = f"(j{a} == {i} ? {dq} : {sel_o})"
                    sel_k = f"(j{a} == {i} ? {k} : {sel_k})"
                lines.append(f"{ind}    const int o{a} = l0 + {sel_o};")
                lines.append(f"{ind}    const int k{a} = {sel_k};")
                if p.part != "interior":  # interior lanes: every window inside diff_dst
                    conds.append(f"o{a} >= 0 && o{a} < {O}")
            else:  # a uniform index, or a lane's with fewer windows than candidates
                xv = f"(int)x{dim}"
                lines += [f"{ind}const int h{a} = min(({xv} + {P}) / {S}, {O - 1});",
                          f"{ind}for (int j{a} = 0; j{a} < {nw}; ++j{a}) {{",
                          f"{ind}    const int o{a} = h{a} - j{a};",
                          f"{ind}    const int t{a} = {xv} + {P} - o{a} * {S};",
                          f"{ind}    if (o{a} < 0 || t{a} >= {ext}) break;"]
                if D:
                    lines.append(f"{ind}    if (t{a} % {D + 1}) continue;")
                lines.append(f"{ind}    const int k{a} = t{a} / {D + 1};")
            closers.append(f"{ind}}}")
        ok = " && ".join(conds) or "true"
        ind = "                "
        lines.append(f"{ind}const bool ok = {ok};")
        lines.append(f"{ind}const float g = ok ? {ld[p.dst_dt]}(diff_dst[g_nc + {g_sp}]) "
                     f": 0.0f;")
        if p.alg == "max":
            lines += [f"{ind}const int w = ok ? (int)ws[w_nc + {w_sp}] : -1;",
                      f"{ind}acc += w == (kd * {KH} + kh) * {KW} + kw ? g : 0.0f;"]
        elif p.alg == "avg_p":
            lines.append(f"{ind}acc += g;")
        else:
            cnt = " * ".join(f"cnt_{a}(o{a}, {i})" for a, i in zip("dhw", p.src_sp))
            lines.append(f"{ind}acc += ok ? g / (float)({cnt}) : 0.0f;")
        lines += closers[::-1]
        if p.alg == "avg_p":
            lines.append(f"    acc = acc / {float(KD * KH * KW)!r}f;")
        if vstore:
            lines.append(f"    res{r} = acc;")
        else:
            lines.append(f"    diff_src[{o_off}] = {store}(acc);")
        lines.append("    } } }")
        body += lines
    if vstore:
        V = ln.vec
        vals = ", ".join(f"{store}(res{r})" for r in range(V))
        body += [f"    {{ const {it} x{lane_sp} = l0 * {V};",
                 f"      vstore{V}(({_STORE_T[p.src_dt]}{V})({vals}), 0, diff_src + "
                 f"{_offset(p.src_layout, x, split=split)}); }}"]
    src = (helpers + f"__kernel void pydnnl_pool_bwd({', '.join(args)})\n{{\n"
           + "\n".join(body) + "\n}\n")
    return src, names


def build_pooling(p: PoolProblem) -> KernelSource:
    """The kernel for ``p``: ``pydnnl_pool_fwd(src, dst[, ws])`` or ``pydnnl_pool_bwd(diff_dst,
    diff_src[, ws])`` over a 2-D range (see :class:`Lanes`)."""
    if p.alg not in ALGS or p.direction not in ("fwd", "bwd"):
        raise ValueError(f"pooling kernel: bad alg {p.alg!r} or direction {p.direction!r}")
    if p.post_ops and p.direction != "fwd":
        raise ValueError("pooling kernel: post-ops are forward only")
    it = "long" if p.wide else "int"
    src, names = (_forward if p.direction == "fwd" else _backward)(p, it)
    name = "pydnnl_pool_fwd" if p.direction == "fwd" else "pydnnl_pool_bwd"
    sizes = free_vars(p)
    if sizes:  # the size arguments first, then the reciprocals of the run-time divisors
        magic = _magic_divisors(p)
        decl = [f"const int {n}" for n in sizes]
        decl += [f"const {t} {n}_{x}" for n in magic for t, x in (("ulong", "m"), ("int", "sh"))]
        src = src.replace(f"void {name}(", f"void {name}(" + ", ".join(decl) + ", ", 1)
        names = tuple(d.split()[-1] for d in decl) + names
    ln = lanes_of(p)
    count = lane_count(p)
    l0, l1 = p.local
    if is_var(count) or is_var(ln.rest):
        if not l0:
            raise ValueError("pooling kernel: run-time sizes need a fixed work-group shape")
        grid = (str(-(-count // l0) * l0) if isinstance(count, int)
                else f"(({count}) + {l0 - 1}) // {l0} * {l0}",
                str(ln.rest) if p.rt_rest is not None else str(-(-ln.rest // l1) * l1))
        return KernelSource(name, src, None, (l0, l1), names, grid=grid)
    if l0:
        gsize = (-(-count // l0) * l0, -(-ln.rest // l1) * l1)
        return KernelSource(name, src, gsize, (l0, l1), names)
    return KernelSource(name, src, (count, ln.rest), None, names)


def runtime_form(p: PoolProblem, keep_lane_dim: bool,
                 spatial: bool = True) -> tuple[PoolProblem, dict] | None:
    """``(problem, values)``: ``p`` (a problem of plain layouts) with the minibatch, the
    spatial sizes other than 1 and every stride that grows with them as size variables, and
    the range's lane count, row count and interior end as variables too; ``values`` binds
    them. ``keep_lane_dim``: a spatial dim the lanes run along stays baked (with every stride
    it enters), for a work-group shape cut to it; ``spatial`` false: only the minibatch (the
    strides then all baked). None (baked) for blocked layouts, padded
    channels, a backward whose lanes walk their own window range (fewer windows than
    candidates: global pooling) and a minibatch of 1 that would move the lanes."""
    lays = [p.src_layout, p.dst_layout] + ([p.ws_layout] if p.ws_layout is not None else [])
    lays += [op[2] for op in p.post_ops if op[0] == "binary"]
    if (p.c_iter != p.c or not p.axes
            or any(blk > 1 or inner for lay in lays for blk, _s, inner in lay[1])):
        return None
    ln = lanes_of(p)
    if (p.direction == "bwd" and ln.dim >= 2
            and any(_lane_cands(p, r) is None for r in range(ln.vec))):
        return None
    values: dict = {}

    def var(name: str, v: int):
        values[name] = int(v)
        return size_var(name)

    n = var("pool_n", p.n)
    # src and dst of one shape and strides (stride 1, "same" padding): one set of size and
    # stride arguments for both, so the compiler shares their index arithmetic as it does
    # the baked kernel's (nhwc avg 3x3/1 mb32ic64ih56 forward, Intel's runtime, same
    # process: arguments of their own 1.08x the baked time)
    same = p.src_sp == p.dst_sp and p.src_layout[1] == p.dst_layout[1]
    src_sp, dst_sp = list(p.src_sp), list(p.dst_sp)
    src_rt, dst_rt = {0}, {0}
    for j, a in enumerate("dhw"):
        if not spatial or (keep_lane_dim and ln.dim == j + 2):
            continue
        if p.src_sp[j] != 1:
            src_sp[j] = var(f"pool_i{a}", p.src_sp[j])
            src_rt.add(j + 2)
        if p.dst_sp[j] != 1:
            dst_sp[j] = src_sp[j] if same else var(f"pool_o{a}", p.dst_sp[j])
            dst_rt.add(j + 2)
    fwd = p.direction == "fwd"
    out_rt = dst_rt if fwd else src_rt
    out_dims = (p.n, p.c_iter) + tuple(p.dst_sp if fwd else p.src_sp)
    sym = (n, p.c_iter) + tuple(dst_sp if fwd else src_sp)
    # the walk's order with every run-time dim present (a minibatch of 1 is an axis too)
    axes = iteration_axes(p.dst_layout if fwd else p.src_layout,
                          tuple(max(2, v) if d in out_rt else v for d, v in enumerate(out_dims)))
    if axes[0][0] != p.axes[0][0]:
        return None
    cq = replace(p, axes=tuple((d, out_dims[d], m) for d, _s, m in axes))
    ln = lanes_of(cq)

    def strides(lay: tuple, rt: set, dims: tuple, t: str) -> tuple:
        # a stride grows with the run-time sizes where a run-time dim lies inside it; it is
        # then an argument times the extent of the baked dims inside it (nchw's width, nhwc's
        # channels), so the compiler still knows the rows' alignment (nchw max backward 3x3/2
        # mb32ic64ih112, Intel's runtime: plain argument strides 1.12-1.16x the baked time)
        off, per_dim = lay
        grows = [s not in (0, 1) and any(e in rt and 0 < per_dim[e][1] < s
                                         for e in range(5) if e != d)
                 for d, (_b, s, _i) in enumerate(per_dim)]
        out = []
        for d, (blk, s, inner) in enumerate(per_dim):
            if not grows[d]:
                out.append((blk, s, inner))
                continue
            f = max([per_dim[e][1] * dims[e] for e in range(5) if e not in rt and e != d
                     and not grows[e] and 0 < per_dim[e][1] < s
                     and s % (per_dim[e][1] * dims[e]) == 0], default=1)
            out.append((blk, var(f"pool_{t}{d}", s // f) * f if f > 1
                        else var(f"pool_{t}{d}", s), inner))
        return (off, tuple(out))

    full = (p.n, p.c)
    src_lay = strides(p.src_layout, src_rt, full + p.src_sp, "s")
    dst_lay = ((p.dst_layout[0], src_lay[1]) if same
               else strides(p.dst_layout, dst_rt, full + p.dst_sp, "g"))

    def like_dst(lay: tuple, t: str) -> tuple:
        # a tensor strided as dst (the workspace, a full-size binary operand) takes dst's
        # stride arguments: the compiler then shares their addresses (nhwc max backward
        # 3x3/2 mb32ic64ih112, Intel's runtime, same process: a stride argument of its own
        # for the workspace 1.06-1.07x the baked time, dst's 0.99-1.04x)
        if lay[1] == p.dst_layout[1]:
            return (lay[0], dst_lay[1])
        return strides(lay, dst_rt, full + p.dst_sp, t)

    q = replace(p, n=n, src_sp=tuple(src_sp), dst_sp=tuple(dst_sp),
                src_layout=src_lay, dst_layout=dst_lay,
                ws_layout=None if p.ws_layout is None else like_dst(p.ws_layout, "w"),
                post_ops=tuple(
                    ("binary", op[1], like_dst(op[2], f"p{i}_"), op[3], op[4])
                    if op[0] == "binary" else op
                    for i, op in enumerate(p.post_ops)),
                axes=tuple((d, sym[d] if d in out_rt else size, m) for d, size, m in axes))
    d0 = axes[0][0]
    if d0 in out_rt:
        q = replace(q, rt_count=var("pool_lanes", ln.count), lane_exact=ln.size % ln.vec == 0)
    if any(d in out_rt for d, _s, _m in axes[1:]):
        q = replace(q, rt_rest=var("pool_nrows", ln.rest), rt_r0=var("pool_r0", 0))
    if p.part != "all" and d0 in out_rt:
        q = replace(q, rt_hi=var("pool_hi", interior_lanes(cq)[1]))
    for name in _magic_divisors(q):
        values.update(magic_values(name, values[name]))
    return q, values


def _magic_divisors(p: PoolProblem) -> list[str]:
    """The size variables the row index is divided by (every run-time axis of the rows but
    the outermost), where it is a 32-bit int: they come with their reciprocals."""
    if p.wide or p.rt_rest is None:
        return []
    return [str(size) for _d, size, _m in p.axes[1:-1] if is_var(size)]


def magic_values(name: str, d: int) -> dict:
    """``{name_m, name_sh}``: ``t / d == (t * m) >> sh`` for every ``0 <= t < 2**31``
    (``m = ceil(2**sh / d)``, ``sh = 31 + ceil(log2 d)``: the error ``t * (m*d - 2**sh) /
    2**sh`` stays below 1)."""
    sh = 31 + max(0, (d - 1).bit_length())
    return {f"{name}_m": -(-(1 << sh) // d), f"{name}_sh": sh}


def image_rows(q: PoolProblem) -> int | None:
    """The rows of one index of the outermost axis (one image) of run-time problem ``q``,
    where that axis is the only run-time one of the rows (every row count is then a multiple
    of it), else None."""
    rest = q.axes[1:]
    if not rest or any(is_var(size) for _d, size, _m in rest[:-1]):
        return None
    n = 1
    for _d, size, _m in rest[:-1]:
        n *= size
    return n


def row_launches(q: PoolProblem, values: dict) -> list[dict]:
    """The size values of each launch of run-time problem ``q`` at ``values``: a run-time
    row count runs as the whole work-groups of rows from row 0, then (where rows are left)
    one more group of rows ending at the last row, which recomputes a few rows of the first
    launch (every output element is a function of the inputs alone, so rewriting it is
    harmless; the kernels then need no bounds check on the rows, which cost the CPU
    forward 8%: nhwc max 3x3/2 mb32ic64ih112, Intel's runtime, same process)."""
    if q.rt_r0 is None:
        return [values]
    rows, l1 = values["pool_nrows"], q.local[1]
    whole = rows // l1 * l1
    out = [{**values, "pool_r0": 0, "pool_nrows": whole}] if whole else []
    if rows > whole:
        out.append({**values, "pool_r0": rows - l1, "pool_nrows": l1})
    return out


def concrete_range(q: PoolProblem, values: dict) -> tuple[int, int]:
    """(lanes, rows) of the range of run-time problem ``q`` at ``values``."""
    from pymbolic import evaluate

    return tuple(int(evaluate(v, values)) if is_var(v) else int(v)
                 for v in (lane_count(q), lanes_of(q).rest))
