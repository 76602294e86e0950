"""The Winograd F(2x2, 3x3) transforms' OpenCL source, written without loopy.

:func:`winograd_source` writes the kernel :func:`pydnnl.kernels.conv_winograd.build_winograd`
generates with loopy for the commonest problems, as a :class:`KernelSource` with the same
name, argument names and order, work-group size and launch grid, and the same arithmetic (the
same terms summed in the same order), so that a first-ever creation neither imports loopy for
them nor spends its code generation (res2a_branch2b's forward creation on the 2-core Xeon:
0.42 s for the input transform, 0.19 s for the filter transform). The index arithmetic is
written directly (the tile's image, row and column computed once per work-item) instead of
loopy's printed affine forms, so the text differs from loopy's; ``tests/kernels/
test_conv_winograd_source.py`` runs both on random data for every stage and path and compares.

Covered: plain (strided) layouts; the tile stages (input, output, dy) in their run-time-size
form (:func:`~pydnnl.kernels.conv_winograd.winograd_runtime`), the output stage with a bias
and no post-ops; the filter transform along the output channels, across 16 x 16 channels and
through the local 16 x 16 tile; the weight-gradient transform with a compile-time slice count,
along either channel dim. Everything else (blocked layouts, post-ops, baked sizes, depthwise
channel counts, a peeled partial work-group, a run-time slice count) returns None and goes to
loopy.
"""
from __future__ import annotations

from .printing import c_size as _name
from .printing import float_ptr as _ptr
from .printing import kernel_head as _head
from .printing import plain_layout as _plain
from .printing import size_vars_of as _vars_of
from .sizevars import is_var as _is_var
from .source import KernelSource

_PRELUDE = ("#define lid(N) ((long) get_local_id(N))\n"
            "#define gid(N) ((long) get_group_id(N))\n")
_CLAMP = ("static inline long pd_clamp_rt(long x, long hi) { x = x > hi ? hi : x; "
          "return x < 0 ? 0 : x; }\n")

BT = ((1, 0, -1, 0), (0, 1, 1, 0), (0, -1, 1, 0), (0, 1, 0, -1))
G_ = ((1.0, 0.0, 0.0), (0.5, 0.5, 0.5), (0.5, -0.5, 0.5), (0.0, 0.0, 1.0))
AT = ((1, 1, 1, 0), (0, 1, -1, -1))
G2 = ((1, 0), (1, 1), (1, -1), (0, -1))
AT2 = ((1.0, 0.5, 0.5, 0.0), (0.0, 0.5, -0.5, 0.0), (0.0, 0.5, 0.5, 1.0))

# as in conv_winograd
_MIN_WG = 16
_CH_TILE = 16


def _offset(plain, idx) -> str:
    """C of the storage offset of index ``idx`` (C strings) in a plain layout: terms of
    zero stride left out, a unit stride without a product."""
    off0, strides = plain
    terms = []
    for e, st in zip(idx, strides):
        if not _is_var(st) and st == 0:
            continue
        if not _is_var(st) and st == 1:
            terms.append(f"({e})")
        else:
            terms.append(f"({e}) * {_name(st)}")
    if _is_var(off0) or off0:
        terms.append(_name(off0))
    return " + ".join(terms) if terms else "0"


def _literal(c: float) -> str:
    return repr(float(c)) + "f"


def _combo(coeffs, terms) -> str:
    """``sum c * t`` as loopy prints conv_winograd's ``_combo`` (the same terms in the same
    order: the same float results)."""
    out = []
    for c, t in zip(coeffs, terms):
        if c == 0:
            continue
        out.append(t if c == 1 else f"-1.0f * {t}" if c == -1 else f"{_literal(c)} * {t}")
    return " + ".join(out) if out else "0.0f"


def _divisor_at_most(n: int, cap: int) -> int:
    return max(d for d in range(1, min(n, cap) + 1) if n % d == 0)


def _tile_wg(channels: int, wg: int) -> int:
    best = max(d for d in range(1, min(wg, channels) + 1) if channels % d == 0)
    return best if best >= min(channels, _MIN_WG) else min(wg, channels)


def winograd_source(p) -> KernelSource | None:
    """The kernel of ``p`` (a :class:`~pydnnl.kernels.conv_winograd.WinogradProblem`) where
    this module covers it (see its doc), else None."""
    if p.stage in ("input", "output", "dy"):
        return _tile_source(p)
    if p.stage == "filter":
        return _filter_source(p)
    if p.stage == "wgrad":
        return _wgrad_source(p)
    return None


# -- tile stages ---------------------------------------------------------------------------


def _tile_source(p) -> KernelSource | None:
    if not p.runtime or p.post_ops:
        return None
    act = _plain(p.act)
    if act is None or (p.bias is not None and _plain(p.bias) is None):
        return None
    if p.bias is not None and (p.stage != "output" or _vars_of(p.bias)):
        return None
    channels = p.icg if p.stage == "input" else p.ocg
    G = p.groups
    GC = G * channels
    wg = _tile_wg(GC, p.wg)
    if GC % wg:
        return None  # loopy peels the partial work-group (see conv_common.split_fast)
    T = "ntiles"
    lines = ["  long const c = lid(0) + gid(0) * %d;\n" % wg,
             "  long const t = gid(1);\n",
             "  long const n = n0 + t / (tiles_w * tiles_h);\n",
             "  long const th = (t / tiles_w) % tiles_h;\n",
             "  long const tw = t % tiles_w;\n"]
    if G == 1:
        lines.append("  long const g = 0;\n  long const cg = c;\n")
    else:
        lines.append(f"  long const g = c / {channels};\n  long const cg = c % {channels};\n")
    used = {"ntiles", "tiles_h", "tiles_w"} | _vars_of(p.act)
    if p.stage == "output":
        body, args, extra = _output_body(p, act, channels, T)
        used |= {"out_h", "out_w"}
    else:
        body, args, extra = _load_body(p, act, channels, T)
        used |= extra
    sizes = sorted(used)
    params = args + [f"long const {s}" for s in sizes]
    names = tuple(a.rsplit(" ", 1)[1] for a in params)
    src = (_PRELUDE + (_CLAMP if p.stage != "output" else "") + "\n"
           + _head(f"pydnnl_conv_winograd_{p.stage}", (wg, 1), params)
           + "".join(lines) + body + "}")
    return KernelSource(f"pydnnl_conv_winograd_{p.stage}", src, None, (wg, 1), names,
                        grid=(str(GC), f"({T}) * 1"))


def _load_body(p, act, channels: int, T: str):
    """The input and dy stages: loads of the tile (clamped, a select zeroing the padding),
    the transform, the stores."""
    inp = p.stage == "input"
    n_ld = 4 if inp else 2
    array = "src" if inp else "dy"
    out = "v" if inp else "u"
    H, W = p.src_sp if inp else p.dst_sp
    out_lines = []
    used = set()
    for a in range(n_ld):
        for b in range(n_ld):
            if inp:
                pl = p.padding_l
                pos = (f"th * 2 + {a - pl[0]}", f"tw * 2 + {b - pl[1]}")
                conds = [f"{e} >= 0" for e, k, q in zip(pos, (a, b), pl) if k - q < 0]
                conds += [f"{e} < {_name(n_)}" for e, k, r, n_ in
                          zip(pos, (a, b), p.padding_r, (H, W)) if k >= 3 - r]
            else:
                pos = (f"th * 2 + {a}", f"tw * 2 + {b}")
                conds = []
                if a == 1:
                    conds.append(f"{pos[0]} < {_name(H)}")
                if b == 1:
                    conds.append(f"{pos[1]} < {_name(W)}")
            if not conds:
                at = _offset(act, ["n", "c", *pos])
                out_lines.append(f"  float const d{a}{b} = {array}[{at}];\n")
                continue
            used |= _vars_of(H, W)
            cl = [f"pd_clamp_rt({e}, {_name(s)} - 1)" for e, s in zip(pos, (H, W))]
            at = _offset(act, ["n", "c", *cl])
            # an unconditional load of the clamped position and a select (as the loopy
            # kernel: a guarded load cost the dy transform 20%)
            out_lines.append(f"  float const r_d{a}{b} = {array}[{at}];\n"
                             f"  float const d{a}{b} = ({' && '.join(conds)}) ? r_d{a}{b} : "
                             "0.0f;\n")
    mat = BT if inp else G2
    G = p.groups
    for xi in range(4):
        for nu in range(4):
            coeffs = [mat[xi][a] * mat[nu][b] for a in range(n_ld) for b in range(n_ld)]
            terms = [f"d{a}{b}" for a in range(n_ld) for b in range(n_ld)]
            k = xi * 4 + nu
            at = f"{out}_off + (g * {T} + t) * {channels} + cg"
            if k:
                at += f" + {k * G * channels} * {T}"
            out_lines.append(f"  {out}[{at}] = {_combo(coeffs, terms)};\n")
    args = [_ptr(array, True), _ptr(out, False), "long const n0", f"long const {out}_off"]
    return "".join(out_lines), args, used


def _output_body(p, act, channels: int, T: str):
    G = p.groups
    lines = []
    for a in range(4):
        for b in range(4):
            k = a * 4 + b
            at = f"m_off + (g * {T} + t) * {channels} + cg"
            if k:
                at += f" + {k * G * channels} * {T}"
            lines.append(f"  float const m{a}{b} = mm[{at}];\n")
    bias = None
    if p.bias is not None:
        bias = f"bias[{_offset(_plain(p.bias), ['c'])}]"
    for i in range(2):
        for j in range(2):
            coeffs = [AT[i][a] * AT[j][b] for a in range(4) for b in range(4)]
            terms = [f"m{a}{b}" for a in range(4) for b in range(4)]
            value = _combo(coeffs, terms)
            if bias is not None:
                value += f" + {bias}"
            oh, ow = f"th * 2 + {i}", f"tw * 2 + {j}"
            conds = ([f"{oh} < out_h"] if i else []) + ([f"{ow} < out_w"] if j else [])
            store = f"dst[{_offset(act, ['n', 'c', oh, ow])}] = {value};\n"
            lines.append(f"  if ({' && '.join(conds)})\n    {store}" if conds else f"  {store}")
    args = [_ptr("mm", True), _ptr("dst", False)]
    if p.bias is not None:
        args.append(_ptr("bias", True))
    args += ["long const n0", "long const m_off"]
    return "".join(lines), args, set()


# -- filter and weight-gradient transforms ---------------------------------------------------


def _channel_launch(p, fast: int, slow: int, across: bool):
    """``(local, global, a, b)`` of conv_winograd's ``_channel_kernel`` (None where it runs
    work-items along groups: depthwise)."""
    if fast * slow < _MIN_WG:
        return None
    la = _divisor_at_most(fast, _CH_TILE if across else p.wg)
    a = f"lid(0) + gid(0) * {la}"
    if across:
        lb = _divisor_at_most(slow, _CH_TILE)
        return (la, lb, 1), (fast, slow, p.groups), a, f"lid(1) + gid(1) * {lb}"
    return (la, 1, 1), (fast, slow, p.groups), a, "gid(1)"


def _filter_source(p) -> KernelSource | None:
    wei = _plain(p.wei)
    if wei is None or _vars_of(p.wei):
        return None
    G, ICg, OCg = p.groups, p.icg, p.ocg
    st = wei[1]
    wst = (st[1], st[2])
    across = wst[1] < wst[0]
    tr = across and OCg % _CH_TILE == 0 and ICg % _CH_TILE == 0

    def tap(a: int) -> int:
        return 2 - a if p.flip else a

    t = _CH_TILE
    lines = []
    if tr:
        local, gsize = (t, t, 1), (OCg, ICg, G)
        lines.append(f"  __local float tl[9 * {t} * {t + 1}];\n")
        lines.append(f"  long const g = gid(2);\n"
                     f"  long const oc = gid(0) * {t} + lid(0);\n"
                     f"  long const ic = gid(1) * {t} + lid(1);\n"
                     f"  long const oc_sw = gid(0) * {t} + lid(1);\n"
                     f"  long const ic_sw = gid(1) * {t} + lid(0);\n\n")
        for a in range(3):
            for b in range(3):
                at = _offset(wei, ["g", "oc_sw", "ic_sw", str(tap(a)), str(tap(b))])
                lines.append(f"  tl[{(a * 3 + b) * t * (t + 1)} + {t + 1} * lid(1) + lid(0)]"
                             f" = wei[{at}];\n")
        lines.append("  barrier(CLK_LOCAL_MEM_FENCE);\n")
        for a in range(3):
            for b in range(3):
                lines.append(f"  float const w{a}{b} = tl[{(a * 3 + b) * t * (t + 1)} + "
                             f"{t + 1} * lid(0) + lid(1)];\n")
    else:
        launch = _channel_launch(p, OCg, ICg, across)
        if launch is None:
            return None
        local, gsize, a_ix, b_ix = launch
        lines.append(f"  long const g = gid(2);\n  long const oc = {a_ix};\n"
                     f"  long const ic = {b_ix};\n\n")
        for a in range(3):
            for b in range(3):
                at = _offset(wei, ["g", "oc", "ic", str(tap(a)), str(tap(b))])
                lines.append(f"  float const w{a}{b} = wei[{at}];\n")
    for xi in range(4):
        for nu in range(4):
            coeffs = [G_[xi][a] * G_[nu][b] for a in range(3) for b in range(3)]
            terms = [f"w{a}{b}" for a in range(3) for b in range(3)]
            k = (xi * 4 + nu) * G * ICg * OCg
            at = f"u_off + (g * {ICg} + ic) * {OCg} + oc" + (f" + {k}" if k else "")
            lines.append(f"  u[{at}] = {_combo(coeffs, terms)};\n")
    name = "pydnnl_conv_winograd_filter"
    params = [_ptr("wei", True), _ptr("u", False), "long const u_off"]
    src = _PRELUDE + "\n" + _head(name, local, params) + "".join(lines) + "}"
    return KernelSource(name, src, gsize, local, ("wei", "u", "u_off"))


def _wgrad_source(p) -> KernelSource | None:
    wei = _plain(p.wei)
    S = p.slices
    if wei is None or _vars_of(p.wei) or _is_var(S):
        return None
    G, ICg, OCg = p.groups, p.icg, p.ocg
    st = wei[1]
    if p.along_oc:
        fast, slow, at_m = OCg, ICg, f"ic * {OCg} + oc"
        wst = (st[1], st[2])
    else:
        fast, slow, at_m = ICg, OCg, f"oc * {ICg} + ic"
        wst = (st[2], st[1])
    launch = _channel_launch(p, fast, slow, wst[1] < wst[0])
    if launch is None:
        return None
    local, gsize, a_ix, b_ix = launch
    oc, ic = (a_ix, b_ix) if p.along_oc else (b_ix, a_ix)
    lines = [f"  long const g = gid(2);\n  long const oc = {oc};\n  long const ic = {ic};\n\n"]
    for a in range(4):
        for b in range(4):
            parts = []
            for sl in range(S):
                k = (((a * 4 + b) * G) * S + sl) * OCg * ICg
                parts.append(f"mm[m_off + g * {S * OCg * ICg} + {k} + {at_m}]")
            lines.append(f"  float const m{a}{b} = {' + '.join(parts)};\n")
    for i in range(3):
        for j in range(3):
            coeffs = [AT2[i][a] * AT2[j][b] for a in range(4) for b in range(4)]
            terms = [f"m{a}{b}" for a in range(4) for b in range(4)]
            at = _offset(wei, ["g", "oc", "ic", str(i), str(j)])
            lines.append(f"  wei[{at}] = {_combo(coeffs, terms)};\n")
    name = "pydnnl_conv_winograd_wgrad"
    params = [_ptr("mm", True), _ptr("wei", False), "long const m_off"]
    src = _PRELUDE + "\n" + _head(name, local, params) + "".join(lines) + "}"
    return KernelSource(name, src, gsize, local, ("mm", "wei", "m_off"))


__all__ = ["winograd_source"]
