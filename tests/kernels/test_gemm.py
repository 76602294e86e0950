"""The GEMM kernel family against numpy: ragged sizes, M/N/K of 1, transposes, alpha/beta,
beta == 0 over a C full of NaN (C must not be read), offsets and leading dimensions, batched
and strided GEMMs, packed B, both pipelines (register tiles, local-memory tiles); then the
parameter helpers, and one run under the Oclgrind simulator for invalid memory accesses."""
from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.kernels import gemm as G
from pydnnl.runtime.heuristics import gemm as H
from pydnnl.runtime.kernel_cache import get_kernel

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from oclgrind_helpers import has_oclgrind, run_probe  # noqa: E402


def _engines() -> list:
    out = []
    for kind in (dnnl.engine.kind.cpu, dnnl.engine.kind.gpu):
        for i in range(dnnl.engine.get_count(kind)):
            out.append(dnnl.engine(kind, i))
    return out


ENGINES = _engines()


@pytest.fixture(scope="module", params=ENGINES,
                ids=[f"{e.get_kind().name}-{e.info.platform.split()[0]}" for e in ENGINES])
def dev(request):
    """(engine, stream) for every device present (Intel's CPU runtime, PoCL, GPUs)."""
    eng = request.param
    return eng, dnnl.stream(eng)


def _mat(buf, off, rows, cols, ld):
    return np.lib.stride_tricks.as_strided(buf[off:], shape=(rows, cols),
                                           strides=(ld * buf.itemsize, buf.itemsize))


def reference(pr: G.GemmProblem, a, b, c):
    """The whole C buffer after the GEMM, computed in float64 (untouched elements kept)."""
    out = c.astype(np.float64)
    for t in range(pr.batch):
        A = _mat(a, pr.a_offset + t * pr.stride_a, *((pr.k, pr.m) if pr.trans_a else
                                                      (pr.m, pr.k)), pr.lda).astype(np.float64)
        B = _mat(b, pr.b_offset + t * pr.stride_b, *((pr.n, pr.k) if pr.trans_b else
                                                      (pr.k, pr.n)), pr.ldb).astype(np.float64)
        A = A.T if pr.trans_a else A
        B = B.T if pr.trans_b else B
        C = _mat(out, pr.c_offset + t * pr.stride_c, pr.m, pr.n, pr.ldc)
        C[...] = pr.alpha * (A @ B) + (pr.beta * C if pr.beta != 0 else 0.0)
    return out


def run_gemm(dev, pr: G.GemmProblem, params: dict | None = None, device_pack=False, seed=0):
    """Run ``pr`` with ``params`` (packing B when they ask for it); (result C, expected C)."""
    import pyopencl as cl

    eng, s = dev
    params = G.normalize_params(params)
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(pr.size("a")).astype(pr.dtype)
    b = rng.standard_normal(pr.size("b")).astype(pr.dtype)
    c = (rng.standard_normal(pr.size("c")).astype(pr.dtype) if pr.beta != 0
         else np.full(pr.size("c"), np.nan, pr.dtype))
    ctx, q = eng.context, s.queue
    mf = cl.mem_flags
    A = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=a)
    C = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=c)
    kpr = pr
    if params["packed_b"]:
        pk = G.pack_b(pr, params)
        kpr = pk.problem
        if device_pack:
            Bsrc = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=b)
            B = cl.Buffer(ctx, mf.READ_WRITE, size=max(1, pk.size) * b.itemsize)
            packer = get_kernel(eng, "gemm_pack_b", (G.GENERATOR_VERSION, pr, params["cols"]),
                                pk.build)
            packer(s, Bsrc, B)
            packed = np.empty(pk.size, pr.dtype)
            cl.enqueue_copy(q, packed, B)
            q.finish()
            np.testing.assert_array_equal(packed, pk.pack(b))
        else:
            B = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=pk.pack(b))
    else:
        B = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=b)
    k = get_kernel(eng, "gemm", G.cache_key(kpr, params), lambda: G.build_gemm(kpr, params))
    k(s, A, B, C)
    out = np.empty_like(c)
    cl.enqueue_copy(q, out, C)
    q.finish()
    return out, reference(pr, a, b, c)


def check(dev, pr, params=None, **kw):
    out, ref = run_gemm(dev, pr, params, **kw)
    tol = 2e-6 * max(1, pr.k) ** 0.5 * 8
    np.testing.assert_allclose(out, ref, rtol=tol, atol=tol)  # NaN where ref has NaN only


# small tiles so that every tile size is exceeded and none divides the sizes
SMALL = {"rows": 3, "cols": 8, "vec": 4}

CASES = {
    # name: (problem, params)
    "ragged_packed": (G.GemmProblem(13, 37, 11), {}),
    "ragged_plain_alpha_beta": (G.GemmProblem(13, 37, 11, alpha=2.0, beta=0.5),
                                {"packed_b": False}),
    "m1": (G.GemmProblem(1, 29, 7), {}),
    "n1_plain": (G.GemmProblem(9, 1, 5, beta=1.0), dict(SMALL, packed_b=False)),
    "k1": (G.GemmProblem(6, 10, 1, alpha=-1.0), dict(SMALL)),
    "mnk1": (G.GemmProblem(1, 1, 1, beta=0.5), dict(SMALL, packed_b=False)),
    "trans_plain": (G.GemmProblem(7, 19, 9, trans_a=True, trans_b=True, lda=11, ldb=12,
                                  alpha=0.5, beta=-1.0), dict(SMALL, packed_b=False)),
    "trans_b_packed": (G.GemmProblem(7, 19, 9, trans_b=True, ldb=10), dict(SMALL)),
    "offsets_ld_kunroll": (G.GemmProblem(9, 19, 7, lda=20, ldb=30, ldc=25, a_offset=3,
                                         b_offset=5, c_offset=7, beta=0.25),
                           dict(SMALL, packed_b=False, k_unroll=4)),
    "batched_strided": (G.GemmProblem(5, 11, 6, batch=3, lda=8, ldc=13, stride_a=50,
                                      stride_b=70, stride_c=80, a_offset=1, c_offset=2,
                                      beta=1.0),
                        dict(SMALL, packed_b=False, wg=(2, 2), m_loop=2)),
    "batched_shared_b_packed": (G.GemmProblem(5, 11, 6, batch=3, stride_b=0),
                                dict(SMALL, m_inner=True, k_unroll=2)),
    "scalar_vec1": (G.GemmProblem(6, 9, 5, trans_b=True), {"rows": 2, "cols": 3, "vec": 1,
                                                           "packed_b": False}),
    "f64_accumulate": (G.GemmProblem(7, 13, 9, beta=0.5, acc_dtype=np.float64), dict(SMALL)),
    "f64": (G.GemmProblem(7, 13, 9, alpha=1.5, dtype=np.float64), dict(SMALL, packed_b=False)),
    "local_tiles": (G.GemmProblem(11, 13, 9, alpha=0.5, beta=0.25),
                    {"local_prefetch": True, "packed_b": False, "vec": 1, "rows": 2, "cols": 2,
                     "wg": (4, 2), "k_tile": 4}),
    "local_tiles_trans_batched": (G.GemmProblem(9, 10, 7, batch=2, trans_a=True, trans_b=True,
                                                lda=12, c_offset=3),
                                  {"local_prefetch": True, "packed_b": False, "vec": 1,
                                   "rows": 2, "cols": 3, "wg": (2, 2), "k_tile": 4}),
    # C stored a vector at a time (n a multiple of vec): the last panel's vectors past n
    # guarded whole, alpha and beta in the vector store, ragged rows, offsets
    "vector_store_alpha_beta": (G.GemmProblem(13, 40, 11, alpha=2.0, beta=0.5, ldc=43,
                                              c_offset=3), {}),
    "vector_store_batched_beta1": (G.GemmProblem(5, 16, 6, batch=3, ldc=19, stride_c=100,
                                                 beta=1.0), dict(SMALL, packed_b=False)),
    # k == 1 (a weight gradient over one image): the local fetch loops lose their k axis
    "local_tiles_k1_trans_a": (G.GemmProblem(6, 9, 1, trans_a=True, lda=8, beta=1.0),
                               {"local_prefetch": True, "packed_b": False, "vec": 1,
                                "rows": 2, "cols": 2, "wg": (4, 2), "k_tile": 4}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_gemm_matches_numpy(dev, name):
    pr, params = CASES[name]
    if np.float64 in (pr.dtype, pr.acc_dtype) and not dev[0].info.fp64:
        pytest.skip("the device has no float64")
    check(dev, pr, params)


def test_default_params_and_device_packing(dev):
    """The device's default parameters on a ragged problem, B packed by the device packer."""
    eng, _ = dev
    pr = G.GemmProblem(10, 27, 13, trans_b=True, beta=0.5)
    params = H.default_params(eng.info)
    if params["packed_b"]:
        check(dev, pr, params, device_pack=True)
    else:
        check(dev, pr, params)


# {{{ no device needed

def test_problem_defaults_and_sizes():
    pr = G.GemmProblem(3, 5, 7, trans_a=True)
    assert (pr.lda, pr.ldb, pr.ldc) == (3, 5, 5)
    assert pr.size("a") == 7 * 3 and pr.size("b") == 7 * 5 and pr.size("c") == 3 * 5
    bt = G.GemmProblem(3, 5, 7, batch=4, a_offset=2, stride_b=0)
    assert bt.stride_a == 21 and bt.size("a") == 2 + 3 * 21 + 21 and bt.size("b") == 35
    pk = G.GemmProblem(3, 5, 7, b_layout="panel8")
    assert pk.panel_width == 8 and pk.size("b") == 8 * 7
    assert G.flops(bt) == 2 * 3 * 5 * 7 * 4


@pytest.mark.parametrize("kw, word", [
    (dict(m=0, n=1, k=1), "m"), (dict(m=1, n=1, k=1, lda=0, trans_a=False), "lda"),
    (dict(m=2, n=3, k=4, ldc=2), "ldc"), (dict(m=1, n=1, k=1, dtype=np.int32), "dtype"),
    (dict(m=1, n=1, k=1, b_layout="blocked"), "b_layout"),
    (dict(m=2, n=2, k=2, batch=2, stride_c=1), "stride_c"),
    (dict(m=1, n=1, k=1, a_offset=-1), "a_offset"),
])
def test_problem_rejects(kw, word):
    with pytest.raises(ValueError, match=word):
        G.GemmProblem(**kw)


@pytest.mark.parametrize("params, word", [
    ({"rows": 0}, "rows"), ({"cols": 12, "vec": 8}, "cols"), ({"vec": 3}, "vec"),
    ({"wg": (0, 1)}, "wg"), ({"bogus": 1}, "bogus"),
    ({"local_prefetch": True, "vec": 8}, "vec"),
])
def test_params_rejects(params, word):
    with pytest.raises(ValueError, match=word):
        G.normalize_params(params)


def test_build_checks_b_layout():
    pr = G.GemmProblem(4, 5, 6)
    with pytest.raises(ValueError, match="pack"):
        G.build_gemm(pr, {"packed_b": True})
    packed = G.pack_b(pr, {"cols": 16, "vec": 8}).problem
    assert packed.b_layout == "panel16" and packed.b_offset == 0
    with pytest.raises(ValueError, match="cols"):
        G.build_gemm(packed, {"cols": 24, "packed_b": True})
    with pytest.raises(ValueError, match="packed_b"):
        G.build_gemm(packed, {"cols": 16, "packed_b": False})


def test_numpy_packer_layout():
    pr = G.GemmProblem(2, 5, 3, trans_b=True, ldb=4, b_offset=1)
    pk = G.pack_b(pr, {"cols": 4, "vec": 4})
    flat = np.arange(pr.size("b"), dtype=np.float32)
    logical = _mat(flat, 1, 5, 3, 4).T  # op(B): (k, n)
    packed = pk.pack(flat).reshape(2, 3, 4)  # (panel, k, column in panel)
    np.testing.assert_array_equal(packed[0], logical[:, :4])
    np.testing.assert_array_equal(packed[1, :, 0], logical[:, 4])
    assert not packed[1, :, 1:].any()  # zero padding past n
    np.testing.assert_array_equal(pk.pack(logical), pk.pack(flat))


def _FakeDevice(type_, family="other", max_wg=1024, local=32768, vec=1):
    """The traits of a made-up device."""
    return dnnl.DeviceInfo(
        name="fake", vendor=family, platform="fake", driver_version="", device_version="",
        type=type_, compute_units=8, global_mem_bytes=1 << 30, local_mem_bytes=local,
        max_work_group_size=max_wg, max_clock_mhz=1000, fp16=False, fp64=False,
        preferred_float_vector_width=vec, vendor_family=family,
        max_work_item_sizes=(max_wg,) * 3)


def test_default_params_by_device_type():
    cpu = H.default_params(_FakeDevice("cpu"))
    assert not cpu["local_prefetch"] and cpu["vec"] == 8 and cpu["packed_b"]
    gpu = H.default_params(_FakeDevice("gpu", "nvidia"))
    assert gpu["local_prefetch"] and gpu["vec"] == 1 and not gpu["packed_b"]
    small = H.default_params(_FakeDevice("gpu", max_wg=64))
    assert small["wg"][0] * small["wg"][1] <= 64


def test_search_space_is_pruned():
    pr = G.GemmProblem(1, 7, 300)
    space = H.search_space(pr, _FakeDevice("cpu"))
    assert space and all(p["rows"] == 1 and p["cols"] == 8 for p in space)
    big = H.search_space(G.GemmProblem(64, 2048, 512), _FakeDevice("cpu"))
    assert big[0] == G.normalize_params(H.default_params(_FakeDevice("cpu")))
    assert len({tuple(sorted(p.items())) for p in big}) == len(big)
    for p in big:  # accumulators + a row of B + a broadcast fit AVX2's 16 registers
        assert p["rows"] * p["cols"] // p["vec"] + p["cols"] // p["vec"] + 1 <= 16
    gpu = H.search_space(G.GemmProblem(64, 64, 64), _FakeDevice("gpu", max_wg=128, local=4096))
    assert gpu and all(p["wg"][0] * p["wg"][1] <= 128 for p in gpu)
    assert all(G.local_mem_bytes(G.GemmProblem(64, 64, 64), p) <= 4096 for p in gpu)
    packed = G.GemmProblem(8, 40, 8, b_layout="panel16")
    assert all(p["cols"] == 16 and p["packed_b"] for p in H.search_space(packed, None))


@pytest.mark.parametrize("variant, beta, params", [
    ("tall", 0.0, {"rows": 3, "cols": 8, "vec": 4}),
    ("tall", 0.5, {"rows": 3, "cols": 8, "vec": 4, "packed_b": False, "m_loop": 2}),
    ("any", 1.0, {"rows": 4, "cols": 8, "vec": 8, "k_unroll": 2}),
])
def test_runtime_m_kernel_serves_every_m(dev, variant, beta, params):
    """One program with ``m`` as an argument computes every m of its class (``tall``:
    m >= rows, the last tile moved up) like the float64 reference, rows past m untouched."""
    import pyopencl as cl

    from pydnnl.kernels.source import launch_size

    eng, s = dev
    params = G.normalize_params(params)
    n, k, lda, ldc = 19, 9, 11, 21
    m_max = 14
    proto = G.GemmProblem(m_max, n, k, lda=lda, ldc=ldc, beta=beta, runtime_offsets=True,
                          runtime_m=variant)
    kpr = G.pack_b(proto, params).problem if params["packed_b"] else proto
    built = []
    kern = get_kernel(eng, "gemm", G.cache_key(kpr, params),
                      lambda: built.append(1) or G.build_gemm(kpr, params))
    assert kern.src.grid is not None and "m" in kern.src.arg_names
    rng = np.random.default_rng(3)
    a = rng.standard_normal(2 + m_max * lda).astype(np.float32)
    b = rng.standard_normal(k * n).astype(np.float32)
    bdev = G.pack_b(proto, params).pack(b) if params["packed_b"] else b
    mf = cl.mem_flags
    A = cl.Buffer(eng.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=a)
    B = cl.Buffer(eng.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=bdev)
    for m in ([3, 4, 7, 12, 14] if variant == "tall" else [1, 2, 3, 5, 14]):
        c = rng.standard_normal(1 + m_max * ldc).astype(np.float32)
        C = cl.Buffer(eng.context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=c)
        vals = {"a": A, "b": B, "c": C, "a_off": np.int64(2), "b_off": np.int64(0),
                "c_off": np.int64(1), "m": np.int64(m)}
        kern(s, *[vals[nm] for nm in kern.src.arg_names])
        out = np.empty_like(c)
        cl.enqueue_copy(s.queue, out, C)
        s.queue.finish()
        pr = G.GemmProblem(m, n, k, lda=lda, ldc=ldc, beta=beta, a_offset=2, c_offset=1)
        np.testing.assert_allclose(out, reference(pr, a, b, c), rtol=1e-5, atol=1e-5)
        assert launch_size(kern.src, vals)[1] == -(-m // params["rows"]) if \
            params["m_loop"] == 1 else True
    assert len(built) <= 1  # one program (none when the disk cache had it)


@pytest.mark.parametrize("trans_a, dense_a, params", [
    (True, False, {"rows": 3, "cols": 8, "vec": 4, "packed_b": False, "k_unroll": 4}),
    (False, False, {"rows": 2, "cols": 8, "vec": 8, "k_unroll": 2}),
    (False, True, {"rows": 2, "cols": 8, "vec": 8, "packed_b": False}),
])
def test_runtime_k_kernel_serves_every_k(dev, trans_a, dense_a, params):
    """One program with the reduction length ``ksize`` as an argument (weight gradients:
    k = T * N) computes every k like the float64 reference, accumulating into C; a dense A
    (``lda == k``) follows k."""
    import pyopencl as cl

    eng, s = dev
    params = G.normalize_params(params)
    m, n, k_max = 7, 13, 23
    lda = m + 1 if trans_a else k_max + (0 if dense_a else 2)
    proto = G.GemmProblem(m, n, k_max, trans_a=trans_a, lda=lda, ldb=n + 2, beta=1.0,
                          runtime_offsets=True, runtime_k=True)
    pk = G.pack_b(proto, params) if params["packed_b"] else None
    kpr = pk.problem if pk else proto
    built = []
    kern = get_kernel(eng, "gemm", G.cache_key(kpr, params),
                      lambda: built.append(1) or G.build_gemm(kpr, params))
    assert "ksize" in kern.src.arg_names
    rng = np.random.default_rng(5)
    mf = cl.mem_flags
    for k in (1, 2, 5, 9, 23):
        pr = G.GemmProblem(m, n, k, trans_a=trans_a, lda=k if dense_a else lda, ldb=n + 2,
                           beta=1.0)
        a = rng.standard_normal(pr.size("a")).astype(np.float32)
        b = rng.standard_normal(pr.size("b")).astype(np.float32)
        c = rng.standard_normal(pr.size("c")).astype(np.float32)
        bdev = G.pack_b(pr, params).pack(b) if pk else b
        A = cl.Buffer(eng.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=a)
        B = cl.Buffer(eng.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=bdev)
        C = cl.Buffer(eng.context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=c)
        vals = {"a": A, "b": B, "c": C, "a_off": np.int64(0), "b_off": np.int64(0),
                "c_off": np.int64(0), "ksize": np.int64(k)}
        kern(s, *[vals[nm] for nm in kern.src.arg_names])
        out = np.empty_like(c)
        cl.enqueue_copy(s.queue, out, C)
        s.queue.finish()
        np.testing.assert_allclose(out, reference(pr, a, b, c), rtol=1e-5, atol=1e-5)
    assert len(built) <= 1


def test_runtime_k_packing(dev):
    """The packing kernel of a run-time k packs B of any k like the host packer."""
    import pyopencl as cl

    eng, s = dev
    params = G.normalize_params({"rows": 2, "cols": 8, "vec": 8})
    proto = G.GemmProblem(1, 13, 1, ldb=15, runtime_offsets=True, runtime_k=True)
    pk = G.pack_b(proto, params)
    kern = get_kernel(eng, "gemm_pack", (G.GENERATOR_VERSION, proto, 8, "test"), pk.build)
    mf = cl.mem_flags
    rng = np.random.default_rng(2)
    for k in (1, 4, 11):
        pr = G.GemmProblem(1, 13, k, ldb=15)
        b = rng.standard_normal(3 + pr.size("b")).astype(np.float32)
        want = G.pack_b(pr, params).pack(b[3:])
        B = cl.Buffer(eng.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=b)
        BP = cl.Buffer(eng.context, mf.READ_WRITE, size=(want.size + 2) * 4)
        vals = {"b": B, "bp": BP, "b_off": np.int64(3), "bp_off": np.int64(2),
                "ksize": np.int64(k)}
        kern(s, *[vals[nm] for nm in kern.src.arg_names])
        out = np.empty(want.size + 2, np.float32)
        cl.enqueue_copy(s.queue, out, BP)
        s.queue.finish()
        np.testing.assert_array_equal(out[2:], want)


LOCAL = {"local_prefetch": True, "packed_b": False, "vec": 1, "rows": 2, "cols": 3,
         "wg": (4, 2), "k_tile": 4}


@pytest.mark.parametrize("trans_a, trans_b, whole", [
    (False, False, False), (False, True, False), (True, False, False), (False, False, True),
    (True, False, True)])
def test_local_tiles_runtime_m_and_k_one_program(dev, trans_a, trans_b, whole):
    """The local-tile pipeline (GPUs) with ``m`` and ``ksize`` as arguments: one program
    computes every m (below one 4-row work-group tile, a multiple of it, ragged) and every k
    (below one 4-deep k tile, ragged, several tiles; ``whole``: the class of k that are
    whole k tiles, without the zero fill) like the float64 reference, C's other elements
    untouched; a transposed A keeps m baked (weight gradients: k = T*N)."""
    import pyopencl as cl

    from pydnnl.kernels.source import launch_size

    eng, s = dev
    params = G.normalize_params(LOCAL)
    n, lda, ldc = 13, 12, 14
    ldb = 12 if trans_b else 15
    proto = G.GemmProblem(9, n, 8 if whole else 10, trans_a=trans_a, trans_b=trans_b,
                          lda=lda, ldb=ldb, ldc=ldc, beta=0.5, runtime_offsets=True,
                          runtime_m=None if trans_a else "any", runtime_k=True)
    built = []
    kern = get_kernel(eng, "gemm", G.cache_key(proto, params),
                      lambda: built.append(1) or G.build_gemm(proto, params))
    assert "ksize" in kern.src.arg_names
    assert ("m" in kern.src.arg_names) == (not trans_a)
    rng = np.random.default_rng(4)
    mf = cl.mem_flags
    sizes = [(9, 1), (9, 7), (9, 12)] if trans_a else [(1, 3), (3, 7), (4, 4), (9, 12),
                                                          (17, 1)]
    if whole:
        sizes = [(m, -(-k // 4) * 4) for m, k in sizes]
    for m, k in sizes:
        pr = G.GemmProblem(m, n, k, trans_a=trans_a, trans_b=trans_b, lda=lda, ldb=ldb,
                           ldc=ldc, beta=0.5, a_offset=1, b_offset=2, c_offset=3)
        a = rng.standard_normal(pr.size("a")).astype(np.float32)
        b = rng.standard_normal(pr.size("b")).astype(np.float32)
        c = rng.standard_normal(pr.size("c") + 5).astype(np.float32)
        A, B, C = (cl.Buffer(eng.context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=x)
                   for x in (a, b, c))
        vals = {"a": A, "b": B, "c": C, "a_off": np.int64(1), "b_off": np.int64(2),
                "c_off": np.int64(3), "m": np.int64(m), "ksize": np.int64(k)}
        kern(s, *[vals[nm] for nm in kern.src.arg_names])
        out = np.empty_like(c)
        cl.enqueue_copy(s.queue, out, C)
        s.queue.finish()
        np.testing.assert_allclose(out, reference(pr, a, b, c), rtol=1e-5, atol=1e-5)
        if not trans_a:
            assert launch_size(kern.src, vals)[1] == -(-m // 4) * 2  # 4-row groups of 2
    assert len(built) <= 1  # one program (none when the disk cache had it)


def test_local_tiles_runtime_rules_and_keys():
    """The launcher's rules give local tiles a run-time m ("any") and k (at least one k
    tile), keyed without the sample sizes; register tiles keep their own rules."""
    from pydnnl.runtime.gemm import GemmShape, runtime_k, runtime_m

    gpu = G.normalize_params(dict(G.DEFAULT_GPU_PARAMS))
    cpu = G.normalize_params(None)
    sh = GemmShape(m=64, n=512, k=512, lda=512, ldb=512, ldc=512)
    assert runtime_m(sh, gpu) == "any" and runtime_k(sh, gpu)
    assert runtime_m(sh, cpu) == "tall" and runtime_k(sh, cpu)
    assert runtime_m(sh, None) == "any" and runtime_k(sh, None)  # the NVIDIA kernel
    assert not runtime_k(GemmShape(m=64, n=512, k=8, lda=8, ldb=512, ldc=512), gpu)
    assert runtime_m(GemmShape(m=64, n=512, k=512, lda=64, ldb=512, ldc=512, trans_a=True),
                     gpu) is None
    big = GemmShape(m=2 ** 20, n=4096, k=512, lda=512, ldb=4096, ldc=4096)  # past int32
    assert runtime_m(big, gpu) is None and not runtime_k(big, gpu)
    def key(m, k):
        return G.cache_key(G.GemmProblem(m, 13, k, runtime_offsets=True, runtime_m="any",
                                         runtime_k=True), LOCAL)

    # two classes of k (4-deep k tiles): whole tiles (no zero fill) and the others
    assert key(3, 5) == key(90, 701) != key(90, 700) == key(3, 8)
    with pytest.raises(ValueError, match="tall"):
        G.build_gemm(G.GemmProblem(9, 13, 10, runtime_offsets=True, runtime_m="tall"), LOCAL)


def _dense_layout(dims):
    """A reorder-style layout of a dense row-major tensor of ``dims`` (broadcast dims 1)."""
    per, stride = [], 1
    for d in reversed(dims):
        per.append((1, stride if d > 1 else 0, ()))
        stride *= d
    return (0, tuple(reversed(per)))


def _batched_rt_problem(m, n, k, batch, beta, epi, rm, rk, panel=None, trans_a=False):
    """A batch of ``batch`` dense GEMMs (strides following m and k, as Winograd's) with
    run-time m (``rm``) and k (``rk``); ``epi``: bias over the destination's columns, then
    relu and (``"sum"``) a sum post-op."""
    from pydnnl.constants import algorithm as A

    kw = {}
    if epi:
        bdims = (1, 1, n)
        ops = (("eltwise", int(A.eltwise_relu), 0.0, 0.0),)
        if epi == "sum":
            ops = (("sum", 0.5, 0),) + ops
        kw = dict(bias=(_dense_layout(bdims), bdims, n), post_ops=ops, epi_batch=(batch,))
    lda = m if trans_a else k
    return G.GemmProblem(m, n, k, trans_a=trans_a, lda=lda, ldb=n, ldc=n + 1, beta=beta,
                         batch=batch, stride_a=m * k + 3, stride_b=k * n,
                         stride_c=m * (n + 1) + 2, runtime_offsets=True, runtime_m=rm,
                         runtime_k=rk, a_offset=0, **kw)


@pytest.mark.parametrize("rm, rk, beta, epi, params", [
    ("tall", True, 0.0, "bias", {"rows": 3, "cols": 8, "vec": 4, "packed_b": False}),
    ("tall", False, 0.0, "sum", {"rows": 3, "cols": 8, "vec": 4, "packed_b": False,
                                  "m_loop": 2}),
    ("any", True, 0.5, None, {"rows": 4, "cols": 8, "vec": 8, "packed_b": False,
                               "k_unroll": 2}),
    (None, True, 1.0, "bias", {"rows": 3, "cols": 8, "vec": 4, "packed_b": False,
                                "trans_a": True}),
    ("any", True, 0.0, "sum", {"local_prefetch": True, "packed_b": False, "vec": 1,
                                "rows": 2, "cols": 2, "wg": (2, 2), "k_tile": 4}),
])
def test_runtime_sizes_batched_epilogue_one_program(dev, rm, rk, beta, epi, params):
    """One program with m, k and the batch strides as arguments serves a batch of GEMMs
    (Winograd's tile products) of every m and k, with a fused bias, relu and sum, like the
    float64 reference; rows past m and C's padding untouched."""
    import pyopencl as cl

    from pydnnl.kernels import post_ops as po
    from pydnnl.kernels.source import launch_size

    eng, s = dev
    params = dict(params)
    trans_a = params.pop("trans_a", False)
    params = G.normalize_params(params)
    n, batch = 13, 3
    sizes = [(5, 7), (11, 9), (3, 4), (14, 12)] if rm != "any" else [(1, 7), (2, 5), (9, 11)]
    # a baked size stays that of the first case
    sizes = [(m if rm else sizes[0][0], k if rk else sizes[0][1]) for m, k in sizes]
    keys, built = set(), []
    rng = np.random.default_rng(5)
    for m, k in sizes:
        pr = _batched_rt_problem(m, n, k, batch, beta, epi, rm, rk, trans_a=trans_a)
        assert pr.runtime_strides
        keys.add(G.cache_key(pr, params))
        kern = get_kernel(eng, "gemm", G.cache_key(pr, params),
                          lambda pr=pr: built.append(1) or G.build_gemm(pr, params))
        for w in "abc":
            assert f"stride_{w}" in kern.src.arg_names
        a = rng.standard_normal(pr.size("a") + 5).astype(np.float32)
        b = rng.standard_normal(pr.size("b") + 2).astype(np.float32)
        c = rng.standard_normal(pr.size("c") + 3).astype(np.float32)
        bias = rng.standard_normal(n).astype(np.float32)
        mf = cl.mem_flags
        bufs = {nm: cl.Buffer(eng.context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=x)
                for nm, x in (("a", a), ("b", b), ("c", c), ("bias", bias))}
        vals = dict(bufs, a_off=np.int64(5), b_off=np.int64(2), c_off=np.int64(3),
                    m=np.int64(m), ksize=np.int64(k), stride_a=np.int64(pr.stride_a),
                    stride_b=np.int64(pr.stride_b), stride_c=np.int64(pr.stride_c),
                    nbatch=np.int64(batch))
        kern(s, *[vals[nm] for nm in kern.src.arg_names])
        out = np.empty_like(c)
        cl.enqueue_copy(s.queue, out, bufs["c"])
        s.queue.finish()
        plain = G.GemmProblem(m, n, k, trans_a=trans_a, lda=pr.lda, ldb=n, ldc=n + 1,
                              batch=batch, stride_a=pr.stride_a, stride_b=pr.stride_b,
                              stride_c=pr.stride_c, a_offset=5, b_offset=2, c_offset=3)
        want = reference(replace_beta(plain, 0.0), a, b, c)
        prior = c.astype(np.float64)
        for t in range(batch):
            C = _mat(want, 3 + t * pr.stride_c, m, n, n + 1)
            P = _mat(prior, 3 + t * pr.stride_c, m, n, n + 1)
            v = C + beta * P
            if epi:
                v = v + bias
                if po.reads_prior(pr.post_ops):
                    v = v + 0.5 * P
                v = np.maximum(v, 0)
            C[...] = v
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
        assert len(launch_size(kern.src, vals)) >= 2
    # one key (the local tiles: whole k tiles or not) and one program per key at most
    assert len(keys) <= (2 if params["local_prefetch"] else 1)
    assert len(built) <= len(keys)  # one program (none when the disk cache had it)


def replace_beta(pr, beta):
    from dataclasses import replace

    return replace(pr, beta=beta)


def test_runtime_rules_batch_and_epilogue():
    """The launcher gives batches and epilogues (bias along C's columns, eltwise, sum) the
    run-time sizes; binary post-ops and biases along m keep m baked; keys name neither the
    sample m, k nor the strides."""
    from pydnnl.constants import algorithm as A
    from pydnnl.runtime.gemm import GemmShape, _problem, runtime_k, runtime_m

    cpu = G.normalize_params({"rows": 7, "cols": 64, "vec": 16})
    sh = GemmShape(m=784, n=64, k=64, lda=64, ldb=64, ldc=64)
    st = dict(stride_a=784 * 64, stride_b=4096, stride_c=784 * 64)
    assert runtime_m(sh, cpu, 16, st) == "tall" and runtime_k(sh, cpu, 16, st)
    assert runtime_m(sh, None, 16, st) is None and not runtime_k(sh, None, 16, st)
    relu = (("sum", 1.0, 0), ("eltwise", int(A.eltwise_relu), 0.0, 0.0))
    bias = (_dense_layout((1, 64)), (1, 64), 64)
    epi = GemmShape(m=196, n=64, k=256, lda=256, ldb=64, ldc=64, bias=bias, post_ops=relu)
    assert runtime_m(epi, cpu) == "tall" and runtime_k(epi, cpu)
    assert runtime_m(epi, None) == "any"  # the NVIDIA kernel too: nothing here follows m
    per_row = GemmShape(m=196, n=64, k=256, lda=256, ldb=64, ldc=64,
                        bias=(_dense_layout((196, 1)), (196, 1), 196))
    assert runtime_m(per_row, cpu) is None and runtime_m(per_row, None) is None
    binary = GemmShape(m=196, n=64, k=256, lda=256, ldb=64, ldc=64, post_ops=(
        ("binary", int(A.binary_add), _dense_layout((196, 64)), (196, 64), 196 * 64),))
    assert runtime_m(binary, cpu) is None

    def key(m, k):
        shp = GemmShape(m=m, n=64, k=k, lda=k, ldb=64, ldc=64)
        bk = dict(batch=16, stride_a=m * k, stride_b=k * 64, stride_c=m * 64)
        return G.cache_key(_problem(shp, None, runtime_m(shp, cpu, 16, bk),
                                    runtime_k(shp, cpu, 16, bk), **bk), cpu)

    assert key(49, 64) == key(784, 128) == key(729, 64)


def test_launcher_shares_programs_across_m_and_k(dev):
    """Plan-level GEMMs of a new m or k (a conv's spatial size) reuse compiled programs: a
    Winograd-like batch through ``gemm_kernel`` and the packer of one B (k at run time)."""
    from pydnnl.runtime.gemm import GemmShape, choose_params, gemm_kernel, get_gemm

    eng, _ = dev
    kerns = set()
    for T in (17, 40):  # (both at least one tile of rows: one "tall" class)
        sh = GemmShape(m=T, n=16, k=8, lda=8, ldb=16, ldc=16)
        params = choose_params(eng, sh, static_b=False)
        kerns.add(id(gemm_kernel(eng, sh, params, batch=4, stride_a=T * 8, stride_b=128,
                                 stride_c=T * 16)))
    assert len(kerns) == 1 or eng.info.is_gpu  # (GPU rules may pick per-size tiles)
    pk = set()
    for k in (9, 13):
        g = get_gemm(eng, GemmShape(m=5, n=16, k=k, lda=k, ldb=16, ldc=16), static_b=True)
        if g.packed:
            kern = g.packer(1, 0)
            assert "ksize" in kern.src.arg_names
            pk.add(id(kern))
    assert len(pk) <= 1


def test_runtime_m_problem_rules():
    with pytest.raises(ValueError, match="runtime_offsets"):
        G.build_gemm(G.GemmProblem(4, 5, 6, runtime_m="tall"), {"packed_b": False})  # loopy
    with pytest.raises(ValueError, match="runtime_m"):
        G.GemmProblem(4, 5, 6, runtime_m="yes", runtime_offsets=True)
    with pytest.raises(ValueError, match="runtime_m"):
        G.GemmProblem(4, 5, 6, trans_a=True, runtime_m="any", runtime_offsets=True)
    a = G.GemmProblem(4, 5, 6, runtime_m="any", runtime_offsets=True)
    b = G.GemmProblem(40, 5, 6, runtime_m="any", runtime_offsets=True)
    assert G.cache_key(a, None) == G.cache_key(b, None)
    assert G.cache_key(G.GemmProblem(4, 5, 6), None) != G.cache_key(G.GemmProblem(40, 5, 6),
                                                                    None)
    assert "runtime_m" not in repr(G.GemmProblem(4, 5, 6))


def test_kernel_signature_and_fixed_sizes():
    import loopy as lp

    pr = G.GemmProblem(13, 37, 11, batch=2, beta=1.0)
    for params in ({"packed_b": False}, dict(G.DEFAULT_GPU_PARAMS)):
        tu = G.build_gemm(pr, params)
        knl = tu.default_entrypoint
        assert [a.name for a in knl.args] == ["a", "b", "c"]
        assert all(len(a.shape) == 1 for a in knl.args)
        gsize, lsize = knl.get_grid_size_upper_bounds_as_exprs(tu.callables_table)
        assert all(isinstance(int(x), int) for x in gsize + lsize)
        code = lp.generate_code_v2(tu).device_code()
        assert "__kernel" in code

# }}}


# {{{ Oclgrind

PROBE = r"""
import json, warnings
warnings.simplefilter("ignore")
import numpy as np
import pyopencl as cl
import pydnnl as dnnl
from pydnnl.kernels import gemm as G
from pydnnl.kernels.gemm_nv import NvTile, build_gemm_nv
from pydnnl.kernels.source import source_from_loopy
eng = dnnl.engine.from_name("Oclgrind")
ctx = eng.context
q = cl.CommandQueue(ctx, eng.device)
mf = cl.mem_flags
rng = np.random.default_rng(1)
results = {}
cases = {
    "plain": (G.GemmProblem(5, 11, 4, beta=0.5, lda=6, c_offset=1),
              {"rows": 2, "cols": 8, "vec": 4, "packed_b": False, "k_unroll": 2}),
    "packed_trans": (G.GemmProblem(5, 11, 4, trans_a=True, trans_b=True, batch=2),
                     {"rows": 2, "cols": 8, "vec": 8, "wg": (2, 1)}),
    "local": (G.GemmProblem(5, 7, 5, beta=1.0),
              {"local_prefetch": True, "packed_b": False, "vec": 1, "rows": 2, "cols": 2,
               "wg": (2, 2), "k_tile": 2}),
    "local_k1": (G.GemmProblem(5, 7, 1, trans_a=True, lda=6, beta=1.0),
                 {"local_prefetch": True, "packed_b": False, "vec": 1, "rows": 2, "cols": 2,
                  "wg": (2, 2), "k_tile": 2}),
}
from pydnnl.kernels.source import launch_size
cases |= {  # rows as an argument
    "tall_beta0": (G.GemmProblem(7, 11, 4, runtime_offsets=True, runtime_m="tall"),
                   {"rows": 3, "cols": 8, "vec": 4}),
    "tall_beta1": (G.GemmProblem(7, 11, 4, beta=1.0, runtime_offsets=True, runtime_m="tall"),
                   {"rows": 3, "cols": 8, "vec": 4, "packed_b": False}),
    "any": (G.GemmProblem(2, 11, 4, beta=0.5, runtime_offsets=True, runtime_m="any"),
            {"rows": 3, "cols": 8, "vec": 4}),
    # local tiles, rows and k as arguments: m below one tile, k ragged
    "local_rt": (G.GemmProblem(3, 7, 5, beta=1.0, runtime_offsets=True, runtime_m="any",
                               runtime_k=True),
                 {"local_prefetch": True, "packed_b": False, "vec": 1, "rows": 2, "cols": 2,
                  "wg": (2, 2), "k_tile": 2}),
    # a batch with m, k and the batch strides as arguments (Winograd's products)
    "tall_batched_rt": (G.GemmProblem(7, 11, 5, beta=1.0, batch=2, stride_a=40, stride_b=60,
                                      stride_c=80, runtime_offsets=True, runtime_m="tall",
                                      runtime_k=True),
                        {"rows": 3, "cols": 8, "vec": 4, "packed_b": False}),
    # the hand-written NVIDIA kernel (plain OpenCL C without mma), m and k as arguments
    "nv_rt": (G.GemmProblem(5, 8, 32, beta=0.5, runtime_offsets=True, runtime_m="any",
                            runtime_k=True), NvTile(32, 16, 16, 4, 4)),
}
for name, (pr, params) in cases.items():
    nv = isinstance(params, NvTile)
    params = params if nv else G.normalize_params(params)
    a = rng.standard_normal(pr.size("a")).astype(np.float32)
    b = rng.standard_normal(pr.size("b")).astype(np.float32)
    c = rng.standard_normal(pr.size("c")).astype(np.float32)
    kpr, bdev = pr, b
    if not nv and params["packed_b"]:
        pk = G.pack_b(pr, params)
        kpr, bdev = pk.problem, pk.pack(b)
    src = build_gemm_nv(kpr, params) if nv else source_from_loopy(G.build_gemm(kpr, params))
    # (unoptimized: LLVM's loop unswitching emits ``freeze``, which Oclgrind's check of
    # uninitialized values does not take)
    knl = getattr(cl.Program(ctx, src.source).build(["-cl-opt-disable"] if nv else []),
                  src.name)
    A = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=a)
    B = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=bdev)
    C = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=c)
    vals = {"a": A, "b": B, "c": C, "a_off": np.int64(0), "b_off": np.int64(0),
            "c_off": np.int64(0), "m": np.int64(pr.m), "ksize": np.int64(pr.k),
            "stride_a": np.int64(pr.stride_a), "stride_b": np.int64(pr.stride_b),
            "stride_c": np.int64(pr.stride_c), "nbatch": np.int64(pr.batch)}
    knl(q, launch_size(src, vals), src.local_size, *[vals[n] for n in src.arg_names])
    out = np.empty_like(c)
    cl.enqueue_copy(q, out, C)
    q.finish()
    ref = c.astype(np.float64)
    for t in range(pr.batch):
        def mat(buf, off, rows, cols, ld):
            return np.lib.stride_tricks.as_strided(buf[off:], (rows, cols),
                                                   (ld * buf.itemsize, buf.itemsize))
        Am = mat(a, pr.a_offset + t * pr.stride_a,
                 *((pr.k, pr.m) if pr.trans_a else (pr.m, pr.k)), pr.lda)
        Bm = mat(b, pr.b_offset + t * pr.stride_b,
                 *((pr.n, pr.k) if pr.trans_b else (pr.k, pr.n)), pr.ldb)
        Am, Bm = (Am.T if pr.trans_a else Am), (Bm.T if pr.trans_b else Bm)
        Cm = mat(ref, pr.c_offset + t * pr.stride_c, pr.m, pr.n, pr.ldc)
        Cm[...] = pr.alpha * (Am.astype(np.float64) @ Bm) + pr.beta * Cm
    results[name] = bool(np.allclose(out, ref, rtol=1e-5, atol=1e-5))
print(json.dumps(results))
"""

@pytest.mark.skipif(not has_oclgrind(), reason="the Oclgrind simulator is not installed")
def test_gemm_kernels_clean_under_oclgrind():
    results = run_probe(PROBE)
    assert results == {"plain": True, "packed_trans": True, "local": True, "local_k1": True,
                       "tall_beta0": True, "tall_beta1": True, "any": True, "local_rt": True,
                       "nv_rt": True, "tall_batched_rt": True}

# }}}
