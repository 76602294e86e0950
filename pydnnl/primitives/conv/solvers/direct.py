"""Direct convolution: one loopy kernel per direction, any layout, bias and post-ops fused.

Forward and backward data: one work-item per output point and ``tile`` channels (a register
tile), reading the input through its layout terms; backward weights: one work-item per weight
element and ``tile`` output channels, summing over images and output points; the bias gradient
is a separate work-group reduction per channel. Applies to every problem; fastest where GEMMs
would be tiny (depthwise and other grouped convolutions with few channels per group).

Where the kernel would read outside the input (padding), the input is first copied into a
zero-padded scratch tensor (the im2col kernel with a 1x1 kernel), so that the inner loops have
no bounds tests: CPU compilers vectorise them, 10-40x faster than guarded loads. Backward data
pads diff_dst likewise when every stride is 1 (strided backward data keeps its tests).
"""
from __future__ import annotations

from dataclasses import replace

from ....conv_shapes import ConvProblem
from ....kernels.channel_sums import ChannelSlices, build_channel_slices, slice_count
from ....kernels.conv_direct import (
    DirectParams,
    build_direct,
    direct_runtime,
    largest_divisor_at_most,
)
from ....kernels.conv_im2col import (
    BiasGradProblem,
    Im2ColProblem,
    bias_grad_runtime,
    build_bias_grad,
    build_im2col,
    channels_last_rows,
    im2col_runtime,
)
from ....runtime.heuristics import conv as conv_rules
from ....runtime.plan import SCRATCH, Plan
from ..problem import dense_layout, with_offset
from ..roles import BIAS, DST, SRC, WEI
from .base import Solver


def _tiled_channels(problem: ConvProblem) -> int:
    return problem.icg if problem.kind == "bwd_d" else problem.ocg


class DirectSolver(Solver):
    name = "direct"
    family = "direct"
    act_family = "nchw"
    wei_order = "goik"

    def default_params(self, problem: ConvProblem, engine) -> dict:
        gpu = engine.info.is_gpu
        cap = 4 if problem.kind == "bwd_w" else 8
        return {"tile": largest_divisor_at_most(_tiled_channels(problem), cap),
                "wg": 64 if gpu else 8}

    def tuning_space(self, problem: ConvProblem, engine) -> list[dict]:
        c = _tiled_channels(problem)
        tiles = sorted({largest_divisor_at_most(c, t) for t in (1, 2, 4, 8, 16)})
        return [{"tile": t, "wg": wg} for t in tiles for wg in (8, 16, 32, 64)]

    def workspace_bytes(self, problem: ConvProblem, params: dict | None = None) -> int:
        plan = Plan(None, self.name, {}, dry=True)
        if (params or {}).get("pad", True):
            _prepad(plan, problem)
        if problem.kind == "bwd_w" and problem.bias is not None:  # its partial sums
            add_bias_grad(plan, problem)
        return plan.scratch_bytes

    def build_plan(self, problem: ConvProblem, params: dict, engine) -> Plan:
        tile = int(params.get("tile", 1))
        if _tiled_channels(problem) % tile:
            tile = largest_divisor_at_most(_tiled_channels(problem), tile)
        plan = Plan(engine, self.name, {**params, "tile": tile})
        p, src_ref, dst_ref = problem, SRC, DST
        padded = bool(params.get("pad", True))
        if padded:
            p, src_ref, dst_ref = _prepad(plan, p)
        if p.kind == "bwd_w":  # the kernel writes diff_weights only; add_bias_grad sums the bias
            p = replace(p, bias=None, bias_n=0)
        knobs = DirectParams(tile, int(params.get("wg", 16)), int(params.get("wtile", 1)),
                             bool(params.get("index64", True)))
        # minibatch, spatial sizes and activation strides as kernel arguments: one program
        # serves every size of the layer's class (baked for blocked layouts, binary post-ops).
        # By default only backward weights: forward and backward data with a run-time width
        # ran MobileNet's depthwise layers at 1.2-1.4x of baked on the AVX-512 Xeon (2 cores;
        # 56x56x128 forward 0.86 -> 1.20 ms: each work-item sums only 9 taps, and the
        # compiler's addressing of a run-time width costs as much; guarded, clamped or moved
        # last work-groups alike); backward weights 0.99-1.02x (7x7 layers: 0.02-0.04 ms
        # more). ``runtime_sizes`` in the params turns it on or off per direction.
        if bool(params.get("runtime_sizes", p.kind == "bwd_w")):
            p, sizes, guards = direct_runtime(p, padded, knobs)
        else:
            sizes, guards = {}, None
        plan.kernel("conv_direct", (p, knobs, guards), lambda key: build_direct(*key),
                    src=src_ref, wei=WEI, dst=dst_ref, bias=BIAS, **sizes)
        if problem.kind == "bwd_w" and problem.bias is not None:
            add_bias_grad(plan, problem)
        return plan


def per_item(engine) -> int:
    """Elements per work-item of the padding copy: CPU runtimes pay per work-group."""
    return 4 if engine is not None and engine.info.is_gpu else 64


def _pad_copy(plan: Plan, p, which: str, lo: list, hi: list):
    """Copy activation ``which`` (src or dst) into scratch, zero-padded to cover the index
    range ``[lo, hi]`` per spatial dim; returns (layout, padded sizes, left pads)."""
    sp = p.src_sp if which == "src" else p.dst_sp
    ch = p.ic if which == "src" else p.oc
    left = [max(0, -a) for a in lo]
    right = [max(0, b - (n - 1)) for b, n in zip(hi, sp)]
    psp = tuple(n + a + b for n, a, b in zip(sp, left, right))
    nsp = len(sp)
    size = p.mb * ch
    for v in psp:
        size *= v
    off = plan.alloc(size)
    order = list(range(3 + 2 * nsp))  # (n, g, ic, k..., o...): a dense nchw copy
    ip = Im2ColProblem(nb=p.mb, groups=1, icg=ch, src_sp=tuple(sp), dst_sp=psp,
                       kernel=(1,) * nsp, strides=(1,) * nsp, dilates=(0,) * nsp,
                       padding_l=tuple(left), src=p.src if which == "src" else p.dst,
                       src_n=p.src_n if which == "src" else p.dst_n, col_n=-1,
                       order=tuple(order), per_item=per_item(plan.engine))
    ip, sizes = im2col_runtime(ip)
    plan.kernel("conv_im2col", ip, build_im2col, src=SRC if which == "src" else DST,
                col=SCRATCH, n0=0, col_off=off, **sizes)
    lay = with_offset(dense_layout([p.mb, ch, *psp], list(range(2 + nsp))), off)
    return lay, psp, left, off + size


def _prepad(plan: Plan, p: ConvProblem) -> tuple:
    """The problem as the direct kernel sees it after padding copies (when any are needed),
    with the buffers it then reads src and dst from."""
    nsp = p.nsp
    ext = [(k - 1) * (d + 1) for k, d in zip(p.kernel, p.dilates)]
    if p.kind in ("fwd", "bwd_w"):
        lo = [-p.padding_l[i] for i in range(nsp)]
        hi = [(p.dst_sp[i] - 1) * p.strides[i] - p.padding_l[i] + ext[i] for i in range(nsp)]
        if all(a >= 0 for a in lo) and all(b < n for b, n in zip(hi, p.src_sp)):
            return p, SRC, DST
        lay, psp, left, n = _pad_copy(plan, p, "src", lo, hi)
        pl = tuple(a - b for a, b in zip(p.padding_l, left))
        return replace(p, src=lay, src_n=n, src_spatial=psp, padding_l=pl), SCRATCH, DST
    if any(s != 1 for s in p.strides):
        return p, SRC, DST
    lo = [p.padding_l[i] - ext[i] for i in range(nsp)]
    hi = [p.src_sp[i] - 1 + p.padding_l[i] for i in range(nsp)]
    if all(a >= 0 for a in lo) and all(b < n for b, n in zip(hi, p.dst_sp)):
        return p, SRC, DST
    lay, psp, left, n = _pad_copy(plan, p, "dst", lo, hi)
    pl = tuple(a + b for a, b in zip(p.padding_l, left))
    return replace(p, dst=lay, dst_n=n, dst_spatial=psp, padding_l=pl), SRC, SCRATCH


def add_bias_grad(plan: Plan, p: ConvProblem) -> None:
    """diff_bias = channel sums of diff_dst (of src for deconvolution)."""
    if p.bias_of == "dst":
        t, t_n, ch, sp, ref = p.dst, p.dst_n, p.oc, p.dst_sp, DST
    else:
        t, t_n, ch, sp, ref = p.src, p.src_n, p.ic, p.src_sp, SRC
    rows = channels_last_rows(t, ch, sp, p.mb)
    mb, rule = p.mb, None
    if rows is not None:
        # channels contiguous, images and points dense: per-channel sums over slices of the
        # rows (work-items along the channels), then the slices' sums added up. The
        # scratchpad holds the most slices any device takes (a size the problem fixes)
        nrows, t_off = rows
        part_off = plan.alloc(slice_count(nrows) * ch)
        rule = conv_rules.bias_grad_slicing(plan.engine.info if plan.engine else None,
                                            nrows, ch)
    if rule is not None:
        per_slice, wg, vec, row_lanes = rule
        S = slice_count(nrows, per_slice)
        cs = ChannelSlices(channels=ch, row_stride=ch, wg=wg, vec=vec, row_lanes=row_lanes)
        plan.kernel("channel_slices", cs, build_channel_slices, t=ref, part=SCRATCH,
                    t_off=t_off, part_off=part_off, nrows=nrows, rps=-(-nrows // S),
                    nslices=S)
        t, t_n, sp, mb, ref = (part_off, ((1, S * ch, ()), (1, 1, ()), (1, ch, ()))), -1, \
            (S,), 1, SCRATCH
    bp = BiasGradProblem(mb=mb, channels=ch, sp=sp, t=t, t_n=t_n, bias=p.bias,
                         bias_n=p.bias_n, wg=64)
    bp, sizes = bias_grad_runtime(bp)
    plan.kernel("conv_bias_grad", bp, build_bias_grad, t=ref, bias=BIAS, **sizes)
