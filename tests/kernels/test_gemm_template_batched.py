"""kernels.gemm_template writes a batch with run-time strides and count over plain B
(Winograd's tile products) byte for byte as loopy generates it (kernels.gemm.build_gemm),
for both register tiles, either grid order, one or four row tiles per work-item, any finite
alpha and beta, and declines the batched problems it does not cover."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from pydnnl.kernels import gemm as G
from pydnnl.kernels import gemm_template as T
from pydnnl.kernels.source import source_from_loopy


def _problem(n, ldb, ldc, alpha=1.0, beta=0.0, **kw):
    return G.GemmProblem(m=3136, n=n, k=64, lda=64, ldb=ldb, ldc=ldc, alpha=alpha, beta=beta,
                         dtype=np.float32, acc_dtype=np.float32, batch=16,
                         stride_a=3136 * 64, stride_b=64 * ldb, stride_c=3136 * ldc,
                         runtime_offsets=True, runtime_m="tall", runtime_k=True, **kw)


def _params(tile, m_inner=False, m_loop=1):
    return dict(tile, packed_b=False, m_inner=m_inner, m_loop=m_loop)


@pytest.mark.parametrize("tile", T.TILES, ids=["8x48", "8x32", "6x16", "6x16k1"])
@pytest.mark.parametrize("m_inner, m_loop", [(False, 1), (True, 4), (True, 1), (False, 4)])
@pytest.mark.parametrize("n, ldb, ldc, alpha, beta", [
    (64, 64, 64, 1.0, 0.0),        # res2a's Winograd products (64 channels)
    (96, 128, 96, 0.5, -2.0),      # B and C wider than n, C read
    (192, 192, 192, 1.0, 1.0),
])
def test_batched_plain_b_equals_loopy(tile, m_inner, m_loop, n, ldb, ldc, alpha, beta):
    pr = _problem(n, ldb, ldc, alpha, beta)
    p = _params(tile, m_inner, m_loop)
    src = T.register_source(pr, p)
    if n % tile["cols"]:
        assert src is None
        return
    assert src is not None
    assert src.to_json() == source_from_loopy(G.build_gemm(pr, p)).to_json()


@pytest.mark.parametrize("change", [
    {"trans_b": True},
    {"runtime_m": None, "runtime_k": False},  # baked strides: no run-time batch
    {"dtype": np.float64, "acc_dtype": np.float64},  # (a baked lda: test_gemm_template_forms)
])
def test_batched_template_declines_other_problems(change):
    assert T.register_source(replace(_problem(64, 64, 64), **change),
                             _params(T.TILES[1])) is None
    # the problem it was changed from is covered
    assert T.register_source(_problem(64, 64, 64), _params(T.TILES[1])) is not None


def test_batched_template_declines_ragged_columns():
    # n not a multiple of the tile's width (80 = 2.5 tiles of 32)
    assert T.register_source(_problem(80, 80, 80), _params(T.TILES[1])) is None


def test_batched_template_declines_packed_params():
    assert T.register_source(_problem(64, 64, 64), dict(T.TILES[1])) is None
