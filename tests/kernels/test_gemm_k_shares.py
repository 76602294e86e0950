"""Blocks of C sharing k among work-groups of one launch (``NvTile.kslices``, the hand-written
NVIDIA SGEMM; plain OpenCL C, so it runs on every device here): each work-group's share tile
goes to a workspace, the last to arrive adds them in slice order and runs the epilogue.
Checked against numpy float64 over repeated launches (the arrival counters must come back to
zero), under Oclgrind for races, the device rule on an H200-like device, and the primitives
(inner product, matmul) that opt in, with the rule forced on the devices here."""
from __future__ import annotations

import pathlib
import sys
from types import SimpleNamespace

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.kernels.gemm import GemmProblem
from pydnnl.kernels.gemm_nv import NvTile, build_gemm_nv, counters_at, supports, workspace
from pydnnl.runtime.kernel import Kernel

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from oclgrind_helpers import GEMM_NV_PROBE_PRELUDE, has_oclgrind, run_probe  # noqa: E402

F32 = dnnl.memory.data_type.f32

CASES = [
    # (m, n, k, trans_a, trans_b, beta, tile)
    (32, 200, 512, False, False, 0.0, NvTile(32, 64, 16, 4, 4, kslices=8)),
    (5, 68, 256, False, True, 0.5, NvTile(16, 64, 16, 4, 4, kslices=4)),
    (36, 60, 128, True, False, 1.0, NvTile(32, 32, 16, 4, 4, kslices=2)),
    (70, 36, 192, False, False, -1.0, NvTile(64, 32, 16, 4, 4, kslices=3)),
    # 8-deep slices, 5 shares of 5 (k = 200, as a classifier's k = 1000 in 5 shares of 25)
    (20, 64, 200, False, False, 0.0, NvTile(16, 32, 8, 4, 4, kslices=5)),
    (32, 96, 200, False, True, 0.0, NvTile(32, 32, 8, 4, 4, kslices=5)),
]


def _mem(engine, host):
    return dnnl.memory(dnnl.memory.desc([host.size], F32, "a"), engine, host.ravel().copy())


@pytest.mark.parametrize("case", range(len(CASES)))
def test_shares_match_numpy_launch_after_launch(engine, stream, case):
    m, n, k, ta, tb, beta, tile = CASES[case]
    pr = GemmProblem(m=m, n=n, k=k, trans_a=ta, trans_b=tb, lda=m if ta else k,
                     ldb=k if tb else n, ldc=n, beta=beta, runtime_offsets=True)
    assert supports(pr, tile)
    rng = np.random.default_rng(case)
    a = rng.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
    c0 = rng.standard_normal((m, n)).astype(np.float32)
    A = (a.T if ta else a).astype(np.float64)
    B = (b.T if tb else b).astype(np.float64)
    src = build_gemm_nv(pr, tile)
    assert src.global_size[2] == tile.kslices and src.arg_names[3:] == (
        "ws", "a_off", "b_off", "c_off", "ws_off", "cnt_off")
    kern = Kernel(engine.context, engine.device, src)
    off, size = 7, workspace(pr, tile)
    guard = np.full(off + size + 9, 3.5, np.float32)
    guard[off:off + size] = 0  # the counters start at zero
    ma, mb, mc, mw = _mem(engine, a), _mem(engine, b), _mem(engine, c0), _mem(engine, guard)
    vals = {"a": ma.buffer, "b": mb.buffer, "c": mc.buffer, "ws": mw.buffer,
            "a_off": np.int64(0), "b_off": np.int64(0), "c_off": np.int64(0),
            "ws_off": np.int64(off), "cnt_off": np.int64(off + counters_at(pr, tile))}
    want = c0.astype(np.float64)
    for _ in range(3):  # each launch must find its counters at zero again
        want = A @ B + beta * want
        kern(stream, *[vals[x] for x in src.arg_names])
        stream.wait()
        got = mc.to_numpy().reshape(m, n)
        assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max(), case
    ws = mw.to_numpy()
    nblk = -(-m // tile.bm) * -(-n // tile.bn)
    assert (ws[off + size - nblk:off + size].view(np.int32) == 0).all()
    assert (ws[:off] == 3.5).all() and (ws[off + size:] == 3.5).all()


def test_one_program_serves_every_m(engine, stream):
    """m at run time (the grid's rows follow it): one program and one workspace, sized for
    the largest m, serve every batch of a classifier; rows past m are not written."""
    tile = NvTile(16, 64, 16, 4, 4, kslices=4)
    proto = GemmProblem(m=40, n=128, k=256, lda=256, ldb=128, ldc=128, runtime_offsets=True,
                        runtime_m="any")
    src = build_gemm_nv(proto, tile)
    assert src.global_size is None and src.arg_names[-1] == "m"
    kern = Kernel(engine.context, engine.device, src)
    rng = np.random.default_rng(8)
    b = rng.standard_normal((256, 128)).astype(np.float32)
    mb, mw = _mem(engine, b), _mem(engine, np.zeros(workspace(proto, tile), np.float32))
    for m in (1, 17, 40, 3):
        a = rng.standard_normal((m, 256)).astype(np.float32)
        c = np.full((41, 128), 7.0, np.float32)  # one row past m's
        ma, mc = _mem(engine, a), _mem(engine, c)
        vals = {"a": ma.buffer, "b": mb.buffer, "c": mc.buffer, "ws": mw.buffer,
                "a_off": np.int64(0), "b_off": np.int64(0), "c_off": np.int64(0),
                "ws_off": np.int64(0), "cnt_off": np.int64(counters_at(proto, tile)),
                "m": np.int64(m)}
        kern(stream, *[vals[x] for x in src.arg_names])
        stream.wait()
        got = mc.to_numpy().reshape(41, 128)
        want = a.astype(np.float64) @ b
        assert np.abs(got[:m] - want).max() <= 1e-5 * np.abs(want).max(), m
        assert (got[m:] == 7.0).all(), m


def test_share_order_fixes_the_sum(engine, stream):
    """The last work-group adds every share in slice order, whoever it is: two launches give
    the same bits."""
    tile = NvTile(32, 64, 16, 4, 4, kslices=8)
    pr = GemmProblem(m=32, n=128, k=1024, lda=1024, ldb=128, ldc=128, runtime_offsets=True)
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((32, 1024)), rng.standard_normal((1024, 128))
    src = build_gemm_nv(pr, tile)
    kern = Kernel(engine.context, engine.device, src)
    ma, mb = _mem(engine, a.astype(np.float32)), _mem(engine, b.astype(np.float32))
    mw = _mem(engine, np.zeros(workspace(pr, tile), np.float32))
    outs = []
    for _ in range(2):
        mc = _mem(engine, np.zeros(32 * 128, np.float32))
        vals = {"a": ma.buffer, "b": mb.buffer, "c": mc.buffer, "ws": mw.buffer,
                "a_off": np.int64(0), "b_off": np.int64(0), "c_off": np.int64(0),
                "ws_off": np.int64(0), "cnt_off": np.int64(counters_at(pr, tile))}
        kern(stream, *[vals[x] for x in src.arg_names])
        stream.wait()
        outs.append(mc.to_numpy())
    np.testing.assert_array_equal(outs[0], outs[1])


def test_supports_only_one_fixed_product():
    t = NvTile(32, 64, 16, 4, 4, kslices=4)
    base = dict(m=32, n=64, k=256, lda=256, ldb=64, ldc=64)
    assert supports(GemmProblem(**base), t)
    assert not supports(GemmProblem(**{**base, "k": 240}), t)  # 15 slices: no even share
    assert not supports(GemmProblem(**base, batch=2, stride_a=8192, stride_b=16384,
                                    stride_c=2048), t)
    assert supports(GemmProblem(**base, runtime_m="any"), t)
    with pytest.raises(ValueError, match="kslices"):
        NvTile(32, 64, 16, 4, 4, ksplit=2, kslices=2).check()


H200 = SimpleNamespace(is_gpu=True, vendor_family="nvidia", compute_units=132,
                       max_work_group_size=1024, local_mem_bytes=48 * 1024, inline_ptx=True)


def _sliced(m, n, k, info=H200):
    from pydnnl.runtime.gemm import _nv_tile

    t = _nv_tile(info, GemmProblem(m=m, n=n, k=k, lda=k, ldb=n, ldc=n), "strict", True)
    return None if t is None else (t.bm, t.bn, t.kslices, t.fence)


def test_rule_on_an_h200_like_device():
    """ResNet-50's classifier and other few-block, long-k products share k (shares of 256,
    else of 128, at most 4 work-groups per unit); products whose blocks fill the units do
    not."""
    assert _sliced(32, 1000, 2048) == (32, 64, 8, "ptx")
    assert _sliced(1, 1000, 2048) == (16, 64, 8, "ptx")
    assert _sliced(256, 1000, 2048) == (128, 64, 8, "ptx")
    assert _sliced(8, 4096, 4096) == (16, 64, 8, "ptx")
    assert _sliced(64, 2048, 512)[2] == 1  # 128 blocks of 16x64: k-groups, as before
    assert _sliced(4096, 4096, 4096)[2] == 1
    # k = 1000: 8-deep slices, 5 shares of 200 (no share of 256 divides it)
    assert _sliced(32, 2048, 1000) == (32, 32, 5, "ptx")
    assert _sliced(32, 1000, 1002) is None  # k not in whole slices: the loopy family
    assert _sliced(32, 1000, 2048, SimpleNamespace(**{**vars(H200), "vendor_family": "amd"})) \
        is None
    # without the workspace (callers that do not opt in) the rule is unchanged
    from pydnnl.runtime.gemm import _nv_tile

    assert _nv_tile(H200, GemmProblem(m=32, n=1000, k=2048, lda=2048, ldb=1000, ldc=1000),
                    "strict") is None


def _sliced_steps(prim):
    return [st.gemm.nv_tile.kslices for st in prim._plan.steps if hasattr(st, "gemm")
            and st.gemm.nv_tile is not None]


def _runs_twice_right(prim, stream, args, out: int, want) -> None:
    """``prim`` plans one GEMM sharing k in 4, and gives ``want`` in ``args[out]`` twice (the
    second execution finds the arrival counters the first left at zero)."""
    assert _sliced_steps(prim) == [4] and prim._plan.ws_elems > 0
    for _ in range(2):
        prim.execute(stream, args)
        stream.wait()
        np.testing.assert_allclose(args[out].to_numpy(), want, rtol=1e-5, atol=1e-5)


def test_inner_product_forward_with_shares(engine, stream, forced_k_shares):
    mb, ic, oc = 6, 256, 200
    md = dnnl.memory.desc
    ops = dnnl.post_ops()
    ops.append_eltwise(dnnl.algorithm.eltwise_relu, 0.0, 0.0)
    attr = dnnl.primitive_attr()
    attr.set_post_ops(ops)
    pd = dnnl.inner_product_forward.primitive_desc(
        engine, dnnl.prop_kind.forward_inference, md([mb, ic], F32, "ab"),
        md([oc, ic], F32, "any"), md([oc], F32, "a"), md([mb, oc], F32, "ab"), attr)
    rng = np.random.default_rng(11)
    s = rng.standard_normal((mb, ic)).astype(np.float32)
    w = rng.standard_normal((oc, ic)).astype(np.float32)
    b = rng.standard_normal(oc).astype(np.float32)
    user_w = dnnl.memory(md([oc, ic], F32, "ab"), engine, w)
    mw = dnnl.memory(pd.weights_desc(), engine)
    dnnl.reorder(user_w, mw).execute(stream, user_w, mw)
    args = {dnnl.ARG_SRC: dnnl.memory(pd.src_desc(), engine, s), dnnl.ARG_WEIGHTS: mw,
            dnnl.ARG_BIAS: dnnl.memory(md([oc], F32, "a"), engine, b),
            dnnl.ARG_DST: dnnl.memory(pd.dst_desc(), engine)}
    prim = dnnl.inner_product_forward(pd)
    _runs_twice_right(prim, stream, args, dnnl.ARG_DST,
                      np.maximum(s.astype(np.float64) @ w.T + b, 0))
    # another minibatch of the same layer: the same program (m at run time)
    pd9 = dnnl.inner_product_forward.primitive_desc(
        engine, dnnl.prop_kind.forward_inference, md([9, ic], F32, "ab"),
        md([oc, ic], F32, "any"), md([oc], F32, "a"), md([9, oc], F32, "ab"), attr)
    gemms = [[st.gemm for st in p._plan.steps if hasattr(st, "gemm")]
             for p in (prim, dnnl.inner_product_forward(pd9))]
    assert gemms[0][0] is not gemms[1][0] and gemms[0][0].kernel is gemms[1][0].kernel


def test_inner_product_backward_data_and_matmul_with_shares(engine, stream, forced_k_shares):
    md = dnnl.memory.desc
    rng = np.random.default_rng(12)
    mb, ic, oc = 4, 128, 512  # backward data: 4 x 128 x 512
    fwd = dnnl.inner_product_forward.primitive_desc(
        engine, dnnl.prop_kind.forward_training, md([mb, ic], F32, "ab"),
        md([oc, ic], F32, "ab"), md([mb, oc], F32, "ab"))
    pd = dnnl.inner_product_backward_data.primitive_desc(
        engine, md([mb, ic], F32, "ab"), md([oc, ic], F32, "ab"), md([mb, oc], F32, "ab"), fwd)
    w = rng.standard_normal((oc, ic)).astype(np.float32)
    dd = rng.standard_normal((mb, oc)).astype(np.float32)
    args = {dnnl.ARG_WEIGHTS: dnnl.memory(pd.weights_desc(), engine, w),
            dnnl.ARG_DIFF_DST: dnnl.memory(pd.diff_dst_desc(), engine, dd),
            dnnl.ARG_DIFF_SRC: dnnl.memory(pd.diff_src_desc(), engine)}
    _runs_twice_right(dnnl.inner_product_backward_data(pd), stream, args, dnnl.ARG_DIFF_SRC,
                      dd.astype(np.float64) @ w)
    M, K, N = 3, 1024, 64
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    mpd = dnnl.matmul.primitive_desc(engine, md([M, K], F32, "ab"), md([K, N], F32, "ab"),
                                     md([M, N], F32, "ab"))
    margs = {dnnl.ARG_SRC: dnnl.memory(mpd.src_desc(), engine, a),
             dnnl.ARG_WEIGHTS: dnnl.memory(mpd.weights_desc(), engine, b),
             dnnl.ARG_DST: dnnl.memory(mpd.dst_desc(), engine)}
    _runs_twice_right(dnnl.matmul(mpd), stream, margs, dnnl.ARG_DST, a.astype(np.float64) @ b)


PROBE = "SEED = 6\n" + GEMM_NV_PROBE_PRELUDE + r"""
for name, tile, (m, n, k) in (("s2", NvTile(16, 32, 16, 4, 4, kslices=2), (20, 36, 64)),
                              ("s4", NvTile(16, 64, 16, 4, 4, kslices=4), (5, 64, 64))):
    pr = GemmProblem(m=m, n=n, k=k, lda=k, ldb=n, ldc=n, beta=0.5)
    a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
    c = rng.uniform(-1, 1, (m, n)).astype(np.float32)
    A, B, C = buf(a), buf(b), buf(c)
    W = buf(np.zeros(workspace(pr, tile), np.float32))
    src = build_gemm_nv(pr, tile)
    vals = {"a": A.buffer, "b": B.buffer, "c": C.buffer, "ws": W.buffer, "ws_off": np.int64(0),
            "cnt_off": np.int64(counters_at(pr, tile))}
    Kernel(eng.context, eng.device, src)(s, *[vals[x] for x in src.arg_names])
    s.wait()
    want = a.astype(np.float64) @ b + 0.5 * c
    results[name] = bool(np.allclose(C.to_numpy().reshape(m, n), want, rtol=1e-4, atol=1e-4))
print(json.dumps(results))
"""


def _handoff(block: str) -> bool:
    """An Oclgrind report of a share's store against the last group's read of it: the
    hand-off through global memory that the arrival counter orders (OpenCL 1.2's model has
    no inter-group order, so the simulator reports every such pair)."""
    return block.lstrip().startswith("Read-write data race at global memory") and \
        "P[((int)get_group_id(2)" in block and "= V[(" in block


@pytest.mark.skipif(not has_oclgrind(), reason="Oclgrind OpenCL platform not installed")
def test_shares_under_oclgrind():
    """No invalid access, uninitialized read or race other than the hand-off of the shares
    (in the shared tiles, the arrival word's broadcast, the epilogue), and C right."""
    results = run_probe(PROBE, allow=_handoff, OCLGRIND_BUILD_OPTIONS="-cl-opt-disable")
    assert results == {"s2": True, "s4": True}
