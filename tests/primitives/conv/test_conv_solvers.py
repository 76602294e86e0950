"""Every convolution solver against the float64 numpy reference, on every device present:
forward, backward data and backward weights (with the bias gradient) of convolution and
deconvolution, over a sweep of shapes: groups, depthwise, strides, asymmetric and negative
padding, dilation, 1-D / 2-D / 3-D, odd sizes, 1x1 kernels; and Winograd F(2x2,3x3) on its
3x3 stride-1 problems. Layouts are ``any`` (each solver's choice) unless a test says otherwise.
"""
from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from test_conv_helpers import Case, assert_close, run_op  # noqa: E402

import pydnnl as dnnl  # noqa: E402


def _sweep() -> list[Case]:
    """Hand-picked edge cases plus seeded random problems (fixed, so kernels are shared)."""
    cases = [
        Case("2d_pad1", 2, 1, 3, 4, (7, 6), (3, 3), (1, 1), (0, 0), (1, 1), (1, 1), grouped=False),
        Case("2d_g2_s21_d10_asym", 2, 2, 6, 4, (7, 5), (3, 2), (2, 1), (1, 0), (1, 2), (0, 1)),
        Case("2d_depthwise_s2", 2, 4, 4, 4, (6, 6), (3, 3), (2, 2), (0, 0), (1, 1), (1, 1)),
        Case("2d_dw_mult_negpad", 1, 3, 3, 6, (5, 7), (2, 3), (1, 2), (0, 0), (0, 1), (1, -1)),
        Case("1d_s2_d1", 2, 1, 5, 3, (9,), (3,), (2,), (1,), (2,), (0,), grouped=False),
        Case("3d_mixed", 1, 1, 2, 3, (4, 5, 3), (2, 3, 1), (1, 2, 1), (0, 0, 0), (1, 0, 0),
             (0, 1, 0), grouped=False),
        Case("2d_1x1", 3, 1, 6, 4, (5, 4), (1, 1), (1, 1), (0, 0), (0, 0), (0, 0), grouped=False),
        Case("2d_1x1_s2_negpad", 2, 1, 4, 5, (6, 6), (1, 1), (2, 2), (0, 0), (0, 0), (-1, -1),
             grouped=False),
        Case("3d_g2_d101", 2, 2, 4, 4, (4, 5, 4), (2, 2, 2), (1, 1, 2), (1, 0, 1), (1, 0, 0),
             (0, 1, 1)),
    ]
    rng = np.random.default_rng(12345)
    for i in range(3):
        nsp = 1 + i
        g = int(rng.integers(1, 4))
        icg, ocg = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        k = tuple(int(v) for v in rng.integers(1, 4, nsp))
        s = tuple(int(v) for v in rng.integers(1, 3, nsp))
        d = tuple(int(v) for v in rng.integers(0, 2, nsp))
        pl = tuple(int(v) for v in rng.integers(0, 3, nsp))
        pr = tuple(int(v) for v in rng.integers(-1, 3, nsp))
        insp = tuple(int(rng.integers((kk - 1) * (dd + 1) + 2, 8)) for kk, dd in zip(k, d))
        cases.append(Case(f"random{i}_{nsp}d", int(rng.integers(1, 3)), g, g * icg, g * ocg,
                          insp, k, s, d, pl, pr, grouped=bool(g > 1 or rng.integers(0, 2))))
    return cases


CASES = _sweep()
SOLVERS = ["direct", "im2col_gemm"]
DIRS = ["fwd", "bwd_d", "bwd_w"]


@pytest.mark.sampled(every=5)
@pytest.mark.parametrize("direction", DIRS)
@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("case", CASES, ids=str)
def test_convolution_solver(engine, stream, case, solver, direction):
    res = run_op(engine, stream, "conv", direction, case, solver=solver,
                 seed=sum(map(ord, case.name)))
    assert solver in res.pd.impl_info_str()
    assert_close(res, 1e-5, f"{case} {solver} {direction}")


DECONV_CASES = [c for c in CASES if c.name in (
    "2d_g2_s21_d10_asym", "2d_dw_mult_negpad", "3d_mixed", "2d_1x1")]


@pytest.mark.sampled(every=5)
@pytest.mark.parametrize("direction", DIRS)
@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("case", DECONV_CASES, ids=str)
def test_deconvolution_solver(engine, stream, case, solver, direction):
    res = run_op(engine, stream, "deconv", direction, case, solver=solver, seed=7)
    assert solver in res.pd.impl_info_str()
    assert_close(res, 1e-5, f"deconv {case} {solver} {direction}")


WINO_CASES = [
    Case("w_pad1", 2, 1, 3, 4, (7, 6), (3, 3), (1, 1), (0, 0), (1, 1), (1, 1), grouped=False),
    Case("w_g2_asym_odd", 1, 2, 4, 6, (5, 8), (3, 3), (1, 1), (0, 0), (0, 2), (1, 0)),
    Case("w_nopad_wide", 3, 1, 16, 8, (9, 9), (3, 3), (1, 1), (0, 0), (0, 0), (0, 0),
         grouped=False),
    # padding past the kernel (backward data reads diff_dst with padding 2 - 3 = -1)
    Case("w_pad3_asym", 1, 1, 2, 3, (4, 5), (3, 3), (1, 1), (0, 0), (3, 0), (0, 2),
         grouped=False),
]

# Winograd F(2x2,3x3) adds up to 16 input and 9 output terms in its transforms (with factors
# 0.5 in the filter transform), so each result carries a few more roundings of values about
# 4x larger than direct convolution's products: errors stay near 1e-6 of the output
# magnitude; 3e-5 leaves room without hiding a wrong tap (which would be O(1) off).
WINO_RTOL = 3e-5


@pytest.mark.parametrize("case", WINO_CASES, ids=str)
def test_winograd_forward(engine, stream, case):
    res = run_op(engine, stream, "conv", "fwd", case, algorithm=dnnl.algorithm.convolution_winograd)
    assert "winograd_f2x3" in res.pd.impl_info_str()
    assert_close(res, WINO_RTOL, f"winograd {case}")


@pytest.mark.parametrize("case", WINO_CASES, ids=str)
def test_winograd_backward_data(engine, stream, case):
    """Backward data as a forward convolution of diff_dst with the flipped filter."""
    res = run_op(engine, stream, "conv", "bwd_d", case,
                 algorithm=dnnl.algorithm.convolution_winograd)
    assert "winograd_f2x3" in res.pd.impl_info_str()
    assert_close(res, WINO_RTOL, f"winograd bwd_d {case}")


@pytest.mark.parametrize("case", WINO_CASES, ids=str)
def test_winograd_backward_weights(engine, stream, case):
    """F(3x3, 2x2): 2x2 diff_dst tiles (odd output sizes: partial tiles) against 4x4 input
    patches, with the bias gradient."""
    res = run_op(engine, stream, "conv", "bwd_w", case,
                 algorithm=dnnl.algorithm.convolution_winograd)
    assert "winograd_f2x3" in res.pd.impl_info_str()
    assert_close(res, WINO_RTOL, f"winograd bwd_w {case}")


@pytest.mark.parametrize("params", [{"chunk_mb": 0.003, "splits": 1},
                                    {"chunk_mb": 64, "splits": 4}], ids=["chunks", "slices"])
def test_winograd_backward_weights_chunks_and_slices(engine, stream, params):
    """Products accumulated over image chunks; or their sum over tiles cut into slices that
    the final transform adds up (the GPU default; slices keep >= 256 tiles, so a problem with
    4 x 20 x 20 = 1600 tiles is used)."""
    case = CHUNKED if params["splits"] == 1 else Case(
        "slices", 4, 1, 4, 4, (40, 40), (3, 3), (1, 1), (0, 0), (1, 1), (1, 1), grouped=False)
    res = run_op(engine, stream, "conv", "bwd_w", case, seed=5,
                 algorithm=dnnl.algorithm.convolution_winograd, solver_params=params)
    assert_close(res, WINO_RTOL, f"winograd bwd_w {params}")
    pd = res.pd
    plan = pd._solver.build_plan(pd._problem_, pd._params, pd._engine)
    assert plan.params["slices"] == params["splits"]


def test_winograd_deconvolution_backward_weights(engine, stream):
    res = run_op(engine, stream, "deconv", "bwd_w", WINO_CASES[1], seed=6,
                 algorithm=dnnl.algorithm.deconvolution_winograd)
    assert_close(res, WINO_RTOL, "winograd deconv bwd_w")


def test_winograd_deconvolution_forward_with_bias_and_post_ops(engine, stream):
    """Deconvolution forward is convolution backward data plus the bias: the flipped-filter
    plan with the bias and post-ops in its output transform."""
    from test_conv_helpers import post_ops_attr

    case = WINO_CASES[1]
    attr, po = post_ops_attr([("sum", 0.5), (dnnl.algorithm.eltwise_relu, 0.1, 0.0)])
    res = run_op(engine, stream, "deconv", "fwd", case, attr=attr, post_ops=po, seed=3,
                 algorithm=dnnl.algorithm.deconvolution_winograd)
    assert "winograd_f2x3" in res.pd.impl_info_str()
    assert_close(res, WINO_RTOL, "winograd deconv fwd")


def test_winograd_deconvolution_backward_data(engine, stream):
    """Deconvolution backward data is a forward convolution: Winograd applies."""
    case = Case("wd", 2, 1, 4, 3, (6, 5), (3, 3), (1, 1), (0, 0), (1, 1), (1, 1), grouped=False)
    res = run_op(engine, stream, "deconv", "bwd_d", case,
                 algorithm=dnnl.algorithm.deconvolution_winograd)
    assert "winograd_f2x3" in res.pd.impl_info_str()
    assert_close(res, WINO_RTOL, "winograd deconv bwd_d")


@pytest.mark.parametrize("case", [CASES[1], CASES[4]], ids=str)
def test_winograd_rejects_other_problems(engine, case):
    from pydnnl.error import unimplemented

    with pytest.raises(unimplemented, match="Winograd"):
        run_op(engine, dnnl.stream(engine), "conv", "fwd", case,
               algorithm=dnnl.algorithm.convolution_winograd)


CHUNKED = Case("chunked", 5, 2, 4, 6, (5, 6), (3, 3), (1, 1), (0, 0), (1, 1), (1, 0))


@pytest.mark.parametrize("direction", DIRS)
@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
def test_im2col_in_chunks_of_images(engine, stream, direction, layout):
    """A tiny ``chunk_mb`` splits the batch (5 images: chunks of 1): every chunk's im2col,
    GEMMs and col2im use the right image offsets; backward weights accumulates over chunks."""
    res = run_op(engine, stream, "conv", direction, CHUNKED, solver="im2col_gemm", seed=3,
                 tags={"src": layout, "dst": layout}, solver_params={"chunk_mb": 0.001})
    assert_close(res, 1e-5, f"chunked {direction} {layout}")


def test_winograd_in_chunks_of_images(engine, stream):
    res = run_op(engine, stream, "conv", "fwd", CHUNKED,
                 algorithm=dnnl.algorithm.convolution_winograd,
                 solver_params={"chunk_mb": 0.003}, seed=4)
    assert_close(res, WINO_RTOL, "winograd chunked")


@pytest.mark.parametrize("direction", ["fwd", "bwd_w"])
def test_im2col_wide_copy_groups(engine, stream, monkeypatch, direction):
    """The GPUs' im2col launch (``heuristics.conv.copy_lanes``: 256 work-items along the
    column's innermost dims, flattened over taps, channels and output points) on every
    device: a conv1-like layer (3 channels innermost, 7x7 taps, stride 2, padding 3)."""
    from pydnnl.primitives.conv.solvers import im2col_gemm

    monkeypatch.setattr(im2col_gemm, "copy_lanes", lambda info: 256)
    case = Case("conv1_like", 2, 1, 3, 8, (13, 11), (7, 7), (2, 2), (0, 0), (3, 3), (3, 3),
                grouped=False)
    res = run_op(engine, stream, "conv", direction, case, solver="im2col_gemm",
                 tags={"src": "acdb", "dst": "acdb"})
    assert_close(res, 1e-5, f"conv1-like im2col {direction}")


@pytest.mark.parametrize("tag", ["acdb", "abcd"])
@pytest.mark.parametrize("kernel", [1, 3])
def test_im2col_backward_data_split_along_k(engine, stream, tag, kernel):
    """Backward data with its GEMM cut along k (the output channels) into slices whose
    products a reduction adds (the GPUs' choice for expanding 1x1 layers at small batches,
    forced here on every device): channels-last rows (weights read unpacked) and
    channels-first per image, a 1x1 layer (diff_src is the GEMM's C) and a 3x3 one."""
    case = Case(f"split_d_k{kernel}", 2, 1, 6, 2048, (5, 4), (kernel, kernel), (1, 1), (0, 0),
                (kernel // 2,) * 2, (kernel // 2,) * 2, grouped=False)
    res = run_op(engine, stream, "conv", "bwd_d", case, solver="im2col_gemm",
                 tags={"src": tag, "dst": tag}, solver_params={"chunk_mb": 64, "split_k": 4})
    assert_close(res, 1e-5, f"bwd_d split {tag} {kernel}")
    pd = res.pd
    plan = pd._solver.build_plan(pd._problem_, pd._params, pd._engine)
    assert "splitk_reduce" in plan.describe(), plan.describe()


@pytest.mark.parametrize("direction", ["fwd", "bwd_d"])
@pytest.mark.parametrize("case", [CHUNKED, WINO_CASES[2]], ids=str)
def test_winograd_packed_filters(engine, stream, monkeypatch, direction, case):
    """The transformed filters packed once per execution into the batched products' panels
    (``heuristics.conv.winograd_packed_filter``, forced on the small problems; CPUs' register
    tiles read them, the hand-written NVIDIA kernel keeps plain B): two groups over chunks of
    one image (each chunk's products read the one packed copy), and 16 -> 8 channels (a
    panel past the last column)."""
    from pydnnl.runtime import plan as plan_mod
    from pydnnl.runtime.heuristics import conv as conv_rules

    monkeypatch.setattr(conv_rules, "WINOGRAD_PACK_MIN_TILES", 1)
    monkeypatch.setattr(conv_rules, "WINOGRAD_PACK_MIN_B_BYTES", 0)
    packed = []
    real = plan_mod.Plan.pack_b_batched

    def spy(self, *a, **kw):
        out = real(self, *a, **kw)
        if not self.dry:
            packed.append(out[3] is not None)
        return out

    monkeypatch.setattr(plan_mod.Plan, "pack_b_batched", spy)
    res = run_op(engine, stream, "conv", direction, case,
                 algorithm=dnnl.algorithm.convolution_winograd,
                 solver_params={"chunk_mb": 0.003}, seed=6)
    if engine.info.is_gpu:  # the rule packs on CPUs only
        assert not packed
    else:
        assert packed and all(packed)
    assert_close(res, WINO_RTOL, f"winograd packed filters {direction} {case}")


@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
def test_im2col_backward_weights_in_k_slices(engine, stream, monkeypatch, layout):
    """Backward weights' GEMMs cut into k slices by CPUs' rule (``cpu_wgrad_slices`` under
    ``wgrad_slices``, forced to 4 slices here; GPUs leave that parameter unused): the slices'
    products and their reduction, over chunks of images, against the reference."""
    from pydnnl.primitives.conv.solvers import im2col_gemm

    monkeypatch.setattr(im2col_gemm, "cpu_wgrad_slices", lambda info, m, n, k, cap: 4)
    case = Case("wgrad_slices", 4, 1, 6, 5, (16, 16), (1, 1), (1, 1), (0, 0), (0, 0), (0, 0),
                grouped=False)
    res = run_op(engine, stream, "conv", "bwd_w", case, solver="im2col_gemm", seed=8,
                 tags={"src": layout, "dst": layout},
                 solver_params={"chunk_mb": 0.01, "wgrad_slices": 8})
    assert_close(res, 1e-5, f"k slices {layout}")
