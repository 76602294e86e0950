"""The register-tile GEMM's moved last tile (run-time m "tall") that reads C (beta != 0) and
has no epilogue stores a vector at a time (``vstore``), like the other tiles, where n is a
multiple of the vector width: against the float64 numpy reference on every CPU runtime, for
row counts whose last tile moves up (and so must store its own rows only), columns past n
in the last column tile, packed and plain B, m_inner and m_loop, several alphas and betas."""
from __future__ import annotations

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.kernels import gemm as G
from pydnnl.kernels.source import source_from_loopy
from pydnnl.runtime.kernel_cache import get_kernel


def _cpu_engines() -> list:
    out = []
    for i in range(dnnl.engine.get_count(dnnl.engine.kind.cpu)):
        out.append(dnnl.engine(dnnl.engine.kind.cpu, i))
    return out


ENGINES = _cpu_engines()


@pytest.fixture(scope="module", params=ENGINES,
                ids=[e.info.platform.split()[0] for e in ENGINES])
def dev(request):
    eng = request.param
    return eng, dnnl.stream(eng)


# (n, alpha, beta, params): n a multiple of vec, not of cols (columns past n in the last tile)
CASES = [
    (20, 1.0, 1.0, {"rows": 3, "cols": 8, "vec": 4}),
    (20, 2.0, 0.5, {"rows": 3, "cols": 8, "vec": 4, "packed_b": False, "m_loop": 2}),
    (24, 1.0, 1.0, {"rows": 4, "cols": 16, "vec": 8, "k_unroll": 2, "m_inner": True,
                    "m_loop": 2}),
    (16, 1.0, -1.0, {"rows": 2, "cols": 8, "vec": 8}),
]


def _problem(m, n, k, alpha, beta, runtime_k=False):
    return G.GemmProblem(m, n, k, lda=k + 3, ldc=n + 5, alpha=alpha, beta=beta,
                         runtime_offsets=True, runtime_m="tall", runtime_k=runtime_k)


@pytest.mark.parametrize("n, alpha, beta, params", CASES)
def test_moved_tile_vector_stores(dev, n, alpha, beta, params):
    import pyopencl as cl

    eng, s = dev
    params = G.normalize_params(params)
    k, m_max = 7, 23
    proto = _problem(m_max, n, k, alpha, beta, runtime_k=params["k_unroll"] > 1)
    packing = G.pack_b(proto, params) if params["packed_b"] else None
    kpr = packing.problem if packing else proto
    src = source_from_loopy(G.build_gemm(kpr, params)).source
    assert f"vstore{params['vec']}(" in src and ".s1 + c[" not in src
    kern = get_kernel(eng, "gemm", G.cache_key(kpr, params), lambda: G.build_gemm(kpr, params))
    rng = np.random.default_rng(11)
    a = rng.standard_normal(2 + m_max * (k + 3)).astype(np.float32)
    b = rng.standard_normal(k * n).astype(np.float32)
    bdev = packing.pack(b) if packing else b
    mf = cl.mem_flags
    A = cl.Buffer(eng.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=a)
    B = cl.Buffer(eng.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=bdev)
    for m in sorted({params["rows"], params["rows"] + 1, 2 * params["rows"] + 1, 13, m_max}):
        ldc = n + 5
        c = rng.standard_normal(1 + m_max * ldc).astype(np.float32)
        C = cl.Buffer(eng.context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=c)
        vals = {"a": A, "b": B, "c": C, "a_off": np.int64(2), "b_off": np.int64(0),
                "c_off": np.int64(1), "m": np.int64(m), "ksize": np.int64(k)}
        kern(s, *[vals[nm] for nm in kern.src.arg_names])
        out = np.empty_like(c)
        cl.enqueue_copy(s.queue, out, C)
        s.queue.finish()
        # the independent reference: numpy in float64 over strided views
        av = a[2:2 + m * (k + 3)].reshape(m, k + 3)[:, :k].astype(np.float64)
        bv = b.reshape(k, n).astype(np.float64)
        want = c.astype(np.float64).copy()
        cv = want[1:1 + m * ldc].reshape(m, ldc)
        cv[:, :n] = alpha * (av @ bv) + beta * cv[:, :n]
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_lane_stores_remain_where_n_is_ragged_within_a_vector():
    """n not a multiple of the vector width: columns are guarded lane by lane (unchanged)."""
    params = G.normalize_params({"rows": 3, "cols": 8, "vec": 4})
    kpr = G.pack_b(_problem(9, 19, 5, 1.0, 1.0), params).problem
    src = source_from_loopy(G.build_gemm(kpr, params)).source
    assert "vstore4(" not in src
