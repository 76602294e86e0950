"""Per-step forward plans writing the top layer's h straight into dst_layer
(``plan_forward.h_in_dst``: unidirectional inference, no final copy out of the state
region): outputs against the float64 reference, on every device, steps launched one by one;
the forms that keep h in the state region say so."""
from __future__ import annotations

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from rnn_ext_helpers import Problem, assert_close, run  # noqa: E402

import pydnnl as dnnl  # noqa: E402
from pydnnl.primitives.rnn import plan_forward  # noqa: E402

INFER = dnnl.prop_kind.forward_inference
TRAIN = dnnl.prop_kind.forward_training


@pytest.fixture
def per_step(monkeypatch):
    """Steps launched one by one: small problems would take a one-launch recurrence."""
    monkeypatch.setattr(plan_forward, "persistent_recurrence", lambda engine, s, training: False)
    monkeypatch.setattr(plan_forward, "grid_problem", lambda engine, s, training: None)


def _reference(p, a) -> dict:
    y, h, c, _ = p.reference(a, seq_lengths=p.ext.seq_lengths)
    return {"dst_layer": y, "dst_iter": h, "dst_iter_c": c}


CASES = {
    "lstm": Problem("lstm", 6, 3, 5, 6),
    "lstm_L2_r2l": Problem("lstm", 6, 2, 4, 4, L=2, direction="unidirectional_right2left"),
    "gru_L3": Problem("gru", 6, 3, 4, 4, L=3),
    "lbr_gru": Problem("lbr_gru", 6, 2, 5, 4),
    "rnn": Problem("rnn", 5, 2, 3, 4),
    "lstm_bi_concat": Problem("lstm", 6, 3, 4, 5, direction="bidirectional_concat"),
    "rnn_sum": Problem("rnn", 6, 2, 3, 4, direction="bidirectional_sum"),
    "lstm_projection": Problem("lstm", 6, 3, 4, 5, DIC=3),
    "lstm_lengths": Problem("lstm", 6, 4, 3, 4,
                            ext=dnnl.rnn_extensions(seq_lengths=(6, 2, 4, 1))),
}
IN_PLACE = ("lstm", "lstm_L2_r2l", "gru_L3", "lbr_gru", "rnn")


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("name", IN_PLACE)
def test_h_written_into_dst_layer(engine, stream, monkeypatch, per_step, name, fused):
    """The top layer's h lands in dst_layer and nothing is copied there at the end; dst_iter
    still gets every layer's last h (the top one read back from dst_layer). ``fused``: the
    cell kernels compute their recurrent GEMM (what GPUs do for small batches)."""
    if fused:
        monkeypatch.setattr(plan_forward, "fused_recurrence", lambda engine, s, training: True)
    p = CASES[name]
    a = p.arrays(9)
    out, _, fwd = run(engine, stream, p, a, prop=INFER, executions=2)
    assert fwd._plan.h_in_dst
    want = _reference(p, a)
    for k, got in out.items():
        assert_close(got, want[k], f"{name} in place {k}")


@pytest.mark.parametrize("name", ["lstm_bi_concat", "rnn_sum", "lstm_projection",
                                  "lstm_lengths"])
def test_h_kept_in_the_state_region(engine, stream, per_step, name):
    p = CASES[name]
    a = p.arrays(1)
    out, _, fwd = run(engine, stream, p, a, prop=INFER)
    assert not fwd._plan.h_in_dst
    want = _reference(p, a)
    for k, got in out.items():
        assert_close(got, want[k], f"{name} {k}")


@pytest.mark.parametrize("name", ["lstm", "gru_L3"])
def test_training_keeps_h_in_the_workspace(engine, stream, per_step, name):
    p = CASES[name]
    a = p.arrays(3)
    out, _, fwd = run(engine, stream, p, a, prop=TRAIN)
    assert not fwd._plan.h_in_dst
    want = _reference(p, a)
    for k, got in out.items():
        assert_close(got, want[k], f"{name} training {k}")


def test_one_launch_recurrence_keeps_h_in_the_state_region(engine, stream):
    """A small problem takes the one-group recurrence on CPUs, which writes the state
    region: dst_layer comes from the final copy."""
    p = CASES["lstm"]
    a = p.arrays(4)
    out, _, fwd = run(engine, stream, p, a, prop=INFER)
    if not (fwd._plan.persistent or fwd._plan.grid):
        pytest.skip("this device runs the small LSTM step by step")
    assert not fwd._plan.h_in_dst
    want = _reference(p, a)
    for k, got in out.items():
        assert_close(got, want[k], f"one launch {k}")
