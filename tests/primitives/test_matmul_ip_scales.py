"""Scales (oneDNN v3's quantization attributes) on matmul and inner product, fused into the
GEMM's store, against numpy float64 computing oneDNN's formula
``dst = post_ops(src_scale * wei_scale * (src @ wei) + bias) / dst_scale``: common and
per-output-channel weights scales, a bias and a post-op chain, f32 and bf16/f16 data, new
scale values at each execution from one compiled program, and the masks and zero points
oneDNN refuses for floating-point data."""
from __future__ import annotations

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.reference.post_ops import apply_post_ops

dt = dnnl.memory.data_type
MD, A = dnnl.memory.desc, dnnl.algorithm
S = dnnl.ARG_ATTR_SCALES
SRC, WEI, DST, BIAS = dnnl.ARG_SRC, dnnl.ARG_WEIGHTS, dnnl.ARG_DST, dnnl.ARG_BIAS


def _attr(masks: dict, po: dnnl.post_ops | None = None) -> dnnl.primitive_attr:
    attr = dnnl.primitive_attr()
    for arg, mask in masks.items():
        attr.set_scales_mask(arg, mask)
    if po is not None:
        attr.set_post_ops(po)
    return attr


def _chain(binary_dims=None) -> tuple[dnnl.post_ops, dict]:
    """sum(0.5), gelu, and optionally a binary add read at the destination position."""
    po, ops = dnnl.post_ops(), {}
    po.append_sum(0.5)
    po.append_eltwise(A.eltwise_gelu_tanh, 0.0, 0.0)
    if binary_dims is not None:
        ops[po.len()] = np.random.default_rng(3).standard_normal(binary_dims).astype(np.float32)
        po.append_binary(A.binary_add, MD(list(binary_dims), dt.f32, "abcd"[:len(binary_dims)]))
    return po, ops


def _scale_mems(engine, pd, values: dict) -> dict:
    return {S | arg: dnnl.memory(pd.query_md(dnnl.query.exec_arg_md, S | arg), engine,
                                 np.asarray(v, np.float32).reshape(-1))
            for arg, v in values.items()}


def _want(prod, bias, po, prior, ops, sv: dict, wei_axis: int):
    """oneDNN's formula in float64: scales on the product, bias, post-ops, 1 / dst scale."""
    ws = np.asarray(sv[WEI], np.float64)
    if ws.size > 1:
        shape = [1] * prod.ndim
        shape[wei_axis] = ws.size
        ws = ws.reshape(shape)
    v = float(sv[SRC][0]) * prod * ws + bias
    return apply_post_ops(v, po, prior, ops) * (1.0 / np.float32(sv[DST][0]))


def _values(rng, n_wei: int) -> dict:
    """Scale values as stored (f32)."""
    return {SRC: rng.uniform(0.25, 2.0, 1).astype(np.float32),
            WEI: rng.uniform(0.25, 2.0, n_wei).astype(np.float32),
            DST: rng.uniform(0.5, 4.0, 1).astype(np.float32)}


# {{{ matmul

M, K, N = 5, 7, 6


@pytest.fixture(scope="module")
def mm(engine):
    """A 2-D f32 matmul: bias, sum + gelu + a per-row binary add, scales src common,
    weights per column N (mask 2), dst common."""
    po, ops = _chain((M, 1))
    attr = _attr({SRC: 0, WEI: 2, DST: 0}, po)
    pd = dnnl.matmul.primitive_desc(engine, MD([M, K], dt.f32, "ab"), MD([K, N], dt.f32, "ab"),
                                    MD([1, N], dt.f32, "ab"), MD([M, N], dt.f32, "ab"), attr)
    return pd, dnnl.matmul(pd), po, ops


def _mm_args(engine, pd, ops, rng):
    args = {SRC: dnnl.memory(pd.src_desc(), engine, rng.standard_normal((M, K))),
            WEI: dnnl.memory(pd.weights_desc(), engine, rng.standard_normal((K, N))),
            BIAS: dnnl.memory(MD([1, N], dt.f32, "ab"), engine, rng.standard_normal((1, N))),
            DST: dnnl.memory(pd.dst_desc(), engine, rng.standard_normal((M, N)))}
    for i, v in ops.items():
        arg = dnnl.ARG_ATTR_MULTIPLE_POST_OP(i) | dnnl.ARG_SRC_1
        args[arg] = dnnl.memory(pd.query_md(dnnl.query.exec_arg_md, arg), engine, v)
    return args


def test_matmul_scales_change_per_execute(engine, stream, mm, requested):
    """Two executions of one primitive with new scale values (and a new prior dst): both
    right, and the second asks the kernel cache for nothing (one compiled program)."""
    pd, prim, po, ops = mm
    assert "attr-scales:src:0+wei:2+dst:0" in pd._info
    assert pd.query_md(dnnl.query.exec_arg_md, S | WEI) == MD([N], dt.f32, "a")
    rng = np.random.default_rng(1)
    args = _mm_args(engine, pd, ops, rng)
    x, w, b = (args[a].to_numpy().astype(np.float64) for a in (SRC, WEI, BIAS))
    for run in range(2):
        if run == 1:
            seen = len(requested)
        sv = _values(rng, N)
        args[DST].write(rng.standard_normal((M, N)).astype(np.float32))
        prior = args[DST].to_numpy().astype(np.float64)
        prim.execute(stream, {**args, **_scale_mems(engine, pd, sv)})
        stream.wait()
        want = _want(x @ w, b, po, prior, ops, sv, 1)
        got = args[DST].to_numpy()
        assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max(), run
    assert len(requested) == seen, requested[seen:]


def test_matmul_scales_batched_transposed_dst(engine, stream):
    """One batched GEMM (the batch folds into strides) writing a transposed dst (``acb``:
    C holds dst^T, so per-N scales follow C's rows), weights scales per N (mask 4)."""
    B, m, k, n = 2, 3, 5, 4
    po = dnnl.post_ops()
    po.append_eltwise(A.eltwise_relu, 0.0, 0.0)
    attr = _attr({SRC: 0, WEI: 4, DST: 0}, po)
    pd = dnnl.matmul.primitive_desc(engine, MD([B, m, k], dt.f32, "abc"),
                                    MD([B, k, n], dt.f32, "abc"), MD([1, 1, n], dt.f32, "abc"),
                                    MD([B, m, n], dt.f32, "acb"), attr)
    rng = np.random.default_rng(2)
    x, w = rng.standard_normal((B, m, k)), rng.standard_normal((B, k, n))
    b = rng.standard_normal((1, 1, n))
    sv = _values(rng, n)
    dst = dnnl.memory(pd.dst_desc(), engine)
    dnnl.matmul(pd).execute(stream, {
        SRC: dnnl.memory(pd.src_desc(), engine, x), WEI: dnnl.memory(pd.weights_desc(), engine, w),
        BIAS: dnnl.memory(MD([1, 1, n], dt.f32, "abc"), engine, b), DST: dst,
        **_scale_mems(engine, pd, sv)})
    stream.wait()
    x, w = x.astype(np.float32).astype(np.float64), w.astype(np.float32).astype(np.float64)
    b = b.astype(np.float32)
    want = _want(np.matmul(x, w), b, po, None, {}, sv, 2)
    assert np.abs(dst.to_numpy() - want).max() <= 1e-5 * np.abs(want).max()


def test_matmul_scales_bf16(engine, stream):
    """bf16 src, weights and dst (bias f32), common scales: the product of the stored
    values scaled in f32 and rounded once into dst (tolerance: bf16's 2^-8)."""
    po = dnnl.post_ops()
    po.append_sum(1.0)
    attr = _attr({SRC: 0, WEI: 0, DST: 0}, po)
    pd = dnnl.matmul.primitive_desc(engine, MD([M, K], dt.bf16, "ab"), MD([K, N], dt.bf16, "ab"),
                                    MD([1, N], dt.f32, "ab"), MD([M, N], dt.bf16, "ab"), attr)
    rng = np.random.default_rng(4)
    args = {SRC: dnnl.memory(pd.src_desc(), engine, rng.standard_normal((M, K))),
            WEI: dnnl.memory(pd.weights_desc(), engine, rng.standard_normal((K, N))),
            BIAS: dnnl.memory(MD([1, N], dt.f32, "ab"), engine, rng.standard_normal((1, N))),
            DST: dnnl.memory(pd.dst_desc(), engine, rng.standard_normal((M, N)))}
    stored = {a: m.to_numpy().astype(np.float64) for a, m in args.items()}
    sv = _values(rng, 1)
    dnnl.matmul(pd).execute(stream, {**args, **_scale_mems(engine, pd, sv)})
    stream.wait()
    want = _want(stored[SRC] @ stored[WEI], stored[BIAS], po, stored[DST], {}, sv, 1)
    got = args[DST].to_numpy()
    assert np.abs(got - want).max() <= (2.0 ** -8 + 1e-5) * np.abs(want).max()

# }}}


# {{{ inner product

MB, IC, OC = 4, 3, 5


@pytest.fixture(scope="module")
def ip(engine):
    """f32 inner product over a 2x2 image: bias, sum + gelu, scales src common, weights per
    output channel (mask 1), dst common."""
    po, _ = _chain()
    attr = _attr({SRC: 0, WEI: 1, DST: 0}, po)
    pd = dnnl.inner_product_forward.primitive_desc(
        engine, dnnl.prop_kind.forward_inference, MD([MB, IC, 2, 2], dt.f32, "abcd"),
        MD([OC, IC, 2, 2], dt.f32, "abcd"), MD([OC], dt.f32, "a"), MD([MB, OC], dt.f32, "ab"),
        attr)
    return pd, dnnl.inner_product_forward(pd), po


def test_inner_product_scales_change_per_execute(engine, stream, ip, requested):
    pd, prim, po = ip
    assert "attr-scales:src:0+wei:1+dst:0" in pd._info
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((MB, IC, 2, 2)), rng.standard_normal((OC, IC, 2, 2))
    b = rng.standard_normal(OC)
    args = {SRC: dnnl.memory(pd.src_desc(), engine, x), WEI: dnnl.memory(pd.weights_desc(),
                                                                         engine, w),
            BIAS: dnnl.memory(pd.bias_desc(), engine, b), DST: dnnl.memory(pd.dst_desc(), engine)}
    x, w, b = (args[a].to_numpy().astype(np.float64) for a in (SRC, WEI, BIAS))
    prod = x.reshape(MB, -1) @ w.reshape(OC, -1).T
    for run in range(2):
        if run == 1:
            seen = len(requested)
        sv = _values(rng, OC)
        args[DST].write(rng.standard_normal((MB, OC)).astype(np.float32))
        prior = args[DST].to_numpy().astype(np.float64)
        prim.execute(stream, {**args, **_scale_mems(engine, pd, sv)})
        stream.wait()
        want = _want(prod, b, po, prior, {}, sv, 1)
        got = args[DST].to_numpy()
        assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max(), run
    assert len(requested) == seen, requested[seen:]


def test_scaled_epilogue_keeps_a_runtime_minibatch(engine, spy_kernels):
    """Common and per-channel scales name no row of C: a new minibatch asks for no GEMM
    kernel the first one did not (the row count stays a run-time size). Both minibatches
    are at least one register tile tall (16 rows at most on CPUs): a shorter one takes the
    kernel form for any m."""
    po, _ = _chain()
    keys = []
    for mb in (17, 23):
        seen = spy_kernels(("gemm",))
        dnnl.inner_product_forward(dnnl.inner_product_forward.primitive_desc(
            engine, dnnl.prop_kind.forward_inference, MD([mb, IC, 2, 2], dt.f32, "abcd"),
            MD([OC, IC, 2, 2], dt.f32, "abcd"), MD([OC], dt.f32, "a"),
            MD([mb, OC], dt.f32, "ab"), _attr({SRC: 0, WEI: 1, DST: 0}, po)))
        keys.append({k for _, k in seen})
    assert keys[1] and keys[1] <= keys[0], keys[1] - keys[0]


def test_inner_product_scales_f16(engine, stream):
    """f16 src, weights and dst, per-channel weights scales: tolerance f16's 2^-11."""
    attr = _attr({SRC: 0, WEI: 1, DST: 0})
    pd = dnnl.inner_product_forward.primitive_desc(
        engine, dnnl.prop_kind.forward_inference, MD([MB, IC * 4], dt.f16, "ab"),
        MD([OC, IC * 4], dt.f16, "ab"), MD([MB, OC], dt.f16, "ab"), attr)
    rng = np.random.default_rng(6)
    args = {SRC: dnnl.memory(pd.src_desc(), engine, rng.standard_normal((MB, IC * 4))),
            WEI: dnnl.memory(pd.weights_desc(), engine, rng.standard_normal((OC, IC * 4))),
            DST: dnnl.memory(pd.dst_desc(), engine)}
    x, w = (args[a].to_numpy().astype(np.float64) for a in (SRC, WEI))
    sv = _values(rng, OC)
    dnnl.inner_product_forward(pd).execute(stream, {**args, **_scale_mems(engine, pd, sv)})
    stream.wait()
    want = _want(x @ w.T, 0.0, dnnl.post_ops(), None, {}, sv, 1)
    got = args[DST].to_numpy().astype(np.float64)
    assert np.abs(got - want).max() <= (2.0 ** -11 + 1e-5) * np.abs(want).max()

# }}}


# {{{ refusals

@pytest.mark.parametrize("masks,what", [
    ({SRC: 2}, "mask 2 for ARG_SRC"),    # per K: oneDNN's dynamic quantization, with groups
    ({SRC: 3}, "mask 3 for ARG_SRC"),
    ({WEI: 1}, "mask 1 for ARG_WEIGHTS"),  # K: weights decompression (integer weights) only
    ({WEI: 3}, "mask 3 for ARG_WEIGHTS"),
    ({DST: 2}, "mask 2 for ARG_DST"),    # per N: oneDNN's GPU engines only
    ({BIAS: 0}, "ARG_BIAS"),
])
def test_matmul_refused_scales(cpu_engine, masks, what):
    with pytest.raises(dnnl.unimplemented, match=what):
        dnnl.matmul.primitive_desc(cpu_engine, MD([M, K], dt.f32, "ab"),
                                   MD([K, N], dt.f32, "ab"), MD([1, N], dt.f32, "ab"),
                                   MD([M, N], dt.f32, "ab"), _attr(masks))


@pytest.mark.parametrize("arg", [SRC, WEI, DST])
def test_zero_points_refused(cpu_engine, arg):
    attr = _attr({WEI: 2})
    attr.set_zero_points_mask(arg, 0)
    with pytest.raises(dnnl.unimplemented, match="int8 matmul"):
        dnnl.matmul.primitive_desc(cpu_engine, MD([M, K], dt.bf16, "ab"),
                                   MD([K, N], dt.bf16, "ab"), MD([M, N], dt.f32, "ab"), attr)
    attr = _attr({})
    attr.set_zero_points_mask(arg, 0)
    with pytest.raises(dnnl.unimplemented, match="int8 inner product"):
        dnnl.inner_product_forward.primitive_desc(
            cpu_engine, dnnl.prop_kind.forward_inference, MD([MB, IC], dt.f32, "ab"),
            MD([OC, IC], dt.f32, "ab"), MD([MB, OC], dt.f32, "ab"), attr)


def test_inner_product_refused_scales(cpu_engine):
    src, wei, dst = MD([MB, IC], dt.f32, "ab"), MD([OC, IC], dt.f32, "ab"), MD([MB, OC], dt.f32,
                                                                                 "ab")
    fwd = dnnl.prop_kind.forward_training
    for masks, what in (({WEI: 2}, "mask 2 for ARG_WEIGHTS"), ({SRC: 1}, "mask 1 for ARG_SRC"),
                        ({DST: 1}, "mask 1 for ARG_DST")):
        with pytest.raises(dnnl.unimplemented, match=what):
            dnnl.inner_product_forward.primitive_desc(cpu_engine, fwd, src, wei, dst,
                                                      _attr(masks))
    hint = dnnl.inner_product_forward.primitive_desc(cpu_engine, fwd, src, wei, dst)
    with pytest.raises(dnnl.unimplemented, match="forward propagation only"):
        dnnl.inner_product_backward_data.primitive_desc(cpu_engine, src, wei, dst, hint,
                                                        _attr({SRC: 0}))


def test_missing_or_wrong_scales_leave_dst_untouched(engine, stream, mm):
    """A missing scale memory, or one of the wrong size, raises naming it before anything
    is written."""
    pd, prim, _, ops = mm
    rng = np.random.default_rng(7)
    args = _mm_args(engine, pd, ops, rng)
    before = args[DST].to_numpy().copy()
    scales = _scale_mems(engine, pd, _values(rng, N))
    short = {k: v for k, v in scales.items() if k != S | WEI}
    with pytest.raises(dnnl.invalid_arguments, match="missing argument"):
        prim.execute(stream, {**args, **short})
    wrong = {**scales, S | WEI: dnnl.memory(MD([1], dt.f32, "a"), engine, np.ones(1))}
    with pytest.raises(dnnl.invalid_arguments, match="ARG_ATTR_SCALES"):
        prim.execute(stream, {**args, **wrong})
    stream.wait()
    np.testing.assert_array_equal(args[DST].to_numpy(), before)

# }}}


# {{{ the hand-written NVIDIA kernel (plain OpenCL C: forced here on every device)

def test_matmul_scales_on_the_nvidia_kernel(engine, stream, monkeypatch):
    """Scales in the store of ``gemm_nv`` as the runtime launches it on NVIDIA GPUs (a copy
    with the plan's offsets compiled in), weights scales per N, against numpy."""
    from pydnnl.kernels.gemm_nv import NvTile, supports
    from pydnnl.runtime import gemm as rg

    tile = NvTile(32, 64, 16, 4, 4)
    monkeypatch.setattr(rg.rules, "nv_tile",
                        lambda info, prob, math="strict": tile if supports(prob, tile)
                        else None)
    monkeypatch.setattr(rg, "_cache", {})
    m, k, n = 40, 32, 68
    po = dnnl.post_ops()
    po.append_eltwise(A.eltwise_relu, 0.0, 0.0)
    attr = _attr({SRC: 0, WEI: 2, DST: 0}, po)
    pd = dnnl.matmul.primitive_desc(engine, MD([m, k], dt.f32, "ab"), MD([k, n], dt.f32, "ab"),
                                    MD([1, n], dt.f32, "ab"), MD([m, n], dt.f32, "ab"), attr)
    rng = np.random.default_rng(8)
    x, w, b = rng.standard_normal((m, k)), rng.standard_normal((k, n)), rng.standard_normal(n)
    sv = _values(rng, n)
    dst = dnnl.memory(pd.dst_desc(), engine)
    dnnl.matmul(pd).execute(stream, {
        SRC: dnnl.memory(pd.src_desc(), engine, x), WEI: dnnl.memory(pd.weights_desc(), engine, w),
        BIAS: dnnl.memory(MD([1, n], dt.f32, "ab"), engine, b[None]), DST: dst,
        **_scale_mems(engine, pd, sv)})
    stream.wait()
    f = lambda a: a.astype(np.float32).astype(np.float64)  # noqa: E731
    want = _want(f(x) @ f(w), f(b), po, None, {}, sv, 1)
    assert np.abs(dst.to_numpy() - want).max() <= 1e-5 * np.abs(want).max()
    gemms = [g for g in rg._cache.values() if g.nv_tile is not None]
    assert gemms and all(len(g._static) == 1 for g in gemms)  # the compiled-in copy ran

# }}}


# {{{ benchdnn

def test_benchdnn_attr_scales(capsys, benchdnn_engine):
    """``--attr-scales`` in benchdnn's syntax on ``--matmul`` and ``--ip`` (mode C against
    oneDNN's formula in float64), and its parser's masks."""
    from pydnnl.benchdnn.__main__ import main
    from pydnnl.benchdnn.matmul import parse_scales

    rc = main([benchdnn_engine, "--matmul", "--mode=C", "--bia_dt=f32",
               "--attr-post-ops=sum:0.5+relu",
               "--attr-scales=src:common:0.5+wei:per_oc+dst:common:2", "5x7:7x6",
               "--ip", "--mode=C", "--attr-scales=src:common:0.25+wei:per_oc:2+dst:common:4",
               "mb4ic3ih2iw2oc5"])
    out = capsys.readouterr().out
    assert rc == 0 and out.count("check,passed") == 2 and "FAILED" not in out, out
    dims = {SRC: [2, 3, 4], WEI: [2, 4, 5], DST: [2, 3, 5]}
    got = parse_scales("src:common:0.5+wei:per_oc+dst:per_dim_01:2", dims,
                       {SRC: 2, WEI: 2, DST: 2})
    assert got == {SRC: (0, 0.5), WEI: (4, 1.0), DST: (3, 2.0)}
    with pytest.raises(SystemExit, match="policy must be"):
        main([benchdnn_engine, "--matmul", "--attr-scales=wei:per_row", "2x2:2x2"])
    with pytest.raises(SystemExit, match="mask 1 for ARG_WEIGHTS"):
        main([benchdnn_engine, "--matmul", "--attr-scales=wei:per_dim_0", "2x2:2x2"])

# }}}
