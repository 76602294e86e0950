"""CPUs' shape defaults (heuristics.gemm): on 16-wide CPUs wide register tiles over many row
tiles walk several row tiles per work-item (m_loop); 8-wide CPUs take narrow tiles over few
columns; the kernels they build compute like the reference."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.kernels import gemm as G
from pydnnl.runtime.heuristics import gemm as H
from pydnnl.runtime.kernel_cache import get_kernel

CPUS = [dnnl.engine(dnnl.engine.kind.cpu, i)
        for i in range(dnnl.engine.get_count(dnnl.engine.kind.cpu))]


def _avx512(cache_mib: int = 2):
    info = replace(dnnl.engine.list_devices()[0], type="cpu", simd_width=16,
                   preferred_float_vector_width=16, max_work_group_size=8192,
                   max_work_item_sizes=(8192, 8192, 8192))
    return replace(info, global_mem_cache_bytes=cache_mib << 20)


def _default(info, m, n, k):
    pr = G.GemmProblem(m, n, k)
    return G.normalize_params(H.shape_default(info, pr, H.default_params(info)))


def test_wide_tiles_loop_over_row_tiles_from_the_threshold():
    info = _avx512()
    rows = H._AVX512_WIDE_TILE[0]
    lo = H._AVX512_WIDE_M_LOOP_MIN_TILES * rows
    for m, n, k in ((3200, 2048, 512), (1024, 1024, 1024), (2048, 2048, 2048), (lo, 2048, 512)):
        p = _default(info, m, n, k)
        assert (p["rows"], p["cols"]) == H._AVX512_WIDE_TILE
        assert p["m_loop"] == H._AVX512_WIDE_M_LOOP, (m, n, k)
    # 8 to 15 row tiles (the RNN's 64-row steps): several row tiles per work-item where each
    # compute unit still gets WIDE_M_LOOP_MIN_ITEMS, so the step's GEMM shares the layer
    # GEMM's program (both take m at run time)
    shared = H._AVX512_WIDE_M_LOOP_SHARED_TILES * rows
    for m in (shared, lo - rows):
        assert _default(replace(info, compute_units=2), m, 2048, 512)["m_loop"] \
            == H._AVX512_WIDE_M_LOOP, m
        assert _default(replace(info, compute_units=64), m, 2048, 512)["m_loop"] == 1, m
    assert _default(replace(info, compute_units=2), shared - rows, 2048, 512)["m_loop"] == 1
    two = replace(info, compute_units=2)
    assert G.normalize_params(H.shape_default(two, G.GemmProblem(64, 2048, 512),
                                              H.default_params(two))) \
        == G.normalize_params(H.shape_default(two, G.GemmProblem(3200, 2048, 512),
                                              H.default_params(two)))
    # B within the core's cache: the small tile, one row tile per work-item
    small = _default(info, 3136, 64, 256)
    assert (small["rows"], small["cols"]) == H._AVX512_SMALL_TILE and small["m_loop"] == 1
    assert _default(_avx512(4), 3200, 512, 512)["m_loop"] == 1  # 1 MiB of B in 4 MiB


@pytest.mark.parametrize("eng", CPUS, ids=[e.info.platform.split()[0] for e in CPUS])
@pytest.mark.parametrize("beta", [0.0, 0.5])
def test_wide_default_with_run_time_m(eng, beta):
    """The wide default (8x48 tile, float16 vectors, m_loop 4, packed B) as a run-time-m kernel:
    one program for every m, ragged columns, rows past m untouched."""
    import pyopencl as cl

    s = dnnl.stream(eng)
    params = G.normalize_params({"rows": 8, "cols": 48, "vec": 16, "k_unroll": 2,
                                 "m_loop": H._AVX512_WIDE_M_LOOP, "packed_b": True})
    n, k, lda, ldc, m_max = 100, 37, 41, 103, 140
    proto = G.GemmProblem(m_max, n, k, lda=lda, ldc=ldc, beta=beta, runtime_offsets=True,
                          runtime_m="tall")
    pk = G.pack_b(proto, params)
    kern = get_kernel(eng, "gemm", G.cache_key(pk.problem, params),
                      lambda: G.build_gemm(pk.problem, params))
    rng = np.random.default_rng(5)
    a = rng.standard_normal(3 + m_max * lda).astype(np.float32)
    b = rng.standard_normal(k * n).astype(np.float32)
    mf = cl.mem_flags
    A = cl.Buffer(eng.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=a)
    B = cl.Buffer(eng.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=pk.pack(b))
    for m in (8, 9, 31, 32, 33, 65, 128, 140):
        c = rng.standard_normal(2 + m_max * ldc).astype(np.float32)
        C = cl.Buffer(eng.context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=c)
        vals = {"a": A, "b": B, "c": C, "a_off": np.int64(3), "b_off": np.int64(0),
                "c_off": np.int64(2), "m": np.int64(m)}
        kern(s, *[vals[nm] for nm in kern.src.arg_names])
        out = np.empty_like(c)
        cl.enqueue_copy(s.queue, out, C)
        s.queue.finish()
        want = c.astype(np.float64)
        av = a[3:3 + m * lda].reshape(m, lda)[:, :k].astype(np.float64)
        cv = want[2:2 + m * ldc].reshape(m, ldc)
        cv[:, :n] = av @ b.reshape(k, n).astype(np.float64) + beta * cv[:, :n]
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4)


def _avx2():
    return replace(dnnl.engine.list_devices()[0], type="cpu", simd_width=8,
                   preferred_float_vector_width=8, max_work_group_size=8192,
                   max_work_item_sizes=(8192, 8192, 8192))


def test_eight_wide_cpus_take_narrow_tiles_over_few_columns():
    """8-wide CPUs: 8x8 tiles up to 8 columns, 6x16 up to 16, 6x16 unrolled by 4 beyond;
    the 16-wide rules leave them alone."""
    info = _avx2()
    want = {1: (8, 8, 1), 8: (8, 8, 1), 9: (6, 16, 1), 16: (6, 16, 1), 17: (6, 16, 4),
            2048: (6, 16, 4)}
    for n, tile in want.items():
        p = _default(info, 512, n, 512)
        assert (p["rows"], p["cols"], p["k_unroll"], p["vec"]) == (*tile, 8), n
    assert (_default(_avx512(), 512, 8, 512)["cols"]) == H._AVX512_NARROW_TILE[1]


@pytest.mark.parametrize("eng", CPUS, ids=[e.info.platform.split()[0] for e in CPUS])
@pytest.mark.parametrize("n", [3, 8, 11, 16, 37])
def test_eight_wide_tiles_compute(eng, n):
    """The 8-wide default tiles, B packed and plain, ragged rows, columns and k (k unrolled
    by 4 beyond 16 columns), against numpy."""
    import pyopencl as cl

    s = dnnl.stream(eng)
    m, k = 37, 29
    rng = np.random.default_rng(n)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    mf = cl.mem_flags
    A = cl.Buffer(eng.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=a)
    pr = G.GemmProblem(m, n, k)
    p = _default(_avx2(), m, n, k)
    for packed in (True, False):
        params = G.normalize_params(dict(p, packed_b=packed))
        kpr, bb = pr, b
        if packed:
            pk = G.pack_b(pr, params)
            kpr, bb = pk.problem, pk.pack(b)
        B = cl.Buffer(eng.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=bb)
        C = cl.Buffer(eng.context, mf.READ_WRITE, size=m * n * 4)
        kern = get_kernel(eng, "gemm", G.cache_key(kpr, params),
                          lambda kpr=kpr, params=params: G.build_gemm(kpr, params))
        vals = {"a": A, "b": B, "c": C}
        kern(s, *[vals[nm] for nm in kern.src.arg_names])
        out = np.empty((m, n), np.float32)
        cl.enqueue_copy(s.queue, out, C)
        s.queue.finish()
        np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-4)
