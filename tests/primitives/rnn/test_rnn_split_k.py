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


def _per_step(monkeypatch):
    """The recurrences' GEMMs run per step (small problems take the one-launch recurrence,
    which has none)."""
    monkeypatch.setattr(plan_forward, "persistent_recurrence", lambda engine, s, training: False)
    monkeypatch.setattr(plan_forward, "grid_problem", lambda engine, s, training: None)
    monkeypatch.setattr(plan_backward, "grid_backward", lambda engine, s: None)


@pytest.fixture
def forced_split(monkeypatch):
    monkeypatch.setattr(rules, "split_k", lambda info, m, n, k, params: 2 if k % 2 == 0 else 1)
    _per_step(monkeypatch)
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


SEQ_FAMILIES = [  # (cell, direction, L, projection): every per-step GEMM role that splits
    ("lstm", "bidirectional_concat", 2, None),
    ("lstm", "unidirectional_right2left", 1, 2),  # the projection's dht GEMM
    ("gru", "bidirectional_sum", 1, None),  # two stages: the GEMM into drh
    ("lbr_gru", "unidirectional_left2right", 2, None),
    ("rnn", "unidirectional_right2left", 1, None),
]


@pytest.mark.parametrize("cell,direction,L,dic", SEQ_FAMILIES)
def test_split_recurrence_with_sequence_lengths_matches_reference(engine, stream, forced_split,
                                                                  monkeypatch, cell, direction,
                                                                  L, dic):
    """With sequence lengths a split GEMM computes every row at each step (the steps' other
    kernels only the running ones): the padding rows its source holds are zero, or are
    never read, so outputs and gradients still equal the float64 reference's."""
    from rnn_ext_helpers import Problem, forward_pd, run

    from pydnnl import rnn_extensions
    from pydnnl.primitives.rnn import plan_common
    from pydnnl.reference.rnn import rnn_backward

    split_roles = set()
    role_gemm = plan_common.role_gemm

    def recording(engine, s, role, *a, **k):
        g = role_gemm(engine, s, role, *a, **k)
        if g.splits > 1:
            split_roles.add(role)
        return g

    monkeypatch.setattr(plan_common, "role_gemm", recording)
    monkeypatch.setattr(plan_backward, "role_gemm", recording)
    monkeypatch.setattr(plan_forward, "role_gemm", recording)

    lens = (4, 6, 1, 6)
    p = Problem(cell, 6, 4, 4, 4, L=L, direction=direction, DIC=dic,
                ext=rnn_extensions(seq_lengths=lens))
    a = p.arrays(23)
    y, h, c, cache = p.reference(a, seq_lengths=lens)
    rng = np.random.default_rng(5)
    dd = {n: rng.uniform(-1, 1, d) for n, d in p.dims().items() if n.startswith("dst")}
    out, grads, fwd = run(engine, stream, p, a, diff_dst=dd, nan_scratch=True)
    # the backward's GEMMs were split, and the forward's where its steps have GEMMs (GPUs
    # compute small batches' steps in the cell kernels)
    fused = plan_forward.fused_recurrence(engine, forward_pd(engine, p).shape, True)
    assert ({"dh0"} if fused else {"iter0", "dh0"}) <= split_roles, split_roles
    want = rnn_backward({"lstm": "vanilla_lstm", "gru": "vanilla_gru", "lbr_gru": "lbr_gru",
                         "rnn": "vanilla_rnn"}[cell], cache, dd["dst_layer"], dd["dst_iter"],
                        dd.get("dst_iter_c"))
    for k, got in out.items():
        assert_close(got, {"dst_layer": y, "dst_iter": h, "dst_iter_c": c}[k], k)
    for name, got in grads.items():
        assert_close(got, np.reshape(want["diff_" + name], got.shape), f"diff_{name}")


@pytest.fixture
def forced_shares(forced_k_shares, monkeypatch):
    """k shared in 4 (see ``forced_k_shares``) in the per-step recurrences, the forward's
    too (GPUs would compute small batches' steps in the cell kernels)."""
    monkeypatch.setattr(plan_forward, "fused_recurrence", lambda engine, s, training: False)
    _per_step(monkeypatch)


@pytest.mark.parametrize("cell,direction,lens", [
    ("lstm", "bidirectional_concat", None), ("lstm", "unidirectional_left2right", (3, 5, 1)),
    ("lbr_gru", "bidirectional_sum", (5, 2, 5))])
def test_recurrence_sharing_k_matches_reference(engine, stream, forced_shares, monkeypatch,
                                                cell, direction, lens):
    """The per-step recurrent GEMMs with k shared among work-groups (one launch a step, no
    reduction launch): every step of a launcher reuses one workspace, whose counters each
    launch leaves at zero; with sequence lengths the GEMMs run whole. Outputs and gradients
    against the float64 reference."""
    from rnn_ext_helpers import Problem, run

    from pydnnl import rnn_extensions
    from pydnnl.primitives.rnn import plan_common
    from pydnnl.reference.rnn import rnn_backward

    shared = set()
    role_gemm = plan_common.role_gemm

    def recording(engine, s, role, *a, **k):
        g = role_gemm(engine, s, role, *a, **k)
        if g.nv_tile is not None and g.nv_tile.kslices > 1:
            shared.add(role)
        return g

    for mod in (plan_common, plan_backward, plan_forward):
        monkeypatch.setattr(mod, "role_gemm", recording)
    ext = rnn_extensions() if lens is None else rnn_extensions(seq_lengths=lens)
    p = Problem(cell, 5, 3, 8, 64, direction=direction, ext=ext)
    a = p.arrays(31)
    a["weights_iter"] = a["weights_iter"] * 0.25  # a contracting recurrence at 64 channels
    y, h, c, cache = p.reference(a, seq_lengths=lens)
    rng = np.random.default_rng(8)
    dd = {n: rng.uniform(-1, 1, d) for n, d in p.dims().items() if n.startswith("dst")}
    out, grads, fwd = run(engine, stream, p, a, diff_dst=dd, executions=2,
                           nan_scratch=True)
    assert {"iter0", "dh0"} <= shared, shared
    plan = fwd._plan.plan
    sliced = [st.gemm for st in plan.steps if getattr(getattr(st, "gemm", None), "ws_elems", 0)]
    launchers = {id(g): g.ws_elems for g in sliced}
    assert len(sliced) == p.T * p.D and plan.ws_elems <= sum(launchers.values()) + 64 * len(
        launchers)  # one workspace per launcher, not per step
    want = rnn_backward({"lstm": "vanilla_lstm", "lbr_gru": "lbr_gru"}[cell], cache,
                        dd["dst_layer"], dd["dst_iter"], dd.get("dst_iter_c"))
    for k, got in out.items():
        assert_close(got, {"dst_layer": y, "dst_iter": h, "dst_iter_c": c}[k], k)
    for name, got in grads.items():
        assert_close(got, np.reshape(want["diff_" + name], got.shape), f"diff_{name}")
