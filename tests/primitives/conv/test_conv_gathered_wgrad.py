"""Backward weights whose GEMM gathers its transposed A from the channels-last source
(``[Kf, OC] = patches^T @ diff_dst`` with ``GemmProblem.a_conv`` and ``trans_a``: no patch
matrix, no im2col copy), whole or cut into k slices added by the split reduction. NVIDIA GPUs
take it by their rule; here the GEMM rule gives every gathering problem the hand-written
kernel's SIMT tile (plain OpenCL C) and the patch-order rule is the GPUs', so the solver's path
runs on every device, against the float64 reference (the tensor-core tiles' transposed gather:
tests/kernels/test_gemm_nv_conv_gather.py)."""
from __future__ import annotations

import numpy as np
import pytest

import pydnnl as dnnl
import pydnnl.primitives.conv.solvers.im2col_gemm as solver
import pydnnl.runtime.heuristics.gemm as rules
from pydnnl.kernels.gemm_nv import NvTile
from pydnnl.reference import conv as R
from pydnnl.runtime.heuristics.conv import gathered_wgrad

MD, F32 = dnnl.memory.desc, dnnl.memory.data_type.f32

# (mb, ic, oc, ih, iw, k, stride, dilate, pad): 2048 output points (mb * oh * ow), so that
# the solver's k slices (at least 512 points each) come in 2 and 4
CASES = {
    "3x3": (2, 16, 24, 32, 32, 3, 1, 0, 1),
    "3x3_s2_dilated": (2, 32, 40, 66, 66, 3, 2, 1, 1),
    "1x1_s2": (2, 16, 64, 64, 64, 1, 2, 0, 0),
}
SIMT = NvTile(32, 32, 16, 4, 4)


@pytest.fixture
def gathering(monkeypatch):
    """GPUs' patch order; gathering GEMMs on the SIMT tile, the others as the rules say."""
    orig = rules.nv_tile

    def tile(info, prob, math):
        return SIMT if prob.a_conv is not None else orig(info, prob, math)

    monkeypatch.setattr(rules, "nv_tile", tile)
    monkeypatch.setattr(solver, "wgrad_kmajor_patches", lambda info, kf: False)
    monkeypatch.setattr(solver, "gathered_wgrad", lambda info, math, splits: True)


def _oh(n, k, s, d, pad):
    return (n + 2 * pad - (d + 1) * (k - 1) - 1) // s + 1


@pytest.mark.parametrize("split_k", [1, 2, 4])
@pytest.mark.parametrize("name", list(CASES))
def test_gathered_backward_weights_match_reference(engine, stream, gathering, name, split_k):
    mb, ic, oc, ih, iw, k, s, d, pad = CASES[name]
    oh, ow = _oh(ih, k, s, d, pad), _oh(iw, k, s, d, pad)
    rng = np.random.default_rng(len(name) + split_k)
    x = rng.standard_normal((mb, ic, ih, iw)).astype(np.float32)
    dy = rng.standard_normal((mb, oc, oh, ow)).astype(np.float32)
    args = ([s, s], [d, d], [pad, pad], [pad, pad])
    src, dst = MD(list(x.shape), F32, "nhwc"), MD(list(dy.shape), F32, "nhwc")
    wmd = MD([oc, ic, k, k], F32, "hwio")
    fwd = dnnl.convolution_forward.primitive_desc(
        engine, dnnl.prop_kind.forward_training, dnnl.algorithm.convolution_direct, src,
        wmd, MD([oc], F32, "x"), dst, *args, solver="im2col_gemm")
    pd = dnnl.convolution_backward_weights.primitive_desc(
        engine, dnnl.algorithm.convolution_direct, src, wmd, MD([oc], F32, "x"), dst, *args,
        fwd, solver="im2col_gemm", solver_params={"chunk_mb": 64, "split_k": split_k})
    prim = dnnl.convolution_backward_weights(pd)
    names = [getattr(getattr(st, "kernel", None), "name", "") or getattr(st, "name", "")
             for st in prim._plan.steps]
    assert not any("im2col" in n for n in names), names  # no patch matrix
    assert ("splitk_reduce" in " ".join(names)) == (split_k > 1), names
    dw, db = dnnl.memory(pd.diff_weights_desc(), engine), dnnl.memory(pd.diff_bias_desc(),
                                                                       engine)
    prim.execute(stream, {dnnl.ARG_SRC: dnnl.memory(src, engine, x),
                          dnnl.ARG_DIFF_DST: dnnl.memory(dst, engine, dy),
                          dnnl.ARG_DIFF_WEIGHTS: dw, dnnl.ARG_DIFF_BIAS: db})
    stream.wait()
    want_w, want_b = R.conv_backward_weights(x, dy, [oc, ic, k, k], *args, dtype=np.float64)
    got = dw.to_numpy()
    assert np.abs(got - want_w).max() <= 1e-5 * np.abs(want_w).max(), name
    assert np.abs(db.to_numpy() - want_b).max() <= 1e-5 * np.abs(want_b).max()


def test_ragged_slices_keep_the_patch_matrix(engine, stream, gathering):
    """Output points that no slice count cuts into whole 16-point slices (5 x 5 = 25): the
    im2col copy stays."""
    x = np.random.default_rng(0).standard_normal((1, 16, 5, 5)).astype(np.float32)
    src, dst = MD([1, 16, 5, 5], F32, "nhwc"), MD([1, 8, 5, 5], F32, "nhwc")
    wmd = MD([8, 16, 3, 3], F32, "hwio")
    args = ([1, 1], [0, 0], [1, 1], [1, 1])
    fwd = dnnl.convolution_forward.primitive_desc(
        engine, dnnl.prop_kind.forward_training, dnnl.algorithm.convolution_direct, src,
        wmd, None, dst, *args, solver="im2col_gemm")
    pd = dnnl.convolution_backward_weights.primitive_desc(
        engine, dnnl.algorithm.convolution_direct, src, wmd, None, dst, *args, fwd,
        solver="im2col_gemm")
    prim = dnnl.convolution_backward_weights(pd)
    names = [getattr(getattr(st, "kernel", None), "name", "") for st in prim._plan.steps]
    assert any("im2col" in n for n in names), names
    dy = np.random.default_rng(1).standard_normal((1, 8, 5, 5)).astype(np.float32)
    dw = dnnl.memory(pd.diff_weights_desc(), engine)
    prim.execute(stream, {dnnl.ARG_SRC: dnnl.memory(src, engine, x),
                          dnnl.ARG_DIFF_DST: dnnl.memory(dst, engine, dy),
                          dnnl.ARG_DIFF_WEIGHTS: dw})
    stream.wait()
    want = R.conv_backward_weights(x, dy, [8, 16, 3, 3], *args, with_bias=False,
                                   dtype=np.float64)[0]
    assert np.abs(dw.to_numpy() - want).max() <= 1e-5 * np.abs(want).max()


def test_rule_gathers_on_tensor_cores_or_in_slices(engine):
    info = engine.info
    assert gathered_wgrad(info, "strict", 2)  # SIMT: where the product is cut along k
    assert not gathered_wgrad(info, "strict", 1)
    assert gathered_wgrad(info, "tf32", 1) == rules.tensor_cores(info)
