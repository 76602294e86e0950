"""The batch normalization elementwise pass with one work-item per innermost run in float
vectors (``BnApply.vec``, ``rules.bn_apply_vec``: the CPU form) and the channels-innermost
statistics reduction with one work-item per block of channels and chunk of rows
(``BnReduce.vec``, ``rules.bn_reduce_vec``: blocks of 2 vectors, a partly whole last block,
scalar tail channels, 3 chunks), forced on every device,
against the float64 numpy reference: channel-uniform runs (``nchw``, ``ncw``) and
channel-indexed runs (``nhwc``, ``nc``), run lengths that are whole vectors, whole vectors
plus a tail, and shorter than one vector; several runs per work-item with a short last
work-item; forward (given and computed statistics, ReLU without a workspace, the added
``src_1``) and backward without a workspace; bf16/f16 storage. The per-element form is
checked with the rule forced off."""
from __future__ import annotations

import numpy as np
import pytest
from norm_helpers import UNIT, check_backward, close, mem  # noqa: E402

import pydnnl as dnnl
from pydnnl.reference import normalization as R

dt, tag = dnnl.memory.data_type, dnnl.memory.format_tag
F = dnnl.normalization_flags
PK = dnnl.prop_kind
EPS = 1e-3

# (dims, tag): innermost runs of 24 (3 vectors of 8), 21 (2 vectors and a tail of 5), 5
# (shorter than one vector) along the spatial dims or the channels
SHAPES = {"nchw_whole": ([3, 5, 4, 6], "abcd"), "nchw_tail": ([3, 5, 3, 7], "abcd"),
          "ncw_short": ([4, 3, 5], "abc"), "nhwc_tail": ([3, 21, 2, 3], "acdb"),
          "nhwc_whole": ([2, 16, 3, 2], "acdb"), "nc_short": ([7, 5], "ab"),
          "ndhwc_tail": ([2, 11, 2, 1, 3], "acdeb"),
          "nhwc_blocks": ([2, 40, 3, 1], "acdb")}


@pytest.fixture
def forced(monkeypatch):
    """Force the vector form (8 lanes) and about 50 values per work-item (several runs per
    work-item, a short last one), and the split statistics (not the per-channel kernel)."""
    from pydnnl.runtime.heuristics import normalization as rules
    monkeypatch.setattr(rules, "bn_apply_vec", lambda info: 8)
    monkeypatch.setattr(rules, "BN_APPLY_VEC_VALUES", 50)
    monkeypatch.setattr(rules, "bn_fused", lambda info, C, nbytes, run: (False, 0, False))
    monkeypatch.setattr(rules, "bn_reduce_vec", lambda info, C, R: (8, 2, 3))
    return rules


def _reduce_source(prim) -> str | None:
    steps = [st for st in prim._plan.steps if getattr(st, "name", "") == "pydnnl_bn_reduce"]
    return steps[0].kernel.src.source if steps else None


def _data(dims, seed):
    rng = np.random.default_rng(seed)
    C = dims[1]
    return dict(x=(rng.standard_normal(dims) * 1.5 + 0.7).astype(np.float32),
                dy=rng.standard_normal(dims).astype(np.float32),
                z=rng.standard_normal(dims).astype(np.float32),
                scale=rng.uniform(0.5, 1.5, C).astype(np.float32),
                shift=rng.standard_normal(C).astype(np.float32),
                mean=rng.standard_normal(C).astype(np.float32) * 0.3 + 0.7,
                var=rng.uniform(1.0, 3.0, C).astype(np.float32))


def _apply_source(prim) -> str:
    steps = [st for st in prim._plan.steps if getattr(st, "name", "") == "pydnnl_bn_apply"]
    assert len(steps) == 1
    return steps[0].kernel.src.source


def _run(eng, s, d, md, prop, flags, vec: bool, kind="f32"):
    """Forward (and, in training, backward) with ``flags``; returns the outputs and the
    reference's."""
    pd = dnnl.batch_normalization_forward.primitive_desc(eng, prop, md, md, EPS, flags)
    assert pd.apply_vec == (8 if vec else 0)
    g = bool(flags & F.use_global_stats)
    add = bool(flags & F.fuse_norm_add_relu)
    relu = add or bool(flags & F.fuse_norm_relu)
    a = {dnnl.ARG_SRC: mem(md, eng, d["x"]), dnnl.ARG_DST: mem(md, eng)}
    if not pd.mean_desc().is_zero():
        a[dnnl.ARG_MEAN] = mem(pd.mean_desc(), eng, d["mean"] if g else None)
        a[dnnl.ARG_VARIANCE] = mem(pd.variance_desc(), eng, d["var"] if g else None)
    if flags & F.use_scale:
        a[dnnl.ARG_SCALE] = mem(pd.weights_desc(), eng, d["scale"])
    if flags & F.use_shift:
        a[dnnl.ARG_SHIFT] = mem(pd.weights_desc(), eng, d["shift"])
    if add:
        a[dnnl.ARG_SRC_1] = mem(md, eng, d["z"])
    if not pd.workspace_desc().is_zero():
        a[dnnl.ARG_WORKSPACE] = mem(pd.workspace_desc(), eng)
    prim = dnnl.batch_normalization_forward(pd)
    prim.execute(s, a)
    s.wait()
    if vec and pd.workspace_desc().is_zero():
        src = _apply_source(prim)
        assert "reqd_work_group_size(1, 1, 1)" in src and "8(" in src
    if vec and pd.lanes == "c" and not g:
        assert "reqd_work_group_size(1, 1, 1)" in _reduce_source(prim)
    xs = a[dnnl.ARG_SRC].to_numpy().astype(np.float64)
    sc = d["scale"] if flags & F.use_scale else None
    sh = d["shift"] if flags & F.use_shift else None
    y, m, v = R.batch_norm_forward(xs, EPS, d["mean"] if g else None, d["var"] if g else None,
                                   sc, sh, False)
    if add:
        y = y + a[dnnl.ARG_SRC_1].to_numpy().astype(np.float64)
    if relu:
        y = np.maximum(y, 0.0)
    got = a[dnnl.ARG_DST].to_numpy().astype(np.float64)
    if kind == "f32":
        close(got, y)
    else:
        bound = 2 * UNIT[kind] * np.abs(y) + 2e-5 * max(1.0, np.abs(y).max())
        assert np.all(np.abs(got - y) <= bound)
    if not g and not pd.mean_desc().is_zero():
        close(a[dnnl.ARG_MEAN].to_numpy(), m)
        close(a[dnnl.ARG_VARIANCE].to_numpy(), v)
    if prop != PK.forward_training:
        return
    bpd = dnnl.batch_normalization_backward.primitive_desc(eng, PK.backward, md, md, md, EPS,
                                                          flags, pd)
    b = {k: a[k] for k in (dnnl.ARG_SRC, dnnl.ARG_MEAN, dnnl.ARG_VARIANCE, dnnl.ARG_SCALE,
                           dnnl.ARG_WORKSPACE) if k in a}
    b[dnnl.ARG_DIFF_DST] = mem(md, eng, d["dy"])
    b[dnnl.ARG_DIFF_SRC] = mem(md, eng)
    if add:
        b[dnnl.ARG_DIFF_SRC_1] = mem(md, eng)
    for k in (dnnl.ARG_DIFF_SCALE, dnnl.ARG_DIFF_SHIFT):
        if k in bpd.arg_specs():
            b[k] = mem(bpd.diff_weights_desc(), eng)
    bprim = dnnl.batch_normalization_backward(bpd)
    bprim.execute(s, b)
    s.wait()
    if vec and not relu:
        src = _apply_source(bprim)
        assert "reqd_work_group_size(1, 1, 1)" in src and "8(" in src
        if bpd.lanes == "c" and not g:
            assert "reqd_work_group_size(1, 1, 1)" in _reduce_source(bprim)
    dys = b[dnnl.ARG_DIFF_DST].to_numpy().astype(np.float64)
    mask = None
    if relu:
        mask = a[dnnl.ARG_WORKSPACE].to_numpy()[:y.size].reshape(y.shape) != 0
    dx, dsc, dsh = R.batch_norm_backward(xs, dys, a[dnnl.ARG_MEAN].to_numpy(),
                                         a[dnnl.ARG_VARIANCE].to_numpy(), EPS, sc, g, mask)
    check_backward(b, kind, dx, dsc, dsh)


@pytest.mark.sampled(every=3)
@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("flags", [F.use_scale | F.use_shift, F.none, F.use_shift,
                                   F.use_global_stats | F.use_scale],
                         ids=["CH", "none", "H", "GC"])
def test_vector_runs_match_reference(engine, stream, forced, shape, flags):
    dims, t = SHAPES[shape]
    md = dnnl.memory.desc(dims, dt.f32, t)
    _run(engine, stream, _data(dims, len(shape) + int(flags)), md, PK.forward_training,
         flags, True)


@pytest.mark.parametrize("shape", ["nchw_tail", "nhwc_tail", "nc_short"])
@pytest.mark.parametrize("flags", [F.use_scale | F.use_shift | F.fuse_norm_relu,
                                   F.use_global_stats | F.use_shift,
                                   F.use_global_stats | F.fuse_norm_add_relu],
                         ids=["CHR", "GH", "GA"])
def test_vector_runs_inference(engine, stream, forced, shape, flags):
    """Inference: ReLU (and the added ``src_1``) without a workspace run the vector form
    too."""
    dims, t = SHAPES[shape]
    md = dnnl.memory.desc(dims, dt.f32, t)
    _run(engine, stream, _data(dims, int(flags)), md, PK.forward_inference, flags, True)


@pytest.mark.parametrize("kind", ["bf16", "f16"])
@pytest.mark.parametrize("shape", ["nchw_tail", "nhwc_tail"])
def test_vector_runs_low_precision(engine, stream, forced, kind, shape):
    dims, t = SHAPES[shape]
    md = dnnl.memory.desc(dims, dt[kind], t)
    _run(engine, stream, _data(dims, 3), md, PK.forward_training, F.use_scale | F.use_shift,
         True, kind)


@pytest.mark.parametrize("shape", ["nchw_tail", "nhwc_tail"])
def test_per_element_form_still_matches(engine, stream, forced, monkeypatch, shape):
    """The per-element form (GPUs' choice), forced on every device."""
    monkeypatch.setattr(forced, "bn_apply_vec", lambda info: 0)
    dims, t = SHAPES[shape]
    md = dnnl.memory.desc(dims, dt.f32, t)
    _run(engine, stream, _data(dims, 5), md, PK.forward_training, F.use_scale | F.use_shift,
         False)


def test_rule_closed_form():
    """``bn_apply_vec`` on made-up devices: GPUs 0, Intel's CPU runtime 16, others 8."""
    from types import SimpleNamespace

    from pydnnl.runtime.heuristics import normalization as rules
    assert rules.bn_apply_vec(SimpleNamespace(is_gpu=True, runtime="nvidia")) == 0
    assert rules.bn_apply_vec(SimpleNamespace(is_gpu=False, runtime="intel")) == 16
    assert rules.bn_apply_vec(SimpleNamespace(is_gpu=False, runtime="pocl")) == 8
    cpu = SimpleNamespace(is_gpu=False, runtime="intel")
    assert rules.bn_reduce_vec(SimpleNamespace(is_gpu=True, runtime="nvidia"), 256, 10**5) \
        == (0, 1, 0)
    assert rules.bn_reduce_vec(cpu, 8, 10**5) == (0, 1, 0)
    # 64 channels per work-item, chunks of 256 rows
    assert rules.bn_reduce_vec(cpu, 256, 32 * 56 * 56) == (16, 4, 392)
    assert rules.bn_reduce_vec(cpu, 24, 100) == (16, 1, 1)
