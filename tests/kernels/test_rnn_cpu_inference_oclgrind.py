"""What CPU RNN inference runs since the AVX2 rules (``heuristics.rnn.weights_panel``'s 6x16
tile over 16- or 8-column weight panels, ``cell_tanh_via_exp``'s cell kernels) under the
Oclgrind simulator, on tiny shapes: no out-of-bounds access, no uninitialized read, no data
race, no API misuse, and results that match numpy. Oclgrind is no CPU device, so the probe
builds these kernels by their parameters rather than through the device rules.

Oclgrind reports problems only on stderr, so the kernels run in a subprocess whose stderr is
read; kernel caches are off so that every kernel is generated and built under Oclgrind."""
from __future__ import annotations

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from oclgrind_helpers import has_oclgrind, run_probe  # noqa: E402

PROBE = r"""
import json
import sys
from dataclasses import replace

import numpy as np

import pydnnl as dnnl
from pydnnl.kernels.gemm import DEFAULT_CPU_PARAMS
from pydnnl.kernels.rnn_elementwise import ElementwiseProblem, build_elementwise
from pydnnl.runtime.gemm import GemmShape, get_gemm
from pydnnl.runtime.heuristics import rnn as rr

sys.path.insert(0, HELPERS)
from printed_kernels import run_source

eng = dnnl.engine.from_name("Oclgrind")
assert eng.is_simulator
s = dnnl.stream(eng)
rng = np.random.default_rng(5)
F32, TAG = dnnl.memory.data_type.f32, dnnl.memory.format_tag
results = {}


def flat(a):
    md = dnnl.memory.desc([a.size], F32, TAG.a)
    return dnnl.memory(md, eng, a.reshape(-1))


tile = dict(DEFAULT_CPU_PARAMS, vec=8, packed_b=True, **rr.PANEL_8WIDE_TILE)
for pw, (m, n, k) in [(16, (7, 32, 5)), (8, (13, 48, 9)), (16, (6, 16, 4))]:
    g = get_gemm(eng, GemmShape(m=m, n=n, k=k, lda=k, ldb=n, ldc=n), static_b=True,
                 b_panel=pw, params=tile)
    a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
    bp = b.reshape(k, n // pw, pw).transpose(1, 0, 2)
    A, B, C = flat(a), flat(bp), flat(np.zeros(m * n, np.float32))
    g(s, A.buffer, 0, B.buffer, 0, C.buffer, 0)
    s.wait()
    got = C.to_numpy().reshape(m, n)
    results[f"gemm_6x16_pw{pw}_{m}x{n}x{k}"] = bool(np.allclose(got, a @ b, rtol=1e-5,
                                                                 atol=1e-5))

DHC, N = 12, 3
base = ElementwiseProblem("vanilla_lstm", 0, False, "tanh", 0.0, DHC, DHC, DHC, wg=8,
                          store_gates=False, tanh_exp=True)
for name, p in [("lstm", base), ("rnn_tanh", replace(base, cell="vanilla_rnn")),
                ("gru_s1", replace(base, cell="vanilla_gru", stage=1)),
                ("lbr_gru", replace(base, cell="lbr_gru"))]:
    src = build_elementwise(p)
    ref = build_elementwise(replace(p, tanh_exp=False))
    bufs = {}
    for a_name in src.arg_names:
        if a_name == "batch" or a_name.endswith("_off"):
            continue
        x = (rng.standard_normal(1024) * 3).astype(np.float32)
        if a_name == "gates":
            x = rng.uniform(0.02, 0.98, 1024).astype(np.float32)
        bufs[a_name] = x
    values = {a_name: 0 for a_name in src.arg_names if a_name.endswith("_off")}
    values["batch"] = N
    got = run_source(eng, src, bufs, values)
    want = run_source(eng, ref, bufs, values)
    results[f"cell_{name}"] = all(np.allclose(got[b], want[b], rtol=0, atol=1e-6)
                                  for b in bufs)
print(json.dumps(results))
"""


def test_cpu_inference_kernels_under_oclgrind():
    if not has_oclgrind():
        pytest.skip("Oclgrind is not installed")
    helpers = str(pathlib.Path(__file__).resolve().parent)
    results = run_probe(f"HELPERS = {helpers!r}\n" + PROBE)
    assert results and all(results.values()), results
