"""Batch normalization at a new minibatch or spatial size of the same plain layout reuses its
programs: the fused kernel and the elementwise pass take sizes and strides as arguments
(``bn_runtime_groups``). Results against pydnnl.reference; kernel requests spied on as in
tests/runtime/test_runtime_sizes.py."""
from __future__ import annotations

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.reference import normalization as R

dt, tag = dnnl.memory.data_type, dnnl.memory.format_tag
F = dnnl.normalization_flags
PK = dnnl.prop_kind
EPS = 1e-3


def _mem(md, eng, v=None):
    return dnnl.memory(md, eng, v) if v is not None else dnnl.memory(md, eng)


def _close(got, want, tol=2e-5):
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(1.0, np.abs(want).max()))


def _run_bn(eng, s, dims, t, flags, seed, backward=True):
    """Forward training (or with global statistics) and backward of one shape, checked
    against the reference."""
    rng = np.random.default_rng(seed)
    C = dims[1]
    x = (rng.standard_normal(dims) * 1.5 + 0.7).astype(np.float32)
    dy = rng.standard_normal(dims).astype(np.float32)
    sc = rng.uniform(0.5, 1.5, C).astype(np.float32)
    sh = rng.standard_normal(C).astype(np.float32)
    gm = (rng.standard_normal(C) * 0.3 + 0.7).astype(np.float32)
    gv = rng.uniform(1.0, 3.0, C).astype(np.float32)
    g, relu = bool(flags & F.use_global_stats), bool(flags & F.fuse_norm_relu)
    md = dnnl.memory.desc(dims, dt.f32, t)
    pd = dnnl.batch_normalization_forward.primitive_desc(eng, PK.forward_training, md, md,
                                                         EPS, flags)
    a = {dnnl.ARG_SRC: _mem(md, eng, x), dnnl.ARG_DST: _mem(md, eng),
         dnnl.ARG_MEAN: _mem(pd.mean_desc(), eng, gm if g else None),
         dnnl.ARG_VARIANCE: _mem(pd.variance_desc(), eng, gv if g else None),
         dnnl.ARG_SCALE: _mem(pd.weights_desc(), eng, sc),
         dnnl.ARG_SHIFT: _mem(pd.weights_desc(), eng, sh)}
    if not pd.workspace_desc().is_zero():
        a[dnnl.ARG_WORKSPACE] = _mem(pd.workspace_desc(), eng)
    dnnl.batch_normalization_forward(pd).execute(s, a)
    s.wait()
    y, m, v = R.batch_norm_forward(x, EPS, gm if g else None, gv if g else None, sc, sh, relu)
    _close(a[dnnl.ARG_DST].to_numpy(), y)
    mean, var = a[dnnl.ARG_MEAN].to_numpy(), a[dnnl.ARG_VARIANCE].to_numpy()
    if not g:
        _close(mean, m)
        _close(var, v)
    mask = y > 0 if relu else None
    if not backward:
        return pd.impl_info_str(), None
    bpd = dnnl.batch_normalization_backward.primitive_desc(eng, PK.backward, md, md, md, EPS,
                                                           flags, pd)
    b = {dnnl.ARG_SRC: a[dnnl.ARG_SRC], dnnl.ARG_MEAN: a[dnnl.ARG_MEAN],
         dnnl.ARG_VARIANCE: a[dnnl.ARG_VARIANCE], dnnl.ARG_SCALE: a[dnnl.ARG_SCALE],
         dnnl.ARG_DIFF_DST: _mem(md, eng, dy), dnnl.ARG_DIFF_SRC: _mem(md, eng),
         dnnl.ARG_DIFF_SCALE: _mem(bpd.diff_weights_desc(), eng),
         dnnl.ARG_DIFF_SHIFT: _mem(bpd.diff_weights_desc(), eng)}
    if relu:
        b[dnnl.ARG_WORKSPACE] = a[dnnl.ARG_WORKSPACE]
    dnnl.batch_normalization_backward(bpd).execute(s, b)
    s.wait()
    dx, dsc, dsh = R.batch_norm_backward(x, dy, mean, var, EPS, sc, g, mask)
    _close(b[dnnl.ARG_DIFF_SRC].to_numpy(), dx)
    _close(b[dnnl.ARG_DIFF_SCALE].to_numpy(), dsc)
    _close(b[dnnl.ARG_DIFF_SHIFT].to_numpy(), dsh)
    return pd.impl_info_str(), bpd.impl_info_str()


SS = F.use_scale | F.use_shift
# two shapes of one class per layout: minibatch and spatial sizes differ, neither a multiple
# of the work-groups (partial last groups), every plain kernel's launch shape the same
SHAPES = ([2, 4, 5, 7], [3, 4, 6, 9])


@pytest.mark.parametrize("flags", [SS, SS | F.fuse_norm_relu], ids=["ss", "ss_relu"])
def test_nchw_training_new_shape_reuses_programs(engine, stream, requested, flags):
    _run_bn(engine, stream, SHAPES[0], tag.nchw, flags, 1)
    first = set(requested)
    impl = _run_bn(engine, stream, SHAPES[1], tag.nchw, flags, 2)
    new = {fam for fam, key in requested if (fam, key) not in first}
    if all("fused" in i for i in impl):
        assert not new, new
    else:  # the split path: its reduction still bakes the sizes
        assert new <= {"bn_reduce", "bn_finalize"}, new


@pytest.mark.parametrize("t", [tag.nchw, tag.nhwc], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("flags", [SS | F.use_global_stats,
                                   SS | F.use_global_stats | F.fuse_norm_relu],
                         ids=["global", "global_relu"])
def test_global_stats_new_shape_reuses_programs(engine, stream, requested, t, flags):
    # forward: finalize (given statistics) and the elementwise pass, both shared
    _run_bn(engine, stream, SHAPES[0], t, flags, 3, backward=False)
    first = set(requested)
    _run_bn(engine, stream, SHAPES[1], t, flags, 4, backward=False)
    assert not {fam for fam, key in requested if (fam, key) not in first}
    # backward (diff_scale, diff_shift): the elementwise pass shared, the channel reduction
    # and its finalize still per shape
    _run_bn(engine, stream, SHAPES[0], t, flags, 3)
    first = set(requested)
    _run_bn(engine, stream, SHAPES[1], t, flags, 4)
    new = {fam for fam, key in requested if (fam, key) not in first}
    assert new <= {"bn_reduce", "bn_finalize"}, new


def test_nhwc_training_new_shape_results(engine, stream, requested):
    """nhwc training: the elementwise pass is shared; the channel reduction (and the
    finalize kernel, which bakes the partial count and R) are still per shape."""
    _run_bn(engine, stream, SHAPES[0], tag.nhwc, SS, 5)
    first = set(requested)
    _run_bn(engine, stream, SHAPES[1], tag.nhwc, SS, 6)
    new = {fam for fam, key in requested if (fam, key) not in first}
    assert "bn_apply" not in new and new <= {"bn_reduce", "bn_finalize"}, new
