"""Split-k GEMMs (``get_gemm(..., split=True)``): slices through one batched kernel, then a
reduction into C, against numpy in float64. The slice count is forced through ``split_k``
(on CPUs the rule never splits: see the closed-form test of the rule); the plan-level use is
in tests/primitives/rnn/test_rnn_split_k.py."""
from __future__ import annotations

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.error import invalid_arguments
from pydnnl.runtime import gemm as matmul
from pydnnl.runtime.heuristics import gemm as rules


@pytest.fixture
def forced_split(monkeypatch):
    def force(slices):
        monkeypatch.setattr(rules, "split_k",
                            lambda info, m, n, k, params: slices if k % slices == 0 else 1)
        matmul._cache.clear()

    yield force
    matmul._cache.clear()


def _buf(engine, arr):
    return dnnl.memory(dnnl.memory.desc([arr.size], dnnl.memory.data_type.f32,
                                        dnnl.memory.format_tag.a), engine, arr.ravel())


@pytest.mark.parametrize("trans_a,trans_b,beta,slices",
                         [(False, False, 0.0, 2), (False, True, 1.0, 4), (True, False, 0.5, 3),
                          (True, True, 0.0, 6)])
def test_split_gemm_matches_numpy(engine, stream, forced_split, trans_a, trans_b, beta, slices):
    forced_split(slices)
    m, n, k = 5, 19, 24
    rng = np.random.default_rng(slices)
    a = rng.standard_normal((k, m) if trans_a else (m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
    c0 = rng.standard_normal((m, n)).astype(np.float32)
    shape = matmul.GemmShape(m=m, n=n, k=k, lda=a.shape[1], ldb=b.shape[1], ldc=n,
                             trans_a=trans_a, trans_b=trans_b, alpha=0.75, beta=beta)
    g = matmul.get_gemm(engine, shape, split=True)
    assert g.splits == slices and g.part_elems == slices * m * n
    ma, mb, mc = _buf(engine, a), _buf(engine, b), _buf(engine, c0)
    part = _buf(engine, np.full(g.part_elems + 7, np.nan, np.float32))
    g(stream, ma.buffer, 0, mb.buffer, 0, mc.buffer, 0, part=part.buffer, part_off=7)
    stream.wait()
    a64 = a.astype(np.float64).T if trans_a else a.astype(np.float64)
    b64 = b.astype(np.float64).T if trans_b else b.astype(np.float64)
    want = 0.75 * a64 @ b64 + beta * c0
    got = mc.to_numpy().reshape(m, n)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_split_gemm_without_part_buffer_is_an_error(engine, stream, forced_split):
    forced_split(2)
    shape = matmul.GemmShape(m=2, n=3, k=4, lda=4, ldb=3, ldc=3)
    g = matmul.get_gemm(engine, shape, split=True)
    z = _buf(engine, np.zeros(12, np.float32))
    with pytest.raises(invalid_arguments, match="part buffer of 12 elements"):
        g(stream, z.buffer, 0, z.buffer, 0, z.buffer, 0)


def test_gpu_rule_fills_the_compute_units():
    """The slice rule on a made-up 132-unit GPU: with k >= 1024, grids covering at most half
    the units split, and those with k >= 1536; slices keep >= 256 of k, divide it, and the
    grid stays within 8 groups per unit."""
    from types import SimpleNamespace

    gpu = SimpleNamespace(is_gpu=True, compute_units=132)
    small = {"local_prefetch": True, "packed_b": False, "wg": (32, 8), "rows": 2, "cols": 2}
    large = dict(small, rows=8, cols=4)

    def sk(m, n, k, params=small):
        return rules.split_k(gpu, m, n, k, params)

    assert sk(64, 512, 2048) == 8      # 32 groups: 2048 / 8 = 256 per slice
    assert sk(32, 1760, 7040) == 16    # 56 groups: 440 per slice
    assert sk(64, 512, 1280) == 4      # 1280 / 8 = 160 < 256
    assert sk(64, 512, 768) == 1       # k < 1024: never
    assert sk(64, 512, 2050) == 2      # 2050 / 4 is no integer
    assert sk(16, 64, 1 << 20) == 1024  # 1 group: up to 8 * 132 groups
    assert sk(64, 2048, 512) == 1      # 128 groups: already one per unit
    assert sk(1024, 1024, 1024, large) == 1
    assert sk(512, 2048, 3200, large) == 8   # 128 groups, but k >= 1536: split anyway
    assert sk(64, 8192, 2048) == 2     # 512 groups, k >= 1536: 1024 groups at most
    cpu = SimpleNamespace(is_gpu=False, compute_units=2)
    assert rules.split_k(cpu, 64, 512, 2048, small) == 1


def test_slice_count_is_a_run_time_value(engine, stream, forced_split, spy_kernels):
    """Two slice counts of one GEMM (k = 512 in 2 slices, then in 4): the batched products
    take their count and slice length at run time, the reduction its count, so the second
    asks for no kernel the first did not; both against numpy. (A's leading dimension, the
    whole k, stays baked: another k makes other programs.)"""
    seen = spy_kernels(("gemm", "splitk_reduce"))
    keys = []
    # slices of at least one k tile: a shorter k keeps its own smaller tile on GPUs
    # (runtime.gemm.runtime_k)
    for slices, k in ((2, 512), (4, 512)):
        forced_split(slices)
        seen.clear()
        m, n = 5, 19
        rng = np.random.default_rng(slices)
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        shape = matmul.GemmShape(m=m, n=n, k=k, lda=k, ldb=n, ldc=n)
        g = matmul.get_gemm(engine, shape, split=True)
        assert g.splits == slices
        ma, mb, mc = _buf(engine, a), _buf(engine, b), _buf(engine, np.zeros(m * n, np.float32))
        part = _buf(engine, np.zeros(g.part_elems, np.float32))
        g(stream, ma.buffer, 0, mb.buffer, 0, mc.buffer, 0, part=part.buffer, part_off=0)
        stream.wait()
        want = a.astype(np.float64) @ b.astype(np.float64)
        np.testing.assert_allclose(mc.to_numpy().reshape(m, n), want, rtol=1e-5,
                                   atol=1e-5 * np.abs(want).max())
        keys.append(set(seen))
    assert keys[0] and keys[1] <= keys[0], sorted(keys[1] - keys[0])


def test_nvidia_local_tiles_fill_the_device():
    """The NVIDIA defaults of the loopy family (a device with an H200's traits): a tall GEMM
    takes the 64 x 128 blocks where they give every compute unit a work-group, and the
    16 x 64 blocks where they would leave most of the units idle."""
    from types import SimpleNamespace

    from pydnnl.kernels.gemm import GemmProblem

    h200 = SimpleNamespace(is_gpu=True, is_cpu=False, vendor_family="nvidia",
                           compute_units=132, max_work_group_size=1024,
                           max_work_item_sizes=(1024, 1024, 64), local_mem_bytes=48 * 1024,
                           simd_width=None)
    default = rules.default_params(h200)

    def block(m, n, k, batch=1):
        p = rules.shape_default(h200, GemmProblem(m=m, n=n, k=k, lda=k, ldb=n, ldc=n), default,
                                batch)
        return p["wg"][1] * p["rows"], p["wg"][0] * p["cols"]

    assert block(3200, 2048, 512) == (64, 128)  # 800 work-groups
    assert block(100352, 64, 147) == (64, 128)
    assert block(784, 128, 512) == (16, 64)  # 13 work-groups of 64 x 128
    assert block(64, 2048, 512) == (16, 64)
    assert block(512, 128, 512, batch=49) == (64, 128)  # a split GEMM's slices fill it
    assert block(512, 2048, 3200) == (64, 128)  # 128 work-groups: the split-k rule's case
