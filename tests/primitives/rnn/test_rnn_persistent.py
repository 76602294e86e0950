"""The one-launch recurrence (kernels/rnn_persistent.py): one work-group walks all steps of a
layer and direction. Outputs against the float64 reference with the path forced on and off
(so the per-step kernels keep their coverage on the small shapes the suite uses), weights in
registers and read as they lie, a training workspace the unchanged backward turns into the
same gradients, and the kernels under Oclgrind with stderr read."""
from __future__ import annotations

import dataclasses
import pathlib
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "kernels"))

from rnn_ext_helpers import Problem, assert_close, run  # noqa: E402

import pydnnl as dnnl  # noqa: E402
from pydnnl.primitives.rnn import plan_forward  # noqa: E402
from pydnnl.runtime.heuristics import rnn as rnn_rules  # noqa: E402

INFER = dnnl.prop_kind.forward_inference
TRAIN = dnnl.prop_kind.forward_training

CASES = {
    "lstm_bi_concat_L2": Problem("lstm", 6, 3, 4, 4, L=2, direction="bidirectional_concat"),
    "lstm_clip_r2l": Problem("lstm", 5, 2, 3, 4, direction="unidirectional_right2left",
                             ext=dnnl.rnn_extensions(cell_clip=(-0.3, 0.4))),
    "gru_sum": Problem("gru", 7, 3, 5, 6, direction="bidirectional_sum"),
    "lbr_gru_L2": Problem("lbr_gru", 5, 2, 5, 5, L=2),
    "rnn_r2l": Problem("rnn", 9, 4, 3, 5, direction="unidirectional_right2left"),
    "lstm_long": Problem("lstm", 40, 2, 3, 8),
}


def _force(monkeypatch, on: bool, private: bool | None = None):
    monkeypatch.setattr(plan_forward, "persistent_recurrence",
                        lambda engine, s, training: on)
    if private is not None:
        monkeypatch.setattr(rnn_rules, "persistent_private_weights",
                            lambda info, gates, dhc: private)


def _reference(p, a) -> dict:
    y, h, c, _ = p.reference(a)
    return {"dst_layer": y, "dst_iter": h, "dst_iter_c": c}


def _launches(fwd) -> list[str]:
    return [getattr(st, "name", "") for st in fwd._plan.plan.steps]


def test_small_problems_take_one_launch_per_layer(engine, stream):
    """The device rule picks the path for a small problem; a layer and direction is one
    launch (no GEMM or cell kernel per step)."""
    p = CASES["lstm_bi_concat_L2"]
    out, _, fwd = run(engine, stream, p, p.arrays(1), prop=INFER)
    assert fwd._plan.persistent
    assert fwd._pd.impl_info_str() == "loopy:gemm+one_group"
    names = _launches(fwd)
    assert sum("rnn_persist" in n for n in names) == p.L * p.D
    assert not any("rnn_vanilla_lstm" in n for n in names)  # no per-step cell kernels
    for k, got in out.items():
        assert_close(got, _reference(p, p.arrays(1))[k], k)


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("path", ["per_step", "one_launch_private", "one_launch_global"])
def test_inference_matches_reference(engine, stream, monkeypatch, name, path):
    _force(monkeypatch, path != "per_step", path == "one_launch_private")
    p = CASES[name]
    a = p.arrays(7)
    out, _, fwd = run(engine, stream, p, a, prop=INFER)
    assert fwd._plan.persistent == (path != "per_step")
    want = _reference(p, a)
    for k, got in out.items():
        assert_close(got, want[k], f"{path} {name} {k}")


@pytest.mark.sampled(every=2)
@pytest.mark.parametrize("name", ["lstm_bi_concat_L2", "gru_sum", "lbr_gru_L2", "rnn_r2l",
                                  "lstm_clip_r2l"])
def test_training_workspace_gives_the_same_gradients(engine, stream, monkeypatch, name):
    p = CASES[name]
    a = p.arrays(11)
    rng = np.random.default_rng(3)
    dd = {k: rng.uniform(-1, 1, d) for k, d in p.dims().items() if k.startswith("dst")}
    _force(monkeypatch, False)
    out0, g0, fwd0 = run(engine, stream, p, a, diff_dst=dd, prop=TRAIN)
    _force(monkeypatch, True, name != "gru_sum")
    out1, g1, fwd1 = run(engine, stream, p, a, diff_dst=dd, prop=TRAIN)
    assert fwd1._plan.persistent and not fwd0._plan.persistent
    want = _reference(p, a)
    for k, got in out1.items():
        assert_close(got, want[k], f"one-launch training {name} {k}")
    for k in g0:
        assert_close(g1[k], g0[k], f"gradient after a one-launch forward {name} {k}")


def test_rule_limits():
    """The rule's bounds: a work-group's items; on GPUs the weights' size, on CPUs a step's
    multiply-adds."""
    class Gpu:
        max_work_group_size, is_gpu = 1024, True

    class Cpu:
        max_work_group_size, is_gpu = 8192, False

    for info in (Gpu, Cpu):
        assert rnn_rules.persistent_recurrence(info, 1, 32, 4)  # the T=1000 tiny LSTM
        assert rnn_rules.persistent_recurrence(info, 1, 64, 4)
        assert not rnn_rules.persistent_recurrence(info, 64, 512, 4)  # LSTM 512, N 64
        assert not rnn_rules.persistent_recurrence(info, 2, 1024, 1)  # 2048 items
    assert rnn_rules.persistent_recurrence(Gpu, 16, 64, 4)  # 64 KiB of weights
    assert not rnn_rules.persistent_recurrence(Cpu, 16, 64, 4)  # 256 Ki multiply-adds
    assert not rnn_rules.persistent_recurrence(Gpu, 1, 128, 4)  # 256 KiB of weights
    Gpu.max_work_group_size = 256
    assert not rnn_rules.persistent_recurrence(Gpu, 8, 64, 4)  # 512 items > 256


PROBE = r"""
import json, sys
import numpy as np
sys.path.insert(0, HELPERS)
import pydnnl as dnnl
from pydnnl.primitives.rnn import plan_forward
from pydnnl.runtime.heuristics import rnn as rnn_rules
from rnn_ext_helpers import Problem, run

eng = dnnl.engine.from_name("Oclgrind")
s = dnnl.stream(eng)
plan_forward.persistent_recurrence = lambda engine, sh, training: True
results = {}
for name, p, private, prop in [
        ("lstm_train", Problem("lstm", 3, 2, 3, 4), True, dnnl.prop_kind.forward_training),
        ("gru_r2l", Problem("gru", 3, 2, 3, 4, direction="unidirectional_right2left"), False,
         dnnl.prop_kind.forward_inference),
        ("lbr_gru_train", Problem("lbr_gru", 3, 2, 3, 4), False,
         dnnl.prop_kind.forward_training),
        ("rnn", Problem("rnn", 3, 3, 2, 3), True, dnnl.prop_kind.forward_inference),
        ("lstm_lengths_r2l", Problem("lstm", 3, 3, 3, 4, direction="unidirectional_right2left",
                                     ext=dnnl.rnn_extensions(seq_lengths=(1, 3, 2))), False,
         dnnl.prop_kind.forward_training)]:
    rnn_rules.persistent_private_weights = lambda info, g, dhc, v=private: v
    a = p.arrays(5)
    out, _, fwd = run(eng, s, p, a, prop=prop)
    y = p.reference(a, seq_lengths=p.ext.seq_lengths)[0]
    results[name] = bool(fwd._plan.persistent and np.allclose(out["dst_layer"], y, rtol=1e-5,
                                                              atol=1e-6))
print(json.dumps(results))
"""


def test_one_launch_kernels_under_oclgrind():
    """Out-of-bounds accesses, data races (the local h and rh every item reads) and API
    misuse. The uninitialized-value check stays off, as for the int8 RNN plan: Oclgrind does
    not count the plan's buffer fills and copies into the states as writes."""
    from oclgrind_helpers import has_oclgrind, run_probe

    if not has_oclgrind():
        pytest.skip("Oclgrind is not installed")
    helpers = str(pathlib.Path(__file__).resolve().parent)
    results = run_probe(f"HELPERS = {helpers!r}\n" + PROBE, OCLGRIND_UNINITIALIZED="0")
    assert results and all(results.values()), results


# -- the grid-wide form (NVIDIA GPUs: inline-PTX fences) ---------------------------------------
GRID_CASES = {
    "lstm_bi_concat_L2": Problem("lstm", 6, 3, 40, 40, L=2, direction="bidirectional_concat"),
    "lstm_clip_r2l": Problem("lstm", 5, 2, 3, 300, direction="unidirectional_right2left",
                             ext=dnnl.rnn_extensions(cell_clip=(-0.3, 0.4))),
    "gru_sum": Problem("gru", 7, 3, 5, 270, direction="bidirectional_sum"),
    "lbr_gru_L2": Problem("lbr_gru", 5, 2, 133, 133, L=2),
    "rnn_r2l": Problem("rnn", 9, 4, 3, 500, direction="unidirectional_right2left"),
}


def _needs_grid(engine):
    if not engine.info.inline_ptx:
        pytest.skip("the grid-wide recurrence needs inline PTX (an NVIDIA GPU)")


def _grid_arrays(p, seed):
    """Inputs whose recurrence contracts: with hundreds of channels and the helpers' weights
    a vanilla RNN is chaotic (float32 and float64 references differ by 6e-4 at 500
    channels), which would test the problem's conditioning, not the kernel."""
    a = p.arrays(seed)
    a["weights_iter"] = a["weights_iter"] * (2.0 / np.sqrt(p.dic))
    return a


def _force_grid(monkeypatch):
    monkeypatch.setattr(plan_forward, "persistent_recurrence", lambda engine, s, training: False)


@pytest.mark.parametrize("rows", [1, 2, 3])
@pytest.mark.parametrize("name", list(GRID_CASES))
def test_grid_inference_matches_reference(engine, stream, monkeypatch, name, rows):
    """Every cell kind, one to three batch rows per work-item (one-stage cells; three leaves
    a ragged last item)."""
    _needs_grid(engine)
    _force_grid(monkeypatch)
    monkeypatch.setattr(rnn_rules, "grid_rows_per_item", lambda batch: rows)
    p = GRID_CASES[name]
    a = _grid_arrays(p, 7)
    out, _, fwd = run(engine, stream, p, a, prop=INFER)
    assert fwd._plan.grid and fwd._pd.impl_info_str() == "loopy:gemm+grid"
    want = _reference(p, a)
    for k, got in out.items():
        assert_close(got, want[k], f"grid {name} {k}")


@pytest.mark.parametrize("ks, kc, swizzle", [(1, 64, True), (2, 32, True), (4, 128, False),
                                             (16, 64, True)])
@pytest.mark.parametrize("name", ["lstm_clip_r2l", "lbr_gru_L2", "rnn_r2l"])
def test_grid_k_split_and_chunks_match_reference(engine, stream, monkeypatch, name, ks, kc,
                                                  swizzle):
    """Each output's k range split over ks lanes (their sums met by shuffles, the group
    rounded up to whole warps) and h staged kc columns at a time (rows padded, or swizzled),
    whatever the rules say."""
    _needs_grid(engine)
    _force_grid(monkeypatch)
    planned = []
    rule = plan_forward.grid_problem

    def forced(*a):
        planned.append(dataclasses.replace(rule(*a), ks=ks, kc=kc, swizzle=swizzle))
        return planned[-1]

    monkeypatch.setattr(plan_forward, "grid_problem", forced)
    p = GRID_CASES[name]
    a = _grid_arrays(p, 5)
    out, _, fwd = run(engine, stream, p, a, prop=INFER)
    assert fwd._plan.grid and planned and all(g.ks == ks and g.kc == kc and g.swizzle == swizzle
                                              for g in planned)
    want = _reference(p, a)
    for k, got in out.items():
        assert_close(got, want[k], f"grid {name} ks {ks} kc {kc} {k}")


GLOBAL_CASES = {
    "lstm_bi_concat_L2": GRID_CASES["lstm_bi_concat_L2"],
    "lstm_clip_r2l": GRID_CASES["lstm_clip_r2l"],
    "lbr_gru_L2": Problem("lbr_gru", 5, 2, 132, 132, L=2),  # channels in quads
    "rnn_r2l": GRID_CASES["rnn_r2l"],
}


@pytest.mark.sampled(every=5)
@pytest.mark.parametrize("ks, kc, rn, jb", [(128, 256, 4, 16), (16, 64, 2, 16), (1, 32, 3, 16),
                                            (4, 128, 8, 16), (64, 64, 1, 16), (8, 64, 2, 8)])
@pytest.mark.parametrize("name", list(GLOBAL_CASES))
@pytest.mark.parametrize("prop", ["infer", "train"])
def test_grid_global_weights_match_reference(engine, stream, monkeypatch, name, ks, kc, rn,
                                             jb, prop):
    """The form for weight slices that outgrow local memory, forced: weights read from global
    memory every step (a float4 of four channels per gate), k split over ks lanes (their sums
    meet by shuffles within a warp, then in local memory), rn rows per item (three: a ragged
    last item; eight: more than the batch), 16 or 8 channels per group (a ragged last group),
    h staged kc columns at a time (past the last channel too). Training also fills the
    workspace the backward reads (its gradients against the per-step forms')."""
    _needs_grid(engine)
    _force_grid(monkeypatch)
    planned = []
    rule = plan_forward.grid_problem

    def forced(*a):
        planned.append(dataclasses.replace(rule(*a), wglobal=True, jb=jb, ks=ks, kc=kc, rn=rn,
                                           swizzle=False))
        return planned[-1]

    monkeypatch.setattr(plan_forward, "grid_problem", forced)
    p = GLOBAL_CASES[name]
    a = _grid_arrays(p, 9)
    if prop == "infer":
        out, _, fwd = run(engine, stream, p, a, prop=INFER)
        want = _reference(p, a)
        assert fwd._plan.grid and planned and all(g.wglobal for g in planned)
        for k, got in out.items():
            assert_close(got, want[k], f"grid global weights {name} {k}")
        return
    rng = np.random.default_rng(4)
    dd = {k: rng.uniform(-1, 1, d) for k, d in p.dims().items() if k.startswith("dst")}
    out1, g1, fwd1 = run(engine, stream, p, a, diff_dst=dd, prop=TRAIN)
    assert fwd1._plan.grid and planned and all(g.wglobal for g in planned)
    _same_as_per_step(engine, stream, monkeypatch, p, a, dd, out1, g1,
                      f"the global-weights forward {name}")


def _same_as_per_step(engine, stream, monkeypatch, p, a, dd, out1, g1, what):
    """Training outputs and gradients ``out1``, ``g1`` against the per-step forward's and
    backward's (every forcing undone first)."""
    from pydnnl.primitives.rnn import plan_backward

    monkeypatch.undo()
    _force(monkeypatch, False)
    monkeypatch.setattr(plan_forward, "grid_problem", lambda engine, s, training: None)
    monkeypatch.setattr(plan_backward, "grid_backward", lambda engine, s: None)
    out0, g0, fwd0 = run(engine, stream, p, a, diff_dst=dd, prop=TRAIN)
    assert not (fwd0._plan.grid or fwd0._plan.persistent)
    for k, got in out1.items():
        assert_close(got, out0[k], f"{what}: {k}")
    for k in g0:
        assert_close(g1[k], g0[k], f"{what}: diff_{k}")


def test_grid_global_weights_rule():
    """The global-weights form is planned only where its aligned float4 reads can be: GPUs
    with the grid form, channels in quads; its groups are whole warps within the device's
    limits; a bad shape is refused by the generator."""
    from types import SimpleNamespace

    from pydnnl.kernels import rnn_persistent_grid as rpg

    h100 = SimpleNamespace(is_gpu=True, inline_ptx=True, compute_units=132,
                           max_work_group_size=1024, local_mem_bytes=48 << 10)
    for n in (1, 4, 8, 16):
        jb, ks, rn = rnn_rules.grid_global_weights(h100, n, 1760, 4)
        g = rpg.GridProblem("lstm", False, "tanh", 0.0, 1760, n, jb, kc=64, rn=rn, ks=ks,
                            wglobal=True)
        assert jb % rnn_rules.GRID_GLOBAL_JB_ALIGN == 0 and g.groups <= 132
        assert g.items % 32 == 0 and g.items <= 1024
        assert rn <= n and -(-n // rn) * (jb // 4) * ks <= g.items
    assert rnn_rules.grid_global_weights(h100, 1, 1762, 4) is None
    assert rnn_rules.grid_global_weights(h100, 32, 1760, 4) is None
    assert rnn_rules.grid_global_weights(
        SimpleNamespace(**{**vars(h100), "inline_ptx": False}), 1, 1760, 4) is None
    with pytest.raises(ValueError, match="quads"):
        rpg.build_grid(rpg.GridProblem("vanilla_lstm", False, "tanh", 0.0, 1762, 1, 16, kc=64, ks=8,
                                       wglobal=True))


def _with_lengths(p, lengths, packed=False):
    return dataclasses.replace(p, ext=dataclasses.replace(
        p.ext, seq_lengths=tuple(lengths), packed=packed))


SEQ_CASES = {  # lengths in any order, some equal, one full length, one of a single step
    "lstm_bi_concat_L2": (_with_lengths(GRID_CASES["lstm_bi_concat_L2"], (2, 6, 1)), "local"),
    "lstm_clip_r2l": (_with_lengths(GRID_CASES["lstm_clip_r2l"], (3, 5)), "local"),
    "gru_sum": (_with_lengths(GRID_CASES["gru_sum"], (7, 4, 4)), "local"),  # two stages
    "lbr_gru_bi_global": (_with_lengths(Problem("lbr_gru", 6, 5, 132, 132, L=2,
                                                direction="bidirectional_concat"),
                                        (1, 6, 3, 6, 2)), "global"),
    "rnn_r2l_packed": (_with_lengths(GRID_CASES["rnn_r2l"], (9, 7, 7, 2), packed=True),
                       "local"),
}


def _force_seq_grid(monkeypatch, form):
    """The grid form on every layer, weights in local memory as the rule says or (``global``)
    read from global memory, 3 rows per item (a ragged last item)."""
    _force_grid(monkeypatch)
    rule = plan_forward.grid_problem
    planned = []

    def forced(*a):
        g = rule(*a)
        if form == "global":
            g = dataclasses.replace(g, wglobal=True, jb=16, ks=8, kc=64, rn=3, swizzle=False)
        planned.append(g)
        return g

    monkeypatch.setattr(plan_forward, "grid_problem", forced)
    return planned


@pytest.mark.parametrize("name", list(SEQ_CASES))
def test_grid_sequence_lengths_match_reference(engine, stream, monkeypatch, name):
    """Sequences of several lengths in the grid form: each step runs its first rows of the
    sorted batch, reads them among the packed rows of the layer GEMM's values, and the rows
    past their end (before their start, right to left) carry their state. Against the
    float64 reference: dst_layer zero past each end, each direction's final state."""
    _needs_grid(engine)
    p, form = SEQ_CASES[name]
    planned = _force_seq_grid(monkeypatch, form)
    fwd = _lengths_match_reference(engine, stream, p, _grid_arrays, f"grid with lengths {name}")
    assert fwd._plan.grid and planned and all(g.seq for g in planned)


def _lengths_match_reference(engine, stream, p, arrays, what):
    """Inference of ``p`` (sequence lengths; packed rows in and out where ``p`` says so)
    against the float64 reference; returns the forward primitive."""
    from pydnnl.reference.rnn import pack_padded

    padded = dataclasses.replace(p, ext=dataclasses.replace(p.ext, packed=False))
    a = arrays(padded, 13)
    y, h, c, _ = padded.reference(a, seq_lengths=p.ext.seq_lengths)
    if p.ext.packed:  # PackedSequence rows in and out
        y = pack_padded(y, np.array(p.ext.seq_lengths))[0]
        a = dict(a, src_layer=pack_padded(a["src_layer"], np.array(p.ext.seq_lengths))[0])
    out, _, fwd = run(engine, stream, p, a, prop=INFER)
    want = {"dst_layer": y, "dst_iter": h, "dst_iter_c": c}
    for k, got in out.items():
        assert_close(got, want[k], f"{what}: {k}")
    return fwd


def _record_grid_bwd(monkeypatch, form=None) -> list:
    """The backward's grid problems as planned; ``form`` ``(jb, rn, ks)`` forces the
    global-weights form with that many channels per group, rows per item and k lanes."""
    from pydnnl.primitives.rnn import plan_backward

    rule = plan_backward.grid_backward
    taken = []

    def record(engine, s):
        g = rule(engine, s)
        if g is not None and form is not None:
            g = dataclasses.replace(g, wglobal=True, jb=form[0], rn=form[1], ks=form[2])
        taken.append(g)
        return g

    monkeypatch.setattr(plan_backward, "grid_backward", record)
    return taken


@pytest.mark.parametrize("bwd", ["rule", "global"])
@pytest.mark.parametrize("name", list(SEQ_CASES))
def test_grid_sequence_lengths_training_gives_the_same_gradients(engine, stream, monkeypatch,
                                                                 name, bwd):
    """The grid forward with lengths fills the workspace the backward reads (rows past a
    sequence's end hold carried, finite states; no gates), and the grid backward with
    lengths (one-stage cells; weights where the rule puts them, or forced to global memory
    with 5 channels a group and 3 rows an item) runs each step's rows: outputs and gradients
    equal the per-step forward's and backward's."""
    _needs_grid(engine)
    p, form = SEQ_CASES[name]
    planned = _force_seq_grid(monkeypatch, form)
    taken = _record_grid_bwd(monkeypatch, (5, 3, 8) if bwd == "global" else None)
    a = _grid_arrays(p, 17)
    rng = np.random.default_rng(6)
    dd = {k: rng.uniform(-1, 1, d) for k, d in p.dims().items() if k.startswith("dst")}
    out1, g1, fwd1 = run(engine, stream, p, a, diff_dst=dd, prop=TRAIN)
    assert fwd1._plan.grid and planned and all(g.seq for g in planned)
    if p.cell == "gru":  # two stages: the backward runs per step
        assert taken and all(g is None for g in taken)
    else:
        assert taken and all(g.seq and g.wglobal == (bwd == "global") for g in taken)
    _same_as_per_step(engine, stream, monkeypatch, p, a, dd, out1, g1,
                      f"the grid forms with lengths {name} (backward: {bwd})")


@pytest.mark.parametrize("form", [(16, 3, 8), (5, 1, 32), (7, 2, 32)])
@pytest.mark.parametrize("name", ["lstm_bi_concat_L2", "lstm_clip_r2l", "rnn_r2l", "lbr_gru"])
def test_grid_backward_global_weights(engine, stream, monkeypatch, name, form):
    """The grid backward reading U from global memory every step, forced: channels per group
    (ragged last groups: 40 / 16, 132 / 5, 300 / 7, ...), rows per item (3: a ragged last
    item), k lanes; gradients against the per-step backward's."""
    _needs_grid(engine)
    p = GLOBAL_CASES["lbr_gru_L2"] if name == "lbr_gru" else GRID_CASES[name]
    a = _grid_arrays(p, 21)
    rng = np.random.default_rng(8)
    dd = {k: rng.uniform(-1, 1, d) for k, d in p.dims().items() if k.startswith("dst")}
    _force_grid(monkeypatch)
    taken = _record_grid_bwd(monkeypatch, form)
    out1, g1, _ = run(engine, stream, p, a, diff_dst=dd, prop=TRAIN)
    assert taken and all(g.wglobal and (g.jb, g.rn, g.ks) == form for g in taken)
    _same_as_per_step(engine, stream, monkeypatch, p, a, dd, out1, g1,
                      f"the global-weights grid backward {form} {name}")


def test_grid_backward_global_rule():
    """Global weights for the backward: a group of ceil(channels / units) channels, two rows
    an item (doubled until the group fits), a warp's lanes per k range; None for large
    batches, columns not in float4s, slices beyond the cache, sums outgrowing the registers,
    devices without PTX."""
    from types import SimpleNamespace

    h200 = SimpleNamespace(is_gpu=True, inline_ptx=True, compute_units=132,
                           max_work_group_size=1024, local_mem_bytes=48 << 10)
    assert rnn_rules.grid_backward_global(h200, 16, 800, 2400) == (7, 2, 32)
    assert rnn_rules.grid_backward_global(h200, 1, 800, 2400) == (7, 1, 32)
    assert rnn_rules.grid_backward_global(h200, 16, 800, 3200) == (7, 2, 32)  # LSTM
    assert rnn_rules.grid_backward_global(h200, 16, 1760, 7040) is None  # 394 KiB a group
    assert rnn_rules.grid_backward_global(h200, 32, 800, 2400) is None
    assert rnn_rules.grid_backward_global(h200, 16, 801, 2403) is None
    many = SimpleNamespace(**{**vars(h200), "compute_units": 8})
    assert rnn_rules.grid_backward_global(many, 16, 136, 136) is None  # 17 x 6 floats
    assert rnn_rules.grid_backward_global(
        SimpleNamespace(**{**vars(h200), "inline_ptx": False}), 16, 800, 2400) is None


ONE_GROUP_SEQ = {  # the one-group form (any device) with lengths
    "lstm_bi_concat_L2": (_with_lengths(CASES["lstm_bi_concat_L2"], (2, 6, 1)), True),
    "gru_sum": (_with_lengths(CASES["gru_sum"], (7, 4, 4)), False),  # two stages
    "lbr_gru_L2_packed": (_with_lengths(CASES["lbr_gru_L2"], (5, 3), packed=True), False),
    "rnn_r2l": (_with_lengths(CASES["rnn_r2l"], (9, 2, 9, 5)), True),
}


@pytest.mark.sampled(every=2)
@pytest.mark.parametrize("name", list(ONE_GROUP_SEQ))
def test_one_group_sequence_lengths(engine, stream, monkeypatch, name):
    """The one-group form with lengths (weights in registers or read as they lie): inference
    against the float64 reference, and a training workspace the per-step backward turns
    into the per-step forward's gradients."""
    p, private = ONE_GROUP_SEQ[name]
    _force(monkeypatch, True, private)
    fwd = _lengths_match_reference(engine, stream, p, lambda q, seed: q.arrays(seed),
                                   f"one group with lengths {name}")
    assert fwd._plan.persistent
    a = p.arrays(19)
    rng = np.random.default_rng(7)
    dd = {k: rng.uniform(-1, 1, d) for k, d in p.dims().items() if k.startswith("dst")}
    out1, g1, fwd1 = run(engine, stream, p, a, diff_dst=dd, prop=TRAIN)
    assert fwd1._plan.persistent
    _same_as_per_step(engine, stream, monkeypatch, p, a, dd, out1, g1,
                      f"the one-group forward with lengths {name}")


GRID_BWD = ["lstm_bi_concat_L2", "lstm_clip_r2l", "gru_sum", "lbr_gru_L2", "rnn_r2l"]


@pytest.mark.parametrize("name", GRID_BWD)
def test_grid_training_gives_the_same_gradients(engine, stream, monkeypatch, name):
    """Forward and backward in their grid-wide forms (the vanilla GRU's backward, two stages,
    runs per step) against both run per step."""
    _needs_grid(engine)
    from pydnnl.primitives.rnn import plan_backward

    p = GRID_CASES[name]
    a = _grid_arrays(p, 11)
    rng = np.random.default_rng(3)
    dd = {k: rng.uniform(-1, 1, d) for k, d in p.dims().items() if k.startswith("dst")}
    _force(monkeypatch, False)
    monkeypatch.setattr(plan_forward, "grid_problem", lambda engine, s, training: None)
    monkeypatch.setattr(plan_backward, "grid_backward", lambda engine, s: None)
    out0, g0, fwd0 = run(engine, stream, p, a, diff_dst=dd, prop=TRAIN)
    monkeypatch.undo()
    _force_grid(monkeypatch)
    taken = []
    rule = plan_backward.grid_backward
    monkeypatch.setattr(plan_backward, "grid_backward",
                        lambda engine, s: taken.append(rule(engine, s)) or taken[-1])
    out1, g1, fwd1 = run(engine, stream, p, a, diff_dst=dd, prop=TRAIN)
    assert fwd1._plan.grid and not fwd0._plan.grid
    assert (taken[-1] is not None) == (p.cell != "gru")
    for k, got in out1.items():
        assert_close(got, out0[k], f"grid training {name} {k}")
    for k in g0:
        assert_close(g1[k], g0[k], f"gradient of the grid forms {name} {k}")


@pytest.mark.parametrize("split", [(1, 1), (1, 8), (2, 32), (3, 4)])
@pytest.mark.parametrize("name", ["lstm_bi_concat_L2", "lstm_clip_r2l", "rnn_r2l"])
def test_grid_backward_split_forms(engine, stream, monkeypatch, name, split):
    """The grid backward's product staged through local memory (1, 1) and split over k lanes
    with rows per item (rn, ks; three rows leave a ragged last item) against the per-step
    backward."""
    _needs_grid(engine)
    from pydnnl.primitives.rnn import plan_backward

    p = GRID_CASES[name]
    a = _grid_arrays(p, 13)
    rng = np.random.default_rng(5)
    dd = {k: rng.uniform(-1, 1, d) for k, d in p.dims().items() if k.startswith("dst")}
    _force_grid(monkeypatch)
    monkeypatch.setattr(plan_backward, "grid_backward", lambda engine, s: None)
    _, g0, _ = run(engine, stream, p, a, diff_dst=dd, prop=TRAIN)
    monkeypatch.undo()
    _force_grid(monkeypatch)
    monkeypatch.setattr(rnn_rules, "grid_backward_split", lambda info, batch, jb, gd: split)
    taken = []
    rule = plan_backward.grid_backward
    monkeypatch.setattr(plan_backward, "grid_backward",
                        lambda engine, s: taken.append(rule(engine, s)) or taken[-1])
    _, g1, _ = run(engine, stream, p, a, diff_dst=dd, prop=TRAIN)
    assert taken[-1] is not None and (taken[-1].rn, taken[-1].ks) == split
    for k in g0:
        assert_close(g1[k], g0[k], f"gradient of the grid backward {split} {name} {k}")


def test_grid_backward_split_rule():
    """A warp's 32 lanes per k range, rows per item doubled until the group fits 1024 items;
    the staged form where the gates' columns do not come in float4s."""
    class Nv:
        is_gpu, inline_ptx, compute_units = True, True, 132
        max_work_group_size, local_mem_bytes = 1024, 48 << 10

    assert rnn_rules.grid_backward_split(Nv, 64, 4, 2048) == (2, 32)
    assert rnn_rules.grid_backward_split(Nv, 32, 4, 2048) == (1, 32)
    assert rnn_rules.grid_backward_split(Nv, 1, 4, 2048) == (1, 32)
    assert rnn_rules.grid_backward_split(Nv, 64, 4, 399) == (1, 1)
    assert rnn_rules.grid_backward_split(Nv, 256, 4, 2048) == (1, 1)  # 8 rows: registers


def test_grid_rule():
    """Channels per group: all channels over the compute units, when a group fits."""
    class Nv:
        is_gpu, inline_ptx, compute_units = True, True, 132
        max_work_group_size, local_mem_bytes = 1024, 48 << 10

    def local(g, n, dhc):
        return lambda jb: 4 * (-(-dhc // 32) * 32 * jb * g + n * 33)

    assert rnn_rules.grid_recurrence(Nv, 64, 512, local(4, 64, 512)) == 4
    assert rnn_rules.grid_recurrence(Nv, 1, 1760, local(4, 1, 1760)) is None  # 394 KiB
    assert rnn_rules.grid_recurrence(Nv, 512, 512, local(4, 512, 512)) is None  # 2048 items
    Nv.inline_ptx = False
    assert rnn_rules.grid_recurrence(Nv, 64, 512, local(4, 64, 512)) is None


def test_grid_split_and_chunk_rules():
    """The k split fills a group to 128 items (2 to 16 lanes) unless whole warps outgrow the
    device; the chunk is the widest that fits and pads k no further than 32 columns do."""
    class Nv:
        simd_width, max_work_group_size = 32, 1024

    assert [rnn_rules.grid_k_split(Nv, n) for n in (4, 16, 32, 64, 128, 512)] == \
        [16, 8, 4, 2, 2, 2]
    assert rnn_rules.grid_k_split(Nv, 1000) == 1  # 2000 items
    assert rnn_rules.grid_chunk_columns(512, lambda kc: True) == 128
    assert rnn_rules.grid_chunk_columns(512, lambda kc: kc <= 64) == 64
    assert rnn_rules.grid_chunk_columns(300, lambda kc: True) == 64  # 320 columns
    assert rnn_rules.grid_chunk_columns(270, lambda kc: True) == 32  # 288 columns
