"""im2col + GEMM over chunks of images whose GEMMs differ between chunks: backward weights'
first GEMM of each group overwrites (beta 0) and the rest accumulate, so with one GEMM per
image (channels-first activations) the first chunk packs fewer B matrices of the
accumulating shape than the later ones. The packing slot they share must hold the most any
chunk packs (DeepSpeech2's conv1 at mb 4 could not be created). Every result is checked
against the float64 reference; and a solver that cannot plan a problem is skipped by
``convolution_auto`` and ``find``, or named in a pydnnl error when pinned.
"""
from __future__ import annotations

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from test_conv_helpers import F32, MD, Case, assert_close, run_op  # noqa: E402

import pydnnl as dnnl  # noqa: E402
from pydnnl.conv_shapes import validate_conv  # noqa: E402
from pydnnl.error import error, unimplemented  # noqa: E402
from pydnnl.primitives.conv import convolution_backward_weights  # noqa: E402
from pydnnl.primitives.conv.solvers import get_solver, heuristic_order  # noqa: E402

DIRS = ["fwd", "bwd_d", "bwd_w"]

# DeepSpeech2's first layer at mb 4: the default chunk budget holds two of its images
DS2_CONV1 = Case("ds2_conv1_mb4", 4, 1, 1, 16, (81, 200), (41, 11), (2, 2), (0, 0), (20, 5),
                 (20, 5), grouped=False)


@pytest.mark.parametrize("direction", DIRS)
@pytest.mark.parametrize("solver", [None, "im2col_gemm"])
def test_ds2_conv1_mb4(engine, stream, solver, direction):
    res = run_op(engine, stream, "conv", direction, DS2_CONV1, solver=solver,
                 tags={"src": "nchw"}, seed=1)
    assert_close(res, 1e-5, f"{DS2_CONV1} {solver} {direction}")


def _chunk_mb(case: Case, images: int) -> float:
    """A ``chunk_mb`` whose column buffer holds ``images`` images and not one more."""
    geo = case.geom(False)
    points, taps = 1, 1
    for v in geo.dst_dims()[2:]:
        points *= v
    for v in case.k:
        taps *= v
    per_image = case.g * points * (case.ic // case.g) * taps
    return (images * per_image + per_image // 2) / (1 << 18)


# (case, images per chunk): two or three chunks of two or three images
UNEVEN = [
    (Case("mb4_s2", 4, 1, 3, 5, (9, 11), (3, 5), (2, 2), (0, 0), (1, 2), (1, 2),
          grouped=False), 2),
    (Case("mb6_g2_asym", 6, 2, 4, 6, (7, 9), (3, 3), (2, 1), (0, 0), (1, 1), (1, 0)), 3),
    (Case("mb6_g2_asym", 6, 2, 4, 6, (7, 9), (3, 3), (2, 1), (0, 0), (1, 1), (1, 0)), 2),
    (Case("mb6_1d_dil", 6, 1, 2, 4, (17,), (5,), (2,), (1,), (3,), (2,), grouped=False), 2),
]


@pytest.mark.sampled(every=5)
@pytest.mark.parametrize("direction", DIRS)
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("case,images", UNEVEN, ids=lambda v: str(v))
def test_uneven_chunks(engine, stream, case, images, layout, direction):
    tag = {1: "abc", 2: "abcd"}[case.nsp] if layout == "nchw" else {1: "acb", 2: "acdb"}[case.nsp]
    res = run_op(engine, stream, "conv", direction, case, solver="im2col_gemm", seed=5,
                 tags={"src": tag, "dst": tag},
                 solver_params={"chunk_mb": _chunk_mb(case, images)})
    assert_close(res, 1e-5, f"{case} x{images} {layout} {direction}")


@pytest.mark.parametrize("direction", ["fwd", "bwd_w"])
def test_uneven_chunks_deconvolution(engine, stream, direction):
    case, images = UNEVEN[1]
    res = run_op(engine, stream, "deconv", direction, case, solver="im2col_gemm", seed=6,
                 tags={"src": "abcd", "dst": "abcd"},
                 solver_params={"chunk_mb": _chunk_mb(case, images)})
    assert_close(res, 1e-5, f"deconv {case} x{images} {direction}")


def _ds2_bwd_w_args():
    c = DS2_CONV1
    return (MD([c.mb, c.ic, *c.insp], F32, "abcd"), MD([c.oc, c.ic, *c.k], F32, "any"),
            MD([c.oc], F32, "a"), MD([c.mb, c.oc, 41, 100], F32, "any"), list(c.s),
            list(c.pl), list(c.pr))


def test_find_ds2_conv1_mb4(engine, tmp_path, monkeypatch):
    monkeypatch.setenv("PYDNNL_PERF_DB", str(tmp_path / "perf.sqlite"))
    res = convolution_backward_weights.find(engine, *_ds2_bwd_w_args())
    assert "im2col_gemm" in {r.solver for r in res}


@pytest.fixture
def failing_plan(monkeypatch):
    """im2col + GEMM whose plan cannot be laid out (a bare ValueError, as the runtime's
    scratch allocator raises)."""
    def fail(problem, params=None):
        raise ValueError("plan: scratch slot 'x' holds 1 elements, 2 asked")

    monkeypatch.setattr(get_solver("im2col_gemm"), "workspace_bytes", fail)


def test_auto_skips_a_solver_that_cannot_plan(engine, failing_plan):
    # a strided 1x1 layer, which the heuristic gives to im2col + GEMM first
    args = (MD([2, 32, 14, 14], F32, "any"), MD([32, 32, 1, 1], F32, "any"), MD([32], F32, "a"),
            MD([2, 32, 7, 7], F32, "any"), [2, 2], [0, 0], [0, 0])
    geom = validate_conv([2, 32, 14, 14], [32, 32, 1, 1], [2, 2], [0, 0], [0, 0], [0, 0])
    assert heuristic_order("bwd_w", geom, engine)[0] == "im2col_gemm"
    pd = convolution_backward_weights.primitive_desc(engine, dnnl.algorithm.convolution_auto,
                                                     *args, _use_db=False)
    assert pd.impl_info_str() != "loopy:im2col_gemm"


def test_find_skips_a_solver_that_cannot_plan(engine, failing_plan, tmp_path, monkeypatch):
    monkeypatch.setenv("PYDNNL_PERF_DB", str(tmp_path / "perf.sqlite"))
    small = (MD([2, 3, 9, 9], F32, "abcd"), MD([4, 3, 3, 3], F32, "any"), MD([4], F32, "a"),
             MD([2, 4, 9, 9], F32, "any"), [1, 1], [1, 1], [1, 1])
    res = convolution_backward_weights.find(engine, *small)
    solvers = {r.solver for r in res}
    assert "im2col_gemm" not in solvers and "direct" in solvers


def test_pinned_solver_that_cannot_plan_raises_a_pydnnl_error(engine, failing_plan):
    with pytest.raises(unimplemented, match="im2col_gemm: cannot plan") as info:
        convolution_backward_weights.primitive_desc(
            engine, dnnl.algorithm.convolution_auto, *_ds2_bwd_w_args(), solver="im2col_gemm")
    assert isinstance(info.value, error)
