"""Forward steps with the recurrent GEMM inside the cell kernel (what GPUs do for batches up
to FUSED_MAX_N, forced here on every device): outputs against the float64 reference, and
a training workspace that the (unchanged) backward turns into the same gradients as the
two-launch steps give."""
from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from rnn_ext_helpers import Problem, assert_close, run  # noqa: E402

import pydnnl as dnnl  # noqa: E402
from pydnnl.primitives.rnn import plan_forward  # noqa: E402

INFER = dnnl.prop_kind.forward_inference
TRAIN = dnnl.prop_kind.forward_training


@pytest.fixture(autouse=True)
def per_step(monkeypatch):
    """Steps launched one by one: small problems would take a one-launch recurrence."""
    monkeypatch.setattr(plan_forward, "persistent_recurrence", lambda engine, s, training: False)
    monkeypatch.setattr(plan_forward, "grid_problem", lambda engine, s, training: None)


@pytest.fixture
def fused(monkeypatch):
    rule = plan_forward.fused_recurrence
    monkeypatch.setattr(plan_forward, "fused_recurrence",
                        lambda engine, s, training: not (training and plan_forward.lbr(s)))
    yield
    monkeypatch.setattr(plan_forward, "fused_recurrence", rule)


CASES = {
    "lstm_bi_concat_L2": Problem("lstm", 4, 3, 6, 6, L=2, direction="bidirectional_concat"),
    "lstm_projection": Problem("lstm", 3, 2, 4, 5, DIC=3),
    "gru_r2l": Problem("gru", 4, 3, 5, 6, direction="unidirectional_right2left"),
    "lbr_gru_sum": Problem("lbr_gru", 3, 2, 4, 5, direction="bidirectional_sum"),
    "rnn_L2": Problem("rnn", 4, 2, 5, 5, L=2),
    "lstm_lengths": Problem("lstm", 5, 4, 3, 4, direction="bidirectional_concat",
                            ext=dnnl.rnn_extensions(seq_lengths=(5, 2, 4, 1))),
}


def _reference(p, a) -> dict:
    y, h, c, _ = p.reference(a, seq_lengths=p.ext.seq_lengths)
    return {"dst_layer": y, "dst_iter": h, "dst_iter_c": c}


@pytest.mark.parametrize("name", list(CASES))
def test_fused_inference_matches_reference(engine, stream, fused, name):
    p = CASES[name]
    a = p.arrays(7)
    out, _, fwd = run(engine, stream, p, a, prop=INFER)
    assert fwd._plan.fused  # the forced rule took effect
    for k, got in out.items():
        assert_close(got, _reference(p, a)[k], f"fused {name} {k}")


@pytest.mark.parametrize("name", ["lstm_bi_concat_L2", "gru_r2l", "rnn_L2", "lstm_lengths"])
def test_fused_training_gives_the_same_gradients(engine, stream, monkeypatch, name):
    p = CASES[name]
    a = p.arrays(11)
    rng = np.random.default_rng(3)
    dd = {k: rng.uniform(-1, 1, d) for k, d in p.dims().items() if k.startswith("dst")}
    out0, g0, fwd0 = run(engine, stream, p, a, diff_dst=dd, prop=TRAIN)
    assert not fwd0._plan.fused or engine.info.type == "gpu"
    monkeypatch.setattr(plan_forward, "fused_recurrence", lambda engine, s, training: True)
    out1, g1, fwd1 = run(engine, stream, p, a, diff_dst=dd, prop=TRAIN)
    assert fwd1._plan.fused
    for k, got in out1.items():
        assert_close(got, _reference(p, a)[k], f"fused training {name} {k}")
    for k in g0:
        assert_close(g1[k], g0[k], f"gradient after a fused forward {name} {k}")
