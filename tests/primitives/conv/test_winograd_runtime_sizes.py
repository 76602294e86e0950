"""Winograd F(2x2,3x3) with sizes at run time: the transforms of plain activation layouts
serve every spatial size and minibatch of their class, so creating the solver's primitives
for a new image size or minibatch generates no ``conv_winograd`` kernel, and the results
still match the float64 numpy reference (odd and even sizes: partial tiles; several image
chunks; partial work-groups along channels)."""
from __future__ import annotations

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from test_conv_helpers import Case, assert_close, post_ops_attr, run_op  # noqa: E402

import pydnnl as dnnl  # noqa: E402
from pydnnl.kernels.conv_winograd import WinogradProblem, winograd_runtime  # noqa: E402

WINO = dnnl.algorithm.convolution_winograd
# as in test_conv_solvers: a few more roundings of values ~4x larger than direct's products
WINO_RTOL = 3e-5


def _case(mb, insp, pl=(1, 1), pr=(1, 1), g=1, ic=4, oc=6):
    return Case(f"w{mb}_{insp[0]}x{insp[1]}", mb, g, ic, oc, insp, (3, 3), (1, 1), (0, 0),
                pl, pr, grouped=g > 1)


# the first shape, another spatial size (even output: no partial tiles), another minibatch
SHAPES = [(1, (5, 7)), (1, (8, 6)), (3, (5, 7))]
NHWC = {"src": "nhwc", "dst": "nhwc"}


@pytest.mark.parametrize("direction", ["fwd", "bwd_d", "bwd_w"])
def test_new_size_and_minibatch_need_no_new_transform(engine, stream, requested, direction):
    for i, (mb, insp) in enumerate(SHAPES):
        requested.clear()
        # a tiny chunk: the larger minibatches run in several chunks (n0 > 0)
        res = run_op(engine, stream, "conv", direction, _case(mb, insp), algorithm=WINO,
                     tags=NHWC, seed=i, solver_params={"chunk_mb": 0.001})
        assert "winograd_f2x3" in res.pd.impl_info_str()
        assert_close(res, WINO_RTOL, f"winograd {direction} mb{mb} {insp}")
        keys = {key for fam, key in requested if fam == "conv_winograd"}
        if i == 0:
            first = keys
            assert first
        else:
            assert keys <= first, sorted(keys - first)


@pytest.mark.parametrize("direction", ["fwd", "bwd_d", "bwd_w"])
def test_channels_first_grouped_asymmetric_padding(engine, stream, direction):
    """nchw, two groups, asymmetric and zero padding (backward data pads by 2 - pl)."""
    for i, (mb, insp) in enumerate([(2, (5, 8)), (1, (6, 3))]):
        case = _case(mb, insp, pl=(0, 2), pr=(1, 0), g=2, ic=4, oc=6)
        res = run_op(engine, stream, "conv", direction, case, algorithm=WINO,
                     tags={"src": "nchw", "dst": "nchw"}, seed=10 + i)
        assert_close(res, WINO_RTOL, f"winograd nchw {direction} {insp}")


@pytest.mark.parametrize("direction", ["fwd", "bwd_d", "bwd_w"])
def test_partial_work_groups(engine, stream, direction):
    """Work-groups of 8 over 13 and 12 channels: the last group along channels is partial
    (peeled), in the tile stages and the flat filter and wgrad transforms."""
    case = _case(2, (5, 6), ic=12, oc=13)
    res = run_op(engine, stream, "conv", direction, case, algorithm=WINO, tags=NHWC, seed=4,
                 solver_params={"chunk_mb": 64, "wg": 8})
    assert_close(res, WINO_RTOL, f"winograd wg8 {direction}")


@pytest.mark.parametrize("direction", ["fwd", "bwd_d", "bwd_w"])
def test_wide_channels(engine, stream, direction):
    """32 x 48 channels in gkio weights: backward data's flipped filter goes through the local
    16 x 16 tile, backward weights stores its products along output channels."""
    case = _case(1, (4, 3), ic=32, oc=48)
    res = run_op(engine, stream, "conv", direction, case, algorithm=WINO, tags=NHWC, seed=6)
    assert_close(res, WINO_RTOL, f"winograd 32x48 {direction}")


def test_post_ops_and_blocked_layouts(engine, stream):
    """Sum and eltwise post-ops in the run-time output transform; a blocked layout keeps
    baked sizes (and still matches)."""
    attr, po = post_ops_attr([("sum", 0.5), (dnnl.algorithm.eltwise_relu, 0.1, 0.0)])
    for insp in ((5, 7), (6, 6)):
        res = run_op(engine, stream, "conv", "fwd", _case(2, insp, ic=8, oc=8), algorithm=WINO,
                     tags=NHWC, attr=attr, post_ops=po, seed=3)
        assert_close(res, WINO_RTOL, f"winograd post-ops {insp}")
    res = run_op(engine, stream, "conv", "fwd", _case(1, (5, 7), ic=8, oc=8), algorithm=WINO,
                 tags={"src": "nChw8c", "dst": "nChw8c"}, seed=8)
    assert_close(res, WINO_RTOL, "winograd blocked")


def test_runtime_form():
    """Plain layouts get size variables (unit stride baked); blocked layouts, binary post-ops
    and the spatial-free stages stay as they are."""
    plain = (0, ((1, 60, ()), (1, 1, ()), (1, 12, ()), (1, 4, ())))   # nhwc 4 x 3 x 5
    p = WinogradProblem("input", nb=2, groups=1, icg=4, ocg=4, src_sp=(3, 5), dst_sp=(3, 5),
                        padding_l=(1, 1), act=plain, act_n=120)
    q, sizes = winograd_runtime(p)
    assert sizes == {"in_h": 3, "in_w": 5, "out_h": 3, "out_w": 5, "tiles_h": 2, "tiles_w": 3,
                     "ntiles": 12, "act_d0": 60, "act_d2": 12, "act_d3": 4}
    assert q.padding_r == (1, 1) and q.act[1][1] == (1, 1, ())
    other, _ = winograd_runtime(WinogradProblem(
        "input", nb=1, groups=1, icg=4, ocg=4, src_sp=(7, 9), dst_sp=(7, 9), padding_l=(1, 1),
        act=(0, ((1, 252, ()), (1, 1, ()), (1, 36, ()), (1, 4, ()))), act_n=252))
    assert other == q
    blocked = (0, ((1, 120, ()), (8, 64, ((8, 1),)), (1, 40, ()), (1, 8, ())))
    assert winograd_runtime(WinogradProblem(
        "input", nb=2, groups=1, icg=4, ocg=4, src_sp=(3, 5), dst_sp=(3, 5), padding_l=(1, 1),
        act=blocked))[1] == {}
    binary = (("binary", "add"),)
    assert winograd_runtime(WinogradProblem(
        "output", nb=2, groups=1, icg=4, ocg=4, src_sp=(3, 5), dst_sp=(3, 5), padding_l=(1, 1),
        act=plain, post_ops=binary))[1] == {}


def test_backward_weights_slices_at_run_time(engine, stream, requested):
    """Backward weights cut into slices of the tiles (``splits``, GPUs' default): the slice
    count follows the tile count (2, then 4, then 1 slices here), yet the wgrad transform
    and the batched products keep one program each (both take their counts at run time);
    results against the reference."""
    from pydnnl.kernels.conv_direct import largest_divisor_at_most

    # 1058, 1200, 156 tiles: every slice at least one k tile of the GPUs' batched products
    # (a shorter k keeps its own smaller tile there, see runtime.gemm.runtime_k)
    shapes = [(2, (46, 46)), (3, (40, 40)), (1, (24, 26))]
    # the premise: the solver's rule (whole slices of at least 256 tiles) gives 2, 4, 1
    tiles = [mb * -(-h // 2) * -(-w // 2) for mb, (h, w) in shapes]
    assert [largest_divisor_at_most(t, min(4, t // 256 or 1)) for t in tiles] == [2, 4, 1]
    for i, (mb, insp) in enumerate(shapes):
        requested.clear()
        res = run_op(engine, stream, "conv", "bwd_w", _case(mb, insp, ic=8, oc=8),
                     algorithm=WINO, tags=NHWC, seed=20 + i, solver_params={"splits": 4})
        assert "winograd_f2x3" in res.pd.impl_info_str()
        assert_close(res, WINO_RTOL, f"winograd sliced bwd_w mb{mb} {insp}")
        keys = {(fam, key) for fam, key in requested if fam in ("conv_winograd", "gemm")}
        if i == 0:
            first = keys
            assert any(fam == "gemm" for fam, _ in first), first
        else:
            assert keys <= first, sorted(keys - first)
