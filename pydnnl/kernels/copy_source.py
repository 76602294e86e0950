"""OpenCL source of small copy and reduction kernels, written without loopy.

A first-ever creation of an im2col + GEMM backward-weights plan on a CPU generated an im2col
copy, the GEMM's B packer, the per-channel slice sums and the bias gradient with loopy
(ResNet-50's res2a_branch2c at mb 1 on the 2-core Xeon: loopy's import 0.13-0.17 s, then
0.05-0.3 s of code generation per kernel; the bias gradient alone 0.26-0.3 s). The printers
here write those kernels for the forms the CPU plans use, as :class:`KernelSource` with the
same kernel name, argument names and order, work-group size and launch grid as loopy's, and the
same arithmetic (the same values summed in the same order); the index arithmetic is written
directly, so the text differs from loopy's, and ``tests/kernels/test_copy_source.py`` runs
both on random data and compares. Each printer returns None where it does not cover a problem
(the caller then uses loopy):

* :func:`im2col_source`: the channel-block copy with run-time sizes
  (``Im2ColProblem.ic_block`` and :func:`~pydnnl.kernels.conv_im2col.im2col_runtime`: channels
  innermost in the source, the output width innermost in the column), two spatial dims.
* :func:`im2col_baked_source`: the baked-size copy without channel blocks, plain source
  layouts (the implicit-GEMM zero-padding copy of an image of fewer than 16 channels:
  ResNet-50's conv1 forward).
* :func:`bias_grad_source`: the run-time-size bias gradient
  (:func:`~pydnnl.kernels.conv_im2col.bias_grad_runtime`), work-groups of 16-256 lanes.
* :func:`channel_slices_source`: :func:`~pydnnl.kernels.channel_sums.build_channel_slices`.
* :func:`col2im_source`: col2im (:class:`~pydnnl.kernels.conv_im2col.Col2ImProblem`), baked
  or run-time sizes, bias, sum and eltwise post-ops (ResNet-50's conv1 backward data: loopy
  spent 89 ms on it at a first-ever creation).
* :func:`im2col_rt_source`: the run-time-size im2col without channel blocks (a channels-first
  or wide channels-last source's column).
* :func:`splitk_reduce_source`: the split-k GEMM's reduction of its slices (im2col backward
  weights: 5 loopy generations, 0.27 s, over ResNet-50's first-ever creations at mb 1).
* :func:`pack_b_source`: the register-tile GEMM's packers with run-time offsets (float32):
  one B (not transposed) with a run-time k (:meth:`pydnnl.runtime.gemm.Gemm.activation_packer`)
  and one or more B of a compile-time k (:meth:`~pydnnl.runtime.gemm.Gemm.packer`).
"""
from __future__ import annotations

import re

from .printing import c_size as _name
from .printing import float_ptr as _ptr
from .printing import indent, peeled
from .printing import kernel_head as _head
from .printing import plain_layout as _plain
from .printing import size_vars_of as _vars_of
from .sizevars import is_var as _is_var
from .source import KernelSource

_PRELUDE = ("#define lid(N) ((long) get_local_id(N))\n"
            "#define gid(N) ((long) get_group_id(N))\n")
_CLAMP = ("static inline long pd_clamp_rt(long x, long hi) { x = x > hi ? hi : x; "
          "return x < 0 ? 0 : x; }\n")
_CLAMP_I = ("static inline int pd_clamp_i(int x, int hi) { x = x > hi ? hi : x; "
            "return x < 0 ? 0 : x; }\n")


def _simple(x) -> bool:
    """An int or a single size variable (no expression)."""
    from pymbolic.primitives import Variable

    return isinstance(x, Variable) or (not _is_var(x) and isinstance(x, int))


def _offset(plain, idx) -> str:
    """C of the storage offset of index ``idx`` (C strings) in a plain layout."""
    off0, strides = plain
    terms = []
    for e, st in zip(idx, strides):
        if not _is_var(st) and st == 0:
            continue
        terms.append(f"({e})" if not _is_var(st) and st == 1 else f"({e}) * {_name(st)}")
    if _is_var(off0) or off0:
        terms.append(_name(off0))
    return " + ".join(terms) if terms else "0"


# {{{ im2col, channel blocks, run-time sizes

def _guarded(pos: list, p, sizes: list, lasts: list,
             clamp: str = "pd_clamp_rt") -> tuple[list, list]:
    """The bound tests of im2col's source positions ``pos`` (only the sides a tap may cross)
    and the positions clamped into the image (``sizes`` and ``lasts`` as C) by ``clamp``,
    which the copy loads before it selects."""
    from .conv_im2col import _im2col_guards

    conds, clamped = [], []
    for e, (lo, hi), n, last in zip(pos, _im2col_guards(p), sizes, lasts):
        if lo:
            conds.append(f"{e} >= 0")
        if hi:
            conds.append(f"{e} < {n}")
        clamped.append(f"{clamp}({e}, {last})" if lo or hi else e)
    return conds, clamped


def im2col_source(p) -> KernelSource | None:
    """The run-time-size channel-block im2col (``conv_im2col._ic_block_rt``) of ``p`` (an
    ``Im2ColProblem``), or None: work-items along the output width (``a0``, guarded), the
    output height on group axis 1, images, groups, channel blocks and taps on axis 2 (images
    outermost), each work-item copying ``ic_block`` channels of one point."""
    from .conv_im2col import _is_runtime

    nsp = len(p.kernel)
    B = p.ic_block
    if not B or nsp != 2 or not _is_runtime(p) or p.icg % B:
        return None
    src = _plain(p.src)
    if src is None or not all(_simple(x) for x in (*src[1], src[0], p.nb, *p.src_sp,
                                                   *p.dst_sp)):
        return None
    if sorted(p.order) != list(range(3 + 2 * nsp)):
        return None
    wg = int(p.wg)
    G, ICg = int(p.groups), int(p.icg)
    outer = [p.nb, G, ICg // B, *p.kernel]
    const = 1
    for v in outer[1:]:
        const *= int(v)
    if _is_var(outer[0]):
        a2 = f"({outer[0]}) * 1" if const == 1 else f"({const}*{outer[0]}) * 1"
    else:
        return None
    # hoisted indices of axis 2 (images outermost, no remainder)
    names = ["gi%d" % i for i in range(len(outer))]
    lines = []
    inner = 1
    exprs = []
    for d in range(len(outer) - 1, -1, -1):
        e = "gid(2)" if inner == 1 else f"gid(2) / {inner}"
        if d > 0:
            e = f"({e}) % {int(outer[d])}"
        exprs.append(e)
        if d > 0:
            inner *= int(outer[d])
    exprs.reverse()
    for nm, e in zip(names, exprs):
        lines.append(f"    long const {nm} = {e};\n")
    n, g, icb, k0, k1 = names
    o = ["gid(1)", f"(lid(0) + gid(0) * {wg})"]
    k = [k0, k1]
    pos = [f"{o[i]} * {int(p.strides[i])} - {int(p.padding_l[i])} + {k[i]} * "
           f"{int(p.dilates[i]) + 1}" for i in range(nsp)]
    conds, clamped = _guarded(pos, p, [_name(n_) for n_ in p.src_sp],
                              [f"{_name(n_)} + -1" for n_ in p.src_sp])
    ic = f"{icb} * {B} + ici"
    at = _offset(src, [f"n0 + {n}", f"{g} * {ICg} + {ic}", *clamped])
    # the column's strides: the product of the sizes of the dims inside, in ``order``
    sizes = [p.nb, G, ICg, *p.kernel, *p.dst_sp]
    logical = [n, g, ic, *k, *o]
    strides = [None] * len(sizes)
    st: list = []
    for d in reversed(p.order):
        strides[d] = " * ".join(st) if st else "1"
        if not (not _is_var(sizes[d]) and int(sizes[d]) == 1):
            st = [_name(sizes[d])] + st
    flat = " + ".join(f"({e}) * {s}" if s != "1" else f"({e})"
                      for e, s in zip(logical, strides))
    store = f"col[col_off + {flat}]"
    if conds:
        body = (f"      float const v = src[{at}];\n"
                f"      {store} = (({' && '.join(conds)}) ? v : 0.0f);\n")
    else:
        body = f"      {store} = src[{at}];\n"
    os1 = _name(p.dst_sp[-1])
    vnames = sorted(_vars_of(p.nb, p.src_sp, p.dst_sp, p.src) - {"n0", "col_off"})
    params = [_ptr("src", True), _ptr("col", False), "long const n0", "long const col_off",
              *[f"long const {v}" for v in vnames]]
    text = (_PRELUDE + _CLAMP + "\n" + _head("pydnnl_conv_im2col", (wg, 1, 1), params)
            + f"  if (lid(0) + gid(0) * {wg} < {os1})\n  {{\n" + "".join(lines)
            + f"    for (long ici = 0; ici <= {B - 1}; ++ici)\n    {{\n" + body
            + "    }\n  }\n}")
    grid = (f"(({wg - 1} + {os1}) // {wg}) * {wg}", f"({_name(p.dst_sp[-2])}) * 1", a2)
    return KernelSource("pydnnl_conv_im2col", text, None, (wg, 1, 1),
                        ("src", "col", "n0", "col_off", *vnames), grid=grid)

# }}}


# {{{ im2col, baked sizes

def _prod(xs) -> int:
    out = 1
    for x in xs:
        out *= int(x)
    return out


def _c(e) -> str:
    """C of a pymbolic index expression over non-negative values (floor division as C's)."""
    return str(e).replace("//", "/")


def im2col_baked_source(p) -> KernelSource | None:
    """The baked-size im2col without channel blocks (``conv_im2col.build_im2col_loopy``'s
    :func:`~pydnnl.kernels.conv_common.grid` launch: the column's innermost dims flattened
    onto work-item axis 0 until they have ``lanes`` elements, loops inside a work-item over
    the dims before them up to ``per_item`` elements, then group axes 1 and 2), or None. The
    partial last work-group of axis 0 gets code of its own guarded by the local id alone, as
    loopy's peeled slab (Intel's compiler drops a loop-free kernel's guard of a constant
    size otherwise: see ``conv_common.split_fast``)."""
    from pymbolic import var

    from .conv_common import grid
    from .conv_im2col import _is_runtime, _units_first

    nsp = len(p.kernel)
    if p.ic_block or _is_runtime(p) or sorted(p.order) != list(range(3 + 2 * nsp)):
        return None
    src = _plain(p.src)
    if src is None or not all(isinstance(x, int) for x in (src[0], *src[1])):
        return None
    sizes = [int(v) for v in (p.nb, p.groups, p.icg, *p.kernel, *p.dst_sp)]
    order = _units_first(p.order, sizes)
    ordered = [sizes[d] for d in order]
    ranges, parts = grid(ordered, p.per_item, p.lanes)
    parts = parts[len(parts) - len(ordered):]
    logical = [None] * len(sizes)
    for d, e in zip(order, parts):
        logical[d] = _c(e)
    # the column offset with the lane dims (flattened onto a0, innermost in the column) as
    # a0 itself: loopy prints that affine form (a0's divisions and remainders left in, the
    # pad copy of conv1 ran 1.2x slower)
    lane_dims = [ordered.pop()]
    while ordered and _prod(lane_dims) < p.lanes:
        lane_dims.insert(0, ordered.pop())
    nl = len(lane_dims)
    flat = 0
    for e, n in zip(parts[:len(parts) - nl], ordered):
        flat = flat * n + e
    flat = flat * _prod(lane_dims) + var("a0")
    n_, g, ic = logical[:3]
    k = logical[3:3 + nsp]
    o = logical[3 + nsp:]
    pos = [f"({o[i]}) * {int(p.strides[i])} + {-int(p.padding_l[i])} + ({k[i]}) * "
           f"{int(p.dilates[i]) + 1}" for i in range(nsp)]
    # 32-bit indices (``index32``): the divisions by the column's constant extents cost a
    # GPU a multiply-high each, emulated in 64 bits; n0 and col_off stay 64-bit
    it = "int" if p.index32 else "long"
    conds, clamped = _guarded(pos, p, [str(int(sz)) for sz in p.src_sp],
                              [str(int(sz) - 1) for sz in p.src_sp],
                              "pd_clamp_i" if p.index32 else "pd_clamp_rt")
    at = _offset(src, [f"n0 + {n_}", f"({g}) * {int(p.icg)} + {ic}", *clamped])
    store = f"col[col_off + {_c(flat)}]"
    A0 = int(ranges["a0"])
    W = max(1, min(int(p.wg), A0))
    loops = [nm for nm in ranges if nm.startswith("s")]
    ind = ""
    body = []
    for nm in loops:
        body.append(f"{ind}for ({it} {nm} = 0; {nm} < {int(ranges[nm])}; ++{nm})\n")
        ind += "  "
    body.append(f"{ind}{{\n")
    if conds:
        body.append(f"{ind}  float const v = src[{at}];\n"
                    f"{ind}  {store} = (({' && '.join(conds)}) ? v : 0.0f);\n")
    else:
        body.append(f"{ind}  {store} = src[{at}];\n")
    body.append(f"{ind}}}\n")
    body = "".join(body)
    A1, R = int(ranges["a1"]), max(1, min(int(p.rows_per_item), int(ranges["a1"])))
    if p.index32:
        heads = (f"int const a0 = (int) get_local_id(0) + (int) get_group_id(0) * {W};\n"
                 "int const a2 = (int) get_group_id(2);\n")
        row = "(int) get_group_id(1)"
    else:
        heads = "long const a0 = lid(0) + gid(0) * %d;\n" % W
        row = "gid(1)"
    if R > 1:  # R values of axis 1 per work-item (a GPU's work-group per few copies idles)
        guard = f"if (a1 < {A1})\n" if A1 % R else ""
        body = (f"for ({it} r = 0; r < {R}; ++r)\n{{\n"
                + indent(f"{it} const a1 = {row} * {R} + r;\n" + guard
                         + (indent(body) if guard else body)) + "}\n")
    else:
        heads += f"{it} const a1 = {row};\n"
    if not p.index32:
        heads += "long const a2 = gid(2);\n"
    code = indent(peeled(heads + body, A0, W))
    params = [_ptr("src", True), _ptr("col", False), "long const n0", "long const col_off"]
    clamp = _CLAMP_I if p.index32 else _CLAMP
    text = (_PRELUDE + clamp + "\n" + _head("pydnnl_conv_im2col", (W, 1, 1), params)
            + code + "}")
    return KernelSource("pydnnl_conv_im2col", text,
                        (-(-A0 // W) * W, -(-A1 // R), int(ranges["a2"])), (W, 1, 1),
                        ("src", "col", "n0", "col_off"))

# }}}


# {{{ bias gradient, run-time sizes

_BG_UNROLL = 4


def bias_grad_source(p) -> KernelSource | None:
    """The run-time-size bias gradient (``conv_im2col._build_bias_grad_rt``) of ``p`` (a
    ``BiasGradProblem`` from ``bias_grad_runtime``), or None: per channel one work-group of
    ``wg`` lanes; per image, whole chunks of ``4 * wg`` points into four partial sums per
    lane, then a guarded tail, then the lanes' sums added as loopy's tree does."""
    L, U = int(p.wg), _BG_UNROLL
    if L not in (16, 32, 64, 128, 256) or len(p.sp) != 1 or not _is_var(p.mb) \
            or not _is_var(p.sp[0]) or p.t_n != -1:
        return None
    t, bias = _plain(p.t), _plain(p.bias)
    if t is None or bias is None or len(t[1]) != 3 or len(bias[1]) != 1 \
            or _vars_of(p.bias) or not all(_simple(x) for x in (t[0], *t[1])):
        return None
    C = int(p.channels)
    P = _name(p.sp[0])
    mb = _name(p.mb)

    def at(nn: str, pt: str) -> str:
        return "t[" + _offset(t, [nn, "gid(0)", pt]) + "]"

    full = "".join(
        f"        part[{u}] = part[{u}] + {at('nn', f'(jo * {U} + {u}) * {L} + lid(0)')};\n"
        for u in range(U))
    tail = "".join(
        f"      acc_nt_jr = acc_nt_jr + ((pfull + {r * L} + lid(0) < {P}) ? "
        f"{at('nt', f'pd_clamp_rt(pfull + {r * L} + lid(0), {P} + -1)')} : 0.0f);\n"
        for r in range(U))
    tree = []
    s = L // 2
    while s > 1:
        tree.append("  barrier(CLK_LOCAL_MEM_FENCE);\n"
                    f"  if ({mb} >= 1 && lid(0) < {s})\n"
                    f"    acc_jl[lid(0)] = acc_jl[lid(0)] + acc_jl[{s} + lid(0)];\n")
        s //= 2
    vnames = sorted(_vars_of(p.mb, p.sp, p.t)) + ["pfull"]
    params = [_ptr("t", True), _ptr("bias", False), *[f"long const {v}" for v in vnames]]
    text = (_PRELUDE + _CLAMP + "\n" + _head("pydnnl_conv_bias_grad", (L,), params)
            + f"  __local float acc_jl[{L}];\n"
            + f"  if ({mb} >= 1)\n  {{\n"
            + "    float part[4];\n    float acc_nt_jr = 0.0f;\n"
            + "".join(f"    part[{u}] = 0.0f;\n" for u in range(U))
            + f"    for (long nn = 0; nn < {mb}; ++nn)\n"
            + f"      for (long jo = 0; jo < (pfull + {U * L - 1}) / {U * L}; ++jo)\n"
            + "      {\n" + full
            + "      }\n"
            + f"    for (long nt = 0; nt < {mb}; ++nt)\n    {{\n" + tail + "    }\n"
            + "    acc_jl[lid(0)] = 0.0f + part[0] + part[1] + part[2] + part[3] + acc_nt_jr;\n"
            + "  }\n" + "".join(tree)
            + "  barrier(CLK_LOCAL_MEM_FENCE);\n"
            + f"  if (lid(0) == 0 && {mb} >= 1)\n  {{\n"
            + "    acc_jl[0] = acc_jl[0] + acc_jl[1];\n"
            + f"    bias[{_offset(bias, ['gid(0)'])}] = acc_jl[0];\n  }}\n}}")
    return KernelSource("pydnnl_conv_bias_grad", text, (C * L,), (L,),
                        ("t", "bias", *vnames))

# }}}


# {{{ channel slices

def channel_slices_source(p) -> KernelSource | None:
    """:func:`~pydnnl.kernels.channel_sums.build_channel_slices`'s kernel for ``p`` (a
    ``ChannelSlices``): work-group axis 0 over channel blocks of ``lanes`` work-items, axis
    1 over slices; each work-item sums its channel over the slice's rows in order."""
    from .channel_sums import lanes

    C, rs = int(p.channels), int(p.row_stride)
    W = lanes(C, int(p.wg))
    params = [_ptr("t", True), _ptr("part", False),
              *[f"long const {v}" for v in ("t_off", "part_off", "nrows", "rps", "nslices")]]
    text = (_PRELUDE + _CLAMP + "\n" + _head("pydnnl_channel_slices", (W, 1), params)
            + "  if (rps >= 1)\n  {\n"
            + f"    long const c = gid(0) * {W} + lid(0);\n"
            + "    float acc_i = 0.0f;\n"
            + "    for (long i = 0; i < rps; ++i)\n"
            + "      acc_i = acc_i + ((gid(1) * rps + i < nrows) ? t[t_off + pd_clamp_rt(gid(1) "
            + f"* rps + i, nrows + -1) * {rs} + c] : 0.0f);\n"
            + f"    part[part_off + gid(1) * {C} + c] = acc_i;\n  }}\n}}")
    return KernelSource("pydnnl_channel_slices", text, None, (W, 1),
                        ("t", "part", "t_off", "part_off", "nrows", "rps", "nslices"),
                        grid=(str(C // W * W), "(nslices) * 1"))


def channel_slices_wide_source(p) -> KernelSource:
    """The wide form of the slices' sums (``p.vec`` channels per work-item, ``p.row_lanes``
    work-items per slice along its rows, their sums added in local memory; no loopy
    counterpart): axis 0 over channel groups, axis 1 over slices times row lanes. A float4
    is read aligned where ``t_off`` is a multiple of 4 (the row stride is), else element by
    element."""
    from .channel_sums import lanes

    C, rs, V, L = int(p.channels), int(p.row_stride), int(p.vec), int(p.row_lanes)
    W = lanes(C // V, int(p.wg))
    vt = "float4" if V == 4 else "float"
    params = [_ptr("t", True), _ptr("part", False),
              *[f"long const {v}" for v in ("t_off", "part_off", "nrows", "rps", "nslices")]]
    if V == 4:
        load = ("(al ? *(__global const float4 *)(t + t_off + r * {rs} + c) : "
                "vload4(0, t + t_off + r * {rs} + c))").format(rs=rs)
        store = "vstore4(red[0][lid(0)], 0, part + part_off + s * {C} + c)".format(C=C)
    else:
        load = f"t[t_off + r * {rs} + c]"
        store = f"part[part_off + s * {C} + c] = red[0][lid(0)]"
    lines = [
        f"  __local {vt} red[{L}][{W}];",
        "  long const s = gid(1);",
        f"  long const c = (gid(0) * {W} + lid(0)) * {V};",
        "  int const al = (t_off & 3) == 0;" if V == 4 else "",
        f"  {vt} acc = ({vt})(0.0f);",
        "  long const r0 = s * rps;",
        "  long const r1 = min(r0 + rps, nrows);",
        f"  for (long r = r0 + lid(1); r < r1; r += {L})",
        f"    acc += {load};",
        "  red[lid(1)][lid(0)] = acc;",
    ]
    h = L // 2
    while h >= 1:
        lines += ["  barrier(CLK_LOCAL_MEM_FENCE);",
                  f"  if (lid(1) < {h})",
                  f"    red[lid(1)][lid(0)] += red[lid(1) + {h}][lid(0)];"]
        h //= 2
    lines += ["  if (lid(1) == 0 && s < nslices)", f"    {store};"]
    text = (_PRELUDE + "\n" + _head("pydnnl_channel_slices_wide", (W, L), params)
            + "\n".join(x for x in lines if x) + "\n}\n")
    return KernelSource("pydnnl_channel_slices_wide", text, None, (W, L),
                        ("t", "part", "t_off", "part_off", "nrows", "rps", "nslices"),
                        grid=(str(C // V // W * W), f"(nslices) * {L}"))

# }}}


# {{{ grid launches (col2im, run-time im2col without channel blocks)

def _cc(e) -> str:
    """C of a pymbolic index expression or condition (``//`` as C's ``/``: the operands are
    non-negative, or the result is clamped where it may not be, and a remainder is only
    tested against zero)."""
    from pymbolic.primitives import Comparison, LogicalAnd

    if isinstance(e, LogicalAnd):
        return " && ".join(_cc(c) for c in e.children)
    if isinstance(e, Comparison):
        return f"{_cc(e.left)} {e.operator} {_cc(e.right)}"
    if not _is_var(e):
        return str(int(e))
    return "(" + str(e).replace("//", "/") + ")"


def _clamp_defs(text: str) -> str:
    """The index clamps ``text`` calls."""
    import re

    from .conv_common import clamp_helper

    out = [_CLAMP] if "pd_clamp_rt(" in text else []
    for hi in sorted({int(h) for h in re.findall(r"pd_clamp_idx_(\d+)\(", text)}):
        out.append(clamp_helper(hi)[1] + "\n")
    return "".join(out)


def _grid_split(ranges: dict, per_item: int) -> int:
    """The loop length :func:`~pydnnl.kernels.conv_common.grid_rt` splits a run-time axis-1
    dim by (0: none), from its ranges."""
    work = _prod([ranges[k] for k in ranges if k.startswith("s")])
    if _is_var(ranges["a1"]) and work * 2 <= per_item:
        return per_item // work
    return 0


def _hoist(exprs: list) -> tuple[list, list]:
    """``exprs`` with those that divide the axis-2 group id (and nothing else that varies)
    named ``gi<i>``, and their C declarations: computed once per work-item, as loopy's
    hoisted temporaries."""
    from pymbolic import var
    from pymbolic.mapper.dependency import DependencyMapper

    dep = DependencyMapper(composite_leaves=False)
    out, decls = [], []
    for i, e in enumerate(exprs):
        if _is_var(e) and ("FloorDiv" in repr(e) or "Remainder" in repr(e)):
            names = {v.name for v in dep(e)}
            if "a2" in names and not any(n in ("a0", "a1") or n.startswith("s") and
                                         n[1:].isdigit() for n in names):
                decls.append(f"long const gi{i} = {_cc(e)};")
                out.append(var(f"gi{i}"))
                continue
        out.append(e)
    return out, decls


def _grid_launch(ranges: dict, decls: list, wg: int, per_item: int, body: str,
                 lane_guard: bool) -> tuple[str, tuple, tuple, tuple | None]:
    """The code of a :func:`~pydnnl.kernels.conv_common.grid` or ``grid_rt`` launch as
    loopy tags it, around ``body`` (C statements at indentation 0 over ``a0``, ``a1``,
    ``a2`` and the loops ``s<i>``): axis 0 over ``a0`` in work-groups (a partial last one of
    a constant extent in code of its own guarded by the local id alone, as loopy's peeled
    slab; a run-time extent ``RT_LANES`` wide, its lanes past the end idle unless
    ``lane_guard``, where the body guards them itself), axis 1 over ``a1`` (or over blocks of
    a loop of ``a1``, as ``grid_rt`` splits it), axis 2 over ``a2``; ``decls`` (of
    :func:`_hoist`) first. Returns (code, global size or None, grid or None,
    local size)."""
    from .conv_common import RT_LANES

    A0, A1, A2 = ranges["a0"], ranges["a1"], ranges["a2"]
    split = _grid_split(ranges, per_item)
    if _is_var(A0):
        W = min(int(wg), RT_LANES)
    else:
        W = max(1, min(int(wg), int(A0)))
    # the ids printed in place: declared as variables (``long const a0 = ...``), the same
    # col2im took Intel's compiler twice as long (conv1's: 160 against loopy's 85 ms)
    ids = {"a0": f"(lid(0) + gid(0) * {W})", "a2": "gid(2)",
           "a1": f"(a1_in + gid(1) * {split})" if split else "gid(1)"}
    inner = body
    for nm in reversed([k for k in ranges if k.startswith("s")]):
        inner = (f"for (long {nm} = 0; {nm} < {int(ranges[nm])}; ++{nm})\n{{\n"
                 + indent(inner) + "}\n")
    if split:
        inner = (f"for (long a1_in = 0; a1_in <= min((long) {split - 1}, "
                 f"{_name(A1)} + -1 + -{split} * gid(1)); ++a1_in)\n{{\n"
                 + indent(inner) + "}\n")
    if _is_var(A0):
        code = inner if lane_guard else (f"if (a0 < {_name(A0)})\n{{\n" + indent(inner)
                                         + "}\n")
        g0 = f"(({W - 1} + {_name(A0)}) // {W}) * {W}"
    else:
        code = peeled(inner, int(A0), W) if int(A0) % W else inner
        g0 = -(-int(A0) // W) * W
    code = "".join(x + "\n" for x in decls) + code
    code = indent(re.sub(r"\ba[012]\b", lambda m: ids[m.group(0)], code))
    if split:
        g1 = f"(({split - 1} + {_name(A1)}) // {split}) * 1"
    else:
        g1 = f"({_name(A1)}) * 1" if _is_var(A1) else int(A1)
    g2 = f"({A2}) * 1" if _is_var(A2) else int(A2)
    sizes = (g0, g1, g2)
    if all(isinstance(x, int) for x in sizes):
        return code, sizes, None, (W, 1, 1)
    return code, None, tuple(str(x) for x in sizes), (W, 1, 1)


def col2im_source(p) -> KernelSource | None:
    """``conv_im2col.build_col2im_loopy``'s kernel for ``p`` (a ``Col2ImProblem``), or None
    (binary post-ops, sums with a zero point, no spatial dims): a grid over the written
    tensor in its storage order (run-time sizes: ``p.out_order``), each work-item summing
    the column entries of its point over the taps (first tap dim outermost, as loopy's
    reduction), then bias and post-ops."""
    from pymbolic import var

    from .conv_common import clamp_into, col2im_column, offset
    from .conv_im2col import _is_runtime, _storage_grid
    from .conv_implicit_gemm_source import _chain, _postop_ok

    nsp = len(p.kernel)
    if not nsp or not _postop_ok(p.post_ops) or _is_var(p.out[0]) and not _simple(p.out[0]):
        return None
    if p.bias is not None and _vars_of(p.bias):
        return None
    sizes = [p.nb, p.groups, p.icg, *p.kernel, *p.dst_sp]
    col_strides = [0] * len(sizes)
    st = 1
    for d in reversed(p.order):
        col_strides[d] = st
        st = st * sizes[d]
    out_sizes = [p.nb, p.groups * p.icg, *p.src_sp]
    runtime = _is_runtime(p)
    if runtime and p.out_order is None:
        return None
    ranges, idx, _ = _storage_grid(out_sizes, p.out, p.out_order, p.per_item, p.wg, runtime)
    idx, decls = _hoist(idx) if runtime else (idx, [])
    lane_guard = runtime and _is_var(ranges["a0"])
    if lane_guard:
        idx = [clamp_into(e, ranges["a0"]) if e == var("a0") else e for e in idx]
    n, c, i_sp = idx[0], idx[1], idx[2:]
    ks = [f"k{i}" for i in range(nsp)]
    cond, cidx = col2im_column(p, n, c, i_sp, ks)
    coff = var("col_off") + sum(e * s for e, s in zip(cidx, col_strides))
    val = f"col[{_cc(coff)}]"
    if cond is not None:
        val = f"(({_cc(cond)}) ? {val} : 0.0f)"
    red = ""
    ind = ""
    for k, kn in zip(ks, p.kernel):
        red += f"{ind}for (long {k} = 0; {k} < {int(kn)}; ++{k})\n"
        ind += "  "
    red = "float acc = 0.0f;\n" + red + f"{ind}acc = acc + {val};\n"
    value = "acc"
    if p.bias is not None:
        value = f"acc + bias[{_cc(offset(p.bias, [c]))}]"
    out_at = f"out[{_cc(offset(p.out, [var('n0') + n, c, *i_sp]))}]"
    value = _chain(value, p.post_ops, out_at)
    store = f"{out_at} = {value};\n"
    if lane_guard:
        store = f"if (a0 < {_name(ranges['a0'])})\n  {store}"
    body = red + store
    code, gs, grid_, local = _grid_launch(ranges, decls, p.wg, p.per_item, body, lane_guard)
    from .conv_implicit_gemm_source import _helpers, _used
    from .sizevars import free_vars

    names = _used(code + repr(grid_), sorted(set(free_vars(p)) | set(free_vars(ranges))
                                              - {"n0", "col_off"}))
    params = [_ptr("col", True), _ptr("out", False)]
    arg_names = ["col", "out"]
    if p.bias is not None:
        params.append(_ptr("bias", True))
        arg_names.append("bias")
    params += ["long const n0", "long const col_off", *[f"long const {v}" for v in names]]
    text = (_PRELUDE + _clamp_defs(code) + _helpers(p.post_ops) + "\n"
            + _head("pydnnl_conv_col2im", local, params) + code + "}")
    return KernelSource("pydnnl_conv_col2im", text, gs, local,
                        (*arg_names, "n0", "col_off", *names), grid=grid_)


def epilogue_source(p) -> KernelSource | None:
    """``conv_im2col.build_epilogue_loopy``'s kernel for ``p`` (an ``EpilogueProblem``), or
    None (binary post-ops, sums with a zero point): a grid over dst in its storage order
    (run-time sizes: ``p.order``), each work-item adding the bias to its accumulator (or to
    dst itself, in place) and running the post-ops (the first, a sum, left out where the
    GEMM already added it)."""
    from pymbolic import var

    from .conv_common import offset
    from .conv_im2col import _storage_grid
    from .conv_implicit_gemm_source import _chain, _helpers, _postop_ok, _used
    from .sizevars import free_vars

    if not _postop_ok(p.post_ops):
        return None
    sizes = [p.nb, p.channels, *p.sp]
    runtime = bool(free_vars((p.nb, p.sp)))
    if runtime and p.order is None:
        return None
    ranges, idx, _ = _storage_grid(sizes, p.dst, p.order, p.per_item, p.wg, runtime)
    n, c, sp = idx[0], idx[1], idx[2:]
    dst_at = f"dst[{_cc(offset(p.dst, [var('n0') + n, c, *sp]))}]"
    value = dst_at if p.acc is None else \
        f"acc[{_cc(var('acc_off') + offset(p.acc, [n, c, *sp]))}]"
    if p.bias is not None:
        value = f"{value} + bias[{_cc(offset(p.bias, [c]))}]"
    body = f"{dst_at} = {_chain(value, p.post_ops, dst_at, skip=int(p.sum_done))};\n"
    code, gs, grid_, local = _grid_launch(ranges, [], p.wg, p.per_item, body, False)
    names = _used(code + repr(grid_), sorted(set(free_vars(p)) | set(free_vars(ranges))
                                              - {"n0", "acc_off"}))
    params, arg_names = [_ptr("dst", False)], ["dst"]
    if p.acc is not None:
        params.append(_ptr("acc", True))
        arg_names.append("acc")
    if p.bias is not None:
        params.append(_ptr("bias", True))
        arg_names.append("bias")
    offs = ["n0"] + (["acc_off"] if p.acc is not None else [])  # (loopy drops it unread)
    params += [f"long const {v}" for v in offs + names]
    text = (_PRELUDE + _clamp_defs(code) + _helpers(p.post_ops) + "\n"
            + _head("pydnnl_conv_epilogue", local, params) + code + "}")
    return KernelSource("pydnnl_conv_epilogue", text, gs, local,
                        (*arg_names, *offs, *names), grid=grid_)


def im2col_rt_source(p) -> KernelSource | None:
    """The run-time-size im2col without channel blocks (``conv_im2col.build_im2col_loopy``
    over :func:`~pydnnl.kernels.conv_common.grid_rt`: the column's dims in its order, units
    first), or None (baked sizes, channel blocks, blocked sources)."""
    from pymbolic import var

    from .conv_common import grid_rt
    from .conv_im2col import _is_runtime, _units_first

    nsp = len(p.kernel)
    if p.ic_block or not _is_runtime(p) or sorted(p.order) != list(range(3 + 2 * nsp)):
        return None
    src = _plain(p.src)
    if src is None or not _simple(src[0]) or not all(_simple(x) for x in src[1]):
        return None
    sizes = [p.nb, p.groups, p.icg, *p.kernel, *p.dst_sp]
    order = _units_first(p.order, sizes)
    ordered = [sizes[d] for d in order]
    ranges, parts, _ = grid_rt(ordered, p.per_item, p.wg)
    parts, decls = _hoist(parts[len(parts) - len(ordered):])
    logical = [None] * len(sizes)
    for d, e in zip(order, parts):
        logical[d] = e
    flat = 0
    for e, n in zip(parts, ordered):
        flat = flat * n + e
    n_, g, ic = logical[:3]
    k = logical[3:3 + nsp]
    o = logical[3 + nsp:]
    pos = [_cc(o[i] * p.strides[i] - p.padding_l[i] + k[i] * (p.dilates[i] + 1))
           for i in range(nsp)]
    conds, clamped = _guarded(pos, p, [_name(n) for n in p.src_sp],
                              [f"{_name(n)} + -1" for n in p.src_sp])
    at = _offset(src, [f"n0 + {_cc(n_)}", f"{_cc(g * int(p.icg) + ic)}", *clamped])
    store = f"col[{_cc(var('col_off') + flat)}]"
    if conds:
        body = (f"float const v = src[{at}];\n"
                f"{store} = (({' && '.join(conds)}) ? v : 0.0f);\n")
    else:
        body = f"{store} = src[{at}];\n"
    code, gs, grid_, local = _grid_launch(ranges, decls, p.wg, p.per_item, body, False)
    from .conv_implicit_gemm_source import _used
    from .sizevars import free_vars

    names = _used(code + repr(grid_), sorted(set(free_vars(p)) | set(free_vars(ranges))
                                              - {"n0", "col_off"}))
    params = [_ptr("src", True), _ptr("col", False), "long const n0", "long const col_off",
              *[f"long const {v}" for v in names]]
    text = (_PRELUDE + _clamp_defs(code) + "\n"
            + _head("pydnnl_conv_im2col", local, params) + code + "}")
    return KernelSource("pydnnl_conv_im2col", text, gs, local,
                        ("src", "col", "n0", "col_off", *names), grid=grid_)

# }}}


# {{{ split-k reduction

def splitk_reduce_source(p) -> KernelSource | None:
    """``conv_im2col.build_splitk_reduce_loopy``'s kernel for ``p`` (a
    ``SplitKReduceProblem``): work-items along C's columns (a partial last work-group in code
    of its own guarded by the local id alone, as loopy's peeled slab), work-groups along its
    rows, each summing its element over the slices in order, then ``beta * C`` added."""
    from .conv_common import c_float

    if not _simple(p.splits):
        return None
    m, n, ldc = int(p.m), int(p.n), int(p.ldc)
    W = max(1, min(int(p.wg), n))
    S = _name(p.splits)
    j = f"(lid(0) + gid(0) * {W})"
    c_at = f"c[c_off + gid(1) * {ldc} + {j}]"
    value = "acc"
    if p.beta != 0.0:
        value += f" + {c_at}" if p.beta == 1.0 else f" + {c_float(p.beta)} * {c_at}"
    body = ("float acc = 0.0f;\n"
            f"for (long t = 0; t < {S}; ++t)\n"
            f"  acc = acc + part[part_off + (t * {m} + gid(1)) * {n} + {j}];\n"
            f"{c_at} = {value};\n")
    code = peeled(body, n, W, f"{S} >= 1")
    vnames = [_name(p.splits)] if _is_var(p.splits) else []
    params = [_ptr("part", True), _ptr("c", False), "long const part_off", "long const c_off",
              *[f"long const {v}" for v in vnames]]
    text = (_PRELUDE + "\n" + _head("pydnnl_conv_splitk_reduce", (W, 1), params)
            + indent(code) + "}")
    return KernelSource("pydnnl_conv_splitk_reduce", text, (-(-n // W) * W, m), (W, 1),
                        ("part", "c", "part_off", "c_off", *vnames))

# }}}


# {{{ B packing

def pack_b_source(pk) -> KernelSource | None:
    """The packer ``pk.build()`` makes (``pk`` a ``gemm.BPacking``) where its source problem
    has run-time offsets, float32, B not batched by run-time strides: one B (not transposed)
    with a run-time k, or ``count`` B (transposed or not) of a compile-time k, ``stride_b``
    apart. Work-group axis 0 over blocks of 16 rows of k, axis 1 over panels, axis 2 over
    the matrices, ``width`` lanes along a panel's columns; columns past n packed as zeros."""
    import numpy as np

    src, w = pk.source, int(pk.width)
    rk = bool(src.runtime_k)
    cnt = int(pk.count)
    if (not src.runtime_offsets or getattr(src, "runtime_strides", False)
            or np.dtype(src.dtype) != np.float32 or np.dtype(src.acc_dtype) != np.float32
            or not isinstance(src.ldb, int) or src.b_offset
            or (rk and (cnt != 1 or src.trans_b))):
        return None
    batched = cnt > 1
    if batched and not isinstance(src.stride_b, int):
        return None
    n, ldb = int(src.n), int(src.ldb)
    npan = -(-n // w)
    k = "ksize" if rk else str(int(src.k))
    kk = "(kk_inner + gid(0) * 16)"
    j = f"gid(1) * {w} + lid(0)"
    bt_src = f" + gid(2) * {int(src.stride_b)}" if batched else ""
    at = f"({j}) * {ldb} + {kk}" if src.trans_b else f"{kk} * {ldb} + {j}"
    load = f"b[b_off{bt_src} + {at}]"
    if n % w:
        load = f"(({j} < {n}) ? {load} : 0.0f)"
    bt_dst = f" + gid(2) * {npan * w * int(src.k)}" if batched else ""
    params = [_ptr("b", True), _ptr("bp", False), "long const b_off", "long const bp_off"]
    if rk:
        params.append("long const ksize")
        bound = ("((ksize - 16 * gid(0) >= 16) ? (long) (15) : ksize - 16 * gid(0) - 1)")
    elif int(src.k) % 16:
        bound = f"(({k} - 16 * gid(0) >= 16) ? (long) (15) : {k} - 16 * gid(0) - 1)"
    else:
        bound = "15"
    local = (w, 1, 1) if batched else (w, 1)
    text = (_PRELUDE + "\n" + _head("pack_b", local, params)
            + "  __attribute__((opencl_unroll_hint))\n"
            + f"  for (long kk_inner = 0; kk_inner <= {bound}; ++kk_inner)\n"
            + f"    bp[bp_off{bt_dst} + gid(1) * {k} * {w} + {kk} * {w} + lid(0)]"
            + f" = {load};\n}}")
    names = ("b", "bp", "b_off", "bp_off") + (("ksize",) if rk else ())
    if rk:
        return KernelSource("pack_b", text, None, local, names,
                            grid=(f"((15 + ksize) // 16) * {w}", str(npan)))
    gs = (-(-int(src.k) // 16) * w, npan) + ((cnt,) if batched else ())
    return KernelSource("pack_b", text, gs, local, names)

# }}}


__all__ = ["bias_grad_source", "channel_slices_source", "channel_slices_wide_source",
           "col2im_source", "im2col_baked_source", "im2col_rt_source", "im2col_source",
           "pack_b_source", "splitk_reduce_source"]
