"""A register-tile GEMM with C's leading dimension at run time (``GemmProblem.runtime_ldc``)
or its column guard against a run-time n (``runtime_n``): kernels.gemm_template writes it
byte for byte as loopy generates it; one text serves every ``ldc`` (keyed as a dense C) and
every n of a ragged last column tile, and its kernel computes what the baked kernel computes,
bit for bit, writing nothing outside C's rows and columns."""
from __future__ import annotations

import pathlib
import sys
from dataclasses import replace

import numpy as np
import pytest

from pydnnl.kernels import gemm as G
from pydnnl.kernels import gemm_template as T
from pydnnl.kernels.source import source_from_loopy

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from printed_kernels import run_source  # noqa: E402

BASE = G.GemmProblem(m=64, n=1024, k=512, lda=512, ldb=32, ldc=1024, b_layout="panel32",
                     dtype=np.float32, acc_dtype=np.float32, runtime_offsets=True,
                     runtime_m="tall", runtime_k=True, runtime_ldc=True)
TILE32 = T.TILES[1]


@pytest.mark.parametrize("tile, panel", [(TILE32, 32), (T.PARAMS, 48), (T.PARAMS, 16)])
@pytest.mark.parametrize("m_inner, m_loop", [(False, 1), (True, 4)])
@pytest.mark.parametrize("n, ldc, beta", [(1024, 1024, 0.0), (512, 1536, 1.0),
                                          (1040, 1040, 0.0), (96, 100, 0.5)])
def test_template_equals_loopy(tile, panel, m_inner, m_loop, n, ldc, beta):
    p = dict(tile, m_inner=m_inner, m_loop=m_loop)
    pr = replace(BASE, n=n, ldc=ldc, ldb=panel, b_layout=f"panel{panel}", beta=beta)
    src = T.register_source(pr, p)
    assert src is not None
    assert src.to_json() == source_from_loopy(G.build_gemm(pr, p)).to_json()
    assert src.arg_names[-1] == "ldc" and "ldc" in src.source


def test_one_key_and_text_for_every_ldc():
    a, b = BASE, replace(BASE, ldc=4096)
    assert G.cache_key(a, TILE32) == G.cache_key(b, TILE32)
    assert G.cache_key(a, TILE32) != G.cache_key(replace(a, runtime_ldc=False), TILE32)
    half = replace(BASE, n=512, ldc=512)  # another n (a multiple of the tile): the same text
    assert T.register_source(half, TILE32).source == T.register_source(a, TILE32).source


def test_template_declines_other_forms():
    assert T.register_source(replace(BASE, n=1000, ldc=1000), TILE32) is None  # lane stores
    with pytest.raises(ValueError, match="runtime_ldc"):
        replace(BASE, batch=2)
    with pytest.raises(ValueError, match="runtime_ldc"):
        replace(BASE, runtime_offsets=False, runtime_m=None, runtime_k=False)


@pytest.mark.parametrize("n, ldc, beta, m", [(1024, 1024, 0.0, 64), (512, 512, 0.0, 64),
                                             (512, 1536, 1.0, 70), (96, 100, 1.0, 9)])
def test_runs_as_the_baked_kernel(engine, n, ldc, beta, m):
    k = 40
    pr = replace(BASE, m=m, n=n, k=k, lda=k, ldc=ldc, beta=beta)
    baked = replace(pr, runtime_ldc=False)
    ours = T.register_source(pr, TILE32)
    theirs = T.register_source(baked, TILE32)
    assert ours is not None and theirs is not None and ours.source != theirs.source
    pack = G.pack_b(replace(pr, b_layout="plain", ldb=n, runtime_ldc=False, runtime_m=None,
                            runtime_k=False, runtime_offsets=False), TILE32).pack
    _runs_alike(engine, ours, theirs, pack, m, n, k, ldc, beta, 3, {})


def _runs_alike(engine, ours, theirs, pack, m, n, k, ldc, beta, seed, values) -> None:
    """``ours`` and ``theirs`` (the baked kernel) on the same random operands (B packed by
    ``pack``; offsets 5, 2, 7): every buffer bit for bit equal, C's rows numpy's product
    where its n columns are and untouched elsewhere."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(5 + m * k).astype(np.float32)
    bl = rng.standard_normal((k, n)).astype(np.float32)
    bp = pack(bl).ravel()
    c = rng.standard_normal(7 + m * ldc + 3).astype(np.float32)
    bufs = {"a": a, "b": np.concatenate([np.zeros(2, np.float32), bp]), "c": c}
    values = {"a_off": 5, "b_off": 2, "c_off": 7, "m": m, "ksize": k, "ldc": ldc, **values}
    got = run_source(engine, ours, bufs, values)
    want = run_source(engine, theirs, bufs, values)
    for name in bufs:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    cm = c[7:7 + m * ldc].reshape(m, ldc).copy()
    cm[:, :n] = a[5:].reshape(m, k) @ bl + beta * cm[:, :n]
    out = got["c"][7:7 + m * ldc].reshape(m, ldc)
    np.testing.assert_allclose(out, cm, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(out[:, n:], c[7:7 + m * ldc].reshape(m, ldc)[:, n:])
    np.testing.assert_array_equal(got["c"][:7], c[:7])


_RAGGED = [(1024, 1536, 1.0, 512, 40), (512, 1536, 1.0, 512, 40), (1040, 1040, 0.0, 64, 17),
           (16, 40, 0.0, 9, 5)]


@pytest.mark.parametrize("m_inner, m_loop", [(False, 4), (True, 1)])
@pytest.mark.parametrize("ldc_too", [True, False])
@pytest.mark.parametrize("n, ldc, beta, m, k", _RAGGED)
def test_runtime_n_template_equals_loopy(m_inner, m_loop, ldc_too, n, ldc, beta, m, k):
    p = dict(T.PARAMS, m_inner=m_inner, m_loop=m_loop)
    pr = replace(BASE, m=m, n=n, k=k, lda=k, ldc=ldc, ldb=48, b_layout="panel48", beta=beta,
                 runtime_ldc=ldc_too, runtime_n=True)
    src = T.register_source(pr, p)
    assert src is not None and "< ncols)" in src.source
    assert src.to_json() == source_from_loopy(G.build_gemm(pr, p)).to_json()
    assert src.arg_names[-1] == "ncols"
    # another n of a ragged last tile: the same text (the grid follows n)
    other = T.register_source(replace(pr, n=n + 16 if (n + 16) % 48 else n - 16), p)
    assert other.source == src.source


def test_runtime_n_declines_narrower_panels():
    pr = replace(BASE, n=1024, ldb=16, b_layout="panel16", runtime_n=True)
    assert T.register_source(pr, dict(T.PARAMS)) is None


@pytest.mark.parametrize("n, ldc, beta, m, k", _RAGGED)
def test_runtime_n_runs_as_the_baked_kernel(engine, n, ldc, beta, m, k):
    pr = replace(BASE, m=m, n=n, k=k, lda=k, ldc=ldc, ldb=48, b_layout="panel48", beta=beta,
                 runtime_n=True)
    ours = T.register_source(pr, T.PARAMS)
    theirs = T.register_source(replace(pr, runtime_ldc=False, runtime_n=False), T.PARAMS)
    assert ours.source != theirs.source
    pack = G.pack_b(G.GemmProblem(m=1, n=n, k=k, ldb=n), T.PARAMS).pack
    _runs_alike(engine, ours, theirs, pack, m, n, k, ldc, beta, 5, {"ncols": n})
