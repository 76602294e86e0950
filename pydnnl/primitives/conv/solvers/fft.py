"""FFT convolution: products of spectra, per frequency a complex GEMM over channels.

For stride 1 (any dilation, padding, groups, 1-D to 3-D) every spatial dimension is
transformed with length ``L >= max(pad_l + in, out + (k - 1) * dilation)`` (the next 2-3-5
smooth size), long enough that the circular products equal the linear convolution:

* forward: ``Y = X conj(W)`` (correlation), ``y`` the first ``out`` points of the inverse;
* backward data: ``dX = dY W`` (convolution), ``dx`` the points from ``pad_l`` on;
* backward weights: ``dW = conj(dY)^T X`` summed over images, ``dw`` at the dilated taps.

Only the Hermitian half of the last dimension's spectrum is kept (``L/2 + 1`` bins). At each
bin and group the channel sum is one complex matrix product, done as one real GEMM on split
operands (real rows over imaginary rows against real | imaginary columns: the four quadrants
of the product combine into the complex result in the inverse transform's loads), all bins
and groups in one batched launch. The transforms are the straight-line line passes of
:mod:`pydnnl.kernels.conv_fft`, one launch per spatial dimension, reading and writing any
layout. Multiplies per output point fall from ``Cin * k^d`` to about ``4 Cin * L^d / (2 out^d)``
plus the transforms, so the solver pays for large kernels; the spectra cost memory: the
scratchpad holds the filter spectrum, a chunk of images' spectra and their product.

Accuracy: each output is a sum over ``L^d`` bins of rounded products; errors are a few
``1e-7`` of the largest magnitudes involved (input times weights summed), not of each
element, as for Winograd.
"""
from __future__ import annotations

from dataclasses import replace

from ....conv_shapes import ConvGeometry, ConvProblem
from ....kernels.conv_direct import largest_divisor_at_most
from ....kernels.conv_fft import FftPass, build_fft_pass, good_length
from ....runtime.gemm import GemmShape
from ....runtime.heuristics.conv import fft_lid_lines
from ....runtime.plan import SCRATCH, Plan
from ..roles import BIAS, DST, SRC, WEI
from .base import Solver
from .direct import add_bias_grad

#: longest transform per dimension: the straight-line passes grow as L log L instructions
#: (generating an L = 128 pass takes seconds) and beyond this the spectra outgrow any cache
MAX_LENGTH = 128


def lengths(p: ConvProblem) -> tuple[int, ...]:
    """Transform length of each spatial dimension."""
    out = []
    for h, o, k, d, pl in zip(p.src_sp, p.dst_sp, p.kernel, p.dilates, p.padding_l):
        keff = (k - 1) * (d + 1) + 1
        out.append(good_length(max(pl + h, o + keff - 1, 1)))
    return tuple(out)


def saving(kind: str, geom: ConvGeometry) -> float:
    """How many times fewer multiplies per output point the FFT's products need than direct
    summation: ``K`` taps against ``4 * bins / points`` (a complex product of four real ones
    per Hermitian bin), 0 where it does not apply. ``geom`` as for
    :func:`~pydnnl.primitives.conv.solvers.heuristic_order`."""
    if any(s != 1 for s in geom.strides) or any(v < 0 for v in geom.padding_l):
        return 0.0
    Ls, bins, points, taps = [], 1, 1, 1
    for h, o, k, d, pl in zip(geom.src_spatial, geom.dst_spatial, geom.kernel, geom.dilates,
                              geom.padding_l):
        Ls.append(good_length(max(pl + h, o + (k - 1) * (d + 1), 1)))
        points *= o
        taps *= k
    if taps == 1 or max(Ls) > MAX_LENGTH:
        return 0.0
    for v in _bins(Ls):
        bins *= v
    return taps * points / (4.0 * bins)


class FftSolver(Solver):
    name = "fft"
    family = "direct"
    act_family = "nhwc"  # the passes' work-items run along channels
    wei_order = "gkio"

    def why_not(self, problem: ConvProblem, engine) -> str:
        p = problem
        if any(s != 1 for s in p.strides):
            return f"FFT needs stride 1, got strides {list(p.strides)}"
        if any(v < 0 for v in p.padding_l):
            return f"FFT needs non-negative left padding, got {list(p.padding_l)}"
        if p.K == 1:
            return "FFT needs a kernel larger than 1 tap (a 1x1 convolution is one GEMM)"
        Ls = lengths(p)
        if max(Ls) > MAX_LENGTH:
            return (f"FFT transform length {max(Ls)} exceeds {MAX_LENGTH} "
                    f"(padded spatial sizes {list(Ls)})")
        return ""

    def is_applicable(self, problem: ConvProblem, engine) -> bool:
        return not self.why_not(problem, engine)

    def default_params(self, problem: ConvProblem, engine) -> dict:
        return {"chunk_mb": 64}

    def tuning_space(self, problem: ConvProblem, engine) -> list[dict]:
        return [{"chunk_mb": c} for c in (16, 64, 256)]

    def workspace_bytes(self, problem: ConvProblem, params: dict | None = None) -> int:
        return _build(problem, params or {"chunk_mb": 64}, None, True).scratch_bytes

    def build_plan(self, problem: ConvProblem, params: dict, engine) -> Plan:
        return _build(problem, params, engine, False)


# ---------------------------------------------------------------------------------------------
# pass construction
# ---------------------------------------------------------------------------------------------
class _Operand:
    """A tensor to transform: its non-spatial dims and where its data sits in each line.

    ``nonsp``: ``[(name, size)]``; ``logical``: per logical dim of the tensor, its index as
    ``[(name, coef)]`` over ``nonsp`` names, ``"s<d>"`` (spatial index) and ``"n0"``;
    ``place``: per spatial dim ``(count, shift, step)``: data index ``t`` at ``shift + t*step``.
    """

    def __init__(self, ref, layout, nelems, nonsp, logical, place):
        self.ref, self.layout, self.nelems = ref, layout, nelems
        self.nonsp, self.logical, self.place = nonsp, logical, place


def _dense(names: list[str], sizes: dict) -> dict:
    out, s = {}, 1
    for n in reversed(names):
        out[n] = s
        s *= sizes[n]
    return out


def _order(nonsp, strides):
    """Non-spatial dims with the smallest GEMM stride last (work-items run along it)."""
    return [n for n, _ in sorted(nonsp, key=lambda e: -strides[e[0]])]


def _tensor_map(logical, line_names, pos_name):
    out = []
    for dim in logical:
        terms = []
        for name, coef in dim:
            if name == pos_name:
                terms.append(("p", coef))
            elif name == "n0":
                terms.append(("n0", coef))
            else:
                terms.append((line_names.index(name), coef))
        out.append(tuple(terms))
    return tuple(out)


def _bins(Ls):
    return list(Ls[:-1]) + [Ls[-1] // 2 + 1]


def _dims(nonsp, pos: str, place, Ls, gemm: dict, blk: int, groups: int):
    """Sizes of the named dims (non-spatial, data positions ``<pos><d>``, frequencies
    ``f<d>``), the GEMM-layout stride of each (blocks of ``blk`` run group-fastest, then over
    the bins) and the non-spatial names in work-item order."""
    m = len(Ls)
    F = _bins(Ls)
    sizes = dict(nonsp)
    sizes.update({f"{pos}{d}": place[d][0] for d in range(m)})
    sizes.update({f"f{d}": F[d] for d in range(m)})
    bin_stride = _dense([f"f{d}" for d in range(m)], sizes)
    gstr = dict(gemm)
    gstr.update({f"f{d}": bin_stride[f"f{d}"] * groups * blk for d in range(m)})
    gstr["g"] = blk
    return sizes, gstr, _order(nonsp, gstr)


def _temporary(pos: str, lines: list[str], sizes: dict):
    """A planar complex temporary written position-major (``pos`` outermost, then the
    pass's lines, so neighbouring work-items store side by side): the pass destination, the
    strides by name (``__plane``: the imaginary plane's offset) for the next pass, and its
    size in elements."""
    st = _dense([pos] + lines, sizes)
    plane = st[pos] * sizes[pos]
    st["__plane"] = plane
    return ("planar", tuple(st[n] for n in lines), st[pos], plane), st, 2 * plane


def _forward_passes(op: _Operand, Ls, gemm: dict, im_off: int, blk: int, groups: int):
    """Passes taking ``op`` to its half spectrum in a GEMM operand layout.

    ``gemm``: element stride of each non-spatial dim inside one (bin, group) block of ``blk``
    elements; blocks run group-fastest, then over bins. Returns ``[(pass, src, dst, size)]``
    with ``src``/``dst`` ``"tensor"``, ``"gemm"`` or a temporary (its ``size`` in elements).
    """
    m = len(Ls)
    F = _bins(Ls)
    sizes, gstr, nonsp = _dims(op.nonsp, "s", op.place, Ls, gemm, blk, groups)
    out = []
    prev = None  # (strides by name) of the temporary the previous pass wrote
    for j in range(m - 1, -1, -1):
        lines = [f"s{d}" for d in range(j)] + [f"f{d}" for d in range(j + 1, m)] + nonsp
        count, shift, step = op.place[j]
        in_pos = tuple(shift + t * step for t in range(count))
        if j == m - 1:
            src = ("tensor", op.layout, op.nelems, _tensor_map(op.logical, lines, f"s{j}"))
            src_name = "tensor"
        else:
            src = ("planar", tuple(prev[n] for n in lines), prev[f"s{j}"], prev["__plane"])
            src_name = "tmp"
        if j == 0:
            dst = ("planar", tuple(gstr[n] for n in lines), gstr[f"f{j}"], im_off)
            dst_name, size = "gemm", 0
        else:
            dst, prev, size = _temporary(f"f{j}", lines, sizes)
            dst_name = "tmp"
        ps = FftPass(lines=tuple(sizes[n] for n in lines), L=Ls[j], inverse=False,
                     in_pos=in_pos, in_real=j == m - 1, half=False,
                     out_pos=tuple(range(F[j])), out_real=False, src=src, dst=dst)
        out.append((ps, src_name, dst_name, size))
    return out


def _inverse_passes(res_nonsp, gemm: dict, quads, signs, blk: int, groups: int, Ls,
                    out_ref, layout, nelems, logical, place, bias=None, bias_n=0, post_ops=()):
    """Passes taking the GEMM result (quadrants of split complex products) to the output."""
    m = len(Ls)
    F = _bins(Ls)
    sizes, gstr, nonsp = _dims(res_nonsp, "u", place, Ls, gemm, blk, groups)
    scale = 1.0
    for v in Ls:
        scale /= v
    out = []
    prev = None
    for j in range(m):
        lines = [f"u{d}" for d in range(j)] + [f"f{d}" for d in range(j + 1, m)] + nonsp
        last = j == m - 1
        if j == 0:
            src = ("quad", tuple(gstr[n] for n in lines), gstr["f0"], tuple(quads), tuple(signs))
            src_name = "gemm"
        else:
            src = ("planar", tuple(prev[n] for n in lines), prev[f"f{j}"], prev["__plane"])
            src_name = "tmp"
        count, shift, step = place[j]
        out_pos = tuple(shift + u * step for u in range(count))
        if last:
            dst = ("tensor", layout, nelems, _tensor_map(logical, lines, f"u{j}"))
            dst_name, size = "tensor", 0
        else:
            dst, prev, size = _temporary(f"u{j}", lines, sizes)
            dst_name = "tmp"
        ps = FftPass(lines=tuple(sizes[n] for n in lines), L=Ls[j], inverse=True,
                     in_pos=tuple(range(F[j])), in_real=False, half=last, out_pos=out_pos,
                     out_real=last, src=src, dst=dst, scale=scale if last else 1.0,
                     bias=bias if last else None, bias_n=bias_n if last else 0,
                     post_ops=post_ops if last else ())
        out.append((ps, src_name, dst_name, size))
    return out


def _operands(p: ConvProblem, nb: int):
    m = p.nsp
    G, ICg, OCg = p.groups, p.icg, p.ocg
    sp = [[(f"s{d}", 1)] for d in range(m)]
    x = _Operand(SRC, p.src, p.src_n, [("n", nb), ("g", G), ("ic", ICg)],
                 [[("n", 1), ("n0", 1)], [("g", ICg), ("ic", 1)]] + sp,
                 [(h, pl, 1) for h, pl in zip(p.src_sp, p.padding_l)])
    dy = _Operand(DST, p.dst, p.dst_n, [("n", nb), ("g", G), ("oc", OCg)],
                  [[("n", 1), ("n0", 1)], [("g", OCg), ("oc", 1)]] + sp,
                  [(o, 0, 1) for o in p.dst_sp])
    w = _Operand(WEI, p.wei, p.wei_n, [("g", G), ("oc", OCg), ("ic", ICg)],
                 [[("g", 1)], [("oc", 1)], [("ic", 1)]] + sp,
                 [(k, 0, d + 1) for k, d in zip(p.kernel, p.dilates)])
    return x, dy, w


def _chunk(p: ConvProblem, nbins: int, params: dict) -> int:
    """Images per chunk: the spectra of a chunk stay under ``chunk_mb``."""
    G, ICg, OCg = p.groups, p.icg, p.ocg
    per_image = nbins * G * 2 * (ICg + 2 * OCg if p.kind == "fwd" else
                                 OCg + 2 * ICg if p.kind == "bwd_d" else ICg + OCg)
    cap = max(1, int(float(params.get("chunk_mb", 64)) * (1 << 18)))
    return largest_divisor_at_most(p.mb, max(1, cap // per_image))


def _build(p: ConvProblem, params: dict, engine, dry: bool) -> Plan:
    plan = Plan(engine, "fft", params, dry=dry)
    Ls = lengths(p)
    nbins = 1
    for v in _bins(Ls):
        nbins *= v
    G, ICg, OCg = p.groups, p.icg, p.ocg
    nb = _chunk(p, nbins, params)
    x, dy, w = _operands(p, nb)
    batch = nbins * G

    if p.kind == "fwd":
        a_op, a_str, a_im, a_blk = x, {"n": ICg, "ic": 1}, nb * ICg, 2 * nb * ICg
        b_op, b_str, b_im, b_blk = w, {"oc": 1, "ic": 2 * OCg}, OCg, 2 * ICg * OCg
        shape = GemmShape(m=2 * nb, n=2 * OCg, k=ICg, lda=ICg, ldb=2 * OCg, ldc=2 * OCg)
        c_blk, ldc = 4 * nb * OCg, 2 * OCg
        res = ([("n", nb), ("g", G), ("oc", OCg)], {"n": ldc, "oc": 1},
               (0, nb * ldc + OCg, nb * ldc, OCg), (1, 1, -1))
        out = (DST, p.dst, p.dst_n, [[("n", 1), ("n0", 1)], [("g", OCg), ("oc", 1)]],
               [(o, 0, 1) for o in p.dst_sp], p.bias, p.bias_n, p.post_ops)
    elif p.kind == "bwd_d":
        a_op, a_str, a_im, a_blk = dy, {"n": OCg, "oc": 1}, nb * OCg, 2 * nb * OCg
        b_op, b_str, b_im, b_blk = w, {"oc": 2 * ICg, "ic": 1}, ICg, 2 * OCg * ICg
        shape = GemmShape(m=2 * nb, n=2 * ICg, k=OCg, lda=OCg, ldb=2 * ICg, ldc=2 * ICg)
        c_blk, ldc = 4 * nb * ICg, 2 * ICg
        res = ([("n", nb), ("g", G), ("ic", ICg)], {"n": ldc, "ic": 1},
               (0, nb * ldc + ICg, nb * ldc, ICg), (-1, 1, 1))
        out = (SRC, p.src, p.src_n, [[("n", 1), ("n0", 1)], [("g", ICg), ("ic", 1)]],
               [(h, pl, 1) for h, pl in zip(p.src_sp, p.padding_l)], p.bias, p.bias_n,
               p.post_ops)
    else:
        a_op, a_str, a_im, a_blk = dy, {"n": 2 * OCg, "oc": 1}, OCg, 2 * nb * OCg
        b_op, b_str, b_im, b_blk = x, {"n": 2 * ICg, "ic": 1}, ICg, 2 * nb * ICg
        shape = GemmShape(m=2 * OCg, n=2 * ICg, k=nb, lda=2 * OCg, ldb=2 * ICg, ldc=2 * ICg,
                          trans_a=True)
        c_blk, ldc = 4 * OCg * ICg, 2 * ICg
        res = ([("g", G), ("oc", OCg), ("ic", ICg)], {"oc": ldc, "ic": 1},
               (0, OCg * ldc + ICg, OCg * ldc, ICg), (1, -1, 1))
        out = (WEI, p.wei, p.wei_n, [[("g", 1)], [("oc", 1)], [("ic", 1)]],
               [(k, 0, d + 1) for k, d in zip(p.kernel, p.dilates)], None, 0, ())

    a_passes = _forward_passes(a_op, Ls, a_str, a_im, a_blk, G)
    b_passes = _forward_passes(b_op, Ls, b_str, b_im, b_blk, G)
    res_nonsp, res_str, quads, signs = res
    o_ref, o_lay, o_n, o_log, o_place, o_bias, o_bias_n, o_ops = out
    logical = o_log + [[(f"s{d}", 1)] for d in range(p.nsp)]
    logical = [[(f"u{n[1:]}", c) if n.startswith("s") else (n, c) for n, c in dim]
               for dim in logical]
    inv = _inverse_passes(res_nonsp, res_str, quads, signs, c_blk, G, Ls, o_ref, o_lay, o_n,
                          logical, o_place, o_bias, o_bias_n, o_ops)

    # scratch: the two GEMM operands, the product, two temporaries for the passes in between
    a_off = plan.alloc(batch * a_blk)
    b_off = plan.alloc(batch * b_blk)
    c_off = plan.alloc(batch * c_blk)
    tmp_size = max([s for *_, s in a_passes + b_passes + inv] + [0])
    tmps = [plan.alloc(tmp_size), plan.alloc(tmp_size)] if tmp_size else []
    gemm_off = {"a": a_off, "b": b_off}

    lid_lines = engine is not None and fft_lid_lines(engine.info)

    def run(passes, ref_in, gemm_at, n0=None):
        k = 0
        for ps, src, dst, _ in passes:
            named = {}
            named["inp"] = ref_in if src == "tensor" else SCRATCH
            if src == "gemm":
                named["in_off"] = gemm_at
            elif src == "tmp":
                named["in_off"] = tmps[(k - 1) % 2]
            if dst == "tensor":
                named["out"] = o_ref
                if ps.bias is not None:
                    named["bias"] = BIAS
            else:
                named["out"] = SCRATCH
                named["out_off"] = gemm_at if dst == "gemm" else tmps[k % 2]
            if n0 is not None:
                named["n0"] = n0
            # arguments a pass kernel does not take (bias, n0, offsets) are left unbound
            plan.kernel("conv_fft", replace(ps, lid_lines=lid_lines), build_fft_pass, **named)
            k += 1

    if p.kind != "bwd_w":
        run(b_passes, WEI, gemm_off["b"])
    for c0 in range(0, p.mb, nb):
        run(a_passes, a_op.ref, gemm_off["a"], c0 if a_op is not w else None)
        if p.kind == "bwd_w":
            run(b_passes, b_op.ref, gemm_off["b"], c0)
            sh = shape if c0 == 0 else replace(shape, beta=1.0)
        else:
            sh = shape
        plan.gemm_batched(sh, batch, a_blk, b_blk, c_blk, SCRATCH, a_off, SCRATCH, b_off,
                          SCRATCH, c_off)
        if p.kind != "bwd_w":
            run(inv, None, c_off, c0)
    if p.kind == "bwd_w":
        run(inv, None, c_off)
        if p.bias is not None:
            add_bias_grad(plan, p)
    return plan

