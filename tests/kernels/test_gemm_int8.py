"""The integer GEMM kernels alone (``Plan.gemm_int8``: packing and product) against numpy's
int64 product, exact: odd sizes that fill no tile (m, n, k not multiples of rows, the panel or
4), A transposed or not, B transposed or not, a batch; with the integer dot product (devices
that have ``cl_khr_integer_dot_product``) and plain multiply-adds (every device); a src zero
point per k (column sums weighted by it in the packing); one run under Oclgrind with its
stderr read."""
from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.kernels.gemm_int8 import Int8GemmProblem, Int8Params
from pydnnl.memory.data_types import data_type
from pydnnl.runtime.plan import Plan, Ref

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from oclgrind_helpers import has_oclgrind, run_probe  # noqa: E402


def _product(eng, M, N, K, trans_a, trans_b, signed, params, batch=1, zp=(0, 0),
             kweights=None):
    """Run one integer GEMM of random data (zero points ``zp`` on A and B, common; or with
    ``kweights`` ``(div, mod)`` a src zero point per k, ``zk[t, (k // div) % mod]`` for batch
    entry t) and return (got, want)."""
    rng = np.random.default_rng(M * 100 + N + K)
    lo, hi = (-128, 128) if signed else (0, 256)
    a = rng.integers(lo, hi, (batch, M, K)).astype(np.int8 if signed else np.uint8)
    b = rng.integers(-128, 128, (batch, K, N)).astype(np.int8)
    a_st = np.ascontiguousarray(a.transpose(0, 2, 1)) if trans_a else a
    b_st = np.ascontiguousarray(b.transpose(0, 2, 1)) if trans_b else b
    zps = [(w, ()) for w, z in zip(("src", "wei"), zp) if z]
    pr = Int8GemmProblem(m=M, n=N, k=K, a_dt=int(data_type.s8 if signed else data_type.u8),
                         trans_a=trans_a, batch=batch, stride_a=M * K, stride_c=M * N,
                         b_batched=batch > 1, zero_points=zps, src_zp_k=kweights is not None)
    plan = Plan(eng, "test")
    epi = {f"{w}_zp": Ref("zs" if w == "src" else "zw") for w, _ in zps}
    zk = np.zeros((batch, 1), np.int32)
    kw = None
    if kweights is not None:
        div, mod = kweights
        zk = rng.integers(-300, 300, (batch, mod)).astype(np.int32)
        kw = (div, mod, mod, Ref("zk"))
    plan.gemm_int8(pr, Ref("a"), 0, Ref("b"), 0, Ref("c"), 0, ldb=K if trans_b else N,
                   trans_b=trans_b, stride_b=K * N, epilogue=epi, params=params,
                   kweights=kw)

    def mem(x, t):
        return dnnl.memory(dnnl.memory.desc([x.size], t, "a"), eng, x.ravel())
    mems = {"a": mem(a_st, data_type.s8 if signed else data_type.u8),
            "b": mem(b_st, data_type.s8),
            "c": dnnl.memory(dnnl.memory.desc([batch * M * N], data_type.s32, "a"), eng),
            "zs": mem(np.array([zp[0]], np.int32), data_type.s32),
            "zw": mem(np.array([zp[1]], np.int32), data_type.s32),
            "zk": mem(zk, data_type.s32),
            "scratch": dnnl.memory(dnnl.memory.desc([plan.scratch_bytes], data_type.u8, "a"),
                                   eng)}
    s = dnnl.stream(eng)
    plan.run(s, {k: v.buffer for k, v in mems.items()})
    s.wait()
    a_zp = zp[0]
    if kweights is not None:  # zk over k: entry (k // div) % mod of each batch entry's row
        a_zp = zk[:, (np.arange(K) // kweights[0]) % kweights[1]][:, None, :].astype(np.int64)
    want = (a.astype(np.int64) - a_zp) @ (b.astype(np.int64) - zp[1])
    return mems["c"].to_numpy().reshape(batch, M, N), want


CASES = [  # M, N, K, trans_a, trans_b, signed A
    (13, 37, 29, False, False, False),
    (5, 50, 7, True, True, True),
    (17, 3, 64, False, True, False),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[:3])))
def test_multiply_adds(engine, case):
    M, N, K, ta, tb, sa = case
    got, want = _product(engine, M, N, K, ta, tb, sa, Int8Params(rows=4, vecs=2, lanes=8),
                         batch=2, zp=(3, -2))
    assert np.array_equal(got, want)


MMA_CASES = [  # M, N, K, trans_b, signed A, zero points (src only: the mma kernel's cover), block
    (70, 100, 96, False, False, (5, 0), 64),
    (64, 64, 32, True, True, (0, 0), 64),
    (3, 130, 64, False, True, (-7, 0), 64),
    (200, 260, 96, False, False, (4, 0), 128),
    (5, 70, 32, True, True, (0, 0), 128),
]


KW_CASES = [  # M, N, K, trans_b, signed A, (div, mod): a convolution's src zero point per
    # input channel over k = ic * taps + tap (div taps) or tap * ICg + ic (div 1)
    (13, 37, 27, False, False, (9, 3)),
    (6, 20, 30, True, True, (1, 5)),
    (9, 5, 7, False, False, (1, 7)),
]


@pytest.mark.parametrize("split", [1, 4], ids=["one-per-column", "split"])
@pytest.mark.parametrize("case", KW_CASES, ids=lambda c: "x".join(map(str, c[:3])))
def test_src_zero_point_per_k(engine, case, split, monkeypatch):
    """A src zero point per k: the packing's column sums weighted by it (each batch entry its
    own), subtracted in the store; exact, with one or several work-items per column."""
    import pydnnl.runtime.heuristics.gemm_int8 as rules

    monkeypatch.setattr(rules, "pack_split", lambda info: split)
    M, N, K, tb, sa, kw = case
    got, want = _product(engine, M, N, K, False, tb, sa, Int8Params(rows=4, vecs=2, lanes=8),
                         batch=2, kweights=kw)
    assert np.array_equal(got, want)


def test_src_zero_point_per_k_excludes_the_others():
    with pytest.raises(ValueError, match="src_zp_k"):
        Int8GemmProblem(m=4, n=4, k=4, src_zp_k=True, zero_points=[("src", ())])
    with pytest.raises(ValueError, match="src_zp_k"):
        Int8GemmProblem(m=4, n=4, k=4, src_zp_k=True, zero_points=[("wei", ())])


def test_pack_split_across_work_items(engine, monkeypatch):
    """The packing kernel with several work-items per column (the GPUs' rule) packs the same
    words and column sums: the product with a src zero point (its sums) stays exact."""
    import pydnnl.runtime.heuristics.gemm_int8 as rules

    monkeypatch.setattr(rules, "pack_split", lambda info: 4)
    got, want = _product(engine, 13, 37, 29, False, False, False,
                         Int8Params(rows=4, vecs=2, lanes=8), batch=2, zp=(3, 0))
    assert np.array_equal(got, want)


def test_mma_cover_and_rule():
    """The tensor-core kernel covers k in whole mma steps, A not transposed, no weights zero
    point; NVIDIA devices with mma.sync get it by default, others never."""
    from types import SimpleNamespace

    from pydnnl.kernels.gemm_int8 import build_gemm_int8, mma_covers
    from pydnnl.runtime.heuristics.gemm_int8 import default_params

    p = Int8Params(rows=4, lanes=64, mma=True)
    base = dict(m=70, n=100, k=96)
    assert mma_covers(Int8GemmProblem(**base), p)
    assert not mma_covers(Int8GemmProblem(**base, zero_points=[("wei", ())]), p)
    assert not mma_covers(Int8GemmProblem(m=70, n=100, k=100), p)
    assert not mma_covers(Int8GemmProblem(**base, trans_a=True), p)
    src = build_gemm_int8(Int8GemmProblem(**base, a_dt=int(data_type.s8)), p).source
    assert src.count("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32") == 8
    big = build_gemm_int8(Int8GemmProblem(**base), Int8Params(rows=4, lanes=128, mma=True))
    assert big.source.count("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32") == 32
    h100 = SimpleNamespace(is_gpu=True, is_cpu=False, vendor_family="nvidia", inline_ptx=True,
                           arch="sm_90", simd_width=32, integer_dot_product=False)
    assert default_params(h100).mma
    h100.compute_units = 132
    assert default_params(h100, Int8GemmProblem(m=4096, n=4096, k=4096)).panel == 128
    assert default_params(h100, Int8GemmProblem(m=1024, n=1024, k=1024)).panel == 64
    assert not default_params(SimpleNamespace(**{**vars(h100), "arch": "sm_75"})).mma


@pytest.mark.parametrize("case", MMA_CASES, ids=lambda c: "x".join(map(str, c[:3])))
def test_mma(engine, case):
    """On NVIDIA GPUs: the tensor-core kernel, exact."""
    from pydnnl.runtime.heuristics.gemm import tensor_cores

    if not (engine.info.is_gpu and engine.info.vendor_family == "nvidia"
            and tensor_cores(engine.info)):
        pytest.skip("int8 mma.sync runs on NVIDIA GPUs of compute capability 8.0 on")
    from pydnnl.kernels.gemm_int8 import mma_covers

    M, N, K, tb, sa, zp, block = case
    p = Int8Params(rows=4, lanes=block, mma=True)
    assert mma_covers(Int8GemmProblem(m=M, n=N, k=K, zero_points=[("src", ())] if zp[0]
                                      else []), p)
    got, want = _product(engine, M, N, K, False, tb, sa, p, batch=2, zp=zp)
    assert np.array_equal(got, want)


@pytest.mark.parametrize("block", [64, 128])
def test_mma_src_zero_point_per_k(engine, block):
    """On NVIDIA GPUs: the tensor-core kernel's store subtracts the per-k weighted sums."""
    from pydnnl.runtime.heuristics.gemm import tensor_cores

    if not (engine.info.is_gpu and engine.info.vendor_family == "nvidia"
            and tensor_cores(engine.info)):
        pytest.skip("int8 mma.sync runs on NVIDIA GPUs of compute capability 8.0 on")
    from pydnnl.kernels.gemm_int8 import mma_covers

    p = Int8Params(rows=4, lanes=block, mma=True)
    assert mma_covers(Int8GemmProblem(m=70, n=100, k=96, src_zp_k=True), p)
    got, want = _product(engine, 70, 100, 96, False, False, False, p, batch=2,
                         kweights=(9, 8))
    assert np.array_equal(got, want)


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[:3])))
def test_dot_product(engine, case):
    if not engine.info.integer_dot_product:
        pytest.skip(f"{engine.info.platform} has no cl_khr_integer_dot_product")
    M, N, K, ta, tb, sa = case
    got, want = _product(engine, M, N, K, ta, tb, sa, Int8Params(rows=3, vecs=1, lanes=16,
                                                                  dot4=True))
    assert np.array_equal(got, want)


PROBE = r"""
import json, sys
sys.path.insert(0, TESTS)
import pydnnl as dnnl
from pydnnl.kernels.gemm_int8 import Int8Params
from test_gemm_int8 import _product
eng = dnnl.engine.from_name("Oclgrind")
got, want = _product(eng, 5, 11, 7, False, True, False, Int8Params(rows=2, vecs=2, lanes=4),
                     batch=2, zp=(3, 1))
got_k, want_k = _product(eng, 5, 11, 6, False, False, False,
                         Int8Params(rows=2, vecs=2, lanes=4), batch=2, kweights=(2, 3))
print(json.dumps({"exact": bool((got == want).all()), "per_k": bool((got_k == want_k).all())}))
"""


@pytest.mark.skipif(not has_oclgrind(), reason="the Oclgrind platform is absent")
def test_gemm_int8_oclgrind():
    probe = PROBE.replace("TESTS", repr(str(pathlib.Path(__file__).parent)))
    # unoptimized builds: Oclgrind's uninitialized-value plugin aborts on the ``freeze``
    # instructions LLVM's optimizer emits for the packing kernel's guarded loads
    assert run_probe(probe, OCLGRIND_BUILD_OPTIONS="-cl-opt-disable") == {"exact": True,
                                                                         "per_k": True}


SHARED = [  # M, N, K, lda, ldc, batch, b_batched: one program for all (sizes are arguments)
    (13, 37, 29, 29, 37, 1, False),
    (5, 50, 7, 9, 53, 2, True),
    (17, 3, 64, 70, 3, 3, False),
    (9, 16, 6, 6, 20, 2, False),
    (20, 21, 8, 11, 21, 1, False),
]


@pytest.mark.parametrize("trans_a, zp", [(False, (0, 0)), (True, (3, 2))],
                         ids=["plain", "transposed-zero-points"])
def test_one_program_serves_every_size(engine, trans_a, zp):
    """Problems that differ in n, k (k % 4 != 0 too), leading dimensions, batch count and
    strides share one compiled product kernel, each result exact."""
    from pydnnl.kernels.gemm_int8 import mma_covers

    p = Int8Params(rows=4, vecs=1, lanes=16)
    kernels = []
    for M, N, K, lda, ldc, batch, bb in SHARED:
        rng = np.random.default_rng(M * 1000 + N * 10 + K)
        lda = max(lda, M) if trans_a else lda
        rows_a = K if trans_a else M
        sa, sc = rows_a * lda + 5, M * ldc + 3  # gaps between the batch entries
        a = rng.integers(0, 256, (batch, sa)).astype(np.uint8)
        b = rng.integers(-128, 128, (batch if bb else 1, K, N)).astype(np.int8)
        zps = [(w, ()) for w, z in zip(("src", "wei"), zp) if z]
        pr = Int8GemmProblem(m=M, n=N, k=K, trans_a=trans_a, lda=lda, ldc=ldc, batch=batch,
                             stride_a=sa, stride_c=sc, b_batched=bb, zero_points=zps)
        assert not mma_covers(pr, p)
        plan = Plan(engine, "test")
        epi = {f"{w}_zp": Ref("zs" if w == "src" else "zw") for w, _ in zps}
        plan.gemm_int8(pr, Ref("a"), 0, Ref("b"), 0, Ref("c"), 0, ldb=N, stride_b=K * N,
                       epilogue=epi, params=p)
        kernels.append(plan.steps[-1].kernel)

        def mem(x, t):
            return dnnl.memory(dnnl.memory.desc([x.size], t, "a"), engine, x.ravel())
        c0 = np.full(batch * sc, -7, np.int32)
        mems = {"a": mem(a, data_type.u8), "b": mem(b, data_type.s8),
                "c": mem(c0, data_type.s32),
                "zs": mem(np.array([zp[0]], np.int32), data_type.s32),
                "zw": mem(np.array([zp[1]], np.int32), data_type.s32),
                "scratch": dnnl.memory(dnnl.memory.desc([plan.scratch_bytes], data_type.u8,
                                                        "a"), engine)}
        s = dnnl.stream(engine)
        plan.run(s, {k: v.buffer for k, v in mems.items()})
        s.wait()
        got = mems["c"].to_numpy().reshape(batch, sc)
        want = c0.reshape(batch, sc).astype(np.int64)
        for t in range(batch):
            mat = a[t, :rows_a * lda].reshape(rows_a, lda)
            at = (mat[:, :M].T if trans_a else mat[:, :K]).astype(np.int64) - zp[0]
            prod = at @ (b[t if bb else 0].astype(np.int64) - zp[1])
            view = want[t, :M * ldc].reshape(M, ldc)
            view[:, :N] = prod  # columns past n and the gaps keep their content
        assert np.array_equal(got, want), (M, N, K, lda, ldc, batch)
    assert len({id(k) for k in kernels}) == 1
