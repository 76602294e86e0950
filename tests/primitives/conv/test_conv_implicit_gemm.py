"""The implicit-GEMM convolution solver against the float64 numpy reference, on every device
present: forward, backward data and backward weights (with the bias gradient) of convolution
and deconvolution over the shape sweep every solver runs (groups, depthwise, strides,
asymmetric and negative padding, dilation, 1-D / 2-D / 3-D, odd sizes, 1x1); tile shapes the
defaults do not choose, a split backward-weights sum, fused bias and post-ops, explicit
layouts (channels-first, channels-last, blocked) and the solver's own answers (applicability,
workspace, parameter errors).
"""
from __future__ import annotations

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from test_conv_helpers import Case, act_tag, assert_close, post_ops_attr, run_op  # noqa: E402
from test_conv_solvers import CASES, DECONV_CASES, DIRS  # noqa: E402

import pydnnl as dnnl  # noqa: E402
from pydnnl.error import invalid_arguments  # noqa: E402
from pydnnl.primitives.conv.solvers import get_solver  # noqa: E402

SOLVER = "implicit_gemm"


@pytest.mark.sampled(every=2)
@pytest.mark.parametrize("direction", DIRS)
@pytest.mark.parametrize("case", CASES, ids=str)
def test_convolution(engine, stream, case, direction):
    res = run_op(engine, stream, "conv", direction, case, solver=SOLVER,
                 seed=sum(map(ord, case.name)))
    assert SOLVER in res.pd.impl_info_str()
    assert_close(res, 1e-5, f"{case} {direction}")


@pytest.mark.sampled(every=2)
@pytest.mark.parametrize("direction", DIRS)
@pytest.mark.parametrize("case", DECONV_CASES, ids=str)
def test_deconvolution(engine, stream, case, direction):
    res = run_op(engine, stream, "deconv", direction, case, solver=SOLVER, seed=7)
    assert SOLVER in res.pd.impl_info_str()
    assert_close(res, 1e-5, f"deconv {case} {direction}")


# strides 2 and 3 with dilation: backward data runs one kernel per phase, some phases
# reached by no tap (bias only), tap progressions with steps > 1
STRIDED = Case("strided", 2, 2, 4, 6, (9, 8), (3, 2), (3, 2), (1, 0), (2, 1), (1, 0))


@pytest.mark.parametrize("direction", DIRS)
def test_strided_dilated_phases(engine, stream, direction):
    res = run_op(engine, stream, "conv", direction, STRIDED, solver=SOLVER, seed=2)
    assert_close(res, 1e-5, f"strided {direction}")


def test_deconvolution_strided_forward_with_bias(engine, stream):
    """Deconvolution forward = convolution backward data (the phases) plus a bias."""
    res = run_op(engine, stream, "deconv", "fwd", STRIDED, solver=SOLVER, seed=4)
    assert_close(res, 1e-5, "deconv strided fwd")


# tiles the defaults do not choose: ragged rows and columns, scalar and vector code,
# column tiles on the fast launch axis, several work-items per work-group
TILES = [{"rows": 3, "cols": 2, "vec": 2, "m_inner": False},
         {"rows": 1, "cols": 8, "vec": 4, "wg": (2, 3)},
         {"rows": 5, "cols": 3, "vec": 1}]


@pytest.mark.parametrize("direction", DIRS)
@pytest.mark.parametrize("params", TILES, ids=["3x2v2", "1x8v4wg", "5x3v1"])
def test_explicit_tiles(engine, stream, params, direction):
    res = run_op(engine, stream, "conv", direction, CASES[1], solver=SOLVER, seed=9,
                 solver_params=params)
    assert res.pd.get_solver_params()["rows"] == params["rows"]
    assert_close(res, 1e-5, f"{params} {direction}")


@pytest.mark.parametrize("splits", [2, 5])
def test_backward_weights_split(engine, stream, splits):
    """The sum over images and output rows in slices (the GPU default) then the reduction;
    5 slices of 2 x 4 = 8 rows round down to 4."""
    case = Case("split", 2, 2, 4, 6, (6, 5), (3, 3), (1, 1), (0, 0), (1, 1), (1, 0))
    res = run_op(engine, stream, "conv", "bwd_w", case, solver=SOLVER, seed=5,
                 solver_params={"splits": splits})
    assert_close(res, 1e-5, f"split {splits}")
    pd = res.pd
    plan = pd._solver.build_plan(pd._problem_, pd._params, pd._engine)
    names = [step.name for step in plan.steps]
    assert any("wei_reduce" in n for n in names), names


POST_OPS = {"sum_relu": [("sum", 1.0), (dnnl.algorithm.eltwise_relu, 0.0, 0.0)],
            "leaky_sum_linear": [(dnnl.algorithm.eltwise_relu, 0.2, 0.0), ("sum", 2.0),
                                 (dnnl.algorithm.eltwise_linear, 0.5, -1.0)],
            "sum_zp_tanh": [("sum", 0.5, 1), (dnnl.algorithm.eltwise_tanh, 0.0, 0.0)]}


@pytest.mark.parametrize("ops", list(POST_OPS))
def test_bias_and_post_ops_fused(engine, stream, ops):
    attr, po = post_ops_attr(POST_OPS[ops])
    res = run_op(engine, stream, "conv", "fwd", CASES[1], solver=SOLVER, attr=attr,
                 post_ops=po, seed=11)
    assert_close(res, 1e-5, ops)


def test_post_ops_deconvolution_forward(engine, stream):
    attr, po = post_ops_attr(POST_OPS["sum_relu"])
    res = run_op(engine, stream, "deconv", "fwd", STRIDED, solver=SOLVER, attr=attr,
                 post_ops=po, seed=12)
    assert_close(res, 1e-5, "deconv post-ops")


@pytest.mark.parametrize("direction", DIRS)
@pytest.mark.parametrize("layout", ["nchw", "nhwc", "blocked"])
def test_explicit_layouts(engine, stream, layout, direction):
    """Channels-first activations are read in place (strided channels); blocked ones are
    staged into channels-last scratch; explicit weights layouts are packed or written
    through their terms."""
    case = Case("lay", 2, 1, 8, 8, (5, 6), (3, 3), (1, 2), (0, 0), (1, 0), (0, 1),
                grouped=False)
    if layout == "blocked":
        tags = {"src": "nChw8c", "dst": "nChw8c", "wei": "OIhw8i8o"}
    else:
        tags = {"src": act_tag(layout, 2), "dst": act_tag(layout, 2),
                "wei": "oihw" if layout == "nchw" else "hwio"}
    res = run_op(engine, stream, "conv", direction, case, solver=SOLVER, seed=13, tags=tags)
    assert_close(res, 1e-5, f"{layout} {direction}")


def test_format_any_picks_channels_last(engine):
    res_pd = run_op(engine, dnnl.stream(engine), "conv", "fwd", CASES[0], solver=SOLVER).pd
    assert res_pd.src_desc().format_name() in ("acdb", "nhwc")


@pytest.mark.parametrize("direction", DIRS)
def test_applies_everywhere_and_workspace_is_exact(engine, direction):
    """No case is refused; the descriptor's scratchpad is what the plan allocates; every
    point of the tuning space is accepted."""
    s = get_solver(SOLVER)
    for case in CASES:
        pd = run_op(engine, dnnl.stream(engine), "conv", direction, case, solver=SOLVER).pd
        prob = pd._problem_
        assert s.why_not(prob, engine) == "" and s.is_applicable(prob, engine)
        plan = s.build_plan(prob, pd._params, engine)
        assert plan.scratch_bytes == s.workspace_bytes(prob, pd._params) == pd.workspace_bytes()
        for params in s.tuning_space(prob, engine):
            assert s.workspace_bytes(prob, params) >= 0


@pytest.mark.parametrize("params, match", [
    ({"rows": 0}, r"solver_params\['rows'\] must be a positive int, got 0"),
    ({"cols": 6, "vec": 4}, r"solver_params\['cols'\] \(6\) must be a multiple of "
                            r"solver_params\['vec'\] \(4\)"),
    ({"vec": 3}, r"solver_params\['vec'\] must be one of"),
    ({"wg": 4}, r"solver_params\['wg'\] must be a pair"),
    ({"splits": 0}, r"solver_params\['splits'\] must be a positive int"),
])
def test_bad_solver_params(engine, params, match):
    with pytest.raises(invalid_arguments, match=match):
        run_op(engine, dnnl.stream(engine), "conv", "bwd_w" if "splits" in params else "fwd",
               CASES[0], solver=SOLVER, solver_params=params)
