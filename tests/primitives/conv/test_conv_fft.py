"""The FFT convolution solver against the float64 numpy reference, on every device present:
forward, backward data and backward weights (with the bias gradient) of convolution and
deconvolution over the stride-1 problems of the shared sweep plus FFT-specific ones (lengths
with factors 3 and 5 and a prime, 1-D / 2-D / 3-D, dilation, groups, depthwise, asymmetric
padding, several image chunks), fused bias and post-ops, explicit layouts, and the solver's
own answers (applicability with reasons, workspace).

Tolerance: the FFT sums ``L^d`` rounded products of spectra whose magnitudes are those of the
whole input and filter, so float32 errors are a few 1e-7 of the output's magnitude times
``log L``; the suite holds every result to 2e-5 of the largest reference entry (the GEMM
solvers are held to 1e-5).
"""
from __future__ import annotations

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from test_conv_helpers import Case, act_tag, assert_close, post_ops_attr, run_op  # noqa: E402
from test_conv_solvers import CASES, DIRS  # noqa: E402

import pydnnl as dnnl  # noqa: E402
from pydnnl.conv_shapes import ConvGeometry  # noqa: E402
from pydnnl.kernels.conv_fft import fft_factors, good_length  # noqa: E402
from pydnnl.primitives.conv.solvers import get_solver  # noqa: E402
from pydnnl.primitives.conv.solvers.fft import lengths  # noqa: E402

SOLVER = "fft"
RTOL = 2e-5

STRIDE1 = [c for c in CASES
           if all(s == 1 for s in c.s) and any(k > 1 for k in c.k) and min(c.pl) >= 0]
OWN = [
    # L = 12 (4 x 3) with a 5x5 kernel and asymmetric padding
    Case("2d_k5_asym", 2, 1, 3, 4, (8, 7), (5, 5), (1, 1), (0, 0), (2, 1), (2, 3),
         grouped=False),
    # L = 15 (3 x 5) / 7 (prime: direct DFT) with dilation
    Case("2d_d2_prime", 1, 2, 4, 2, (9, 3), (3, 2), (1, 1), (2, 1), (1, 1), (1, 0)),
    # depthwise 7x7
    Case("2d_dw_k7", 2, 3, 3, 3, (9, 10), (7, 7), (1, 1), (0, 0), (3, 3), (3, 3)),
    # 1-D long kernel, 3-D 3x3x3
    Case("1d_k9", 3, 1, 2, 5, (20,), (9,), (1,), (0,), (4,), (4,), grouped=False),
    Case("3d_k3", 1, 1, 2, 3, (5, 4, 6), (3, 3, 3), (1, 1, 1), (0, 0, 0), (1, 1, 1),
         (1, 1, 1), grouped=False),
]


@pytest.mark.sampled(every=2)
@pytest.mark.parametrize("direction", DIRS)
@pytest.mark.parametrize("case", STRIDE1 + OWN, ids=str)
def test_convolution(engine, stream, case, direction):
    res = run_op(engine, stream, "conv", direction, case, solver=SOLVER,
                 seed=sum(map(ord, case.name)))
    assert SOLVER in res.pd.impl_info_str()
    assert_close(res, RTOL, f"{case} {direction}")


DECONV = [c for c in STRIDE1 + OWN if c.name in ("3d_mixed", "2d_k5_asym", "2d_d2_prime")]


@pytest.mark.parametrize("direction", DIRS)
@pytest.mark.parametrize("case", DECONV, ids=str)
def test_deconvolution(engine, stream, case, direction):
    res = run_op(engine, stream, "deconv", direction, case, solver=SOLVER, seed=7)
    assert SOLVER in res.pd.impl_info_str()
    assert_close(res, RTOL, f"deconv {case} {direction}")


@pytest.mark.parametrize("direction", DIRS)
def test_several_image_chunks(engine, stream, direction):
    """A chunk limit below one image's spectra: one image per chunk, the backward-weights
    products accumulated over the chunks."""
    case = Case("chunks", 3, 1, 4, 4, (6, 5), (3, 3), (1, 1), (0, 0), (1, 1), (1, 1),
                grouped=False)
    res = run_op(engine, stream, "conv", direction, case, solver=SOLVER, seed=3,
                 solver_params={"chunk_mb": 0.001})
    assert_close(res, RTOL, f"chunks {direction}")


POST_OPS = {"sum_zp_relu": [("sum", 0.5, 1), (dnnl.algorithm.eltwise_relu, 0.0, 0.0)],
            "leaky_sum_linear": [(dnnl.algorithm.eltwise_relu, 0.2, 0.0), ("sum", 2.0),
                                 (dnnl.algorithm.eltwise_linear, 0.5, -1.0)]}


@pytest.mark.parametrize("ops", list(POST_OPS))
@pytest.mark.parametrize("op", ["conv", "deconv"])
def test_bias_and_post_ops(engine, stream, ops, op):
    """Fused into the last inverse pass (deconvolution forward: the backward-data plan)."""
    attr, po = post_ops_attr(POST_OPS[ops])
    res = run_op(engine, stream, op, "fwd", OWN[0], solver=SOLVER, attr=attr, post_ops=po,
                 seed=5)
    assert_close(res, RTOL, f"{op} {ops}")


@pytest.mark.parametrize("family", ["nchw", "nhwc"])
def test_explicit_layouts(engine, stream, family):
    case = OWN[0]
    tags = {"src": act_tag(family, 2), "dst": act_tag(family, 2), "wei": "oihw"}
    for direction in DIRS:
        res = run_op(engine, stream, "conv", direction, case, solver=SOLVER, tags=tags, seed=6)
        assert_close(res, RTOL, f"{family} {direction}")


def test_lengths_are_smooth_and_cover_the_linear_convolution():
    for n in range(1, 300):
        m = good_length(n)
        assert m >= n and all(f in (2, 3, 4, 5) for f in fft_factors(m))
        assert all(good_length(k) > k or k == m for k in range(n, m))
    assert fft_factors(7) == [7] and fft_factors(60) == [4, 3, 5]


def test_applicability_and_workspace(engine):
    s = get_solver(SOLVER)
    strided = [c for c in CASES if any(v > 1 for v in c.s)][0]
    one = [c for c in CASES if c.name == "2d_1x1"][0]
    for case, why in ((strided, "stride 1"), (one, "larger than 1 tap")):
        pd = _pd(engine, case)
        assert why in s.why_not(pd._problem_, engine)
    big = Case("big", 1, 1, 1, 1, (200, 8), (3, 3), (1, 1), (0, 0), (1, 1), (1, 1),
               grouped=False)
    assert "exceeds" in s.why_not(_pd(engine, big)._problem_, engine)
    pd = _pd(engine, OWN[0])
    p = pd._problem_
    # 8 + 2 + 2 - 5 + 1 = 8 rows out: max(2 + 8, 8 + 5 - 1) = 12; 7 + 1 + 3 - 5 + 1 = 7
    # columns: max(1 + 7, 7 + 5 - 1) = 11 -> 12 (4 x 3)
    assert lengths(p) == (12, 12)
    # filter spectrum + chunk spectra + products, in float32: bins = 12 * (12 / 2 + 1)
    nb = 2
    bins = 12 * 7
    least = 4 * bins * (2 * 3 * 4 + 2 * nb * 3 + 4 * nb * 4)
    assert s.workspace_bytes(p, {"chunk_mb": 64}) >= least


def _pd(engine, case):
    """A forward descriptor with the im2col solver (applicable everywhere) for its problem."""
    geo = case.geom(False)
    f32 = dnnl.data_type.f32
    md = dnnl.memory.desc
    return dnnl.convolution_forward.primitive_desc(
        engine, dnnl.prop_kind.forward_training, dnnl.algorithm.convolution_direct,
        md((case.mb, case.ic, *case.insp), f32, "any"), md(case.wdims(), f32, "any"), None,
        md(geo.dst_dims(), f32, "any"), list(case.s), list(case.d), list(case.pl),
        list(case.pr), solver="im2col_gemm")


def _geom(sp, k, pad, mb=8, ic=64, oc=64, stride=1):
    n = len(sp)
    o = tuple((v + 2 * pad - k) // stride + 1 for v in sp)
    return ConvGeometry(mb, 1, ic, oc, tuple(sp), o, (k,) * n, (stride,) * n, (0,) * n,
                        (pad,) * n, (pad,) * n)


def test_saving_closed_form():
    from pydnnl.primitives.conv.solvers.fft import saving

    # 7x7 on 32x32 padded 3: L = 38 -> 40, bins 40 x 21, 49 taps x 1024 points / (4 bins)
    assert saving("fwd", _geom((32, 32), 7, 3)) == pytest.approx(49 * 1024 / (4 * 40 * 21))
    assert saving("fwd", _geom((32, 32), 7, 3, stride=2)) == 0.0
    assert saving("fwd", _geom((224, 224), 7, 3)) == 0.0          # L = 230 > 128


def test_heuristic_puts_fft_first_for_large_kernels(engine):
    """On every device type: 7x7 (15x fewer multiplies) first, 3x3 (3.7x) last; AlexNet's
    5x5 with 96 -> 256 channels (8.4x) forward first, backward weights last."""
    from pydnnl.primitives.conv.solvers import heuristic_order

    for kind in ("fwd", "bwd_d", "bwd_w"):
        big = heuristic_order(kind, _geom((32, 32), 7, 3), engine)
        assert big[0] == "fft", (kind, big)
        small = heuristic_order(kind, _geom((28, 28), 3, 1), engine)
        assert small[-1] == "fft", (kind, small)
    alex = _geom((27, 27), 5, 2, ic=96, oc=256)
    assert heuristic_order("fwd", alex, engine)[0] == "fft"
    assert heuristic_order("bwd_w", alex, engine)[-1] == "fft"
