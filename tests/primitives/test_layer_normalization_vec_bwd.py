"""The layer normalization backward with one work-item per chunk of rows in float vectors
(``LnRows.vec`` with ``dy``, ``rules.ln_bwd_vec``: the CPU form), forced on every device
with 8 lanes, against the float64 numpy reference: rows of whole vectors, of vectors plus a
tail, shorter than one vector; 2 vector sums per statistic or 1; several rows per
work-item (a short last one); backward_data and backward with computed or given statistics,
with and without scale and shift; the form that also sums diff_scale/diff_shift into its
partial rows (forced on too, though the rule keeps it off); bf16/f16 storage."""
from __future__ import annotations

import numpy as np
import pytest
from norm_helpers import check_backward, ln_data, mem  # noqa: E402

import pydnnl as dnnl
from pydnnl.reference import normalization as R

dt, tag = dnnl.memory.data_type, dnnl.memory.format_tag
F = dnnl.normalization_flags
PK = dnnl.prop_kind
EPS = 1e-3


@pytest.fixture
def forced(monkeypatch):
    from pydnnl.runtime.heuristics import normalization as rules
    monkeypatch.setattr(rules, "ln_bwd_vec", lambda info, C, fused_ss: 8)
    monkeypatch.setattr(rules, "ln_fwd_vec_rows", lambda info, C: 4)
    return rules


def _run(eng, s, dims, t, flags, prop, kind="f32", seed=0):
    d = ln_data(dims, seed)
    md = dnnl.memory.desc(dims, dt[kind], t)
    fpd = dnnl.layer_normalization_forward.primitive_desc(eng, PK.forward_training, md, md,
                                                           EPS, flags)
    lead = dims[:-1]
    g = bool(flags & F.use_global_stats)
    gm = np.full(lead, 0.2, np.float32)
    gv = np.full(lead, 1.3, np.float32)
    a = {dnnl.ARG_SRC: mem(md, eng, d["x"]), dnnl.ARG_DST: mem(md, eng),
         dnnl.ARG_MEAN: mem(fpd.mean_desc(), eng, gm if g else None),
         dnnl.ARG_VARIANCE: mem(fpd.variance_desc(), eng, gv if g else None)}
    if flags & F.use_scale:
        a[dnnl.ARG_SCALE] = mem(fpd.weights_desc(), eng, d["scale"])
    if flags & F.use_shift:
        a[dnnl.ARG_SHIFT] = mem(fpd.weights_desc(), eng, d["shift"])
    dnnl.layer_normalization_forward(fpd).execute(s, a)
    s.wait()
    bpd = dnnl.layer_normalization_backward.primitive_desc(eng, prop, md, md, md, EPS, flags,
                                                           fpd)
    assert bpd.vec == 8
    b = {k: a[k] for k in (dnnl.ARG_SRC, dnnl.ARG_MEAN, dnnl.ARG_VARIANCE, dnnl.ARG_SCALE,
                           dnnl.ARG_SHIFT) if k in bpd.arg_specs()}
    b[dnnl.ARG_DIFF_DST] = mem(md, eng, d["dy"])
    b[dnnl.ARG_DIFF_SRC] = mem(md, eng)
    for k in (dnnl.ARG_DIFF_SCALE, dnnl.ARG_DIFF_SHIFT):
        if k in bpd.arg_specs():
            b[k] = mem(bpd.diff_weights_desc(), eng)
    prim = dnnl.layer_normalization_backward(bpd)
    prim.execute(s, b)
    s.wait()
    srcs = [st.kernel.src.source for st in prim._plan.steps
            if getattr(st, "name", "") == "pydnnl_ln_bwd"]
    assert len(srcs) == 1 and "reqd_work_group_size(1, 1, 1)" in srcs[0]
    xs = b[dnnl.ARG_SRC].to_numpy().astype(np.float64)
    dys = b[dnnl.ARG_DIFF_DST].to_numpy().astype(np.float64)
    sc = d["scale"] if flags & F.use_scale else None
    dx, dsc, dsh = R.layer_norm_backward(xs, dys, a[dnnl.ARG_MEAN].to_numpy(),
                                         a[dnnl.ARG_VARIANCE].to_numpy(), EPS, sc, g)
    check_backward(b, kind, dx, dsc, dsh)


SHAPES = {"whole": ([3, 5, 32], "abc"), "tail": ([3, 5, 37], "abc"),
          "short": ([6, 5], "ab"), "one_vector_tail": ([2, 3, 2, 11], "abcd"),
          "transposed_rows": ([3, 4, 21], "bac")}


@pytest.mark.sampled(every=3)
@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("flags,prop", [
    (F.none, PK.backward), (F.use_scale | F.use_shift, PK.backward),
    (F.use_scale, PK.backward_data), (F.use_global_stats | F.use_scale, PK.backward),
    (F.use_global_stats, PK.backward_data)], ids=["none", "CH", "C_data", "GC", "G_data"])
@pytest.mark.parametrize("accs", [2, 1])
def test_vector_rows_backward_match_reference(engine, stream, forced, monkeypatch, shape,
                                              flags, prop, accs):
    monkeypatch.setattr(forced, "ln_fwd_vec_accs", lambda info, C, vec: accs)
    dims, t = SHAPES[shape]
    _run(engine, stream, dims, t, flags, prop, seed=int(flags) + accs)


@pytest.mark.parametrize("kind", ["bf16", "f16"])
def test_vector_rows_backward_low_precision(engine, stream, forced, kind):
    _run(engine, stream, [3, 5, 37], "abc", F.use_scale | F.use_shift, PK.backward, kind)
    _run(engine, stream, [3, 5, 37], "abc", F.use_scale, PK.backward_data, kind)


def test_rule_closed_form():
    """``ln_bwd_vec`` on made-up devices: GPUs 0; CPUs as the forward's vectors unless the
    row kernel sums diff_scale/diff_shift."""
    from types import SimpleNamespace

    from pydnnl.runtime.heuristics import normalization as rules
    cpu = SimpleNamespace(is_gpu=False, runtime="intel")
    assert rules.ln_bwd_vec(SimpleNamespace(is_gpu=True, runtime="nvidia"), 768, False) == 0
    assert rules.ln_bwd_vec(cpu, 768, False) == 16
    assert rules.ln_bwd_vec(cpu, 768, True) == 0
    assert rules.ln_bwd_vec(cpu, 7, False) == 0
    assert rules.ln_bwd_vec(SimpleNamespace(is_gpu=False, runtime="pocl"), 768, False) == 8
