"""Per-step forward plans as CPUs run them: the layer GEMM in chunks of steps launched just
before the steps that read them (``layer_gemm_steps``), the top layer's h written straight
into dst_layer (``plan_forward.h_in_dst``). Forced here on every device and checked against
the float64 reference; the rule itself in closed form on made-up devices."""
from __future__ import annotations

import pathlib
import sys
from types import SimpleNamespace

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from rnn_ext_helpers import Problem, assert_close, run  # noqa: E402

import pydnnl as dnnl  # noqa: E402
from pydnnl.primitives.rnn import plan_forward  # noqa: E402
from pydnnl.runtime.heuristics import rnn as rnn_rules  # noqa: E402

INFER = dnnl.prop_kind.forward_inference
TRAIN = dnnl.prop_kind.forward_training


def _cpu(cache=2 << 20, units=2):
    return SimpleNamespace(is_cpu=True, is_gpu=False, core_cache_bytes=cache,
                           compute_units=units)


def test_layer_gemm_steps_rule():
    gpu = SimpleNamespace(is_cpu=False, is_gpu=True, core_cache_bytes=50 << 20,
                          compute_units=132)
    assert rnn_rules.layer_gemm_steps(gpu, 50, 512 << 10) == 50
    # LSTM 512, N 64: 512 KiB a step, half of 2 x 2 MiB holds 4 steps; 50 = 2 x 25 -> 2
    assert rnn_rules.layer_gemm_steps(_cpu(), 50, 512 << 10) == 2
    assert rnn_rules.layer_gemm_steps(_cpu(), 28, 800 << 10) == 2
    assert rnn_rules.layer_gemm_steps(_cpu(), 48, 512 << 10) == 4
    # tiny steps: every step in one launch; a prime T: one step a launch
    assert rnn_rules.layer_gemm_steps(_cpu(), 10, 1 << 10) == 10
    assert rnn_rules.layer_gemm_steps(_cpu(), 7, 512 << 10) == 1
    # a step larger than the budget: still one step a launch
    assert rnn_rules.layer_gemm_steps(_cpu(), 6, 64 << 20) == 1


@pytest.fixture
def per_step(monkeypatch):
    """Steps launched one by one (small problems would take a one-launch recurrence), the
    layer GEMM in chunks of ``chunk`` steps."""
    monkeypatch.setattr(plan_forward, "persistent_recurrence", lambda engine, s, training: False)
    monkeypatch.setattr(plan_forward, "grid_problem", lambda engine, s, training: None)
    monkeypatch.setattr(plan_forward, "fused_recurrence", lambda engine, s, training: False)

    def force(chunk):
        monkeypatch.setattr(rnn_rules, "layer_gemm_steps",
                            lambda info, steps, step_bytes: chunk if steps % chunk == 0 else 1)
    return force


def _reference(p, a) -> dict:
    y, h, c, _ = p.reference(a, seq_lengths=p.ext.seq_lengths)
    return {"dst_layer": y, "dst_iter": h, "dst_iter_c": c}


CASES = {
    "lstm": Problem("lstm", 6, 3, 5, 6),
    "lstm_L2_r2l": Problem("lstm", 6, 2, 4, 4, L=2, direction="unidirectional_right2left"),
    "lstm_bi_concat": Problem("lstm", 6, 3, 4, 5, direction="bidirectional_concat"),
    "gru_L3": Problem("gru", 6, 3, 4, 4, L=3),
    "lbr_gru": Problem("lbr_gru", 6, 2, 5, 4),
    "rnn_sum": Problem("rnn", 6, 2, 3, 4, direction="bidirectional_sum"),
    "lstm_projection": Problem("lstm", 6, 3, 4, 5, DIC=3),
    "lstm_lengths": Problem("lstm", 6, 4, 3, 4,
                            ext=dnnl.rnn_extensions(seq_lengths=(6, 2, 4, 1))),
}


@pytest.mark.parametrize("chunk", [1, 2, 3, 6])
@pytest.mark.parametrize("name", list(CASES))
def test_chunked_inference_matches_reference(engine, stream, per_step, name, chunk):
    p = CASES[name]
    per_step(chunk)
    a = p.arrays(5)
    out, _, fwd = run(engine, stream, p, a, prop=INFER)
    plan = fwd._plan
    if p.ext.seq_lengths is None:
        assert plan.chunk == chunk  # the forced rule took effect
    want = _reference(p, a)
    for k, got in out.items():
        assert_close(got, want[k], f"{name} chunk {chunk} {k}")


@pytest.mark.parametrize("name", ["lstm", "lstm_L2_r2l", "gru_L3", "lbr_gru"])
def test_h_written_into_dst_layer(engine, stream, per_step, name):
    """Unidirectional inference writes the top layer's h into dst_layer and copies none of
    it at the end; dst_iter still gets every layer's last h."""
    p = CASES[name]
    per_step(2)
    a = p.arrays(9)
    out, _, fwd = run(engine, stream, p, a, prop=INFER, executions=2)
    assert fwd._plan.h_in_dst
    want = _reference(p, a)
    for k, got in out.items():
        assert_close(got, want[k], f"{name} in place {k}")


@pytest.mark.parametrize("name", ["lstm_bi_concat", "lstm_projection", "lstm_lengths"])
def test_h_kept_in_the_state_region(engine, stream, per_step, name):
    p = CASES[name]
    per_step(2)
    _, _, fwd = run(engine, stream, p, p.arrays(1), prop=INFER)
    assert not fwd._plan.h_in_dst


@pytest.mark.parametrize("name", ["lstm_L2_r2l", "gru_L3"])
def test_chunked_training_gives_the_same_gradients(engine, stream, monkeypatch, per_step,
                                                   name):
    p = CASES[name]
    a = p.arrays(11)
    rng = np.random.default_rng(3)
    dd = {k: rng.uniform(-1, 1, d) for k, d in p.dims().items() if k.startswith("dst")}
    per_step(6)
    out0, g0, fwd0 = run(engine, stream, p, a, diff_dst=dd, prop=TRAIN)
    per_step(2)
    out1, g1, fwd1 = run(engine, stream, p, a, diff_dst=dd, prop=TRAIN)
    assert fwd1._plan.chunk == 2 and not fwd1._plan.h_in_dst
    for k, got in out1.items():
        assert_close(got, _reference(p, a)[k], f"chunked training {name} {k}")
    for k in g0:
        assert_close(g1[k], g0[k], f"gradient after a chunked forward {name} {k}")
