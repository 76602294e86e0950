"""int8 convolution forward (oneDNN v3's quantization model): src u8 or s8, weights s8, s32
accumulation, on the integer GEMM of :mod:`pydnnl.kernels.gemm_int8`.

``dst = post_ops(src_scale * wei_scale[oc] * sum (src - zp_src) * wei + bias) / dst_scale +
zp_dst``, rounded to nearest even and saturated into dst's type (f32, s32, s8, u8, bf16, f16).
Scales (``set_scales_mask``): src and dst 0, weights 0 or per output channel (mask 1, grouped
weights 3); zero points (``set_zero_points_mask``): src 0 or per input channel (mask 2,
``zp_src[g * IC/G + ic]``), dst 0 or per output channel (mask 2).

Plan: (a 1x1, stride-1, unpadded convolution over channels-last src reads src itself) a byte
im2col of src into the scratchpad (:mod:`pydnnl.kernels.conv_im2col_int8`; padded
taps hold ``zp_src``, their channel's where it is per channel, so that the GEMM's
compensation cancels them), then the integer GEMM
``[P, Kf] x [Kf, OCg]`` per group and image, its store writing dst (channels-last dst
directly, any other plain dst through a channels-last copy in the scratchpad and a reorder).
The compensation of a common src zero point is ``zp_src`` times each weight column's sum, of
per-channel ones each column's sum of ``zp_src[ic] * w``: both counted by the GEMM's packing
of the weights (:class:`~pydnnl.kernels.gemm_int8.PackProblem` ``kweights``), which reads
every weight at each execution anyway, and subtracted exactly in int32 by its store.

int8 deconvolution forward (solver ``deconv_im2col_gemm_int8``) is the same plan over a transposed
im2col: output point ``p`` and tap ``k`` gather the src position ``i`` with ``i * stride - pad +
k * (dil + 1) = p``, the byte holding ``zp_src`` (its channel's) where none exists (between
strides or outside src), so that the deconvolution's sum of ``(src - zp_src) * wei`` over the
src positions that reach ``p`` comes out of the same GEMM, compensation and store, with the
deconvolution's ``[G, OC/G, IC/G, k...]`` weights as they are. oneDNN's deconvolution takes the
same attributes (its ``deconv_attr_check``), so the checks below serve both.

The GEMM's epilogue sees a destination position ``(g, p, j)`` (group, output point, channel in
the group): the per-channel operands (weights scales, bias) and the binary post-ops' operands
are re-expressed over those dims; an operand varying over images is offset per image.
"""
from __future__ import annotations

import math
from dataclasses import replace

from ...constants import (
    ARG_ATTR_ZERO_POINTS,
    ARG_BIAS,
    ARG_DST,
    ARG_SRC,
    ARG_WEIGHTS,
    algorithm,
    arg_name,
)
from ...error import invalid_arguments, unimplemented
from ...kernels import gemm_int8 as gi
from ...kernels.conv_common import grouped_layout, layout_of, plain_strides
from ...kernels.conv_im2col_int8 import GENERATOR_VERSION, Im2colInt8, build_im2col_int8
from ...kernels.post_ops import describe as describe_post_ops
from ...kernels.post_ops import reads_prior
from ...kernels.reorder import ReorderProblem
from ...memory.data_types import data_type
from ...memory.desc import MemoryDesc
from ...runtime.plan import SCRATCH, Plan, Ref
from ..base import ArgSpec
from ..post_ops import WITH_PRELU, operand_arg, scale_operands, zero_point_operands
from ..post_ops import resolve as resolve_post_ops
from .problem import act_matrix, flat_stride, wei_matrix

SOLVER = "im2col_gemm_int8"
DECONV_SOLVER = "deconv_im2col_gemm_int8"
SRC_TYPES = gi.A_TYPES
_WHICH = {ARG_SRC: "src", ARG_WEIGHTS: "wei", ARG_DST: "dst"}
_NHWC = {1: "acb", 2: "acdb", 3: "acdeb"}
_GOIHW = {1: "abc", 2: "abcd", 3: "abcde"}


class Int8Solver:
    """What the descriptor's solver queries report for an int8 convolution."""

    name = SOLVER
    family = "direct"


class Int8DeconvSolver(Int8Solver):
    """What the descriptor's solver queries report for an int8 deconvolution."""

    name = DECONV_SOLVER


def solver_name(op: str) -> str:
    """The int8 solver of ``op`` (``convolution`` or ``deconvolution``)."""
    return DECONV_SOLVER if op == "deconvolution" else SOLVER


def is_int8(direction: str, descs: dict) -> bool:
    """Whether the problem's leading data tensor is u8 or s8 (oneDNN's int8 convolution)."""
    lead = {"fwd": "src_desc", "bwd_d": "diff_dst_desc", "bwd_w": "src_desc"}[direction]
    md = descs.get(lead)
    return md is not None and md.data_type in SRC_TYPES


def check_types(kind: str, descs: dict) -> None:
    """oneDNN's int8 forward table: weights s8, dst and bias of the integer GEMM's types."""
    src, wei = descs["src_desc"], descs["weights_desc"]
    if wei.data_type != data_type.s8:
        raise unimplemented(f"{kind}: weights_desc data type {wei.data_type.name} with src "
                            f"data type {src.data_type.name}; an int8 convolution takes s8 "
                            f"weights")
    for name, allowed in (("dst_desc", gi.C_TYPES), ("bias_desc", gi.BIAS_TYPES)):
        md = descs.get(name)
        if md is not None and md.data_type not in allowed:
            raise unimplemented(f"{kind}: {name} data type {md.data_type.name} with int8 src; "
                                f"implemented: {', '.join(t.name for t in allowed)}")


def _resolve(descs: dict, nsp: int, grouped: bool) -> dict:
    """``any`` resolved: activations channels-last (the integer GEMM's rows), weights plain
    (``goihw``: each output channel's row of the GEMM's transposed B)."""
    out = {}
    for n, md in descs.items():
        if md is None or not md.is_any():
            out[n] = md
        elif n == "bias_desc":
            out[n] = MemoryDesc(md.dims, md.data_type, "a")
        elif n == "weights_desc":
            out[n] = MemoryDesc(md.dims, md.data_type,
                                "abcdefghijkl"[:len(md.dims)] if grouped else _GOIHW[nsp])
        else:
            other = descs["dst_desc" if n == "src_desc" else "src_desc"]
            tag = _NHWC[nsp]
            if not other.is_any() and other.tag is not None and other.tag.canonical in (
                    _NHWC[nsp], _GOIHW[nsp]):
                tag = other.tag.canonical
            out[n] = MemoryDesc(md.dims, md.data_type, tag)
    return out


def _operand_layout(kind: str, what: str, md: MemoryDesc, G: int, OCg: int,
                    dst_sp: tuple) -> tuple[tuple, tuple, bool]:
    """``(layout, dims, varies over images)`` of an operand over the destination's dims,
    re-expressed over the epilogue's positions ``(g, p, j)``."""
    st = plain_strides(layout_of(md))
    if st is None:
        raise unimplemented(f"{kind}: {what} in a blocked layout with int8 src")
    dims = tuple(md.dims)
    sn, sc, ssp = st[0], st[1], st[2:]
    per_c = dims[1] != 1
    sp = dims[2:]
    if all(v == 1 for v in sp):
        sp_dim, sp_stride = 1, 0
    elif tuple(sp) == tuple(dst_sp):
        sp_stride = flat_stride(ssp, sp)
        if sp_stride is None:
            raise unimplemented(f"{kind}: {what}: its spatial dims {list(sp)} do not flatten "
                                f"into one stride (strides {list(ssp)})")
        sp_dim = math.prod(sp)
    else:
        raise unimplemented(f"{kind}: {what} dims {list(dims)}: broadcast over some spatial "
                            f"dims only is not implemented with int8 src")
    per = ((1, OCg * sc if per_c else 0, ()), (1, sp_stride, ()), (1, sc if per_c else 0, ()))
    pdims = (G if per_c else 1, sp_dim, OCg if per_c else 1)
    return (md.offset0, per), pdims, dims[0] != 1 and sn != 0


def init(pd, descs: dict) -> None:
    """Set up int8 forward descriptor ``pd`` (its geometry validated): layouts, the
    quantization attributes, the post-ops, the scratchpad (from a dry plan)."""
    kind, g = pd._kind, pd._geom
    deconv = pd._op == "deconvolution"
    if pd._alg in (algorithm.convolution_winograd, algorithm.deconvolution_winograd):
        direct = "deconvolution_direct" if deconv else "convolution_direct"
        raise unimplemented(f"{kind}: algorithm {pd._alg.name} with int8 src; "
                            f"implemented: {direct}, convolution_auto")
    check_types(kind, descs)
    nsp = len(g.kernel)
    descs = _resolve(descs, nsp, g.grouped_weights)
    G, OC = g.groups, g.oc
    OCg = OC // G
    dst = descs["dst_desc"]
    # quantization attributes over the epilogue's positions (g, p, j)
    attr = pd._attr
    per_oc = 3 if g.grouped_weights else 1
    scales, texts = [], []
    for arg, mask in attr.scales.items():
        allowed = (0, per_oc) if arg == ARG_WEIGHTS else (0,)
        if arg not in _WHICH:
            raise unimplemented(f"{kind}: scales for {arg_name(arg)}; oneDNN's convolution "
                                f"takes scales for ARG_SRC, ARG_WEIGHTS and ARG_DST only")
        if mask not in allowed:
            raise unimplemented(
                f"{kind}: scales mask {mask} for {arg_name(arg)}; implemented: "
                + (f"0 (common) or {per_oc} (per output channel)" if arg == ARG_WEIGHTS
                   else "0 (one common scale)"))
        scales.append((_WHICH[arg], (G, 1, OCg) if mask else ()))
        texts.append(f"{_WHICH[arg]}:{mask}")
    zps, ztexts, src_zp_k = [], [], False
    for arg, mask in attr.zero_points.items():
        if arg not in (ARG_SRC, ARG_DST):
            raise unimplemented(f"{kind}: zero points for {arg_name(arg)}; implemented for "
                                f"ARG_SRC and ARG_DST")
        if mask not in (0, 2):  # oneDNN's convolution: 0 or 1 << 1 (the channel dim)
            raise unimplemented(
                f"{kind}: zero points mask {mask} for {arg_name(arg)}; implemented: 0 "
                f"(common) or 2 (per {'input' if arg == ARG_SRC else 'output'} channel)")
        if arg == ARG_SRC and mask:
            src_zp_k = True  # per input channel: the GEMM's compensation weighted per k
        else:
            zps.append((_WHICH[arg], (G, 1, OCg) if mask else ()))
        ztexts.append(f"{_WHICH[arg]}:{mask}")
    chain, po_args = (resolve_post_ops(kind, attr, dst, allowed=WITH_PRELU)
                      if attr.get_post_ops().ops else ((), {}))
    epi_chain, per_image = [], []
    for i, op in enumerate(chain):
        if op[0] == "binary":
            md = po_args[operand_arg(i, op)].md
            lay, dims, varies = _operand_layout(kind, f"post-op {i} (binary) src1", md, G,
                                                OCg, g.dst_spatial)
            epi_chain.append(("binary", op[1], lay, dims, op[4]))
            if varies:
                per_image.append((i, md.strides[0]))
        else:
            epi_chain.append(op)
    pd._int8 = True
    pd._solver = Int8DeconvSolver() if deconv else Int8Solver()
    pd._params = {}
    pd._post_ops = chain
    pd._descs = descs
    pd._descs_by_logical = {"src": descs["src_desc"], "wei": descs["weights_desc"],
                            "dst": dst, "bias": descs.get("bias_desc")}
    pd._q = {"scales": tuple(scales), "zero_points": tuple(zps), "chain": tuple(epi_chain),
             "per_image": tuple(per_image), "src_zp_k": src_zp_k}
    for name, arg, out in (("src_desc", ARG_SRC, False), ("weights_desc", ARG_WEIGHTS, False),
                           ("bias_desc", ARG_BIAS, False), ("dst_desc", ARG_DST, True)):
        if descs.get(name) is not None:
            pd._args[arg] = ArgSpec(descs[name], out, True)
    pd._args.update(po_args)
    pd._add_runtime_attr_args()
    dry = Plan(pd._engine, kind, dry=True)
    steps(dry, pd)
    pd._finish_scratchpad(dry.scratch_elems * 4)
    name = solver_name(pd._op)
    pd._impl = f"loopy:{name}"
    pd._info = (f"alg:{pd._alg.name} prop:{pd._prop.name} solver:{name} "
                f"mb{g.mb}g{G}ic{g.ic}oc{OC}_k{'x'.join(map(str, g.kernel))}"
                f"_s{'x'.join(map(str, g.strides))}_p{'x'.join(map(str, g.padding_l))}") + (
        f" attr-scales:{'+'.join(texts)}" if texts else "") + (
        f" attr-zero-points:{'+'.join(ztexts)}" if ztexts else "") + (
        f" attr-post-ops:{describe_post_ops(chain)}" if chain else "")


def _shift(chain: tuple, per_image: tuple, n: int) -> tuple:
    """The chain with the operands that vary over images moved to image ``n``."""
    if not per_image or n == 0:
        return chain
    out = list(chain)
    for i, sn in per_image:
        op = out[i]
        (off0, per) = op[2]
        out[i] = (op[0], op[1], (off0 + n * sn, per), op[3], op[4])
    return tuple(out)


def steps(plan: Plan, pd) -> None:
    """The int8 convolution's steps into ``plan`` (dry or not)."""
    g, q, kind = pd._geom, pd._q, pd._kind
    descs = pd._descs
    src, wei, dst, bias = (descs["src_desc"], descs["weights_desc"], descs["dst_desc"],
                           descs.get("bias_desc"))
    G, IC, OC, N = g.groups, g.ic, g.oc, g.mb
    ICg, OCg = IC // G, OC // G
    nsp = len(g.kernel)
    P = math.prod(g.dst_spatial)
    st = plain_strides(layout_of(src))
    if st is None:
        raise unimplemented(f"{kind}: src_desc in a blocked layout with int8 src")
    wm = wei_matrix(grouped_layout(wei, g.grouped_weights), OCg, ICg, tuple(g.kernel))
    if wm is None:
        raise unimplemented(f"{kind}: weights_desc layout {wei.format_name()}: an int8 "
                            f"convolution reads plain weights")
    im = Im2colInt8(int(src.data_type), N, G, ICg, tuple(g.src_spatial), tuple(g.dst_spatial),
                    tuple(g.kernel), tuple(g.strides), tuple(g.dilates), tuple(g.padding_l),
                    st[0], st[1], tuple(st[2:]), wm.kf_order,
                    any(w == "src" for w, _ in q["zero_points"]) or q["src_zp_k"],
                    q["src_zp_k"], pd._op == "deconvolution")
    Kf = im.kf
    # a 1x1, stride-1, unpadded convolution over channels-last src: A is src itself (so is a
    # deconvolution's: each output point is its own src point's product)
    sm = act_matrix(layout_of(src), N, IC, tuple(g.src_spatial), "hwc")
    direct_a = (sm is not None and sm.mode == "hwc" and all(k == 1 for k in g.kernel)
                and all(v == 1 for v in g.strides) and not any(g.padding_l)
                and not any(g.padding_r))
    if direct_a:
        a_ref, a_off0, lda, a_sn, a_sg = Ref(ARG_SRC), src.offset0, sm.ld, sm.sn, ICg
    else:
        col_off = plan.alloc(-(-im.col_bytes // 4), "int8_col")
        zp = {"zp": Ref(ARG_ATTR_ZERO_POINTS | ARG_SRC)} if im.zero_point else {}
        plan.kernel("conv_im2col_int8", (GENERATOR_VERSION, im),
                    lambda key: build_im2col_int8(key[1]), src=Ref(ARG_SRC), col=SCRATCH,
                    src_off=src.offset0, col_off=col_off * 4, **zp)
        a_ref, a_off0, lda, a_sn, a_sg = SCRATCH, col_off * 4, Kf, G * P * Kf, P * Kf
    # C: dst itself when channels-last, else a channels-last copy in the scratchpad
    am = act_matrix(layout_of(dst), N, OC, tuple(g.dst_spatial), "hwc")
    staged = None
    c_ref, c_off0, ldc, c_sn = Ref(ARG_DST), dst.offset0, None, None
    if am is not None and am.mode == "hwc":
        ldc, c_sn = am.ld, am.sn
    else:
        size = dst.data_type.itemsize
        off = plan.alloc(-(-N * P * OC * size // 4), "int8_dst")
        staged = MemoryDesc(dst.dims, dst.data_type, _NHWC[nsp]).with_data_type(dst.data_type)
        staged.offset0 = off * 4 // size
        c_ref, c_off0, ldc, c_sn = SCRATCH, staged.offset0, OC, P * OC
        if reads_prior(pd._post_ops):  # a sum post-op reads dst's prior content
            plan.reorder(ReorderProblem.between(dst, staged), Ref(ARG_DST), SCRATCH)
    operands = {**scale_operands(q["scales"]), **zero_point_operands(q["zero_points"])}
    epi = {}
    if bias is not None:
        bst = plain_strides(layout_of(bias))[0]
        epi = dict(bias=((bias.offset0, ((1, OCg * bst, ()), (1, 0, ()), (1, bst, ()))),
                         (G, 1, OCg), bias.nelems_physical()), bias_dt=int(bias.data_type))
        operands["bias"] = Ref(ARG_BIAS)
    tb = wm.form == "ok"
    base = gi.Int8GemmProblem(m=P, n=OCg, k=Kf, a_dt=int(src.data_type), lda=lda, ldc=ldc,
                              c_dt=int(dst.data_type), scales=q["scales"],
                              zero_points=q["zero_points"], post_ops=q["chain"],
                              src_zp_k=q["src_zp_k"], **epi)
    # per-channel src zero points weight row kf of the weights of group t by
    # zp[t * ICg + ic(kf)] (ic major: kf / K; taps major or 1x1: kf % ICg)
    kw = None
    if q["src_zp_k"]:
        div = math.prod(g.kernel) if wm.kf_order == "ick" and not direct_a else 1
        kw = (div, ICg, ICg, Ref(ARG_ATTR_ZERO_POINTS | ARG_SRC))
    if G == 1 and not q["per_image"]:  # one launch over the images
        pr = replace(base, batch=N, stride_a=a_sn, stride_c=c_sn, epi_batch=(N,))
        plan.gemm_int8(pr, a_ref, a_off0, Ref(ARG_WEIGHTS), wm.offset(0), c_ref,
                       c_off0, ldb=wm.ld, trans_b=tb, epilogue=operands, slot="int8_b",
                       kweights=kw)
    else:  # per image, one launch over the groups (each its own weights)
        for n in range(N):
            pr = replace(base, batch=G, stride_a=a_sg, stride_c=OCg, epi_batch=(G,),
                         b_batched=G > 1, post_ops=_shift(q["chain"], q["per_image"], n))
            plan.gemm_int8(pr, a_ref, a_off0 + n * a_sn, Ref(ARG_WEIGHTS),
                           wm.offset(0), c_ref, c_off0 + n * c_sn, ldb=wm.ld, trans_b=tb,
                           stride_b=wm.sg, epilogue=operands, slot="int8_b", kweights=kw)
    if staged is not None:
        plan.reorder(ReorderProblem.between(staged, dst), SCRATCH, Ref(ARG_DST))


def build_plan(pd) -> Plan:
    plan = Plan(pd._engine, pd._kind)
    steps(plan, pd)
    if plan.scratch_elems * 4 > pd.workspace_bytes():
        raise invalid_arguments(f"{pd._kind}: the int8 plan needs {plan.scratch_elems * 4} "
                                f"bytes of scratchpad, the descriptor reserved "
                                f"{pd.workspace_bytes()}")
    return plan


__all__ = ["is_int8", "init", "build_plan", "steps", "SOLVER", "DECONV_SOLVER", "solver_name"]
