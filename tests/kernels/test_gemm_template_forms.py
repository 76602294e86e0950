"""kernels.gemm_template's forms beyond the plain product: a bias over C's columns (the
im2col convolutions' forward GEMMs), written byte for byte as loopy generates it
(kernels.gemm.build_gemm) and run against loopy's kernel; the forms it declines return None."""
from __future__ import annotations

import functools
import pathlib
import sys
from dataclasses import replace

import numpy as np
import pytest

from pydnnl.constants import algorithm as A
from pydnnl.kernels import gemm as G
from pydnnl.kernels import gemm_template as T
from pydnnl.kernels.source import source_from_loopy

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from printed_kernels import run_source, same_loopy_version  # noqa: E402

BIAS_LAYOUT = (0, ((1, 0, ()), (1, 1, ())))


def _bias_problem(n, ldc, pw, m=20, k=10):
    return G.GemmProblem(m=m, n=n, k=k, lda=k, ldb=pw, ldc=ldc, b_layout=f"panel{pw}",
                         runtime_offsets=True, runtime_m="tall", runtime_k=True,
                         bias=(BIAS_LAYOUT, (1, n), n))


@functools.lru_cache(maxsize=None)
def _loopy(pr, params_items):
    # module-wide: each case's loopy kernel is generated once (0.2-0.4 s each)
    return source_from_loopy(G.build_gemm(pr, dict(params_items)))


# (tile, m_inner, m_loop, n, ldc, panel width): column guards (n no multiple of the tile),
# one column tile (loopy drops its group index), C wider than n, 16-column panels
def _run_as_loopy(engine, src, pr, params, bufs, values) -> dict:
    """Run the template's ``src`` and loopy's kernel for ``pr`` on the same buffers; C must
    come out bitwise equal. The template's outputs."""
    ours = run_source(engine, src, bufs, values)
    theirs = run_source(engine, _loopy(pr, tuple(sorted(params.items()))), bufs, values)
    np.testing.assert_array_equal(ours["c"], theirs["c"])
    return ours


BIAS_CASES = [
    (0, False, 1, 64, 64, 48),
    (0, True, 4, 96, 96, 48),
    (0, False, 4, 48, 48, 48),
    (0, True, 1, 32, 40, 48),
    (0, False, 1, 80, 80, 16),
    (1, False, 1, 64, 64, 32),
    (1, True, 1, 80, 96, 32),
    (1, True, 4, 32, 32, 32),
    (1, False, 4, 256, 256, 32),
    (2, False, 1, 64, 64, 16),
    (2, True, 4, 40, 40, 16),
    (3, False, 1, 16, 16, 16),
]


def _case(case):
    ti, mi, ml, n, ldc, pw = case
    return _bias_problem(n, ldc, pw), dict(T.TILES[ti], m_inner=mi, m_loop=ml)


@pytest.mark.parametrize("case", [BIAS_CASES[i] for i in (1, 3, 4, 6, 10)],
                         ids=[str(BIAS_CASES[i]) for i in (1, 3, 4, 6, 10)])
def test_bias_runs_as_loopy(engine, case):
    """Template and loopy kernels write the same C (exactly), and it is A @ B + bias."""
    pr, p = _case(case)
    src = T.register_source(pr, p)
    assert src is not None
    rng = np.random.default_rng(0)
    m, k, n, ldc = 19, 13, pr.n, pr.ldc  # run-time m and k other than the sample's
    a_off, c_off = 3, 5
    a = rng.standard_normal(a_off + m * k).astype(np.float32)
    bm = rng.standard_normal((k, n)).astype(np.float32)
    plain = replace(pr, m=m, k=k, lda=k, b_layout="plain", ldb=n)
    bp = G.pack_b(plain, dict(p, cols=pr.panel_width)).pack(bm)
    bias = rng.standard_normal(n).astype(np.float32)
    c = np.full(c_off + m * ldc + 7, 9.0, np.float32)
    bufs = {"a": a, "b": bp, "c": c, "bias": bias}
    values = {"a_off": a_off, "b_off": 0, "c_off": c_off, "m": m, "ksize": k}
    ours = _run_as_loopy(engine, src, pr, p, bufs, values)
    got = ours["c"][c_off:c_off + m * ldc].reshape(m, ldc)
    ref = a[a_off:].reshape(m, k) @ bm + bias
    np.testing.assert_allclose(got[:, :n], ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got[:, n:], 9.0)  # C's columns past n untouched
    np.testing.assert_array_equal(ours["c"][:c_off], 9.0)


@pytest.mark.parametrize("change", [
    {"alpha": 2.0}, {"beta": 1.0},                            # C read: the vector epilogue
    {"bias": ((1, ((1, 0, ()), (1, 1, ()))), (1, 64), 65)},   # bias from an offset
    {"bias": (BIAS_LAYOUT, (64, 64), 4096)},                  # a bias over rows too
    {"post_ops": (("eltwise", int(A.eltwise_relu), 0.0, 0.0),)},
    {"epi_swap": True},
])
def test_bias_template_declines_other_epilogues(change):
    pr, p = _case(BIAS_CASES[0])
    assert T.register_source(pr, p) is not None
    assert T.register_source(replace(pr, **change), p) is None


# {{{ a baked leading dimension of A (batched plain B)

def _lda_problem(n, lda, tile_cols, m=20, k=12, batch=3):
    return G.GemmProblem(m=m, n=n, k=k, lda=lda, ldb=n, ldc=n, batch=batch,
                         stride_a=m * lda, stride_b=k * n, stride_c=m * n,
                         runtime_offsets=True, runtime_m="tall", runtime_k=True)


# (tile, m_inner, m_loop, n, lda): a weight gradient's slices of the images' rows (A's rows
# lda apart, k a slice of them)
LDA_CASES = [(1, False, 1, 64, 40), (1, True, 4, 96, 50), (0, False, 4, 96, 40),
             (0, True, 1, 48, 13), (2, False, 1, 64, 40), (2, True, 4, 32, 13),
             (3, False, 1, 16, 40)]


def _lda_case(case):
    ti, mi, ml, n, lda = case
    return (_lda_problem(n, lda, T.TILES[ti]["cols"]),
            dict(T.TILES[ti], packed_b=False, m_inner=mi, m_loop=ml))


@pytest.mark.parametrize("case", LDA_CASES[1:3], ids=[str(c) for c in LDA_CASES[1:3]])
def test_baked_lda_runs_as_loopy(engine, case):
    pr, p = _lda_case(case)
    src = T.register_source(pr, p)
    rng = np.random.default_rng(1)
    m, k, n, lda, nb = 17, 9, pr.n, pr.lda, 2
    sa, sb, sc = m * lda + 3, k * n + 5, m * n + 2
    a = rng.standard_normal(nb * sa).astype(np.float32)
    b = rng.standard_normal(nb * sb).astype(np.float32)
    c = np.full(nb * sc, 9.0, np.float32)
    values = {"a_off": 0, "b_off": 0, "c_off": 0, "m": m, "ksize": k, "stride_a": sa,
              "stride_b": sb, "stride_c": sc, "nbatch": nb}
    bufs = {"a": a, "b": b, "c": c}
    ours = _run_as_loopy(engine, src, pr, p, bufs, values)
    for t in range(nb):
        am = np.lib.stride_tricks.as_strided(a[t * sa:], (m, k), (lda * 4, 4))
        ref = am @ b[t * sb:t * sb + k * n].reshape(k, n)
        np.testing.assert_allclose(ours["c"][t * sc:t * sc + m * n].reshape(m, n), ref,
                                   rtol=1e-5, atol=1e-5)


# (tile, m_inner, m_loop, n, lda, panel width, beta): packed B, one entry: the GRU's backward
# GEMMs over a slice of its gates' columns (loopy prints A's index as one sorted sum)
PLDA_CASES = [(1, False, 1, 64, 30, 32, 1.0), (1, True, 4, 96, 40, 32, 0.0),
              (0, False, 4, 96, 25, 48, 0.5), (0, True, 1, 80, 12, 16, 1.0),
              (2, False, 1, 64, 30, 16, 1.0), (2, True, 4, 48, 12, 16, 0.0),
              (3, False, 1, 16, 30, 16, 1.0)]


def _plda_case(case):
    ti, mi, ml, n, lda, pw, beta = case
    pr = G.GemmProblem(m=20, n=n, k=10, lda=lda, ldb=pw, ldc=n, b_layout=f"panel{pw}",
                       beta=beta, runtime_offsets=True, runtime_m="tall", runtime_k=True)
    return pr, dict(T.TILES[ti], m_inner=mi, m_loop=ml)


@pytest.mark.parametrize("case", PLDA_CASES[:2], ids=[str(c) for c in PLDA_CASES[:2]])
def test_baked_lda_over_packed_b_runs_as_loopy(engine, case):
    pr, p = _plda_case(case)
    src = T.register_source(pr, p)
    rng = np.random.default_rng(4)
    m, k, n, lda = 19, 7, pr.n, pr.lda
    a = rng.standard_normal(m * lda + 3).astype(np.float32)
    bm = rng.standard_normal((k, n)).astype(np.float32)
    bp = G.pack_b(G.GemmProblem(m=m, n=n, k=k), dict(p, cols=pr.panel_width)).pack(bm)
    c = rng.standard_normal(m * n).astype(np.float32)
    values = {"a_off": 3, "b_off": 0, "c_off": 0, "m": m, "ksize": k}
    bufs = {"a": a, "b": bp, "c": c}
    ours = _run_as_loopy(engine, src, pr, p, bufs, values)
    am = np.lib.stride_tricks.as_strided(a[3:], (m, k), (lda * 4, 4))
    ref = am @ bm + pr.beta * c.reshape(m, n)
    np.testing.assert_allclose(ours["c"].reshape(m, n), ref, rtol=1e-5, atol=1e-5)

# }}}


# {{{ A transposed (weight gradients: m baked, k at run time, batched plain B)

def _ta_problem(m, n, lda, alpha=1.0, beta=0.0, k=40, batch=4):
    return G.GemmProblem(m=m, n=n, k=k, trans_a=True, lda=lda, ldb=n, ldc=n, batch=batch,
                         alpha=alpha, beta=beta, runtime_offsets=True, runtime_k=True)


# (tile, m_inner, m, n, lda, alpha, beta): C accumulated (beta 1, the second image slice's
# product), one row tile, A's rows wider than m; m no multiple of the tile's rows (the last
# tile reads clamped rows of A and stores its own: Winograd's 128 x 128 weight-gradient
# products in 6-row tiles)
TA_CASES = [(1, False, 64, 64, 64, 1.0, 0.0), (1, True, 16, 96, 16, 1.0, 1.0),
            (1, False, 8, 32, 24, 0.5, -2.0), (0, False, 24, 96, 24, 1.0, 1.0),
            (0, True, 16, 48, 40, 1.0, 0.0), (2, False, 18, 64, 18, 1.0, 1.0),
            (2, True, 12, 32, 20, 0.5, -2.0), (3, False, 18, 16, 18, 1.0, 1.0),
            (2, False, 20, 32, 24, 1.0, 1.0), (2, True, 128, 128, 128, 1.0, 0.0),
            (1, False, 20, 64, 20, 0.5, -2.0), (3, True, 14, 16, 14, 1.0, 0.0)]


def _ta_case(case):
    ti, mi, m, n, lda, alpha, beta = case
    return (_ta_problem(m, n, lda, alpha, beta),
            dict(T.TILES[ti], packed_b=False, m_inner=mi, m_loop=1))


@pytest.mark.parametrize("case", TA_CASES[1:4] + TA_CASES[8:9],
                         ids=[str(c) for c in TA_CASES[1:4] + TA_CASES[8:9]])
def test_trans_a_runs_as_loopy(engine, case):
    pr, p = _ta_case(case)
    src = T.register_source(pr, p)
    rng = np.random.default_rng(2)
    m, n, lda, k, nb = pr.m, pr.n, pr.lda, 11, 3  # k other than the sample's
    sa, sb, sc = k * lda + 1, k * n + 3, m * n + 2
    a = rng.standard_normal(nb * sa).astype(np.float32)
    b = rng.standard_normal(nb * sb).astype(np.float32)
    c = rng.standard_normal(nb * sc).astype(np.float32)
    values = {"a_off": 0, "b_off": 0, "c_off": 0, "ksize": k, "stride_a": sa,
              "stride_b": sb, "stride_c": sc, "nbatch": nb}
    bufs = {"a": a, "b": b, "c": c}
    ours = _run_as_loopy(engine, src, pr, p, bufs, values)
    for t in range(nb):
        at = np.lib.stride_tricks.as_strided(a[t * sa:], (k, m), (lda * 4, 4))
        ref = pr.alpha * (at.T @ b[t * sb:t * sb + k * n].reshape(k, n)) \
            + pr.beta * c[t * sc:t * sc + m * n].reshape(m, n)
        np.testing.assert_allclose(ours["c"][t * sc:t * sc + m * n].reshape(m, n), ref,
                                   rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("change, params", [
    ({"m": 20, "lda": 20, "n": 48, "ldb": 48, "ldc": 48}, {}),  # ragged rows and columns
    ({}, {"m_loop": 4}),                    # row tiles looped over a baked m
    ({"batch": 1}, {}),                     # one entry: no run-time batch
])
def test_trans_a_declines(change, params):
    pr, p = _ta_case(TA_CASES[0])
    assert T.register_source(pr, p) is not None
    assert T.register_source(replace(pr, **change), dict(p, **params)) is None

# }}}


# {{{ a batch over packed B (Winograd's tile products over packed weights)

def _pbatch_problem(n, ldc, pw, alpha=1.0, beta=0.0):
    return G.GemmProblem(m=20, n=n, k=10, lda=10, ldb=pw, ldc=ldc, batch=4,
                         b_layout=f"panel{pw}", alpha=alpha, beta=beta, runtime_offsets=True,
                         runtime_m="tall", runtime_k=True)


# (tile, m_inner, m_loop, n, ldc, panel width, alpha, beta)
PBATCH_CASES = [(1, False, 1, 128, 128, 32, 1.0, 0.0), (1, True, 4, 80, 96, 32, 1.0, 1.0),
                (0, False, 4, 96, 96, 48, 0.5, -2.0), (0, True, 1, 80, 80, 16, 1.0, 0.0),
                (1, False, 1, 32, 32, 32, 1.0, 0.0), (2, False, 1, 64, 64, 16, 1.0, 0.0),
                (2, True, 4, 48, 64, 16, 1.0, 1.0), (3, False, 1, 16, 16, 16, 1.0, 0.0),
                (3, False, 1, 16, 16, 16, 1.0, 1.0)]


def _pbatch_case(case):
    ti, mi, ml, n, ldc, pw, alpha, beta = case
    return (_pbatch_problem(n, ldc, pw, alpha, beta),
            dict(T.TILES[ti], m_inner=mi, m_loop=ml))


@pytest.mark.parametrize("case", PBATCH_CASES[1:4], ids=[str(c) for c in PBATCH_CASES[1:4]])
def test_batched_packed_b_runs_as_loopy(engine, case):
    pr, p = _pbatch_case(case)
    src = T.register_source(pr, p)
    rng = np.random.default_rng(3)
    m, k, n, ldc, nb = 19, 13, pr.n, pr.ldc, 3
    one = G.GemmProblem(m=m, n=n, k=k, lda=k, ldb=n, ldc=ldc)
    bms = [rng.standard_normal((k, n)).astype(np.float32) for _ in range(nb)]
    packs = [G.pack_b(one, dict(p, cols=pr.panel_width)).pack(bm) for bm in bms]
    sa, sb, sc = m * k + 2, packs[0].size + 5, m * ldc + 1
    a = rng.standard_normal(nb * sa).astype(np.float32)
    b = np.zeros(nb * sb, np.float32)
    for t, pk in enumerate(packs):
        b[t * sb:t * sb + pk.size] = pk
    c = rng.standard_normal(nb * sc).astype(np.float32)
    values = {"a_off": 0, "b_off": 0, "c_off": 0, "m": m, "ksize": k, "stride_a": sa,
              "stride_b": sb, "stride_c": sc, "nbatch": nb}
    bufs = {"a": a, "b": b, "c": c}
    ours = _run_as_loopy(engine, src, pr, p, bufs, values)
    for t in range(nb):
        cm = c[t * sc:t * sc + m * ldc].reshape(m, ldc)[:, :n]
        ref = pr.alpha * (a[t * sa:t * sa + m * k].reshape(m, k) @ bms[t]) + pr.beta * cm
        got = ours["c"][t * sc:t * sc + m * ldc].reshape(m, ldc)
        np.testing.assert_allclose(got[:, :n], ref, rtol=1e-5, atol=1e-5)


def test_batched_packed_b_declines_baked_batches():
    pr, p = _pbatch_case(PBATCH_CASES[0])
    assert T.register_source(replace(pr, runtime_m=None, runtime_k=False), p) is None
    assert T.register_source(replace(pr, bias=(BIAS_LAYOUT, (1, pr.n), pr.n)), p) is None

# }}}


# {{{ n no multiple of the vector width (lane stores): conv1's backward-data GEMM (n 147)

# (tile, m_inner, m_loop, n, ldc, bias)
LANE_CASES = [(1, False, 1, 147, 147, False), (1, True, 4, 20, 24, False),
              (0, False, 4, 100, 100, True), (0, True, 1, 3, 3, False),
              (2, False, 1, 147, 147, False), (2, True, 4, 20, 24, False),
              (2, False, 4, 100, 100, True), (3, False, 1, 12, 12, False)]


def _lane_case(case):
    ti, mi, ml, n, ldc, bias = case
    pw = T.TILES[ti]["cols"]
    pr = replace(_bias_problem(n, ldc, pw), bias=(BIAS_LAYOUT, (1, n), n) if bias else None)
    return pr, dict(T.TILES[ti], m_inner=mi, m_loop=ml)


@pytest.mark.parametrize("case", LANE_CASES[:2], ids=[str(c) for c in LANE_CASES[:2]])
def test_lane_stores_run_as_loopy(engine, case):
    pr, p = _lane_case(case)
    src = T.register_source(pr, p)
    rng = np.random.default_rng(5)
    m, k, n, ldc = 19, 7, pr.n, pr.ldc
    a = rng.standard_normal(m * k).astype(np.float32)
    bm = rng.standard_normal((k, n)).astype(np.float32)
    bp = G.pack_b(G.GemmProblem(m=m, n=n, k=k), dict(p, cols=pr.panel_width)).pack(bm)
    c = np.full(m * ldc, 9.0, np.float32)
    values = {"a_off": 0, "b_off": 0, "c_off": 0, "m": m, "ksize": k}
    bufs = {"a": a, "b": bp, "c": c}
    ours = _run_as_loopy(engine, src, pr, p, bufs, values)
    got = ours["c"].reshape(m, ldc)
    np.testing.assert_allclose(got[:, :n], a.reshape(m, k) @ bm, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got[:, n:], 9.0)


@pytest.mark.parametrize("change", [{"beta": 1.0}, {"alpha": 2.0},
                                    {"ldb": 16, "b_layout": "panel16"}])
def test_lane_stores_decline(change):
    pr, p = _lane_case(LANE_CASES[0])
    assert T.register_source(replace(pr, **change), p) is None

# }}}


# every form's text against loopy's, for each of its cases
FORMS = {
    "bias": (_case, BIAS_CASES),
    "lda": (_lda_case, LDA_CASES),
    "plda": (_plda_case, PLDA_CASES),
    "ta": (_ta_case, TA_CASES),
    "pbatch": (_pbatch_case, PBATCH_CASES),
    "lane": (_lane_case, LANE_CASES),
}
TEXT_CASES = [(form, c) for form, (_, cases) in FORMS.items() for c in cases]


@pytest.mark.parametrize("form, case", TEXT_CASES, ids=[f"{f}-{c}" for f, c in TEXT_CASES])
def test_text_equals_loopy(form, case):
    if not same_loopy_version():
        pytest.skip("texts recorded under test_codegen_unchanged.VERSIONS")
    pr, p = FORMS[form][0](case)
    src = T.register_source(pr, p)
    assert src is not None
    assert src.to_json() == _loopy(pr, tuple(sorted(p.items()))).to_json()
