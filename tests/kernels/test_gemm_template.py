"""kernels.gemm_template writes the wide CPU GEMM default's source byte for byte as loopy
generates it (kernels.gemm.build_gemm), and declines every problem it does not cover."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from pydnnl.kernels import gemm as G
from pydnnl.kernels import gemm_template as T
from pydnnl.kernels.source import source_from_loopy

BASE = G.GemmProblem(m=3200, n=2048, k=512, lda=512, ldb=48, ldc=2048, b_layout="panel48",
                     dtype=np.float32, acc_dtype=np.float32, runtime_offsets=True,
                     runtime_m="tall", runtime_k=True)


@pytest.mark.parametrize("m, n, k, ldc", [
    (3200, 2048, 512, 2048),   # LSTM 512's layer GEMM (and its step's, m 64)
    (64, 2048, 512, 2048),
    (1280, 1024, 256, 1024),   # 256-channel LSTM
    (100, 1536, 512, 1536),    # a GRU's 3 gates of 512 (n a multiple of 48: no column guard)
    (500, 96, 64, 96),
    (300, 512, 1000, 512),
    (700, 2048, 512, 4096),    # C a slice of a wider buffer
    (900, 2064, 2064, 2064),
])
def test_template_equals_loopy(m, n, k, ldc):
    pr = replace(BASE, m=m, n=n, k=k, lda=k, ldc=ldc)
    src = T.register_source(pr, dict(T.PARAMS))
    assert src is not None
    assert src.to_json() == source_from_loopy(G.build_gemm(pr, dict(T.PARAMS))).to_json()


@pytest.mark.parametrize("change", [
    {"n": 1000, "ldc": 1000, "beta": 1.0},  # n not a multiple of the vector width, C read
    {"a_offset": 16}, {"dtype": np.float64, "acc_dtype": np.float64},
    {"runtime_m": "any"}, {"runtime_k": False}, {"c_offset": 16},
    {"b_offset": 16},  # (a run-time batch over packed B: test_gemm_template_forms)
])
def test_template_declines_other_problems(change):
    assert T.register_source(replace(BASE, **change), dict(T.PARAMS)) is None


@pytest.mark.parametrize("change", [{"m_loop": 2}, {"k_unroll": 4}, {"rows": 4},
                                    {"m_loop": 1, "cols": 64}])
def test_template_declines_other_params(change):
    assert T.register_source(BASE, dict(T.PARAMS, **change)) is None


@pytest.mark.parametrize("tile", T.TILES, ids=["8x48", "8x32", "6x16", "6x16k1"])
@pytest.mark.parametrize("m_inner, m_loop", [(False, 1), (True, 4), (True, 1)])
@pytest.mark.parametrize("n, ldc, alpha, beta", [
    (2048, 2048, 1.0, 0.0),
    (2048, 2048, 1.0, 1.0),     # an RNN's weight gradient, accumulated: C read, moved tile
    (1536, 3072, 1.0, 1.0),     # n a multiple of the tile: no column guard
    (512, 512, 0.5, -2.0),
    (96, 96, 2.0, 0.0),
])
def test_template_equals_loopy_grid_orders_row_loops_and_scalars(tile, m_inner, m_loop, n, ldc,
                                                                 alpha, beta):
    """The template's other row-tile loops (one or four per work-item), both grid orders and
    any alpha and beta (a C read: the vector store's ``vload``) against loopy, byte for
    byte."""
    params = dict(tile, m_inner=m_inner, m_loop=m_loop)
    pr = replace(BASE, n=n, ldc=ldc, alpha=alpha, beta=beta)
    if tile["cols"] != 48:
        pr = replace(pr, ldb=tile["cols"], b_layout=f"panel{tile['cols']}")
    src = T.register_source(pr, params)
    assert src is not None
    assert src.to_json() == source_from_loopy(G.build_gemm(pr, params)).to_json()


@pytest.mark.parametrize("m_inner, m_loop, beta", [(True, 4, 1.0), (False, 1, 0.0)])
def test_template_equals_loopy_narrow_panels(m_inner, m_loop, beta):
    """The 8x48 tile over 16-column panels with the other grid order and row loops."""
    params = dict(T.PARAMS, m_inner=m_inner, m_loop=m_loop)
    for n in (2048, 1000 // 16 * 16):
        pr = replace(BASE, n=n, ldc=n, ldb=16, b_layout="panel16", beta=beta)
        src = T.register_source(pr, params)
        assert src is not None
        assert src.to_json() == source_from_loopy(G.build_gemm(pr, params)).to_json()
