"""Winograd F(2x2, 3x3): 2-D convolutions with 3x3 kernels, stride 1, no dilation, forward
and backward data (a forward convolution of diff_dst with the spatially flipped filter, its
channel roles exchanged, padded by ``2 - pad_l``: deconvolution forward too); backward
weights with F(3x3, 2x2) (the 2x2 diff_dst tiles as filters over 4x4 input patches).

Filter transform (once per execution), input transform of a chunk of images into 4x4 tiles,
16 GEMMs per group ``M[T, OCg] = V[T, ICg] @ U[ICg, OCg]`` in one batched launch, then the
output transform with bias and post-ops writing dst in any layout. 2.25x fewer multiplies
than direct; the transforms cost memory traffic, so it pays for wide layers.

Accuracy: the transforms multiply by 0.5 and add up to 9 (output) or 16 (input) terms, so
rounding errors are a few ulps of the largest intermediate instead of one rounding per
product; results stay within ~1e-5 of the magnitude of the output, not of each element.

Sizes at run time: the transforms of plain activation layouts take spatial sizes, tile counts
and strides as arguments (:func:`~pydnnl.kernels.conv_winograd.winograd_runtime`), and the
filter and weight-gradient transforms have none, so a new spatial size or minibatch compiles
no transform; the 16-way batched GEMM still bakes its tile count (m, or k for backward
weights).
"""
from __future__ import annotations

from ....conv_shapes import ConvProblem
from ....kernels.conv_common import swap_channel_dims
from ....kernels.conv_direct import largest_divisor_at_most
from ....kernels.conv_winograd import (
    WinogradProblem,
    build_winograd,
    wgrad_along_oc,
    winograd_runtime,
)
from ....kernels.sizevars import size_var
from ....runtime.gemm import GemmShape
from ....runtime.heuristics.conv import winograd_chunk_mb, winograd_packed_filter
from ....runtime.plan import SCRATCH, Plan
from ..roles import BIAS, DST, SRC, WEI
from .base import Solver
from .direct import add_bias_grad


class WinogradF2x3Solver(Solver):
    name = "winograd_f2x3"
    family = "winograd"
    act_family = "nhwc"
    wei_order = "gkio"  # the filter transform's work-items run along OC: contiguous loads

    def why_not(self, problem: ConvProblem, engine) -> str:
        p = problem
        if p.nsp != 2:
            return f"Winograd F(2x2,3x3) needs a 2-D problem, got {p.nsp}-D"
        if tuple(p.kernel) != (3, 3):
            return f"Winograd F(2x2,3x3) needs a 3x3 kernel, got {'x'.join(map(str, p.kernel))}"
        if any(s != 1 for s in p.strides):
            return f"Winograd F(2x2,3x3) needs stride 1, got strides {list(p.strides)}"
        if any(d != 0 for d in p.dilates):
            return f"Winograd F(2x2,3x3) needs no dilation, got dilates {list(p.dilates)}"
        return ""

    def is_applicable(self, problem: ConvProblem, engine) -> bool:
        return not self.why_not(problem, engine)

    def default_params(self, problem: ConvProblem, engine) -> dict:
        # (an optional "wg": the transforms' work-group size, 64 when absent)
        out = {"chunk_mb": 64}
        chunk = winograd_chunk_mb(engine.info if engine is not None else None)
        if chunk is not None:  # CPUs: each product's operands within a core's cache
            out["chunk_mb"] = chunk
        if problem.kind == "bwd_w":
            # GPUs: the products' sum over tiles (k of 16 x groups small GEMMs) in up to 32
            # slices of at least 256 tiles, so that enough work-groups run; the wgrad
            # transform adds the slices up
            gpu = engine is not None and engine.info.is_gpu
            out["splits"] = 32 if gpu else 1
        return out

    def tuning_space(self, problem: ConvProblem, engine) -> list[dict]:
        base = self.default_params(problem, engine)
        return [{**base, "chunk_mb": c} for c in (8, 64, 256)]

    def workspace_bytes(self, problem: ConvProblem, params: dict | None = None) -> int:
        return _build(problem, params or {"chunk_mb": 64}, None, True).scratch_bytes

    def build_plan(self, problem: ConvProblem, params: dict, engine) -> Plan:
        return _build(problem, params, engine, False)


# the spatial fields of the filter and wgrad stages, which have no spatial size: one program
# per (channels, weights layout) whatever the images
_NO_SPACE = dict(nb=0, src_sp=(), dst_sp=(), padding_l=())


def _forward_view(p: ConvProblem):
    """``(ICg, OCg, in sp, out sp, padding_l, in layout/size/role, out layout/size/role,
    weights layout, flip)`` of the forward convolution the plan runs. Backward data (stride 1,
    3x3) is one: ``dx = dy`` correlated with the filter flipped in space and its channel
    roles exchanged, ``dy`` padded by ``2 - pad_l``."""
    if p.kind == "fwd":
        return (p.icg, p.ocg, p.src_sp, p.dst_sp, p.padding_l, (p.src, p.src_n, SRC),
                (p.dst, p.dst_n, DST), p.wei, False)
    pad = tuple(2 - v for v in p.padding_l)
    return (p.ocg, p.icg, p.dst_sp, p.src_sp, pad, (p.dst, p.dst_n, DST),
            (p.src, p.src_n, SRC), swap_channel_dims(p.wei), True)


def _build(p: ConvProblem, params: dict, engine, dry: bool) -> Plan:
    if p.kind == "bwd_w":
        return _build_wgrad(p, params, engine, dry)
    plan = Plan(engine, "winograd_f2x3", params, dry=dry)
    G = p.groups
    ICg, OCg, in_sp, out_sp, pad, (a_in, a_in_n, r_in), (a_out, a_out_n, r_out), wei, flip = \
        _forward_view(p)
    TH, TW = -(-out_sp[0] // 2), -(-out_sp[1] // 2)
    per_image = 16 * G * TH * TW * (ICg + OCg)
    cap = max(1, int(float(params.get("chunk_mb", 64)) * (1 << 18)))  # float32 elements
    nb = largest_divisor_at_most(p.mb, max(1, cap // per_image))
    T = nb * TH * TW
    u_off = plan.alloc(16 * G * ICg * OCg)
    v_off = plan.alloc(16 * G * T * ICg)
    m_off = plan.alloc(16 * G * T * OCg)
    wg = int(params.get("wg", 64))
    common = dict(nb=nb, groups=G, icg=ICg, ocg=OCg, src_sp=in_sp, dst_sp=out_sp,
                  padding_l=pad, wg=wg)
    fp = WinogradProblem("filter", **_NO_SPACE, groups=G, icg=ICg, ocg=OCg, wei=wei,
                         wei_n=p.wei_n, flip=flip, wg=wg)
    plan.kernel("conv_winograd", fp, build_winograd, wei=WEI, u=SCRATCH, u_off=u_off)
    ip, i_sizes = winograd_runtime(WinogradProblem("input", **common, act=a_in, act_n=a_in_n))
    op, o_sizes = winograd_runtime(WinogradProblem(
        "output", **common, act=a_out, act_n=a_out_n, bias=p.bias, bias_n=p.bias_n,
        post_ops=p.post_ops))
    shape = GemmShape(m=T, n=OCg, k=ICg, lda=ICg, ldb=OCg, ldc=OCg)
    # the transformed filters as the products' B: packed once per execution into the
    # panels of their tuned kernel where it reads packed B (CPUs' register tiles)
    b_ref, b_off, b_step, b_params = SCRATCH, u_off, ICg * OCg, None
    # (the dry run, without an engine, reserves the packed copy for any device)
    if dry or winograd_packed_filter(engine.info, p.mb * TH * TW, 4 * ICg * OCg):
        b_ref, b_off, b_step, b_params = plan.pack_b_batched(shape, 16 * G, SCRATCH, u_off,
                                                             ICg * OCg)
    for c0 in range(0, p.mb, nb):
        plan.kernel("conv_winograd", ip, build_winograd, src=r_in, v=SCRATCH, n0=c0,
                    v_off=v_off, **i_sizes)
        # the 16 * G products in one batched launch (16 * G launches cost ~17 us each of
        # enqueue on NVIDIA's OpenCL, more than a small layer's GEMMs)
        plan.gemm_batched(shape, 16 * G, T * ICg, b_step, T * OCg, SCRATCH, v_off,
                          b_ref, b_off, SCRATCH, m_off, params=b_params)
        plan.kernel("conv_winograd", op, build_winograd, mm=SCRATCH, dst=r_out, bias=BIAS,
                    n0=c0, m_off=m_off, **o_sizes)
    return plan


def _slices(T: int, splits: int, engine, icg: int, ocg: int, groups: int) -> int:
    """Slices of the tile sum: at most ``splits``, >= 256 tiles each. On GPUs, for products
    of >= 64 x 64, the largest count leaving slices of >= 512 tiles and a multiple of 16
    (the SGEMM's 16-deep steps, which then takes the batch: ``heuristics.gemm.nv_tile``)
    where its products give every compute unit a 32 x 64 block. H200, mb 32: res3a 0.475 ->
    0.274 ms, res2a 0.57 -> 0.40; at mb 1 res2a's 16 products of one slice (32 blocks) lost
    (0.068 -> 0.077 ms) and keep the first count."""
    first = largest_divisor_at_most(T, max(1, min(splits, T // 256 or 1)))
    if engine is None or not engine.info.is_gpu or min(icg, ocg) < 64:
        return first
    per_slice = 16 * groups * -(-icg // 32) * -(-ocg // 64)
    for s in range(min(splits, T // 512), 0, -1):
        if T % s == 0 and (T // s) % 16 == 0:
            return s if s * per_slice >= engine.info.compute_units else first
    return first


def _build_wgrad(p: ConvProblem, params: dict, engine, dry: bool) -> Plan:
    """Backward weights with F(3x3, 2x2): per chunk of images the input patches (the
    forward's input transform) and the 2x2 diff_dst tiles are transformed, 16 x groups x
    slices products ``M = U^T V`` sum over the tiles (accumulating over chunks), then one
    transform per weight adds the slices and writes the 3x3 gradient."""
    plan = Plan(engine, "winograd_f2x3", params, dry=dry)
    G, ICg, OCg = p.groups, p.icg, p.ocg
    TH, TW = -(-p.dst_sp[0] // 2), -(-p.dst_sp[1] // 2)
    per_image = 16 * G * TH * TW * (ICg + OCg)
    cap = max(1, int(float(params.get("chunk_mb", 64)) * (1 << 18)))
    nb = largest_divisor_at_most(p.mb, max(1, cap // per_image))
    T = nb * TH * TW
    S = _slices(T, int(params.get("splits", 1)), engine, ICg, OCg, G)
    Ts = T // S
    plan.params["slices"] = S  # what the plan uses (splits capped: >= 256 tiles a slice)
    u_off = plan.alloc(16 * G * T * OCg)
    v_off = plan.alloc(16 * G * T * ICg)
    m_off = plan.alloc(16 * G * S * OCg * ICg)
    wg = int(params.get("wg", 64))
    common = dict(nb=nb, groups=G, icg=ICg, ocg=OCg, src_sp=p.src_sp, dst_sp=p.dst_sp,
                  padding_l=p.padding_l, wg=wg)
    ip, i_sizes = winograd_runtime(WinogradProblem("input", **common, act=p.src, act_n=p.src_n))
    dp, d_sizes = winograd_runtime(WinogradProblem("dy", **common, act=p.dst, act_n=p.dst_n))
    along_oc = wgrad_along_oc(p.wei)
    # where the slice count may follow the tile count (splits > 1: GPUs), the transform
    # takes it at run time, and the batched products their count: one program for any size
    rt_slices = int(params.get("splits", 1)) > 1
    wp = WinogradProblem("wgrad", **_NO_SPACE, groups=G, icg=ICg, ocg=OCg, wei=p.wei,
                         wei_n=p.wei_n, slices=size_var("nslices") if rt_slices else S, wg=wg,
                         along_oc=along_oc)
    w_sizes = {"nslices": S} if rt_slices else {}
    for c0 in range(0, p.mb, nb):
        plan.kernel("conv_winograd", ip, build_winograd, src=SRC, v=SCRATCH, n0=c0,
                    v_off=v_off, **i_sizes)
        plan.kernel("conv_winograd", dp, build_winograd, dy=DST, u=SCRATCH, n0=c0,
                    u_off=u_off, **d_sizes)
        beta = 0.0 if c0 == 0 else 1.0
        if along_oc:  # M^T = V^T U: the products [ICg][OCg] (see wgrad_along_oc)
            shape = GemmShape(m=ICg, n=OCg, k=Ts, lda=ICg, ldb=OCg, ldc=OCg, trans_a=True,
                              beta=beta)
            plan.gemm_batched(shape, 16 * G * S, Ts * ICg, Ts * OCg, OCg * ICg, SCRATCH,
                              v_off, SCRATCH, u_off, SCRATCH, m_off)
        else:
            shape = GemmShape(m=OCg, n=ICg, k=Ts, lda=OCg, ldb=ICg, ldc=ICg, trans_a=True,
                              beta=beta)
            plan.gemm_batched(shape, 16 * G * S, Ts * OCg, Ts * ICg, OCg * ICg, SCRATCH,
                              u_off, SCRATCH, v_off, SCRATCH, m_off)
    plan.kernel("conv_winograd", wp, build_winograd, mm=SCRATCH, wei=WEI, m_off=m_off,
                **w_sizes)
    if p.bias is not None:
        add_bias_grad(plan, p)
    return plan
