"""Implicit GEMM: the GEMMs of im2col + GEMM with the patch matrix computed in the loads.

* forward: ``dst[(n, p), oc] = sum_{tap, ic} src[n, p*s + tap*(d+1) - pl, ic] * W[tap, ic, oc]``,
  a register-tiled kernel over (output points x output channels) reading the weights packed
  in panels (one packing launch per execution); bias and post-ops in its store.
* backward data: the same kernel over input points x input channels, reading diff_dst. With
  strides ``s`` the input points split into ``prod(s)`` phases (one residue modulo ``s`` per
  dim); the taps that reach a phase form a progression, so each phase is a dense problem of
  its own (one launch each; a phase no tap reaches gets bias and post-ops only).
* backward weights: rows (tap, ic) x columns oc, summed over images and output points; on
  GPUs the sum is split into slices (partials in the scratchpad, then a reduction); the bias
  gradient is the channel reduction the other solvers use.

The activation the patches come from is read through plain strides; where the kernel would
read padding (or the layout is blocked) it is first copied into a zero-padded channels-last
scratch tensor, so the inner loops have no bounds tests. Backward weights also copies a
diff_dst whose channels are not contiguous (the kernel loads vectors along channels).
``format_tag.any``: channels-last activations (channel reduction innermost and contiguous) and
weights with output channels innermost (``gkio``, what the other GEMM-based solver prefers).
"""
from __future__ import annotations

import itertools
import math

from ....conv_shapes import ConvProblem
from ....error import invalid_arguments, runtime_error
from ....kernels.conv_common import plain_strides, prod
from ....kernels.conv_direct import largest_divisor_at_most
from ....kernels.conv_im2col import Im2ColProblem, build_im2col, im2col_runtime
from ....kernels.conv_implicit_gemm import (
    IgemmDataProblem,
    IgemmWeiProblem,
    PlainTensor,
    TileParams,
    WeiPackProblem,
    WeiReduceProblem,
    build_igemm_data,
    build_igemm_wei,
    build_wei_pack,
    build_wei_reduce,
)
from ....kernels.sizevars import symbolize
from ....runtime.plan import SCRATCH, Plan
from ..roles import BIAS, DST, SRC, WEI
from .base import Solver
from .direct import add_bias_grad, per_item

_VECS = (1, 2, 4, 8, 16)


def _simd(engine) -> int:
    """Float SIMD width the CPU tiles are sized for (AVX-512: 16, else 8): the native width
    (Intel's runtime *prefers* 1 on AVX-512 machines)."""
    if engine is None:
        return 8
    return 16 if int(engine.info.simd_width or 1) >= 16 else 8


def _cpu_tile(ncols: int, simd: int) -> tuple[int, int, int]:
    """(rows, cols, vec) of a CPU register tile for ``ncols`` columns: accumulators, one row
    of column vectors within the vector registers (16, or 32 with 16-wide SIMD), plus one for
    the broadcast value where the FMA cannot broadcast from memory (AVX2; AVX-512 can), the
    least padding of the columns, then the largest tile."""
    w = simd
    if ncols < w:
        w = next(v for v in _VECS if v >= ncols)
    regs = 32 if simd >= 16 else 16
    best = None
    for nv in (3, 2, 1, 4):
        cols = nv * w
        rows = min(8, (regs - nv - (0 if simd >= 16 else 1)) // nv)
        waste = -(-ncols // cols) * cols - ncols
        key = (waste, -rows * cols)
        if best is None or key < best[0]:
            best = (key, (rows, cols, w))
    return best[1]


def _pow2_at_most(n: int, cap: int) -> int:
    v = 1
    while v * 2 <= min(n, cap):
        v *= 2
    return v


def _shape(p: ConvProblem) -> tuple[int, int]:
    """(rows, columns) of the problem's GEMM."""
    if p.kind == "fwd":
        return p.mb * p.P, p.ocg
    if p.kind == "bwd_d":
        return p.mb * p.PI, p.icg
    return p.K * p.icg, p.ocg


def _gpu_splits(p: ConvProblem, params: dict, engine) -> int:
    """Slices of the backward-weights sum: about four work-groups per compute unit."""
    M, N = _shape(p)
    wn, wm = params["wg"]
    wgs = p.groups * -(-M // (params["rows"] * wm)) * -(-N // (params["cols"] * wn))
    cu = engine.info.compute_units if engine is not None else 1
    return max(1, min(256, -(-4 * cu // wgs)))


class ImplicitGemmSolver(Solver):
    name = "implicit_gemm"
    family = "direct"
    act_family = "nhwc"
    wei_order = "gkio"

    def default_params(self, problem: ConvProblem, engine) -> dict:
        M, N = _shape(problem)
        if engine is not None and engine.info.is_gpu:
            rows, cols = 4, 4
            wn = _pow2_at_most(-(-N // cols), 16)
            wm = _pow2_at_most(-(-M // rows), 256 // wn)
            out = {"rows": rows, "cols": cols, "vec": 1, "wg": (wn, wm), "m_inner": False}
            if problem.kind == "bwd_w":
                out["splits"] = _gpu_splits(problem, out, engine)
            return out
        rows, cols, vec = _cpu_tile(N, _simd(engine))
        out = {"rows": rows, "cols": cols, "vec": vec, "wg": (1, 1), "m_inner": True}
        if problem.kind == "bwd_w":
            out["splits"] = 1
        return out

    def tuning_space(self, problem: ConvProblem, engine) -> list[dict]:
        base = self.default_params(problem, engine)
        out = [base]
        if engine is not None and engine.info.is_gpu:
            for rows, cols in ((4, 4), (8, 4), (2, 2), (4, 2), (8, 8)):
                for wg in ((16, 16), (8, 16), (4, 32), (1, 64)):
                    out.append({**base, "rows": rows, "cols": cols, "wg": wg})
        else:
            w = base["vec"]
            for rows, nv in ((4, 3), (6, 2), (8, 1), (4, 2), (2, 4), (3, 3), (1, 2)):
                for m_inner in (True, False):
                    out.append({**base, "rows": rows, "cols": nv * w, "m_inner": m_inner})
        if problem.kind == "bwd_w":
            out += [{**base, "splits": s} for s in (2, 4, 8, 16) if s != base.get("splits")]
        seen, uniq = set(), []
        for p in out:
            key = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in p.items()))
            if key not in seen:
                seen.add(key)
                uniq.append(p)
        return uniq

    def workspace_bytes(self, problem: ConvProblem, params: dict | None = None) -> int:
        if params is None:
            params = self.default_params(problem, None)
        return _build(problem, params, None, dry=True).scratch_bytes

    def build_plan(self, problem: ConvProblem, params: dict, engine) -> Plan:
        plan = _build(problem, params, engine, dry=False)
        reserved = self.workspace_bytes(problem, params)
        if plan.scratch_bytes > reserved:  # the descriptor's scratchpad would overflow
            raise runtime_error(f"implicit_gemm: the plan needs {plan.scratch_bytes} bytes of "
                                f"scratchpad, the descriptor reserved {reserved}")
        return plan


def tile_params(params: dict) -> TileParams:
    """The register tile of ``params``, checked (errors name the key)."""
    def pos_int(key, default):
        v = params.get(key, default)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise invalid_arguments(f"implicit_gemm: solver_params[{key!r}] must be a positive "
                                    f"int, got {v!r}")
        return v

    rows, cols = pos_int("rows", 4), pos_int("cols", 8)
    vec = params.get("vec", 1)
    if vec not in _VECS:
        raise invalid_arguments(f"implicit_gemm: solver_params['vec'] must be one of {_VECS}, "
                                f"got {vec!r}")
    if cols % vec:
        raise invalid_arguments(f"implicit_gemm: solver_params['cols'] ({cols}) must be a "
                                f"multiple of solver_params['vec'] ({vec})")
    wg = params.get("wg", (1, 1))
    if (not isinstance(wg, (tuple, list)) or len(wg) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in wg)):
        raise invalid_arguments(f"implicit_gemm: solver_params['wg'] must be a pair (wg_n, wg_m) "
                                f"of positive ints, got {wg!r}")
    return TileParams(rows=rows, cols=cols, vec=vec, wg=(int(wg[0]), int(wg[1])),
                      m_inner=bool(params.get("m_inner", True)))


def _plain(layout: tuple, nsp: int) -> PlainTensor | None:
    st = plain_strides(layout)
    if st is None:
        return None
    return PlainTensor(off0=layout[0], sn=st[0], sc=st[1], ssp=tuple(st[2:2 + nsp]))


def _stage(plan: Plan, ref, layout: tuple, n_elems: int, mb: int, ch: int, sp: tuple,
           lo: list, hi: list) -> tuple[PlainTensor, tuple, list]:
    """Copy activation ``[mb, ch, sp...]`` into a dense channels-last scratch tensor padded
    with zeros to cover positions ``[lo, hi]`` per dim; returns (its strides, padded sizes,
    left pads)."""
    nsp = len(sp)
    left = [max(0, -a) for a in lo]
    right = [max(0, b - (n - 1)) for b, n in zip(hi, sp)]
    psp = tuple(n + a + b for n, a, b in zip(sp, left, right))
    P = prod(psp)
    off = plan.alloc(mb * P * ch)
    # column dims (n, g, ic, k..., o...) stored n, g, k, o..., ic: channels innermost
    order = (0, 1, *range(3, 3 + nsp), *range(3 + nsp, 3 + 2 * nsp), 2)
    ip = Im2ColProblem(nb=mb, groups=1, icg=ch, src_sp=tuple(sp), dst_sp=psp,
                       kernel=(1,) * nsp, strides=(1,) * nsp, dilates=(0,) * nsp,
                       padding_l=tuple(left), src=layout, src_n=n_elems, col_n=-1,
                       order=order, per_item=per_item(plan.engine))
    ip, sizes = im2col_runtime(ip)  # the same problem where sizes must stay baked
    plan.kernel("conv_im2col", ip, build_im2col, src=ref, col=SCRATCH, n0=0, col_off=off,
                **sizes)
    ssp = tuple(ch * prod(psp[d + 1:]) for d in range(nsp))
    return PlainTensor(off0=off, sn=P * ch, sc=1, ssp=ssp), psp, left


def _covered(t: PlainTensor | None, lo: list, hi: list, sp: tuple) -> bool:
    return t is not None and all(a >= 0 for a in lo) and all(b < n for b, n in zip(hi, sp))


def _phases(p: ConvProblem) -> list[dict]:
    """The dense sub-problems of forward (one) or backward data (one per stride phase)."""
    nsp = p.nsp
    if p.kind == "fwd":
        return [dict(jsp=tuple(p.dst_sp), a_stride=tuple(p.strides),
                     a_off=tuple(-v for v in p.padding_l),
                     a_step=tuple(d + 1 for d in p.dilates), taps=tuple(p.kernel),
                     wt0=(0,) * nsp, wstep=(1,) * nsp, o_stride=(1,) * nsp, o_off=(0,) * nsp)]
    per_dim = []
    for d in range(nsp):
        s, dl, pl, K, n_in = p.strides[d], p.dilates[d] + 1, p.padding_l[d], p.kernel[d], \
            p.src_sp[d]
        opts = []
        for i0 in range(min(s, n_in)):
            J = -(-(n_in - i0) // s)
            valid = [t for t in range(K) if (i0 + pl - t * dl) % s == 0]
            if valid:
                t0, step = valid[0], s // math.gcd(dl, s)
                assert valid == list(range(t0, K, step))
                c0 = (i0 + pl - t0 * dl) // s
                opts.append((J, 1, c0, -(step * dl // s), len(valid), t0, step, s, i0))
            else:
                opts.append((J, 1, 0, 0, 0, 0, 1, s, i0))
        per_dim.append(opts)
    out = []
    for combo in itertools.product(*per_dim):
        cols = list(zip(*combo))
        out.append(dict(jsp=cols[0], a_stride=cols[1], a_off=cols[2], a_step=cols[3],
                        taps=cols[4], wt0=cols[5], wstep=cols[6], o_stride=cols[7],
                        o_off=cols[8]))
    return out


def _read_range(phases: list[dict], nsp: int) -> tuple[list, list]:
    """Lowest and highest activation position the phases read, per dim."""
    lo, hi = [0] * nsp, [-1] * nsp
    first = True
    for ph in phases:
        if any(t == 0 for t in ph["taps"]):
            continue
        for d in range(nsp):
            ext = (ph["taps"][d] - 1) * ph["a_step"][d]
            a = ph["a_off"][d] + min(0, ext)
            b = ph["a_off"][d] + (ph["jsp"][d] - 1) * ph["a_stride"][d] + max(0, ext)
            lo[d] = a if first else min(lo[d], a)
            hi[d] = b if first else max(hi[d], b)
        first = False
    return lo, hi


def _build(p: ConvProblem, params: dict, engine, dry: bool) -> Plan:
    plan = Plan(engine, "implicit_gemm", params, dry=dry)
    t = tile_params(params)
    if p.kind == "bwd_w":
        _weights(plan, p, params, t)
    else:
        _data(plan, p, t)
    return plan


def _data(plan: Plan, p: ConvProblem, t: TileParams) -> None:
    nsp = p.nsp
    fwd = p.kind == "fwd"
    if fwd:
        a_ref, a_lay, a_n, a_ch, a_sp = SRC, p.src, p.src_n, p.ic, p.src_sp
        kch, nch, out, out_n, out_ref = p.icg, p.ocg, p.dst, p.dst_n, DST
    else:
        a_ref, a_lay, a_n, a_ch, a_sp = DST, p.dst, p.dst_n, p.oc, p.dst_sp
        kch, nch, out, out_n, out_ref = p.ocg, p.icg, p.src, p.src_n, SRC
    phases = _phases(p)
    lo, hi = _read_range(phases, nsp)
    # the packed weights first: their place in the scratchpad does not depend on the
    # spatial sizes, so neither does the packing kernel
    npan = -(-nch // t.cols)
    wp_off = plan.alloc(p.groups * npan * p.K * kch * t.cols)
    a = _plain(a_lay, nsp)
    if not _covered(a, lo, hi, a_sp):
        a, _, left = _stage(plan, a_ref, a_lay, a_n, p.mb, a_ch, a_sp, lo, hi)
        a_ref = SCRATCH
        phases = [{**ph, "a_off": tuple(v + l for v, l in zip(ph["a_off"], left))}
                  for ph in phases]
    wpp = WeiPackProblem(groups=p.groups, kch=kch, nch=nch, kernel=tuple(p.kernel), wei=p.wei,
                         wei_n=p.wei_n, cols=t.cols, transpose=not fwd, wp_off=wp_off,
                         per_item=per_item(plan.engine))
    plan.kernel("conv_igemm_pack_wei", wpp, build_wei_pack, wei=WEI, wp=SCRATCH)
    runtime = runtime_sizes(p, out, phases)
    a_args = {}
    if runtime:
        a, a_args = _sym_plain(a, "a", a_ch)
        out, o_args = _sym_layout(out, "o", p.ic if not fwd else p.oc)
        a_args.update(o_args)
        out_n = -1
    for ph in phases:
        size_args = {}
        if runtime:
            jsp = ph["jsp"]
            # ("rows" would collide with Plan.launch's own parameter)
            sizes, size_args = symbolize({"mb": p.mb, "nrows": p.mb * prod(jsp),
                                          **{f"j{d}": v for d, v in enumerate(jsp)}})
            ph = {**ph, "jsp": tuple(sizes[f"j{d}"] for d in range(nsp))}
            size_args.update(a_args)
            extra = {"mb": sizes["mb"], "rows": sizes["nrows"] if all(ph["taps"]) else None,
                     "tall": p.mb * prod(jsp) >= t.rows}
        else:
            extra = {"mb": p.mb}
        dp = IgemmDataProblem(
            groups=p.groups, kch=kch, nch=nch, a=a, kernel=tuple(p.kernel),
            wp_off=wp_off, out=out, out_n=out_n, bias=p.bias, bias_n=p.bias_n,
            post_ops=p.post_ops, tile=t, **extra, **ph)
        plan.kernel("conv_igemm_data", dp, build_igemm_data, a=a_ref, wp=SCRATCH, out=out_ref,
                    bias=BIAS, **size_args)


def runtime_sizes(p: ConvProblem, out: tuple, phases: list[dict]) -> bool:
    """Whether the data kernels take minibatch, spatial sizes and the activations' strides
    at run time (one program for every size): plain output layouts without binary post-ops
    (their operands' layouts stay baked), and at most two spatial dims where a phase reads
    nothing (its fill kernel's loop over the outer positions must stay affine)."""
    if plain_strides(out) is None or any(op[0] == "binary" for op in p.post_ops):
        return False
    return p.nsp <= 2 or all(all(ph["taps"]) for ph in phases)


def _sym_strides(values: dict, channels: int) -> tuple[dict, dict]:
    """Size variables for the strides and offsets of ``values``. A stride of 1 or of the
    tensor's channel count (the innermost spatial stride of a channels-last tensor) stays
    baked: it does not change with the spatial sizes, contiguous vector loads and stores need
    the unit stride at compile time, and a constant tap stride let the 7x7 stem (3 input
    channels) keep its unrolled addresses (a run-time one ran it at 0.62-0.78x)."""
    keep = {k: v for k, v in values.items() if v in (1, channels) and not k.endswith("off0")}
    fields, args = symbolize({k: v for k, v in values.items() if k not in keep})
    return {**fields, **keep}, args


def _sym_plain(t: PlainTensor, name: str, channels: int) -> tuple[PlainTensor, dict]:
    vals = {f"{name}_off0": t.off0, f"{name}_sn": t.sn, f"{name}_sc": t.sc,
            **{f"{name}_s{d}": v for d, v in enumerate(t.ssp)}}
    f, args = _sym_strides(vals, channels)
    return PlainTensor(off0=f[f"{name}_off0"], sn=f[f"{name}_sn"], sc=f[f"{name}_sc"],
                       ssp=tuple(f[f"{name}_s{d}"] for d in range(len(t.ssp)))), args


def _sym_layout(layout: tuple, name: str, channels: int) -> tuple[tuple, dict]:
    """A plain layout ``(off0, ((1, stride, ()), ...))`` with size variables."""
    off0, per = layout
    vals = {f"{name}_off0": off0, **{f"{name}_d{d}": st for d, (_, st, _) in enumerate(per)}}
    f, args = _sym_strides(vals, channels)
    return (f[f"{name}_off0"], tuple((1, f[f"{name}_d{d}"], ()) for d in range(len(per)))), args


def _weights(plan: Plan, p: ConvProblem, params: dict, t: TileParams) -> None:
    nsp = p.nsp
    lo = [-v for v in p.padding_l]
    hi = [(p.dst_sp[i] - 1) * p.strides[i] - p.padding_l[i] + (p.kernel[i] - 1)
          * (p.dilates[i] + 1) for i in range(nsp)]
    src = _plain(p.src, nsp)
    src_ref = SRC
    pl = tuple(p.padding_l)
    if not _covered(src, lo, hi, p.src_sp):
        src, _, left = _stage(plan, SRC, p.src, p.src_n, p.mb, p.ic, p.src_sp, lo, hi)
        src_ref = SCRATCH
        pl = tuple(v - l for v, l in zip(pl, left))
    dst = _plain(p.dst, nsp)
    dst_ref = DST
    if dst is None or (dst.sc != 1 and p.ocg > 1):  # vector loads along channels
        dst, _, _ = _stage(plan, DST, p.dst, p.dst_n, p.mb, p.oc, p.dst_sp, [0] * nsp,
                           [n - 1 for n in p.dst_sp])
        dst_ref = SCRATCH
    R = p.mb * prod(p.dst_sp[:-1])
    splits = params.get("splits", 1)
    if isinstance(splits, bool) or not isinstance(splits, int) or splits < 1:
        raise invalid_arguments(f"implicit_gemm: solver_params['splits'] must be a positive "
                                f"int, got {splits!r}")
    splits = largest_divisor_at_most(R, splits)
    M = p.K * p.icg
    part_off = plan.alloc(splits * p.groups * M * p.ocg) if splits > 1 else 0
    sizes = {"mb": p.mb, "dst_sp": tuple(p.dst_sp)}
    size_args = {}
    if splits == 1:  # run-time sizes (a split's slices divide the sizes: GPUs keep them)
        f, size_args = symbolize({"mb": p.mb, "nrows": R,
                                  **{f"j{d}": v for d, v in enumerate(p.dst_sp)}})
        src, a_args = _sym_plain(src, "a", p.ic)
        dst, o_args = _sym_plain(dst, "o", p.oc)
        size_args.update(a_args, **o_args)
        sizes = {"mb": f["mb"], "dst_sp": tuple(f[f"j{d}"] for d in range(nsp)),
                 "rows": f["nrows"]}
    wp = IgemmWeiProblem(groups=p.groups, icg=p.icg, ocg=p.ocg, kernel=tuple(p.kernel),
                         strides=tuple(p.strides), dilates=tuple(p.dilates), padding_l=pl,
                         src=src, dst=dst, wei=p.wei, wei_n=p.wei_n, splits=splits,
                         part_off=part_off, tile=t, **sizes)
    plan.kernel("conv_igemm_wei", wp, build_igemm_wei, src=src_ref, dst=dst_ref, wei=WEI,
                part=SCRATCH, **size_args)
    if splits > 1:
        rp = WeiReduceProblem(groups=p.groups, icg=p.icg, ocg=p.ocg, kernel=tuple(p.kernel),
                              splits=splits, part_off=part_off, wei=p.wei, wei_n=p.wei_n,
                              per_item=per_item(plan.engine))
        plan.kernel("conv_igemm_wei_reduce", rp, build_wei_reduce, part=SCRATCH, wei=WEI)
    if p.bias is not None:
        add_bias_grad(plan, p)
