"""Forward convolutions whose GEMM gathers its A from the channels-last source (no patch
matrix: ``GemmShape.a_conv``). NVIDIA GPUs take it by their rule; the test gives the GEMM
launcher the hand-written kernel's SIMT tile (plain OpenCL C) for every gathered problem, so
that the solver's path runs on every device here (and on these small shapes), against the
float64 reference (the tensor-core tiles' gather: tests/kernels/test_gemm_nv_conv_gather.py)."""
from __future__ import annotations

import numpy as np
import pytest

import pydnnl as dnnl
import pydnnl.runtime.gemm as rg
from pydnnl.kernels.gemm_nv import NvTile
from pydnnl.reference import conv as R

MD, F32 = dnnl.memory.desc, dnnl.memory.data_type.f32
FWD = dnnl.prop_kind.forward_inference
DIRECT = dnnl.algorithm.convolution_direct

# (mb, ic, oc, ih, iw, k, stride, dilate, pad_l, pad_r)
CASES = {
    "3x3": (2, 16, 24, 7, 7, 3, 1, 0, 1, 1),
    "3x3_s2_dilated": (1, 32, 40, 9, 8, 3, 2, 1, 1, 0),
    "5x5_s2": (3, 16, 64, 9, 9, 5, 2, 0, 2, 1),
}


@pytest.fixture
def gathering(monkeypatch):
    """Gathered GEMMs on the hand-written kernel's SIMT tile, other GEMMs as the rules say."""
    orig = rg._nv_tile

    def tile(info, prob, math, slices=False):
        if prob.a_conv is not None:
            return NvTile(32, 32, 16, 4, 4)
        return orig(info, prob, math, slices)

    monkeypatch.setattr(rg, "_nv_tile", tile)


@pytest.mark.parametrize("wtag", ["hwio", "oihw"])  # (oihw: weights staged as [Kf, OC])
@pytest.mark.parametrize("name", list(CASES))
def test_gathered_forward_matches_reference(engine, stream, gathering, name, wtag):
    mb, ic, oc, ih, iw, k, s, d, pl, pr = CASES[name]
    oh = (ih + pl + pr - (d + 1) * (k - 1) - 1) // s + 1
    ow = (iw + pl + pr - (d + 1) * (k - 1) - 1) // s + 1
    rng = np.random.default_rng(len(name))
    x = rng.standard_normal((mb, ic, ih, iw)).astype(np.float32)
    w = (rng.standard_normal((oc, ic, k, k)) / 4).astype(np.float32)
    b = rng.standard_normal(oc).astype(np.float32)
    po = dnnl.post_ops()
    po.append_eltwise(dnnl.algorithm.eltwise_relu, 0.0, 0.0)
    attr = dnnl.primitive_attr()
    attr.set_post_ops(po)
    pd = dnnl.convolution_forward.primitive_desc(
        engine, FWD, DIRECT, MD(list(x.shape), F32, "nhwc"), MD(list(w.shape), F32, wtag),
        MD([oc], F32, "x"), MD([mb, oc, oh, ow], F32, "nhwc"), [s, s], [d, d], [pl, pl],
        [pr, pr], attr=attr, solver="im2col_gemm")
    prim = dnnl.convolution_forward(pd)
    names = [getattr(st, "name", "") for st in prim._plan.steps]
    assert "pydnnl_conv_im2col" not in names, names  # no patch matrix
    src = dnnl.memory(pd.src_desc(), engine, x)  # (arrays in logical order)
    wei = dnnl.memory(pd.weights_desc(), engine, w)
    bias = dnnl.memory(pd.bias_desc(), engine, b)
    dst = dnnl.memory(pd.dst_desc(), engine)
    prim.execute(stream, {dnnl.ARG_SRC: src, dnnl.ARG_WEIGHTS: wei, dnnl.ARG_BIAS: bias,
                          dnnl.ARG_DST: dst})
    stream.wait()
    got = dst.to_numpy()
    ref = np.maximum(R.conv_forward(x, w, b, [s, s], [d, d], [pl, pl], [pr, pr],
                                    dtype=np.float64), 0)
    tol = 2e-3 if dnnl.get_default_fpmath_mode().name in ("tf32", "any") else 1e-5
    assert np.abs(got - ref).max() <= tol * np.abs(ref).max()


def test_rule_puts_the_gathering_gemm_ahead_of_winograd_where_measured():
    """NVIDIA GPUs: 3x3 forward layers of up to 64 input channels (128 with tensor cores)
    and at least 25088 output rows take the gathering GEMM before Winograd."""
    from types import SimpleNamespace

    from pydnnl.conv_shapes import ConvGeometry
    from pydnnl.runtime.heuristics.conv import solver_order

    h200 = SimpleNamespace(is_gpu=True, is_cpu=False, vendor_family="nvidia",
                           compute_units=132)

    def first(mb, c, sp, math, kind="fwd"):
        g = ConvGeometry(mb=mb, groups=1, ic=c, oc=c, src_spatial=(sp, sp),
                         dst_spatial=(sp, sp), kernel=(3, 3), strides=(1, 1), dilates=(0, 0),
                         padding_l=(1, 1), padding_r=(1, 1))
        return solver_order(kind, g, h200, 1.0, math)[0]

    assert first(32, 64, 56, "strict") == "im2col_gemm"
    assert first(32, 128, 28, "strict") == "winograd_f2x3"
    assert first(32, 128, 28, "tf32") == "im2col_gemm"
    assert first(32, 256, 14, "tf32") == "winograd_f2x3"
    assert first(1, 64, 56, "tf32") == "winograd_f2x3"  # 3136 rows: not measured
    # backward data of stride-1 layers gathers diff_dst by the same rule, on tensor cores
    assert first(32, 64, 56, "tf32", "bwd_d") == "im2col_gemm"
    assert first(32, 128, 28, "tf32", "bwd_d") == "im2col_gemm"
    assert first(32, 64, 56, "strict", "bwd_d") == "winograd_f2x3"
    assert first(32, 256, 14, "tf32", "bwd_d") == "winograd_f2x3"
    # backward weights gathers the source's channels by the same thresholds
    assert first(32, 64, 56, "strict", "bwd_w") == "im2col_gemm"
    assert first(32, 128, 28, "strict", "bwd_w") == "winograd_f2x3"
    assert first(32, 128, 28, "tf32", "bwd_w") == "im2col_gemm"
    assert first(32, 256, 14, "tf32", "bwd_w") == "winograd_f2x3"
    # strided backward data per output phase where each phase writes as many rows
    from pydnnl.runtime.heuristics.conv import gathered_phases

    assert gathered_phases(h200, 32 * 28 * 28) and not gathered_phases(h200, 32 * 14 * 14)
    assert not gathered_phases(SimpleNamespace(is_gpu=False, vendor_family="intel"), 10 ** 6)


def test_1x1_layers_keep_the_copy(engine, gathering):
    """A strided 1x1 layer keeps its im2col copy (the gather lost there on the H200)."""
    pd = dnnl.convolution_forward.primitive_desc(
        engine, FWD, DIRECT, MD([2, 16, 6, 6], F32, "nhwc"), MD([32, 16, 1, 1], F32, "hwio"),
        None, MD([2, 32, 3, 3], F32, "nhwc"), [2, 2], [0, 0], [0, 0], [0, 0],
        solver="im2col_gemm")
    names = [getattr(st, "name", "") for st in dnnl.convolution_forward(pd)._plan.steps]
    assert "pydnnl_conv_im2col" in names, names


# stride 1 (mb, ic, oc, ih, iw, k, dilate, pad_l, pad_r): diff_dst's channels (oc) in whole
# 16-deep slices
BWD_D_CASES = {
    "3x3": (2, 24, 32, 7, 7, 3, 0, 1, 1),
    "3x3_dilated_asym": (1, 16, 16, 9, 8, 3, 1, 2, 0),
    "5x5_asym": (2, 8, 32, 8, 8, 5, 0, 2, 1),
}


def _gathered_backward_data(engine, stream, case: tuple, wtag: str, seed: int) -> None:
    """Backward data of ``case`` ``(mb, ic, oc, ih, iw, k, stride, dilate, pad_l, pad_r)``
    on channels-last activations through im2col_gemm: no patch matrix and no col2im in its
    plan, every point of diff_src written (NaN before), against the float64 reference."""
    mb, ic, oc, ih, iw, k, s, d, pl, pr = case
    oh = (ih + pl + pr - (d + 1) * (k - 1) - 1) // s + 1
    ow = (iw + pl + pr - (d + 1) * (k - 1) - 1) // s + 1
    rng = np.random.default_rng(seed)
    dy = rng.standard_normal((mb, oc, oh, ow)).astype(np.float32)
    w = (rng.standard_normal((oc, ic, k, k)) / 4).astype(np.float32)
    args = ([s, s], [d, d], [pl, pl], [pr, pr])
    src_md, dst_md = MD([mb, ic, ih, iw], F32, "nhwc"), MD([mb, oc, oh, ow], F32, "nhwc")
    fwd = dnnl.convolution_forward.primitive_desc(
        engine, dnnl.prop_kind.forward_training, DIRECT, src_md, MD(list(w.shape), F32, wtag),
        None, dst_md, *args)
    pd = dnnl.convolution_backward_data.primitive_desc(
        engine, DIRECT, src_md, MD(list(w.shape), F32, wtag), dst_md, *args, fwd,
        solver="im2col_gemm")
    prim = dnnl.convolution_backward_data(pd)
    names = [getattr(st, "name", "") for st in prim._plan.steps]
    assert not any("col2im" in n or "im2col" in n for n in names), names
    dx = dnnl.memory(pd.diff_src_desc(), engine, np.full((mb, ic, ih, iw), np.nan, np.float32))
    prim.execute(stream, {dnnl.ARG_DIFF_DST: dnnl.memory(pd.diff_dst_desc(), engine, dy),
                          dnnl.ARG_WEIGHTS: dnnl.memory(pd.weights_desc(), engine, w),
                          dnnl.ARG_DIFF_SRC: dx})
    stream.wait()
    ref = R.conv_backward_data(dy, w, (mb, ic, ih, iw), *args, dtype=np.float64)
    tol = 2e-3 if dnnl.get_default_fpmath_mode().name in ("tf32", "any") else 1e-5
    assert np.abs(dx.to_numpy() - ref).max() <= tol * np.abs(ref).max()


@pytest.mark.parametrize("wtag", ["hwio", "oihw"])
@pytest.mark.parametrize("name", list(BWD_D_CASES))
def test_gathered_backward_data_matches_reference(engine, stream, gathering, name, wtag):
    """Backward data of a stride-1 layer: one GEMM gathering diff_dst at ``y + ph - kh *
    dh`` (negative padding and dilation), the weights staged as [taps][oc][ic]; no patch
    matrix, no col2im."""
    mb, ic, oc, ih, iw, k, d, pl, pr = BWD_D_CASES[name]
    _gathered_backward_data(engine, stream, (mb, ic, oc, ih, iw, k, 1, d, pl, pr), wtag,
                            7 + len(name))


# strided (mb, ic, oc, ih, iw, k, stride, dilate, pad_l, pad_r)
PHASED_CASES = {
    "3x3_s2": (2, 24, 32, 8, 7, 3, 2, 0, 1, 1),             # v1.5 res3a_branch2b's shape
    "3x3_s2_dilated_asym": (1, 16, 16, 9, 8, 3, 2, 1, 1, 0),
    "5x5_s2_asym": (2, 8, 16, 9, 9, 5, 2, 0, 2, 1),
    "2x2_s3": (1, 8, 16, 9, 8, 2, 3, 0, 0, 0),              # phases without taps: zeros
}


@pytest.fixture
def phased(gathering, monkeypatch):
    """The per-phase gathering GEMMs on every device (NVIDIA GPUs take them by rule)."""
    import pydnnl.primitives.conv.solvers.im2col_gemm as ig

    monkeypatch.setattr(ig, "gathered_phases", lambda info, rows: True)


# (oihw weights on the first case only: each phase's taps are a strided view of either)
@pytest.mark.parametrize("name, wtag", [(n, "hwio") for n in PHASED_CASES]
                         + [("3x3_s2", "oihw")])
def test_strided_backward_data_gathers_per_phase(engine, stream, phased, name, wtag):
    """Backward data of a strided layer: per output phase one GEMM gathering diff_dst as a
    stride-1 convolution and scattering its rows into every stride-th point of diff_src."""
    _gathered_backward_data(engine, stream, PHASED_CASES[name], wtag, 3 + len(name))


def test_strided_backward_data_keeps_col2im_elsewhere(engine, gathering):
    """Where the device's rule declines (CPUs; on NVIDIA phases of fewer than 25088 rows,
    as here) a strided layer keeps its patch matrix and col2im."""
    src_md, dst_md = MD([1, 16, 8, 8], F32, "nhwc"), MD([1, 32, 4, 4], F32, "nhwc")
    args = ([2, 2], [0, 0], [1, 1], [0, 0])
    fwd = dnnl.convolution_forward.primitive_desc(
        engine, dnnl.prop_kind.forward_training, DIRECT, src_md, MD([32, 16, 3, 3], F32, "hwio"),
        None, dst_md, *args)
    pd = dnnl.convolution_backward_data.primitive_desc(
        engine, DIRECT, src_md, MD([32, 16, 3, 3], F32, "hwio"), dst_md, *args, fwd,
        solver="im2col_gemm")
    names = [getattr(st, "name", "") for st in dnnl.convolution_backward_data(pd)._plan.steps]
    assert any("col2im" in n for n in names), names


@pytest.mark.parametrize("kind,wtag", [("fwd", "oihw"), ("bwd_d", "oihw"), ("bwd_d", "hwio")])
def test_scratchpad_holds_the_staged_weights(engine, kind, wtag):
    """A 7x7 map at mb 1 (res5a_branch2b): the weights a gathering plan stages (512 x 512 x
    9; backward data always, as [taps][oc][ic]) outgrow the patch matrix (49 x 4608) that
    a plan without an engine sizes; the descriptor reserves for both."""
    from pydnnl.primitives.conv.solvers.im2col_gemm import Im2colGemmSolver

    eng = engine  # (descriptors only: every device, a GPU-only machine's included)
    src, dst = MD([1, 512, 7, 7], F32, "nhwc"), MD([1, 512, 7, 7], F32, "nhwc")
    wei = MD([512, 512, 3, 3], F32, wtag)
    args = ([1, 1], [0, 0], [1, 1], [1, 1])
    fwd = dnnl.convolution_forward.primitive_desc(
        eng, dnnl.prop_kind.forward_training, DIRECT, src, wei, None, dst, *args,
        solver="im2col_gemm")
    pd = fwd if kind == "fwd" else dnnl.convolution_backward_data.primitive_desc(
        eng, DIRECT, src, wei, dst, *args, fwd, solver="im2col_gemm")
    size = Im2colGemmSolver().workspace_bytes(pd._problem_, pd._params)
    assert size >= 4 * 512 * 512 * 9
