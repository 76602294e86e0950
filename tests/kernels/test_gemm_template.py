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
    {"n": 1000, "ldc": 1000},          # n not a multiple of the vector width
    {"beta": 1.0}, {"alpha": 0.5}, {"lda": 1024}, {"dtype": np.float64, "acc_dtype": np.float64},
    {"runtime_m": "any"}, {"runtime_k": False}, {"c_offset": 16},
    {"batch": 2, "stride_a": 0, "stride_c": 2048 * 3200},
])
def test_template_declines_other_problems(change):
    assert T.register_source(replace(BASE, **change), dict(T.PARAMS)) is None


@pytest.mark.parametrize("change", [{"m_loop": 1}, {"k_unroll": 4}, {"rows": 4},
                                    {"m_inner": True}])
def test_template_declines_other_params(change):
    assert T.register_source(BASE, dict(T.PARAMS, **change)) is None
