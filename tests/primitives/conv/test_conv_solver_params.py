"""Explicit tuning parameters of the GEMM-based convolution solver that the defaults of a CPU
never choose: backward weights split along its long k (what GPUs do), with and without
chunks of images; checked against the float64 reference."""
from __future__ import annotations

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from test_conv_helpers import Case, assert_close, run_op  # noqa: E402

# k of the backward-weights GEMM = images x output points = 2 x 32 x 32 = 2048: four slices
# of 512 (the solver keeps slices of at least 512)
WIDE = Case("wide", 2, 1, 3, 4, (32, 32), (3, 3), (1, 1), (0, 0), (1, 1), (1, 1),
            grouped=False)


@pytest.mark.parametrize("params", [{"split_k": 4}, {"split_k": 4, "chunk_mb": 0.02},
                                    {"split_k": 3}],
                         ids=["split4", "split4_chunked", "split3_rounds_down"])
def test_backward_weights_split_along_k(engine, stream, params):
    res = run_op(engine, stream, "conv", "bwd_w", WIDE, solver="im2col_gemm", seed=5,
                 solver_params=params)
    assert_close(res, 1e-5, f"split bwd_w {params}")
    # the split did happen: the plan adds the slices with the split-k reduction
    pd = res.pd
    plan = pd._solver.build_plan(pd._problem_, pd._params, pd._engine)
    names = [step.name for step in plan.steps]
    assert any("splitk_reduce" in n for n in names), names
