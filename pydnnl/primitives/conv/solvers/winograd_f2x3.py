"""Winograd F(2x2, 3x3): forward 2-D convolutions with 3x3 kernels, stride 1, no dilation.

Filter transform (once per execution), input transform of a chunk of images into 4x4 tiles,
16 GEMMs per group ``M[T, OCg] = V[T, ICg] @ U[ICg, OCg]`` in one batched launch, then the
output transform with bias and post-ops writing dst in any layout. 2.25x fewer multiplies
than direct; the transforms cost memory traffic, so it pays for wide layers.

Accuracy: the transforms multiply by 0.5 and add up to 9 (output) or 16 (input) terms, so
rounding errors are a few ulps of the largest intermediate instead of one rounding per
product; results stay within ~1e-5 of the magnitude of the output, not of each element.
"""
from __future__ import annotations

from ....kernels.conv_direct import largest_divisor_at_most
from ....kernels.conv_winograd import WinogradProblem, build_winograd
from ....kernels.matmul import GemmShape
from ..plan import BIAS, DST, SCRATCH, SRC, WEI, Plan
from ..problem import ConvProblem
from . import Solver


class WinogradF2x3Solver(Solver):
    name = "winograd_f2x3"
    family = "winograd"
    act_family = "nhwc"
    wei_order = "gkio"  # the filter transform's work-items run along OC: contiguous loads

    def why_not(self, problem: ConvProblem, engine) -> str:
        p = problem
        if p.kind != "fwd":
            return "Winograd F(2x2,3x3) implements forward convolution only"
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
        return {"chunk_mb": 64}

    def tuning_space(self, problem: ConvProblem, engine) -> list[dict]:
        return [{"chunk_mb": c} for c in (8, 64, 256)]

    def workspace_bytes(self, problem: ConvProblem, params: dict | None = None) -> int:
        return _build(problem, params or {"chunk_mb": 64}, None, True).scratch_bytes

    def build_plan(self, problem: ConvProblem, params: dict, engine) -> Plan:
        return _build(problem, params, engine, False)


def _build(p: ConvProblem, params: dict, engine, dry: bool) -> Plan:
    plan = Plan(engine, "winograd_f2x3", params, dry=dry)
    G, ICg, OCg = p.groups, p.icg, p.ocg
    TH, TW = -(-p.dst_sp[0] // 2), -(-p.dst_sp[1] // 2)
    per_image = 16 * G * TH * TW * (ICg + OCg)
    cap = max(1, int(float(params.get("chunk_mb", 64)) * (1 << 18)))  # float32 elements
    nb = largest_divisor_at_most(p.mb, max(1, cap // per_image))
    T = nb * TH * TW
    u_off = plan.alloc(16 * G * ICg * OCg)
    v_off = plan.alloc(16 * G * T * ICg)
    m_off = plan.alloc(16 * G * T * OCg)
    common = dict(nb=nb, groups=G, icg=ICg, ocg=OCg, src_sp=p.src_sp, dst_sp=p.dst_sp,
                  padding_l=p.padding_l)
    fp = WinogradProblem("filter", **common, wei=p.wei, wei_n=p.wei_n)
    plan.kernel("conv_winograd", fp, build_winograd, wei=WEI, u=SCRATCH, u_off=u_off)
    ip = WinogradProblem("input", **common, act=p.src, act_n=p.src_n)
    op = WinogradProblem("output", **common, act=p.dst, act_n=p.dst_n, bias=p.bias,
                         bias_n=p.bias_n, post_ops=p.post_ops)
    shape = GemmShape(m=T, n=OCg, k=ICg, lda=ICg, ldb=OCg, ldc=OCg)
    for c0 in range(0, p.mb, nb):
        plan.kernel("conv_winograd", ip, build_winograd, src=SRC, v=SCRATCH, n0=c0, v_off=v_off)
        # the 16 * G products in one batched launch (16 * G launches cost ~17 us each of
        # enqueue on NVIDIA's OpenCL, more than a small layer's GEMMs)
        plan.gemm_batched(shape, 16 * G, T * ICg, ICg * OCg, T * OCg, SCRATCH, v_off,
                          SCRATCH, u_off, SCRATCH, m_off)
        plan.kernel("conv_winograd", op, build_winograd, mm=SCRATCH, dst=DST, bias=BIAS,
                    n0=c0, m_off=m_off)
    return plan
