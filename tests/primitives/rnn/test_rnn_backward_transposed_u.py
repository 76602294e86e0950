"""The per-step backward reading a transposed copy of the recurrent weights (what GPUs do for
large weights, forced here on every device through ``transposed_recurrent_weights``):
gradients against the float64 reference for every cell family, stacks, both directions, a
projection and a peephole (the copy is of U, SIC x gates x channels, whatever the
projection)."""
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
from pydnnl.runtime.heuristics import rnn as rnn_rules  # noqa: E402


@pytest.fixture
def forced_copy(monkeypatch):
    monkeypatch.setattr(rnn_rules, "transposed_recurrent_weights", lambda info, sic, cols: True)
    monkeypatch.setattr(plan_forward, "persistent_recurrence", lambda engine, s, training: False)
    monkeypatch.setattr(plan_backward, "grid_backward", lambda engine, s: None)


@pytest.mark.parametrize("cfg,direction,L", [
    ("lstm", "bidirectional_concat", 2),
    ("lstm_peephole_projection", "unidirectional_right2left", 1),
    ("gru", "bidirectional_sum", 1),
    ("lbr_gru", "unidirectional_left2right", 2),
    ("rnn_tanh", "unidirectional_left2right", 1),
])
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
