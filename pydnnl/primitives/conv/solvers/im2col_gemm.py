"""im2col + GEMM: explicit patch matrices in the scratchpad, every product through ``get_gemm``.

Per chunk of images (sized so that the column buffer stays under ``chunk_mb``):

* forward: ``im2col`` gathers the patches, one GEMM per group multiplies them with the
  weights straight into dst; bias and post-ops follow in one in-place epilogue (a leading sum
  post-op rides on the GEMM's beta);
* backward data: one GEMM per group writes the column gradient, ``col2im`` gathers it into
  diff_src with bias and post-ops (deconvolution forward);
* backward weights: ``im2col`` then one GEMM per group accumulating over the chunks
  (beta = 1 after the first), and a channel reduction for the bias gradient.

The GEMMs read activations in place when their layout is a matrix: channels-last
(``hwc``: ``[N*P, C]`` rows when images follow each other) or channels-first (``chw``: one
``[C, P]`` matrix per image, so one GEMM per image and group). Other layouts (blocked,
oddly strided) are staged through the scratchpad with the reorder kernel; likewise weights
that are not a ``[OCg, ICg*K]`` or ``[ICg*K, OCg]`` matrix per group. 1x1 stride-1 unpadded
convolutions skip ``im2col``/``col2im``: the activations are the GEMM operands.
"""
from __future__ import annotations

from ....kernels.conv_direct import largest_divisor_at_most
from ....kernels.conv_im2col import (Col2ImProblem, EpilogueProblem, Im2ColProblem,
                                     build_col2im, build_epilogue, build_im2col)
from ....kernels.matmul import GemmShape
from ..plan import BIAS, DST, SCRATCH, SRC, WEI, Plan
from ..problem import (ActMatrix, ConvProblem, WeiMatrix, act_matrix, dense_layout,
                       wei_matrix, with_offset)
from . import Solver
from .direct import add_bias_grad


class Im2colGemmSolver(Solver):
    name = "im2col_gemm"
    family = "direct"
    act_family = "nhwc"
    wei_order = "gkio"

    def default_params(self, problem: ConvProblem, engine) -> dict:
        return {"chunk_mb": 64}

    def tuning_space(self, problem: ConvProblem, engine) -> list[dict]:
        return [{"chunk_mb": c} for c in (8, 64, 256)]

    def workspace_bytes(self, problem: ConvProblem, params: dict | None = None) -> int:
        return _build(problem, params or {"chunk_mb": 64}, None, dry=True).scratch_bytes

    def build_plan(self, problem: ConvProblem, params: dict, engine) -> Plan:
        return _build(problem, params, engine, dry=False)


def _act_view(p: ConvProblem, which: str, mode: str | None) -> ActMatrix | None:
    lay, ch, sp = (p.dst, p.oc, p.dst_sp) if which == "dst" else (p.src, p.ic, p.src_sp)
    if mode is not None:
        return act_matrix(lay, p.mb, ch, sp, mode)
    return act_matrix(lay, p.mb, ch, sp, "hwc") or act_matrix(lay, p.mb, ch, sp, "chw")


def _hwc_dense(nimg: int, ch: int, sp: tuple, off: int) -> tuple[tuple, ActMatrix]:
    """A dense channels-last layout of ``[nimg, ch, sp...]`` at scratch offset ``off``."""
    nd = 2 + len(sp)
    lay = with_offset(dense_layout([nimg, ch, *sp], [0, *range(2, nd), 1]), off)
    P = 1
    for v in sp:
        P *= v
    return lay, ActMatrix("hwc", ch, P * ch, off, True)


def per_item(engine) -> int:
    """Elements per work-item of the copy kernels: CPU runtimes pay per work-group."""
    return 4 if engine is not None and engine.info.type == "gpu" else 64


def _build(p: ConvProblem, params: dict, engine, dry: bool) -> Plan:
    plan = Plan(engine, "im2col_gemm", params, dry=dry)
    pi = per_item(engine)
    nsp = p.nsp
    G, ICg, OCg, P, K = p.groups, p.icg, p.ocg, p.P, p.K
    Kf = ICg * K
    ops = p.post_ops
    sums = [i for i, op in enumerate(ops) if op[0] == "sum"]

    # -- the dst-side activation as a GEMM matrix ----------------------------------------------
    T = _act_view(p, "dst", None)
    staged_acc = False  # fwd: GEMM into a scratch accumulator, epilogue writes dst
    beta_fwd, sum_done = 0.0, False
    if p.kind == "fwd" and sums:
        if sums == [0] and ops[0][2] == 0 and T is not None:
            beta_fwd, sum_done = float(ops[0][1]), True
        else:
            staged_acc = True
    if p.kind == "fwd" and (T is None or staged_acc):
        staged_acc = True
        mode = "hwc"
    else:
        mode = T.mode if T is not None else "hwc"
    staged_T = T is None and p.kind != "fwd"
    if staged_T:
        t_off = plan.alloc(p.mb * p.oc * P)
        t_lay, T = _hwc_dense(p.mb, p.oc, p.dst_sp, t_off)
        plan.reorder([p.mb, p.oc, *p.dst_sp], DST, p.dst, p.dst_n, SCRATCH, t_lay,
                     t_off + p.mb * p.oc * P)
    t_ref = SCRATCH if staged_T else DST

    # -- weights as a GEMM matrix --------------------------------------------------------------
    W = wei_matrix(p.wei, OCg, ICg, p.kernel)
    w_ref = WEI
    staged_W = W is None
    if staged_W:
        if mode == "hwc":  # per group [k..., ic, oc]
            order = [0, *range(3, 3 + nsp), 2, 1]
            form, kfo = "ko", "kic"
        else:  # per group [oc, ic, k...]
            order = [0, 1, 2, *range(3, 3 + nsp)]
            form, kfo = "ok", "ick"
        w_off = plan.alloc(G * OCg * Kf)
        w_lay = with_offset(dense_layout([G, OCg, ICg, *p.kernel], order), w_off)
        W = WeiMatrix(form, kfo, Kf if form == "ok" else OCg, OCg * Kf, w_off)
        w_ref = SCRATCH
        if p.kind != "bwd_w":
            plan.reorder([G, OCg, ICg, *p.kernel], WEI, p.wei, p.wei_n, SCRATCH, w_lay,
                         w_off + G * OCg * Kf)

    # -- 1x1 shortcut: the src-side activation is the column matrix itself ---------------------
    S = None
    if p.is_1x1_dense():
        S = _act_view(p, "src", mode)
        if p.kind == "bwd_d" and S is not None and sums:
            S = None  # col2im applies sums against the prior diff_src generically
    s_ref = SRC

    # -- chunks of images ------------------------------------------------------------------------
    cap = max(1, int(float(params.get("chunk_mb", 64)) * (1 << 18)))  # float32 elements
    per_image = G * P * Kf
    nb = p.mb if S is not None else largest_divisor_at_most(p.mb, max(1, cap // max(per_image, 1)))
    col_off = plan.alloc(nb * per_image) if S is None else 0
    acc_off = 0
    if staged_acc:
        acc_off = plan.alloc(nb * p.oc * P)
        acc_lay, T = _hwc_dense(nb, p.oc, p.dst_sp, acc_off)
        t_ref = SCRATCH
    kf_dims = [2, *range(3, 3 + nsp)] if W.kf_order == "ick" else [*range(3, 3 + nsp), 2]
    o_dims = list(range(3 + nsp, 3 + 2 * nsp))
    col_order = tuple([1, 0, *o_dims, *kf_dims] if mode == "hwc" else [1, 0, *kf_dims, *o_dims])
    fold = mode == "hwc" and T.fold and (S is None or S.fold)

    def col_at(g: int, n_local: int) -> int:
        return col_off + (g * nb + n_local) * P * Kf

    def image_groups(c0: int):
        """(first image, image count) of each GEMM of a chunk."""
        return [(c0, nb)] if fold else [(c0 + i, 1) for i in range(nb)]

    first = [True] * G
    for c0 in range(0, p.mb, nb):
        if S is None and p.kind in ("fwd", "bwd_w"):
            ip = Im2ColProblem(nb=nb, groups=G, icg=ICg, src_sp=p.src_sp, dst_sp=p.dst_sp,
                               kernel=p.kernel, strides=p.strides, dilates=p.dilates,
                               padding_l=p.padding_l, src=p.src, src_n=p.src_n,
                               col_n=-1, order=col_order, per_item=pi)
            plan.kernel("conv_im2col", ip, build_im2col, src=SRC, col=SCRATCH, n0=c0,
                        col_off=col_off)
        for g in range(G):
            for n, cnt in image_groups(c0):
                nl = n - c0
                if S is not None:
                    x_ref, x_off, x_ld = s_ref, S.offset(n, g * ICg), S.ld
                else:
                    x_ref, x_off, x_ld = SCRATCH, col_at(g, nl), (Kf if mode == "hwc" else P)
                t_off_g = T.offset(n - c0 if staged_acc else n, g * OCg)
                if p.kind == "fwd":
                    if mode == "hwc":
                        shape = GemmShape(m=cnt * P, n=OCg, k=Kf, lda=x_ld, ldb=W.ld, ldc=T.ld,
                                          trans_a=False, trans_b=W.form == "ok", beta=beta_fwd)
                        plan.gemm(shape, x_ref, x_off, w_ref, W.offset(g), t_ref, t_off_g)
                    else:
                        shape = GemmShape(m=OCg, n=P, k=Kf, lda=W.ld, ldb=x_ld, ldc=T.ld,
                                          trans_a=W.form == "ko", trans_b=False, beta=beta_fwd)
                        plan.gemm(shape, w_ref, W.offset(g), x_ref, x_off, t_ref, t_off_g)
                elif p.kind == "bwd_d":
                    if mode == "hwc":
                        shape = GemmShape(m=cnt * P, n=Kf, k=OCg, lda=T.ld, ldb=W.ld, ldc=x_ld,
                                          trans_a=False, trans_b=W.form == "ko")
                        plan.gemm(shape, t_ref, t_off_g, w_ref, W.offset(g), x_ref, x_off)
                    else:
                        shape = GemmShape(m=Kf, n=P, k=OCg, lda=W.ld, ldb=T.ld, ldc=x_ld,
                                          trans_a=W.form == "ok", trans_b=False)
                        plan.gemm(shape, w_ref, W.offset(g), t_ref, t_off_g, x_ref, x_off)
                else:  # bwd_w
                    beta = 0.0 if first[g] else 1.0
                    first[g] = False
                    if mode == "hwc":
                        if W.form == "ok":
                            shape = GemmShape(m=OCg, n=Kf, k=cnt * P, lda=T.ld, ldb=x_ld,
                                              ldc=W.ld, trans_a=True, beta=beta)
                            plan.gemm(shape, t_ref, t_off_g, x_ref, x_off, w_ref, W.offset(g))
                        else:
                            shape = GemmShape(m=Kf, n=OCg, k=cnt * P, lda=x_ld, ldb=T.ld,
                                              ldc=W.ld, trans_a=True, beta=beta)
                            plan.gemm(shape, x_ref, x_off, t_ref, t_off_g, w_ref, W.offset(g))
                    else:
                        if W.form == "ok":
                            shape = GemmShape(m=OCg, n=Kf, k=P, lda=T.ld, ldb=x_ld, ldc=W.ld,
                                              trans_b=True, beta=beta)
                            plan.gemm(shape, t_ref, t_off_g, x_ref, x_off, w_ref, W.offset(g))
                        else:
                            shape = GemmShape(m=Kf, n=OCg, k=P, lda=x_ld, ldb=T.ld, ldc=W.ld,
                                              trans_b=True, beta=beta)
                            plan.gemm(shape, x_ref, x_off, t_ref, t_off_g, w_ref, W.offset(g))
        if p.kind == "bwd_d" and S is None:
            cp = Col2ImProblem(nb=nb, groups=G, icg=ICg, src_sp=p.src_sp, dst_sp=p.dst_sp,
                               kernel=p.kernel, strides=p.strides, dilates=p.dilates,
                               padding_l=p.padding_l, out=p.src, out_n=p.src_n, col_n=-1,
                               order=col_order, bias=p.bias, bias_n=p.bias_n, post_ops=ops,
                               per_item=pi)
            plan.kernel("conv_col2im", cp, build_col2im, col=SCRATCH, out=SRC, bias=BIAS,
                        n0=c0, col_off=col_off)
        if staged_acc:
            ep = EpilogueProblem(nb=nb, channels=p.oc, sp=p.dst_sp, dst=p.dst, dst_n=p.dst_n,
                                 acc=(0, acc_lay[1]), acc_n=-1, bias=p.bias, bias_n=p.bias_n,
                                 post_ops=ops, per_item=pi)
            plan.kernel("conv_epilogue", ep, build_epilogue, dst=DST, acc=SCRATCH, bias=BIAS,
                        n0=c0, acc_off=acc_off)

    # -- in-place epilogue (bias, post-ops) ------------------------------------------------------
    if p.kind == "fwd" and not staged_acc and (p.bias is not None or len(ops) > len(sums)):
        ep = EpilogueProblem(nb=p.mb, channels=p.oc, sp=p.dst_sp, dst=p.dst, dst_n=p.dst_n,
                             acc=None, acc_n=0, bias=p.bias, bias_n=p.bias_n, post_ops=ops,
                             sum_done=sum_done, per_item=pi)
        plan.kernel("conv_epilogue", ep, build_epilogue, dst=DST, bias=BIAS, n0=0, acc_off=0)
    if p.kind == "bwd_d" and S is not None and (p.bias is not None or ops):
        ep = EpilogueProblem(nb=p.mb, channels=p.ic, sp=p.src_sp, dst=p.src, dst_n=p.src_n,
                             acc=None, acc_n=0, bias=p.bias, bias_n=p.bias_n, post_ops=ops,
                             per_item=pi)
        plan.kernel("conv_epilogue", ep, build_epilogue, dst=SRC, bias=BIAS, n0=0, acc_off=0)
    if p.kind == "bwd_w":
        if staged_W:
            plan.reorder([G, OCg, ICg, *p.kernel], SCRATCH, w_lay, w_off + G * OCg * Kf, WEI,
                         p.wei, p.wei_n)
        if p.bias is not None:
            add_bias_grad(plan, p)
    return plan
