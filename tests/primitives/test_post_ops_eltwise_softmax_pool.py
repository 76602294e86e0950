"""Post-ops fused into the forward eltwise, softmax and pooling kernels (oneDNN v3's sets:
eltwise takes binary entries, softmax and pooling eltwise and binary ones): chains against the
numpy references followed by the reference post-ops in float64, the attributes oneDNN refuses
for them (and every backward attribute) refused before anything is written, and the chain in
the verbose line."""
from __future__ import annotations

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.reference.eltwise import eltwise_forward as ref_eltwise
from pydnnl.reference.pooling import pooling_forward as ref_pool
from pydnnl.reference.post_ops import apply_post_ops
from pydnnl.reference.softmax import softmax_forward as ref_softmax

MD, F32, A = dnnl.memory.desc, dnnl.memory.data_type.f32, dnnl.algorithm
INF, TRAIN = dnnl.prop_kind.forward_inference, dnnl.prop_kind.forward_training
SENTINEL = 7.25


def _attr(entries):
    """``(attr, post_ops, {index: operand dims})`` from ``[(alg, alpha, beta) |
    ("binary", alg, dims, tag) | ("sum", scale)]``."""
    po, dims = dnnl.post_ops(), {}
    for i, e in enumerate(entries):
        if e[0] == "binary":
            po.append_binary(e[1], MD(list(e[2]), F32, e[3]))
            dims[i] = e[2]
        elif e[0] == "sum":
            po.append_sum(e[1])
        else:
            po.append_eltwise(*e)
    attr = dnnl.primitive_attr()
    attr.set_post_ops(po)
    return attr, po, dims


def _run(engine, stream, prim, pd, srcs, dims, seed):
    """Execute with random operands; ``(dst, operand values)``."""
    rng = np.random.default_rng(seed)
    args = {arg: dnnl.memory(pd.query_md(dnnl.query.exec_arg_md, arg), engine, v)
            for arg, v in srcs.items()}
    vals = {}
    for i, d in dims.items():
        arg = dnnl.ARG_ATTR_MULTIPLE_POST_OP(i) | dnnl.ARG_SRC_1
        vals[i] = rng.standard_normal(d).astype(np.float32)
        args[arg] = dnnl.memory(pd.query_md(dnnl.query.exec_arg_md, arg), engine, vals[i])
    args[dnnl.ARG_DST] = dst = dnnl.memory(pd.dst_desc(), engine)
    if not pd.workspace_desc().is_zero():
        args[dnnl.ARG_WORKSPACE] = dnnl.memory(pd.workspace_desc(), engine)
    prim(pd).execute(stream, args)
    stream.wait()
    return dst.to_numpy().astype(np.float64), vals


def _check(got, ref):
    err = np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30)
    assert err <= 1e-5, f"max relative error {err:.3g}"


# -- eltwise ---------------------------------------------------------------------------------
ELTWISE = {
    # name: (dims, tag, algorithm, alpha, chain); plain: the flat kernel reading a per-channel
    # operand at the element's position; blocked: the strided kernel
    "nchw_flat": ((2, 8, 3, 3), "abcd", A.eltwise_relu, 0.1,
                  [("binary", A.binary_add, (1, 8, 1, 1), "abcd"),
                   ("binary", A.binary_mul, (2, 8, 3, 3), "acdb")]),
    "blocked_strided": ((2, 16, 3, 3), "aBcd16b", A.eltwise_elu, 0.5,
                        [("binary", A.binary_sub, (1, 16, 1, 1), "abcd"),
                         ("binary", A.binary_ge, (2, 1, 3, 3), "abcd")]),
}


def _eltwise_pd(engine, case):
    dims, tag, alg, alpha, chain = ELTWISE[case]
    attr, po, odims = _attr(chain)
    md = MD(list(dims), F32, tag)
    return dnnl.eltwise_forward.primitive_desc(engine, INF, alg, md, md, alpha, 0.0, attr), \
        po, odims


@pytest.mark.parametrize("case", list(ELTWISE))
def test_eltwise_forward_post_ops(engine, stream, case):
    dims, _, alg, alpha, _ = ELTWISE[case]
    pd, po, odims = _eltwise_pd(engine, case)
    x = np.random.default_rng(1).standard_normal(dims).astype(np.float32)
    got, vals = _run(engine, stream, dnnl.eltwise_forward, pd, {dnnl.ARG_SRC: x}, odims, 2)
    ref = ref_eltwise(alg, x.astype(np.float64), alpha, 0.0)
    _check(got, apply_post_ops(ref, po, None, vals))


# -- softmax ---------------------------------------------------------------------------------
SOFTMAX = {
    # name: (dims, tag, axis, algorithm, chain); axis innermost (row kernel), axis 1 of nchw
    # (strided kernel)
    "rows": ((4, 40), "ab", 1, A.softmax_accurate,
             [("binary", A.binary_add, (4, 1), "ab"), (A.eltwise_linear, 2.0, 1.0),
              ("binary", A.binary_mul, (1, 40), "ab")]),
    "nchw_axis1": ((2, 8, 3, 3), "abcd", 1, A.softmax_log,
                   [("binary", A.binary_add, (1, 8, 1, 1), "abcd"), (A.eltwise_abs, 0.0, 0.0),
                    ("binary", A.binary_max, (2, 1, 3, 3), "abcd")]),
}


def _softmax_pd(engine, case):
    dims, tag, axis, alg, chain = SOFTMAX[case]
    attr, po, odims = _attr(chain)
    md = MD(list(dims), F32, tag)
    return dnnl.softmax_forward.primitive_desc(engine, INF, alg, md, md, axis, attr), po, odims


@pytest.mark.parametrize("case", list(SOFTMAX))
def test_softmax_forward_post_ops(engine, stream, case):
    dims, _, axis, alg, _ = SOFTMAX[case]
    pd, po, odims = _softmax_pd(engine, case)
    x = np.random.default_rng(3).standard_normal(dims).astype(np.float32)
    got, vals = _run(engine, stream, dnnl.softmax_forward, pd, {dnnl.ARG_SRC: x}, odims, 4)
    _check(got, apply_post_ops(ref_softmax(alg, x, axis), po, None, vals))


# -- pooling ---------------------------------------------------------------------------------
POOL_ALGS = {"max": A.pooling_max, "avg_exclude_padding": A.pooling_avg_exclude_padding,
             "avg_include_padding": A.pooling_avg_include_padding}
POOLING = {
    # name: (src dims, dst dims, tag, alg, prop, kernel, stride, pad, chain)
    "max_nchw_training": ((2, 4, 6, 6), (2, 4, 3, 3), "abcd", "max", TRAIN, 3, 2, 1,
                          [("binary", A.binary_add, (1, 4, 1, 1), "abcd"),
                           (A.eltwise_relu, 0.0, 0.0)]),
    "avg_nhwc": ((2, 4, 6, 6), (2, 4, 3, 3), "acdb", "avg_exclude_padding", INF, 3, 2, 1,
                 [("binary", A.binary_mul, (2, 4, 3, 3), "abcd"), (A.eltwise_tanh, 0.0, 0.0),
                  ("binary", A.binary_lt, (1, 1, 3, 1), "abcd")]),
    # one window over the whole source: with post-ops the pooling kernel, not the reduction
    "global_avg": ((2, 4, 4, 4), (2, 4, 1, 1), "abcd", "avg_include_padding", INF, 4, 1, 0,
                   [("binary", A.binary_sub, (1, 4, 1, 1), "abcd")]),
}


def _pool_pd(engine, case):
    sd, dd, tag, alg, prop, k, st, pad, chain = POOLING[case]
    attr, po, odims = _attr(chain)
    pd = dnnl.pooling_forward.primitive_desc(
        engine, prop, POOL_ALGS[alg], MD(list(sd), F32, tag), MD(list(dd), F32, tag),
        [st, st], [k, k], [0, 0], [pad, pad], [pad, pad], attr)
    return pd, po, odims


@pytest.mark.parametrize("case", list(POOLING))
def test_pooling_forward_post_ops(engine, stream, case):
    sd, _, _, alg, _, k, st, pad, _ = POOLING[case]
    pd, po, odims = _pool_pd(engine, case)
    x = np.random.default_rng(5).standard_normal(sd).astype(np.float32)
    got, vals = _run(engine, stream, dnnl.pooling_forward, pd, {dnnl.ARG_SRC: x}, odims, 6)
    ref = ref_pool(x, alg, [k, k], [st, st], [0, 0], [pad, pad], [pad, pad])
    ref = ref[0] if isinstance(ref, tuple) else ref
    _check(got, apply_post_ops(ref, po, None, vals))


# -- refusals, untouched outputs, verbose ------------------------------------------------------
def test_unsupported_attrs_refused_before_any_write(cpu_engine):
    eng = cpu_engine
    s = dnnl.stream(eng)
    md = MD([2, 8, 3, 3], F32, "abcd")
    elt = dnnl.eltwise_forward.primitive_desc
    sm = dnnl.softmax_forward.primitive_desc
    pool = dnnl.pooling_forward.primitive_desc
    pool_dst = MD([2, 8, 1, 1], F32, "abcd")
    pool_p = ([1, 1], [3, 3], [0, 0], [0, 0], [0, 0])
    scales = dnnl.primitive_attr()
    scales.set_scales_mask(dnnl.ARG_SRC, 0)
    cases = [
        # oneDNN's eltwise takes binary post-ops only
        (lambda: elt(eng, INF, A.eltwise_relu, md, md, 0.0, 0.0,
                     _attr([(A.eltwise_tanh, 0.0, 0.0)])[0]),
         dnnl.unimplemented, r"post-op 0 \(eltwise\): oneDNN's eltwise_forward takes binary "
                             r"post-ops only"),
        (lambda: elt(eng, INF, A.eltwise_relu, md, md, 0.0, 0.0, _attr([("sum", 1.0)])[0]),
         dnnl.unimplemented, r"post-op 0 \(sum\)"),
        (lambda: elt(eng, INF, A.eltwise_relu, md, md, 0.0, 0.0, scales),
         dnnl.unimplemented, "scales or zero points"),
        # softmax: scales only for int8 (not implemented here), no sum
        (lambda: sm(eng, INF, A.softmax_accurate, md, md, 1, scales),
         dnnl.unimplemented, "int8"),
        (lambda: sm(eng, INF, A.softmax_accurate, md, md, 1, _attr([("sum", 1.0)])[0]),
         dnnl.unimplemented, "takes binary and eltwise post-ops only"),
        # pooling: no sum; an operand that does not fit dst names both dims
        (lambda: pool(eng, INF, A.pooling_max, md, pool_dst, *pool_p,
                      _attr([("sum", 1.0)])[0]),
         dnnl.unimplemented, r"post-op 0 \(sum\)"),
        (lambda: pool(eng, INF, A.pooling_max, md, pool_dst, *pool_p,
                      _attr([("binary", A.binary_add, (1, 8, 3, 3), "abcd")])[0]),
         dnnl.invalid_arguments, r"src1 dims \[1, 8, 3, 3\] .* \[2, 8, 1, 1\]"),
    ]
    for make, err, words in cases:
        with pytest.raises(err, match=words):
            make()
    # backward propagation takes no attributes (oneDNN defines none)
    binary_attr = _attr([("binary", A.binary_add, (1, 8, 1, 1), "abcd")])[0]
    efwd = elt(eng, TRAIN, A.eltwise_relu, md, md)
    with pytest.raises(dnnl.unimplemented, match="backward"):
        dnnl.eltwise_backward.primitive_desc(eng, A.eltwise_relu, md, md, md, 0.0, 0.0, efwd,
                                             binary_attr)
    sfwd = sm(eng, TRAIN, A.softmax_accurate, md, md, 1)
    with pytest.raises(dnnl.unimplemented, match="backward"):
        dnnl.softmax_backward.primitive_desc(eng, A.softmax_accurate, md, md, md, 1, sfwd,
                                             binary_attr)
    pfwd = pool(eng, TRAIN, A.pooling_avg_include_padding, md, pool_dst, *pool_p)
    with pytest.raises(dnnl.unimplemented, match="backward"):
        dnnl.pooling_backward.primitive_desc(eng, A.pooling_avg_include_padding, md, pool_dst,
                                             *pool_p, pfwd, binary_attr)
    # execute without a binary operand, or with one of the wrong dims: dst keeps its content
    pd, _, odims = _eltwise_pd(eng, "nchw_flat")
    x = dnnl.memory(pd.src_desc(), eng, np.ones((2, 8, 3, 3), np.float32))
    dst = dnnl.memory(pd.dst_desc(), eng, np.full((2, 8, 3, 3), SENTINEL, np.float32))
    prim = dnnl.eltwise_forward(pd)
    full = {i: dnnl.memory(MD(list(d), F32, "abcd"), eng) for i, d in odims.items()}
    args = {dnnl.ARG_SRC: x, dnnl.ARG_DST: dst,
            dnnl.ARG_ATTR_MULTIPLE_POST_OP(0) | dnnl.ARG_SRC_1: full[0]}
    with pytest.raises(dnnl.invalid_arguments, match="missing argument"):
        prim.execute(s, args)
    args[dnnl.ARG_ATTR_MULTIPLE_POST_OP(1) | dnnl.ARG_SRC_1] = full[0]   # [1, 8, 1, 1]
    with pytest.raises(dnnl.invalid_arguments, match=r"\[1, 8, 1, 1\].*expects.*\[2, 8, 3, 3\]"):
        prim.execute(s, args)
    s.wait()
    assert np.all(dst.to_numpy() == SENTINEL)


def test_verbose_names_post_ops(cpu_engine, capsys, monkeypatch):
    monkeypatch.setenv("PYDNNL_VERBOSE", "1")
    dnnl.eltwise_forward(_eltwise_pd(cpu_engine, "nchw_flat")[0])
    dnnl.softmax_forward(_softmax_pd(cpu_engine, "rows")[0])
    dnnl.pooling_forward(_pool_pd(cpu_engine, "max_nchw_training")[0])
    out = capsys.readouterr().out
    assert "attr-post-ops:binary_add:1x8x1x1+binary_mul:2x8x3x3" in out
    assert "attr-post-ops:binary_add:4x1+eltwise_linear:2:1+binary_mul:1x40" in out
    assert "attr-post-ops:binary_add:1x4x1x1+eltwise_relu:0:0" in out


# -- run-time sizes kept ---------------------------------------------------------------------
def test_new_minibatch_reuses_programs_with_post_ops(cpu_engine, requested, monkeypatch):
    """A new minibatch (pooling: and, forced, a new image size) asks for no program the first
    shape did not: the operands' layouts enter the kernels as the tensors' do."""
    import pydnnl.primitives.pooling as PP

    monkeypatch.setattr(PP, "runtime_spatial", lambda info: True)
    eng, s = cpu_engine, dnnl.stream(cpu_engine)
    x = np.random.default_rng(7)

    def eltwise(n):
        attr, po, od = _attr([("binary", A.binary_add, (1, 8, 1, 1), "abcd"),
                              ("binary", A.binary_mul, (n, 8, 3, 3), "acdb")])
        md = MD([n, 8, 3, 3], F32, "abcd")
        pd = dnnl.eltwise_forward.primitive_desc(eng, INF, A.eltwise_relu, md, md, 0.1, 0.0,
                                                 attr)
        src = x.standard_normal((n, 8, 3, 3)).astype(np.float32)
        got, vals = _run(eng, s, dnnl.eltwise_forward, pd, {dnnl.ARG_SRC: src}, od, n)
        _check(got, apply_post_ops(ref_eltwise(A.eltwise_relu, src.astype(np.float64), 0.1,
                                               0.0), po, None, vals))

    def softmax(n):
        attr, po, od = _attr([("binary", A.binary_add, (1, 8, 1, 1), "abcd"),
                              (A.eltwise_abs, 0.0, 0.0),
                              ("binary", A.binary_max, (n, 1, 3, 3), "abcd")])
        md = MD([n, 8, 3, 3], F32, "abcd")
        pd = dnnl.softmax_forward.primitive_desc(eng, INF, A.softmax_log, md, md, 1, attr)
        src = x.standard_normal((n, 8, 3, 3)).astype(np.float32)
        got, vals = _run(eng, s, dnnl.softmax_forward, pd, {dnnl.ARG_SRC: src}, od, n)
        _check(got, apply_post_ops(ref_softmax(A.softmax_log, src, 1), po, None, vals))

    def pooling(n, h):
        # the shapes of test_pool_bnorm_runtime_sizes' nchw case: the width stays (CPUs bake
        # the lanes' dim) and so does the work-group shape the device rule picks
        oh, ow = (h - 1) // 2 + 1, 5
        attr, po, od = _attr([("binary", A.binary_add, (1, 3, 1, 1), "abcd"),
                              ("binary", A.binary_mul, (n, 3, oh, ow), "abcd"),
                              (A.eltwise_relu, 0.0, 0.0)])
        pd = dnnl.pooling_forward.primitive_desc(
            eng, TRAIN, A.pooling_max, MD([n, 3, h, 9], F32, "abcd"),
            MD([n, 3, oh, ow], F32, "abcd"), [2, 2], [3, 3], [0, 0], [1, 1], [1, 1], attr)
        src = x.standard_normal((n, 3, h, 9)).astype(np.float32)
        got, vals = _run(eng, s, dnnl.pooling_forward, pd, {dnnl.ARG_SRC: src}, od, n)
        ref = ref_pool(src, "max", [3, 3], [2, 2], [0, 0], [1, 1], [1, 1])[0]
        _check(got, apply_post_ops(ref, po, None, vals))

    for run, first, second in ((eltwise, (2,), (3,)), (softmax, (2,), (3,)),
                               (pooling, (3, 7), (4, 6))):
        run(*first)
        before = set(requested)
        run(*second)
        new = {fam for fam, key in requested if (fam, key) not in before}
        assert not new, (run.__name__, new)
