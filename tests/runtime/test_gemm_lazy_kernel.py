"""A GEMM launcher asked only for its tuned tile and packing (``get_gemm(kernel=False)``:
a batched GEMM's panels) builds no kernel of its own; every other caller gets the kernel
built when it creates the launcher, never at execution."""
from __future__ import annotations

import numpy as np
import pytest

import pydnnl as dnnl
import pydnnl.runtime.gemm as rg
from pydnnl.runtime.gemm import GemmShape, get_gemm
from pydnnl.runtime.plan import Plan, Ref


def _spy(monkeypatch):
    built = []
    real = rg._build

    def build(engine, prob, params):
        built.append((prob.m, prob.n, prob.k, prob.batch))
        return real(engine, prob, params)

    monkeypatch.setattr(rg, "_build", build)
    return built


def test_packing_facts_build_no_kernel(engine, monkeypatch):
    built = _spy(monkeypatch)
    shape = GemmShape(m=37, n=48, k=29, lda=29, ldb=48, ldc=48)  # (a shape no test builds)
    g = get_gemm(engine, shape, static_b=True, kernel=False)
    if g.nv_tile is not None:
        pytest.skip("the hand-written NVIDIA kernel's launchers build their kernel at once")
    assert built == [] and g.packed_size >= 0
    assert get_gemm(engine, shape, static_b=True) is g and len(built) == 1  # built now
    get_gemm(engine, shape, static_b=True)
    assert len(built) == 1


def test_batched_panels_pack_without_an_unbatched_kernel(engine, stream, monkeypatch):
    """Plan.pack_b_batched packs B for the batched kernel; the unbatched launcher it asks
    for its panels compiles nothing, and the batched product is right."""
    built = _spy(monkeypatch)
    m, n, k, batch = 19, 40, 23, 3
    shape = GemmShape(m=m, n=n, k=k, lda=k, ldb=n, ldc=n)
    if get_gemm(engine, shape, static_b=True, kernel=False).nv_tile is not None:
        pytest.skip("the hand-written NVIDIA kernel's launchers build their kernel at once")
    plan = Plan(engine, "lazy")
    rng = np.random.default_rng(2)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((batch, k, n)).astype(np.float32)
    ref, off, step, params = plan.pack_b_batched(shape, batch, Ref("b"), 0, k * n)
    assert (m, n, k, 1) not in built, built
    plan.gemm_batched(shape, batch, 0, step, m * n, Ref("a"), 0, ref, off, Ref("c"), 0,
                      params=params)
    f32 = dnnl.memory.data_type.f32

    def mem(v):
        return dnnl.memory(dnnl.memory.desc([v.size], f32, "a"), engine, v.ravel().copy())

    ma, mb_, mc = mem(a), mem(b), mem(np.zeros(batch * m * n, np.float32))
    scratch = mem(np.zeros(max(plan.scratch_elems, 1), np.float32))
    plan.run(stream, {"a": ma.buffer, "b": mb_.buffer, "c": mc.buffer,
                          "scratch": scratch.buffer})
    stream.wait()
    want = np.einsum("mk,tkn->tmn", a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(mc.to_numpy().reshape(batch, m, n), want, rtol=1e-4, atol=1e-4)
