"""OpenCL source of the implicit-GEMM convolution kernels, written without loopy.

A first-ever creation of ResNet-50's stem forward (7x7/2, 3 channels, implicit GEMM) spent
0.31 s of its 0.44 s in loopy: its import, then the code generation of the weight packer and
the register-tile data kernel. The printers here write those kernels as
:class:`KernelSource` with loopy's kernel name, argument names and order (size arguments the
code never reads left out, as loopy does), work-group size, launch grid and arithmetic: the
register tile sums over the taps, then the channels, into the same ``float<vec>``
accumulators with the same ``acc = acc + a * b`` statement, so results are bit for bit
loopy's (``tests/kernels/test_conv_implicit_gemm_source.py``). Index arithmetic is printed
directly (C's ``/`` and ``%`` on non-negative values in place of loopy's floor helpers).
Each printer returns None where it does not cover a problem; the builders in
:mod:`pydnnl.kernels.conv_implicit_gemm` then use loopy:

* :func:`igemm_data_source`: the forward / backward-data register tile (CPU tiles: one
  work-item per work-group, float vectors of 2-16 lanes), vector or lane stores, bias, sum
  and eltwise post-ops; no binary post-ops.
* :func:`igemm_fill_source`: a phase no tap reaches (bias and post-ops of a zero sum).
* :func:`wei_pack_source`: the weights packed in the data kernel's panels.
* :func:`igemm_wei_source`, :func:`wei_reduce_source`: backward weights' register tile
  (whole, or in slices) and the slices' sum. Loopy's weights tile ran 1.4-4x slower than
  the printed one on the AVX-512 Xeon (its floor-division helpers sit in the sum's loop).
"""
from __future__ import annotations

import re

from .printing import c_size as _name
from .printing import float_ptr as _ptr
from .printing import indent, peeled
from .printing import kernel_head as _head
from .sizevars import free_vars, is_var
from .source import KernelSource

_PRELUDE = ("#define lid(N) ((long) get_local_id(N))\n"
            "#define gid(N) ((long) get_group_id(N))\n")
_UNROLL = "__attribute__((opencl_unroll_hint))"


def _c(e) -> str:
    """C of a pymbolic index expression over non-negative values (floor division as C's)."""
    if not is_var(e):
        return str(int(e))
    return "(" + str(e).replace("//", "/") + ")"


def _simple(x) -> bool:
    from pymbolic.primitives import Variable

    return isinstance(x, Variable) or (not is_var(x) and isinstance(x, int))


def _used(body: str, names) -> list[str]:
    """The names of ``names`` that ``body`` (the code and the grid expressions) reads: loopy
    leaves other size arguments out."""
    return [n for n in names if re.search(rf"\b{re.escape(n)}\b", body)]


def _postop_ok(post_ops: tuple) -> bool:
    """Sum (zero point 0) and eltwise entries: what :func:`_chain` prints."""
    return all(op[0] == "eltwise" or op[0] == "sum" and op[2] == 0 for op in post_ops)


def _chain(value: str, post_ops: tuple, prior: str, zero: bool = False, skip: int = 0) -> str:
    """C of ``value`` after the chain as loopy prints ``post_ops.apply``'s expression: a sum
    entry's prior term and the value's terms added left to right, unparenthesized (pymbolic
    prints nested sums flat), so the order of the additions is loopy's; ``zero``: ``value``
    is the literal 0, which a sum entry drops; the first ``skip`` entries are left out (the
    helpers keep their places' names)."""
    from .conv_common import c_float

    for i, op in enumerate(post_ops):
        if i < skip:
            continue
        if op[0] == "sum":
            p = prior if op[1] == 1.0 else f"{c_float(op[1])} * {prior}"
            value = p if zero else f"{p} + {value}"
        else:
            value = f"pd_postop{i}({value})"
        zero = False
    return value


def _helpers(post_ops: tuple, extra=()) -> str:
    from .post_ops import helpers

    hs = [h[1] for h in helpers(post_ops)] + list(extra)
    return "".join(h + "\n" for h in hs)


def _floor_grid(total, per: int) -> str:
    """loopy's grid expression of ``ceil(total / per)`` launch entries of ``per``."""
    return f"(({per - 1} + {_name(total)}) // {per}) * 1" if per > 1 else f"({_name(total)}) * 1"


# {{{ data kernel

def igemm_data_source(p) -> KernelSource | None:
    """``conv_implicit_gemm.build_igemm_data_loopy``'s register-tile kernel for ``p`` (an
    ``IgemmDataProblem`` whose phase some tap reaches), or None (GPU tiles, scalar tiles,
    binary post-ops, a row count that is an expression of several sizes)."""
    from pymbolic import var

    from .conv_common import decompose, offset, plain_strides, prod
    from .conv_implicit_gemm import _vector_store, _vector_stores

    t = p.tile
    if not all(n > 0 for n in p.taps) or tuple(t.wg) != (1, 1) or t.vec <= 1 \
            or t.vec not in (2, 4, 8, 16) or t.cols % t.vec or not _postop_ok(p.post_ops):
        return None
    M = p.rows if p.rows is not None else p.mb * prod(p.jsp)
    if not _simple(M):
        return None
    runtime = is_var(M)
    if runtime and plain_strides(p.out) is None:
        return None
    if p.bias is not None and is_var(p.bias[0]):
        return None
    nsp = len(p.jsp)
    rm, nr, vw = t.rows, t.cols, t.vec
    nv = nr // vw
    N = p.nch
    nt = -(-N // nr)
    npan = -(-p.nch // nr)
    K = prod(p.kernel)
    ragged = runtime or -(-M // rm) * rm > M
    # group ids as variables gid_<axis>, printed gid(<axis>) at the end
    io, jo = (var("gid_0"), var("gid_1")) if t.m_inner else (var("gid_1"), var("gid_0"))
    g = var("gid_2")
    a = p.a
    vec_store = _vector_stores(p)
    has_sum = any(op[0] == "sum" for op in p.post_ops)

    def decomp(r):
        n, *j = decompose(r, [p.mb, *p.jsp])
        return n, j

    def row_base(r):
        n, j = decomp(r)
        return (a.off0 + n * a.sn + g * (p.kch * a.sc)
                + sum((j[d] * p.a_stride[d] + p.a_off[d]) * a.ssp[d] for d in range(nsp)))

    def out_pos(r):
        n, j = decomp(r)
        return n, [j[d] * p.o_stride[d] + p.o_off[d] for d in range(nsp)]

    lines = []
    ind = "  "
    decl = [f"  float{vw} acc[{rm} * {nv}];\n", f"  float{vw} bv[{nv}];\n"]
    if runtime:
        decl.append(f"  long ob[{rm}];\n")
    if p.tall:
        decl.append("  long r0;\n")
    decl.append(f"  long rb[{rm}];\n")
    row0 = io * rm
    if p.tall:
        lines.append(f"{ind}r0 = (({_c(row0)} + {rm} <= {_name(M)}) ? {_c(row0)} : "
                     f"{_name(M)} + -{rm});\n")
        r_ir = var("r0") + var("ir")
    else:
        r_ir = row0 + var("ir")
    lines.append(f"{ind}{_UNROLL}\n{ind}for (long jz = 0; jz <= {nv - 1}; ++jz)\n{ind}{{\n"
                 f"{ind}  {_UNROLL}\n{ind}  for (long iz = 0; iz <= {rm - 1}; ++iz)\n"
                 f"{ind}    acc[{nv} * iz + jz] = (float) (0.0f);\n{ind}}}\n")
    rvar = var("rr")
    rows = [f"{ind}  long const rr = {_c(r_ir)};\n"]
    if ragged and not p.tall:
        rows = [f"{ind}  long const rr = ({_c(r_ir)} < {_name(M)}) ? {_c(r_ir)} : "
                f"{_name(M)} + -1;\n"]
    rows.append(f"{ind}  rb[ir] = {_c(row_base(rvar))};\n")
    if runtime:
        n, pos = out_pos(rvar)
        rows.append(f"{ind}  ob[ir] = {_c(offset(p.out, [n, 0, *pos]))};\n")
    lines.append(f"{ind}{_UNROLL}\n{ind}for (long ir = 0; ir <= {rm - 1}; ++ir)\n{ind}{{\n"
                 + "".join(rows) + f"{ind}}}\n")
    # the reduction: taps outer, channels inner, as loopy's loop priorities
    us = [var(f"u{d}") for d in range(nsp)]
    kstr = [prod(p.kernel[d + 1:]) for d in range(nsp)]
    loops = [(f"u{d}", n) for d, n in enumerate(p.taps)] + [("kc", p.kch)]
    d_ind = ind
    for nm, n in loops:
        lines.append(f"{d_ind}for (long {nm} = 0; {nm} <= {int(n) - 1}; ++{nm})\n")
        d_ind += "  "
    d_ind = d_ind[:-2]
    tap = sum((p.wt0[d] + us[d] * p.wstep[d]) * kstr[d] for d in range(nsp))
    pan_base = (g * npan + jo) * (K * p.kch * nr)
    wbase = p.wp_off + pan_base + (tap * p.kch + var("kc")) * nr + var("jb") * vw
    lanes = "".join(f"{d_ind}    bv[jb].s{v:x} = wp[{_c(wbase + v)}];\n" for v in range(vw))
    a_at = (var("rb_ii") + sum(us[d] * (p.a_step[d] * a.ssp[d]) for d in range(nsp))
            + var("kc") * a.sc)
    a_txt = _c(a_at).replace("rb_ii", "rb[ii]")
    lines.append(
        f"{d_ind}{{\n"
        f"{d_ind}  {_UNROLL}\n{d_ind}  for (long jb = 0; jb <= {nv - 1}; ++jb)\n"
        f"{d_ind}  {{\n{lanes}{d_ind}  }}\n"
        f"{d_ind}  {_UNROLL}\n{d_ind}  for (long ii = 0; ii <= {rm - 1}; ++ii)\n{d_ind}  {{\n"
        f"{d_ind}    {_UNROLL}\n{d_ind}    for (long jj = 0; jj <= {nv - 1}; ++jj)\n"
        f"{d_ind}      acc[{nv} * ii + jj] = acc[{nv} * ii + jj] + a[{a_txt}] * bv[jj];\n"
        f"{d_ind}  }}\n{d_ind}}}\n")
    # the stores
    r_s = (var("r0") if p.tall else row0) + var("is")
    conds = []
    if p.tall:
        if has_sum:
            conds.append(f"{_c(r_s)} >= {_c(row0)}")
    elif ragged:
        conds.append(f"{_c(r_s)} < {_name(M)}")
    if vec_store:
        c_s = jo * nr + var("js") * vw
        c = g * p.nch + c_s
        if runtime:
            oidx = var("ob_is") + c
        else:
            n, pos = out_pos(r_s)
            oidx = offset(p.out, [n, c, *pos])
        body = [f"long oidx = {_c(oidx).replace('ob_is', 'ob[is]')};"]
        if p.bias is not None:
            body.append(f"long bidx = {_c(offset(p.bias, [c]))};")
        body.append(f"long cacc = is * {nv} + js;")
        if nt * nr > N:
            conds.append(f"{_c(c_s)} < {N}")
        store = _vector_store(vw, p.bias is not None, p.post_ops)
        guard = f"if ({' && '.join(conds)}) " if conds else ""
        lines.append(
            f"{ind}{_UNROLL}\n{ind}for (long js = 0; js <= {nv - 1}; ++js)\n{ind}{{\n"
            f"{ind}  {_UNROLL}\n{ind}  for (long is = 0; is <= {rm - 1}; ++is)\n{ind}  {{\n"
            + "".join(f"{ind}    {x}\n" for x in body)
            + f"\n{ind}    {guard}{store}\n{ind}  }}\n{ind}}}\n")
    else:
        st = []
        for v in range(vw):
            c_s = jo * nr + var("js") * vw + v
            c = g * p.nch + c_s
            if runtime:
                at = var("ob_is") + c * p.out[1][1][1]
            else:
                n, pos = out_pos(r_s)
                at = offset(p.out, [n, c, *pos])
            at_t = _c(at).replace("ob_is", "ob[is]")
            value = f"acc[{nv} * is + js].s{v:x}"
            if p.bias is not None:
                value = f"{value} + bias[{_c(offset(p.bias, [c]))}]"
            value = _chain(value, p.post_ops, f"out[{at_t}]")
            cc = list(conds)
            if nt * nr > N:
                cc.append(f"{_c(c_s)} < {N}")
            guard = f"if ({' && '.join(cc)})\n{ind}      " if cc else ""
            st.append(f"{ind}    {guard}out[{at_t}] = {value};\n")
        lines.append(
            f"{ind}{_UNROLL}\n{ind}for (long is = 0; is <= {rm - 1}; ++is)\n{ind}{{\n"
            f"{ind}  {_UNROLL}\n{ind}  for (long js = 0; js <= {nv - 1}; ++js)\n{ind}  {{\n"
            + "".join(st) + f"{ind}  }}\n{ind}}}\n")
    body = "".join(decl) + "\n" + "".join(lines)
    body = (body.replace("gid_0", "gid(0)").replace("gid_1", "gid(1)")
            .replace("gid_2", "gid(2)"))
    names = _used(body, free_vars(p))
    params = [_ptr("a", True), _ptr("wp", True), _ptr("out", False)]
    arg_names = ["a", "wp", "out"]
    if p.bias is not None:
        params.append(_ptr("bias", True))
        arg_names.append("bias")
    params += [f"long const {v}" for v in names]
    text = (_PRELUDE + _helpers(p.post_ops) + "\n"
            + _head("pydnnl_conv_igemm_data", (1, 1, 1), params) + body + "}")
    G = int(p.groups)
    if runtime:
        rows_g = _floor_grid(M, rm)
        grid = (rows_g, str(nt), str(G)) if t.m_inner else (str(nt), rows_g, str(G))
        return KernelSource("pydnnl_conv_igemm_data", text, None, (1, 1, 1),
                            (*arg_names, *names), grid=grid)
    mt = -(-int(M) // rm)
    gs = (mt, nt, G) if t.m_inner else (nt, mt, G)
    return KernelSource("pydnnl_conv_igemm_data", text, gs, (1, 1, 1), (*arg_names, *names))

# }}}


# {{{ fill

def igemm_fill_source(p) -> KernelSource | None:
    """``conv_implicit_gemm._build_fill``'s kernel for ``p`` (a phase no tap reaches), or
    None (binary post-ops): a work-group per image (axis 1) and outer position (axis 0)
    looping over the innermost positions, then the channels."""
    from pymbolic import var

    from .conv_common import decompose, offset
    from .conv_implicit_gemm import _vprod
    if not _postop_ok(p.post_ops):
        return None
    nsp = len(p.jsp)
    R = _vprod(p.jsp[:-1])
    if not all(_simple(x) for x in (p.mb, R, p.jsp[-1])):
        return None
    if p.bias is not None and is_var(p.bias[0]):
        return None
    j = [*decompose(var("gid_0"), list(p.jsp[:-1])), var("w")]
    pos = [j[d] * p.o_stride[d] + p.o_off[d] for d in range(nsp)]
    c = var("c")
    at = _c(offset(p.out, [var("gid_1"), c, *pos]))
    value = f"bias[{_c(offset(p.bias, [c]))}]" if p.bias is not None else "0.0f"
    value = _chain(value, p.post_ops, f"out[{at}]", zero=p.bias is None)
    C = int(p.groups) * int(p.nch)
    body = (f"  for (long w = 0; w <= {_name(p.jsp[-1])} + -1; ++w)\n"
            f"    for (long c = 0; c <= {C - 1}; ++c)\n"
            f"      out[{at}] = {value};\n")
    body = body.replace("gid_0", "gid(0)").replace("gid_1", "gid(1)")
    names = _used(body + repr((R, p.mb)), free_vars(p))
    params = [_ptr("out", False)]
    arg_names = ["out"]
    if p.bias is not None:
        params.append(_ptr("bias", True))
        arg_names.append("bias")
    params += [f"long const {v}" for v in names]
    text = (_PRELUDE + _helpers(p.post_ops) + "\n"
            + _head("pydnnl_conv_igemm_fill", (1, 1), params) + body + "}")
    if is_var(R) or is_var(p.mb):
        grid = (_floor_grid(R, 1) if is_var(R) else str(int(R)),
                _floor_grid(p.mb, 1) if is_var(p.mb) else str(int(p.mb)))
        return KernelSource("pydnnl_conv_igemm_fill", text, None, (1, 1),
                            (*arg_names, *names), grid=grid)
    return KernelSource("pydnnl_conv_igemm_fill", text, (int(R), int(p.mb)), (1, 1),
                        (*arg_names, *names))

# }}}


# {{{ weight packing

def wei_pack_source(p) -> KernelSource | None:
    """``conv_implicit_gemm.build_wei_pack_loopy``'s kernel for ``p`` (a ``WeiPackProblem``):
    :func:`~pydnnl.kernels.conv_common.grid`'s launch over (group, panel, tap, channel,
    column), the partial last work-group of axis 0 in code of its own guarded by the local
    id alone (as loopy's peeled slab)."""
    from .conv_common import clamp_helper, clamped_positions, decompose, grid, offset, prod

    if any(is_var(x) for x in (p.wei[0], p.wp_off)):
        return None
    npan = -(-p.nch // p.cols)
    K = prod(p.kernel)
    sizes = [p.groups, npan, K, p.kch, p.cols]
    ranges, idx = grid(sizes, p.per_item)
    gg, pan, tap, kc, w = idx
    ch = pan * p.cols + w
    taps = decompose(tap, list(p.kernel)) if p.kernel else []
    helpers = []
    if npan * p.cols > p.nch:
        ch_safe = clamped_positions([ch], [(0, npan * p.cols - 1)], [p.nch])[0]
        helpers.append(clamp_helper(p.nch - 1)[1])
        oc_s, ic_s = (kc, ch_safe) if p.transpose else (ch_safe, kc)
        val = (f"(({_c(ch)} < {p.nch}) ? wei[{_c(offset(p.wei, [gg, oc_s, ic_s, *taps]))}]"
               " : 0.0f)")
    else:
        oc, ic = (kc, ch) if p.transpose else (ch, kc)
        val = f"wei[{_c(offset(p.wei, [gg, oc, ic, *taps]))}]"
    flat = (((gg * npan + pan) * K + tap) * p.kch + kc) * p.cols + w
    return _grid_copy("pydnnl_conv_igemm_pack_wei", ranges, p.wg,
                      f"wp[{_c(p.wp_off + flat)}] = {val};\n",
                      [_ptr("wei", True), _ptr("wp", False)], ("wei", "wp"),
                      "".join(h + "\n" for h in helpers))


def _grid_copy(name: str, ranges: dict, wg: int, body: str, params: list, arg_names: tuple,
               helpers: str = "") -> KernelSource:
    """A kernel over a :func:`~pydnnl.kernels.conv_common.grid` launch tagged as
    ``conv_common.tag_grid`` does: ``body`` (C over ``a0``, ``a1``, ``a2`` and the loops
    ``s<i>``) inside the loops, the partial last work-group of axis 0 in code of its own
    guarded by the local id alone (as loopy's peeled slab)."""
    A0 = int(ranges["a0"])
    W = max(1, min(int(wg), A0))
    for nm in reversed([k for k in ranges if k.startswith("s")]):
        body = (f"for (long {nm} = 0; {nm} < {int(ranges[nm])}; ++{nm})\n{{\n"
                + "".join("  " + x for x in body.splitlines(True)) + "}\n")
    # the ids printed in place (declared as variables, they cost Intel's compiler time: see
    # copy_source._grid_launch)
    ids = {"a0": f"(lid(0) + gid(0) * {W})", "a1": "gid(1)", "a2": "gid(2)"}
    body = re.sub(r"\ba[012]\b", lambda m: ids[m.group(0)], body)
    code = indent(peeled(body, A0, W))
    text = _PRELUDE + helpers + "\n" + _head(name, (W, 1, 1), params) + code + "}"
    return KernelSource(name, text, (-(-A0 // W) * W, int(ranges["a1"]), int(ranges["a2"])),
                        (W, 1, 1), arg_names)

# }}}


# {{{ backward weights

def igemm_wei_source(p) -> KernelSource | None:
    """``conv_implicit_gemm.build_igemm_wei_loopy``'s register-tile kernel for ``p`` (an
    ``IgemmWeiProblem``), or None (GPU tiles, scalar tiles): rows (tap, input channel),
    columns output channels, the sum over (image, outer output point) then the innermost
    output point, into the same ``float<vec>`` accumulators as loopy's; lane stores into the
    weights' layout or, split, into the slices' partial sums."""
    from pymbolic import var
    from pymbolic.primitives import Variable

    from .conv_common import decompose, offset, prod

    t = p.tile
    if tuple(t.wg) != (1, 1) or t.vec <= 1 or t.vec not in (2, 4, 8, 16) or t.cols % t.vec:
        return None
    nsp = len(p.kernel)
    K = prod(p.kernel)
    M = K * p.icg
    R = p.rows if p.rows is not None else p.mb * prod(p.dst_sp[:-1])
    S = int(p.splits)
    if is_var(R) and (S > 1 or not isinstance(R, Variable)) or not is_var(R) and R % S:
        return None  # (loopy's builder raises for these)
    if not all(_simple(x) for x in (p.dst_sp[-1], p.wei[0])):
        return None
    RS = R if S == 1 else R // S
    rm, nr, vw = t.rows, t.cols, t.vec
    nv = nr // vw
    N = p.ocg
    nt = -(-N // nr)
    io, jo = (var("gid_0"), var("gid_1")) if t.m_inner else (var("gid_1"), var("gid_0"))
    gg = var("gid_2")
    gv, ts = (gg, 0) if S == 1 else (gg % p.groups, gg // p.groups)
    s, d = p.src, p.dst
    qf = ts * RS + var("q") if S > 1 else var("q")
    n, *o_out = decompose(qf, [p.mb, *p.dst_sp[:-1]])
    o = [*o_out, var("w")]
    ragged = -(-M // rm) * rm > M
    row0 = io * rm

    def row_parts(r):
        tap, ic = decompose(r, [K, p.icg])
        return tap, ic, decompose(tap, list(p.kernel))

    rr = var("rr")
    _, ic, taps = row_parts(rr)
    rbase = (s.off0 + gv * (p.icg * s.sc) + ic * s.sc
             + sum(taps[i] * ((p.dilates[i] + 1) * s.ssp[i]) for i in range(nsp)))
    ind = "  "
    lines = [f"  float{vw} acc[{rm} * {nv}];\n", f"  float{vw} bv[{nv}];\n",
             f"  long rb[{rm}];\n", "\n",
             f"{ind}{_UNROLL}\n{ind}for (long jz = 0; jz <= {nv - 1}; ++jz)\n{ind}{{\n"
             f"{ind}  {_UNROLL}\n{ind}  for (long iz = 0; iz <= {rm - 1}; ++iz)\n"
             f"{ind}    acc[{nv} * iz + jz] = (float) (0.0f);\n{ind}}}\n"]
    r_ir = row0 + var("ir")
    if ragged:
        rdef = f"({_c(r_ir)} < {M}) ? {_c(r_ir)} : {M - 1}"
    else:
        rdef = _c(r_ir)
    lines.append(f"{ind}{_UNROLL}\n{ind}for (long ir = 0; ir <= {rm - 1}; ++ir)\n{ind}{{\n"
                 f"{ind}  long const rr = {rdef};\n{ind}  rb[ir] = {_c(rbase)};\n{ind}}}\n")
    lines.append(f"{ind}for (long q = 0; q <= {_name(RS)} + -1; ++q)\n"
                 f"{ind}  for (long w = 0; w <= {_name(p.dst_sp[-1])} + -1; ++w)\n")
    d_ind = ind + "  "
    npad = nt * nr
    lanes = []
    for v in range(vw):
        col = jo * nr + var("jb") * vw + v
        col_s = col
        col_t = None
        if npad > N:
            col_t = f"(({_c(col)} < {N}) ? {_c(col)} : {N - 1})"
            col_s = var("COLSAFE")
        at = (d.off0 + n * d.sn + (gv * p.ocg + col_s) * d.sc
              + sum(o[i] * d.ssp[i] for i in range(nsp)))
        at_t = _c(at)
        if col_t is not None:
            at_t = at_t.replace("COLSAFE", col_t)
        lanes.append(f"{d_ind}    bv[jb].s{v:x} = dst[{at_t}];\n")
    a_at = var("rb_ii") + n * s.sn + sum((o[i] * p.strides[i] - p.padding_l[i]) * s.ssp[i]
                                        for i in range(nsp))
    a_txt = _c(a_at).replace("rb_ii", "rb[ii]")
    lines.append(
        f"{d_ind}{{\n"
        f"{d_ind}  {_UNROLL}\n{d_ind}  for (long jb = 0; jb <= {nv - 1}; ++jb)\n"
        f"{d_ind}  {{\n{''.join(lanes)}{d_ind}  }}\n"
        f"{d_ind}  {_UNROLL}\n{d_ind}  for (long ii = 0; ii <= {rm - 1}; ++ii)\n{d_ind}  {{\n"
        f"{d_ind}    {_UNROLL}\n{d_ind}    for (long jj = 0; jj <= {nv - 1}; ++jj)\n"
        f"{d_ind}      acc[{nv} * ii + jj] = acc[{nv} * ii + jj] + src[{a_txt}] * bv[jj];\n"
        f"{d_ind}  }}\n{d_ind}}}\n")
    r_s = row0 + var("is")
    st = []
    for v in range(vw):
        c_s = jo * nr + var("js") * vw + v
        if S > 1:
            at = f"part[{_c(p.part_off + (gg * M + r_s) * p.ocg + c_s)}]"
        else:
            _, ic_s, taps_s = row_parts(r_s)
            at = f"wei[{_c(offset(p.wei, [gv, c_s, ic_s, *taps_s]))}]"
        cc = []
        if ragged:
            cc.append(f"{_c(r_s)} < {M}")
        if npad > N:
            cc.append(f"{_c(c_s)} < {N}")
        guard = f"if ({' && '.join(cc)})\n{ind}      " if cc else ""
        st.append(f"{ind}    {guard}{at} = acc[{nv} * is + js].s{v:x};\n")
    lines.append(f"{ind}{_UNROLL}\n{ind}for (long is = 0; is <= {rm - 1}; ++is)\n{ind}{{\n"
                 f"{ind}  {_UNROLL}\n{ind}  for (long js = 0; js <= {nv - 1}; ++js)\n{ind}  {{\n"
                 + "".join(st) + f"{ind}  }}\n{ind}}}\n")
    body = "".join(lines)
    body = (body.replace("gid_0", "gid(0)").replace("gid_1", "gid(1)")
            .replace("gid_2", "gid(2)"))
    names = _used(body, free_vars(p))
    out = "part" if S > 1 else "wei"
    params = [_ptr("src", True), _ptr("dst", True), _ptr(out, False),
              *[f"long const {v}" for v in names]]
    text = (_PRELUDE + "\n" + _head("pydnnl_conv_igemm_wei", (1, 1, 1), params) + body + "}")
    mt = -(-M // rm)
    gs = (mt, nt, p.groups * S) if t.m_inner else (nt, mt, p.groups * S)
    return KernelSource("pydnnl_conv_igemm_wei", text, gs, (1, 1, 1),
                        ("src", "dst", out, *names))


def wei_reduce_source(p) -> KernelSource | None:
    """``conv_implicit_gemm.build_wei_reduce_loopy``'s kernel for ``p`` (a
    ``WeiReduceProblem``): :func:`~pydnnl.kernels.conv_common.grid`'s launch over (group,
    row, output channel) as :func:`wei_pack_source`'s, each element the sum of its slices in
    order."""
    from pymbolic import var

    from .conv_common import decompose, grid, offset, prod

    if is_var(p.wei[0]):
        return None
    K = prod(p.kernel)
    M = K * p.icg
    ranges, idx = grid([p.groups, p.icg * K, p.ocg], p.per_item)
    gg, row, oc = idx
    tap, ic = decompose(row, [K, p.icg])
    taps = decompose(tap, list(p.kernel))
    part = p.part_off + ((var("t") * p.groups + gg) * M + row) * p.ocg + oc
    store = (f"float acc = 0.0f;\n"
             f"for (long t = 0; t < {int(p.splits)}; ++t)\n"
             f"  acc = acc + part[{_c(part)}];\n"
             f"wei[{_c(offset(p.wei, [gg, oc, ic, *taps]))}] = acc;\n")
    return _grid_copy("pydnnl_conv_igemm_wei_reduce", ranges, p.wg, store,
                      [_ptr("part", True), _ptr("wei", False)], ("part", "wei"))

# }}}


__all__ = ["igemm_data_source", "igemm_fill_source", "igemm_wei_source", "wei_pack_source",
           "wei_reduce_source"]
