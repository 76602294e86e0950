"""RNN forward and backward with the recurrence GEMMs split along k (what GPUs do, forced
here on every device through ``split_k``): gradients (which read the forward's states)
against the float64 reference, for every cell family (LSTM's GEMM stores the h_prev
gradient; GRU's accumulates after the elementwise kernel)."""
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


@pytest.mark.parametrize("cfg,direction,L", [
    ("lstm", "bidirectional_concat", 2),
    ("lstm_peephole_projection", "unidirectional_right2left", 1),
    ("gru", "bidirectional_sum", 1),
    ("lbr_gru", "unidirectional_left2right", 2),
    ("rnn_tanh", "unidirectional_left2right", 1),
])
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
