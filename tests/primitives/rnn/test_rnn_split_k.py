"""RNN forward and backward with the recurrence GEMMs in the forms GPUs take, forced here on
every device: split along k (``split_k``), and the backward's reading a transposed copy of
the recurrent weights (``transposed_recurrent_weights``). Gradients (which read the forward's
states) against the float64 reference, for every cell family (LSTM's GEMM stores the h_prev
gradient; GRU's accumulates after the elementwise kernel), stacks, both directions, a
projection and a peephole."""
from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from rnn_bwd_helpers import (  # noqa: E402
    assert_close,
    bwd_pd,
    fwd_pd,
    gradients,
    problem,
    ref_gradients,
    run_backward,
    run_forward,
)

from pydnnl.primitives.rnn import plan_backward, plan_forward  # noqa: E402
from pydnnl.runtime import gemm as matmul  # noqa: E402
from pydnnl.runtime.heuristics import gemm as rules  # noqa: E402
from pydnnl.runtime.heuristics import rnn as rnn_rules  # noqa: E402


@pytest.fixture
def forced_split(monkeypatch):
    monkeypatch.setattr(rules, "split_k", lambda info, m, n, k, params: 2 if k % 2 == 0 else 1)
    # the forward's recurrent GEMMs run per step (small problems take the one-launch
    # recurrence, which has none)
    monkeypatch.setattr(plan_forward, "persistent_recurrence", lambda engine, s, training: False)
    monkeypatch.setattr(plan_forward, "grid_problem", lambda engine, s, training: None)
    monkeypatch.setattr(plan_backward, "grid_backward", lambda engine, s: None)
    matmul._cache.clear()
    yield
    matmul._cache.clear()


FAMILIES = [
    ("lstm", "bidirectional_concat", 2),
    ("lstm_peephole_projection", "unidirectional_right2left", 1),
    ("gru", "bidirectional_sum", 1),
    ("lbr_gru", "unidirectional_left2right", 2),
    ("rnn_tanh", "unidirectional_left2right", 1),
]


@pytest.mark.parametrize("cfg,direction,L", FAMILIES)
def test_split_recurrence_gradients_match_reference(engine, stream, forced_split, cfg,
                                                    direction, L):
    p = problem(cfg, direction, L)
    fpd = fwd_pd(engine, p)
    # forward k = SIC (odd: whole); GPUs compute small batches' steps in the cell kernels
    fused = plan_forward.fused_recurrence(engine, fpd.shape, True)
    assert ("splitk" in fpd.scratch) == (p.SIC % 2 == 0 and not fused)
    fargs = run_forward(engine, stream, p, fpd)
    bpd = bwd_pd(engine, p, fpd)
    assert "splitk" in bpd.scratch  # the partial products' region: the split did happen
    got = gradients(run_backward(engine, stream, p, bpd, fargs))
    ref = ref_gradients(p)
    for name, g in got.items():
        assert_close(g, np.reshape(ref[name], g.shape), f"split-k {cfg} {direction} L{L} {name}")


@pytest.fixture
def forced_copy(monkeypatch):
    monkeypatch.setattr(rnn_rules, "transposed_recurrent_weights", lambda info, sic, cols: True)
    monkeypatch.setattr(plan_forward, "persistent_recurrence", lambda engine, s, training: False)
    monkeypatch.setattr(plan_backward, "grid_backward", lambda engine, s: None)


@pytest.mark.parametrize("cfg,direction,L", FAMILIES)
def test_transposed_weights_gradients_match_reference(engine, stream, forced_copy, cfg,
                                                      direction, L):
    p = problem(cfg, direction, L)
    fpd = fwd_pd(engine, p)
    fargs = run_forward(engine, stream, p, fpd)
    bpd = bwd_pd(engine, p, fpd)
    assert "ut" in bpd.scratch  # the copy's region: the transposed form was planned
    got = gradients(run_backward(engine, stream, p, bpd, fargs))
    ref = ref_gradients(p)
    for name, g in got.items():
        assert_close(g, np.reshape(ref[name], g.shape), f"U^T copy {cfg} {direction} L{L} {name}")
