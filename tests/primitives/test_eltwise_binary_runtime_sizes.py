"""Eltwise and binary primitives with sizes as kernel arguments: a new shape of one layout
class (a new minibatch or spatial size of dense tensors, a binary over the same broadcast
pattern) creates its primitive from the programs of the first, and computes the same as the
float64 numpy references."""
from __future__ import annotations

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.kernels import binary as KB
from pydnnl.reference import eltwise as ref_eltwise
from pydnnl.reference.binary import binary as ref_binary

A = dnnl.algorithm
dt, tag = dnnl.memory.data_type, dnnl.memory.format_tag
FWD = dnnl.prop_kind.forward_training


def _x(seed, dims):
    return np.random.default_rng(seed).uniform(-2, 2, dims).astype(np.float32)


def _binary(engine, stream, alg, x0, x1, t0, t1, td):
    dims = [max(a, b) for a, b in zip(x0.shape, x1.shape)]
    md = lambda d, t: dnnl.memory.desc(list(d), dt.f32, t)  # noqa: E731
    pd = dnnl.binary.primitive_desc(engine, alg, md(x0.shape, t0), md(x1.shape, t1),
                                    md(dims, td))
    a = dnnl.memory(pd.src_desc(0), engine, x0)
    b = dnnl.memory(pd.src_desc(1), engine, x1)
    c = dnnl.memory(pd.dst_desc(), engine)
    dnnl.binary(pd).execute(stream, {dnnl.ARG_SRC_0: a, dnnl.ARG_SRC_1: b, dnnl.ARG_DST: c})
    stream.wait()
    return c.to_numpy()


# (src0 dims, src1 dims, tags (src0, src1, dst)) pairs of one class: the second shape has a new
# minibatch and/or spatial size; sizes that leave the last work-group partial
BINARY_CLASSES = {
    "flat_nchw": [([2, 3, 4, 5], [2, 3, 4, 5], "abcd"), ([3, 3, 7, 9], [3, 3, 7, 9], "abcd")],
    "flat_nhwc": [([2, 3, 4, 5], [2, 3, 4, 5], "acdb"), ([1, 3, 9, 31], [1, 3, 9, 31], "acdb")],
    "flat_blocked": [([2, 16, 3, 3], [2, 16, 3, 3], "aBcd16b"),
                     ([3, 16, 5, 2], [3, 16, 5, 2], "aBcd16b")],
    # per channel on NCHW, rows of H*W longer than a work-group (their length baked, a new
    # minibatch only: run-time row lengths ran 3x slower)
    "per_channel_nchw_long": [([2, 3, 16, 17], [1, 3, 1, 1], "abcd"),
                              ([3, 3, 16, 17], [1, 3, 1, 1], "abcd")],
    # per channel on NCHW, short rows: their length baked, a new minibatch only
    "per_channel_nchw_short": [([2, 4, 3, 5], [1, 4, 1, 1], "abcd"),
                               ([5, 4, 3, 5], [1, 4, 1, 1], "abcd")],
    # per channel on NCHW, short rows of a multiple of 16: whole rows per work-group
    "per_channel_nchw_rows16": [([2, 4, 4, 4], [1, 4, 1, 1], "abcd"),
                                ([3, 4, 4, 4], [1, 4, 1, 1], "abcd")],
    # per channel on NHWC: rows of C, the N*H*W rows run-time
    "per_channel_nhwc": [([2, 16, 3, 5], [1, 16, 1, 1], "acdb"),
                         ([3, 16, 7, 2], [1, 16, 1, 1], "acdb")],
    "scalar": [([2, 3, 4, 5], [1, 1, 1, 1], "abcd"), ([4, 3, 2, 7], [1, 1, 1, 1], "abcd")],
    # src1 broadcast over channels: rows of H*W (600, baked), a new minibatch
    "middle_broadcast": [([2, 3, 2, 300], [2, 1, 2, 300], "abcd"),
                         ([3, 3, 2, 300], [3, 1, 2, 300], "abcd")],
    "two_dims": [([5, 32], [1, 32], "ab"), ([11, 32], [1, 32], "ab")],
}


@pytest.mark.parametrize("case", list(BINARY_CLASSES))
def test_binary_new_shape_needs_no_new_kernel(engine, stream, requested, case):
    (d0, d1, t), (e0, e1, _) = BINARY_CLASSES[case]
    alg = A.binary_mul if case != "scalar" else A.binary_sub
    x0, x1 = _x(1, d0), _x(2, d1)
    np.testing.assert_allclose(_binary(engine, stream, alg, x0, x1, t, t, t),
                               ref_binary(alg, x0, x1), rtol=1e-6, atol=1e-6)
    first = set(requested)
    assert first
    requested.clear()
    y0, y1 = _x(3, e0), _x(4, e1)
    np.testing.assert_allclose(_binary(engine, stream, alg, y0, y1, t, t, t),
                               ref_binary(alg, y0, y1), rtol=1e-6, atol=1e-6)
    assert set(requested) <= first, sorted(set(requested) - first)


def test_binary_runtime_form_keeps_classes_apart():
    """Blocked broadcasts and binary post-ops keep their sizes; run-time strides are only those
    that depend on run-time dims."""
    lay = lambda *st: (0, tuple((1, s, ()) for s in st))  # noqa: E731
    p = KB.BinaryProblem(alg=int(A.binary_add), dims=(2, 3, 320),
                         layouts=(lay(960, 320, 1), lay(0, 1, 0), lay(960, 320, 1)),
                         sizes=(1920, 3, 1920), rows=True)
    q, values = KB.runtime_form(p, (0, 2))
    assert values == {"bd0": 2, "bouter": 6}  # the row length and every stride baked
    assert q.layouts == p.layouts and q.dims[1:] == (3, 320)
    # flat over rows of 15 (not a multiple of 16): only the outermost dim run-time
    p = KB.BinaryProblem(alg=int(A.binary_add), dims=(2, 3, 15),
                         layouts=(lay(45, 15, 1), lay(0, 1, 0), lay(45, 15, 1)),
                         sizes=(90, 3, 90), rows=False)
    assert KB.runtime_form(p, (0, 2))[1] == {"bd0": 2}
    # channels-last per channel: rows of C, the C stride of the outer dim stays baked
    p = KB.BinaryProblem(alg=int(A.binary_add), dims=(30, 16),
                         layouts=(lay(16, 1), lay(0, 1), lay(16, 1)), sizes=(480, 16, 480),
                         rows=True)
    q, values = KB.runtime_form(p, (0,))
    assert values == {"bd0": 30, "bouter": 30} and q.layouts == p.layouts
    blocked = (0, ((16, 16, ((16, 1, 1),)), (1, 1, ())))
    assert KB.runtime_form(KB.BinaryProblem(alg=int(A.binary_add), dims=(32, 5),
                                            layouts=(blocked,) * 3, sizes=(160,) * 3,
                                            rows=False), (0, 1))[1] == {}


def _eltwise(engine, stream, alg, alpha, x, t, backward=False, dd=None):
    md = dnnl.memory.desc(list(x.shape), dt.f32, t)
    fpd = dnnl.eltwise_forward.primitive_desc(engine, FWD, alg, md, md, alpha, 0.0)
    src = dnnl.memory(md, engine, x)
    if not backward:
        out = dnnl.memory(md, engine)
        dnnl.eltwise_forward(fpd).execute(stream, {dnnl.ARG_SRC: src, dnnl.ARG_DST: out})
    else:
        bpd = dnnl.eltwise_backward.primitive_desc(engine, alg, md, md, md, alpha, 0.0, fpd)
        out = dnnl.memory(md, engine)
        dnnl.eltwise_backward(bpd).execute(stream, {
            dnnl.ARG_SRC: src, dnnl.ARG_DIFF_DST: dnnl.memory(md, engine, dd),
            dnnl.ARG_DIFF_SRC: out})
    stream.wait()
    return out.to_numpy()


ELTWISE_CLASSES = {
    "nchw": ("abcd", [2, 3, 4, 5], [3, 3, 11, 13]),
    "nhwc": ("acdb", [2, 3, 4, 5], [1, 3, 17, 9]),
    "blocked": ("aBcd16b", [2, 16, 3, 3], [5, 16, 4, 7]),
}


@pytest.mark.parametrize("backward", [False, True], ids=["fwd", "bwd"])
@pytest.mark.parametrize("case", list(ELTWISE_CLASSES))
def test_eltwise_new_shape_needs_no_new_kernel(engine, stream, requested, case, backward):
    t, d0, d1 = ELTWISE_CLASSES[case]
    # a piecewise-linear algorithm: CPUs keep the others' counts baked (runtime_count)
    alg, alpha = A.eltwise_relu, 0.7
    first = None
    for k, dims in enumerate((d0, d1)):
        x, dd = _x(10 + k, dims), _x(20 + k, dims)
        y = _eltwise(engine, stream, alg, alpha, x, t, backward, dd)
        want = (ref_eltwise.eltwise_backward(alg, dd, x, alpha, 0.0) if backward
                else ref_eltwise.eltwise_forward(alg, x, alpha, 0.0))
        np.testing.assert_allclose(y, want, rtol=2e-6, atol=1e-6)
        if first is None:
            first = set(requested)
            assert first
            requested.clear()
    assert set(requested) <= first, sorted(set(requested) - first)


def test_transcendental_eltwise_keeps_its_count_baked_on_cpus(cpu_engine):
    """The run-time count's guard cost transcendental algorithms 20-37% on the AVX-512 CPU:
    there the rule keeps their counts baked; piecewise-linear ones and GPUs take it at run
    time."""
    from pydnnl.runtime.heuristics.eltwise import runtime_count

    cpu = cpu_engine.info
    assert runtime_count(cpu, A.eltwise_relu) and runtime_count(cpu, A.eltwise_clip_v2)
    assert runtime_count(cpu, A.eltwise_relu_use_dst_for_bwd)
    assert not runtime_count(cpu, A.eltwise_gelu_erf)
    assert not runtime_count(cpu, A.eltwise_tanh_use_dst_for_bwd)



def test_whole_block_counts_share_an_unguarded_program(engine, stream, requested):
    """Counts that are a whole number of work-group blocks form their own run-time class on
    every device, transcendental algorithms included: two such tensors share one program,
    whose source checks no bound (the baked kernel's code), and compute the reference."""
    from pydnnl.kernels import eltwise as KE
    from pydnnl.runtime.heuristics.eltwise import flat_params

    wg, iters = flat_params(engine.info, 1 << 20)
    block = wg * iters
    first = None
    for k, dims in enumerate(([2, block // 4, 2, 2], [5, block // 4, 1, 4])):
        x = _x(30 + k, dims)
        y = _eltwise(engine, stream, A.eltwise_gelu_erf, 0.0, x, "abcd")
        np.testing.assert_allclose(y, ref_eltwise.eltwise_forward(A.eltwise_gelu_erf, x, 0.0,
                                                                  0.0), rtol=2e-6, atol=1e-6)
        keys = {(fam, key) for fam, key in requested if fam == "eltwise_flat"}
        assert keys, requested
        if first is None:
            first = keys
            requested.clear()
    assert keys <= first, sorted(keys - first)
    p = KE.EltwiseFlat(alg=int(A.eltwise_gelu_erf), alpha=0.0, beta=0.0, backward=False,
                       count=4 * block, offsets=(0, 0), sizes=(4 * block,) * 2, wg=wg,
                       iters=iters)
    q, values = KE.flat_runtime(p)
    assert q.whole and values == {"nelems": 4 * block}
    src = KE.build_flat(q)
    import loopy as lp

    body = lp.generate_code_v2(src).device_code()
    body = body[body.index("pydnnl_eltwise_fwd("):]
    assert "nelems" in body and " if " not in body and "if (" not in body, body
    assert not KE.flat_runtime(KE.EltwiseFlat(**{**p.__dict__, "count": 4 * block + 3,
                                                 "sizes": (4 * block + 3,) * 2}))[0].whole
