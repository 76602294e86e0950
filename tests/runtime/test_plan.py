"""The runtime Plan: scratchpad regions, index tables, rows-limited launches, split-k and
batched GEMMs, fills, primitive steps and dry plans, each against numpy."""
from __future__ import annotations

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.kernels.gather import RowGather, build_row_gather
from pydnnl.runtime.gemm import GemmShape
from pydnnl.runtime.plan import ALIGN, INDEX, SCRATCH, Bind, Plan, Ref

dt, tag = dnnl.memory.data_type, dnnl.memory.format_tag


def _mem(engine, arr, dtype=dt.f32):
    arr = np.ascontiguousarray(arr).ravel()
    return dnnl.memory(dnnl.memory.desc([arr.size], dtype, tag.a), engine, arr)


def test_scratch_regions_are_aligned_and_slots_shared():
    plan = Plan(None, dry=True, scratch_elems=5)
    a = plan.alloc(3)
    b = plan.alloc(10, slot="s")
    assert (a, b) == (ALIGN, 2 * ALIGN)
    assert plan.alloc(7, slot="s") == b  # a later, smaller use of the slot
    with pytest.raises(ValueError, match="holds 10 elements, 11 asked"):
        plan.alloc(11, slot="s")
    assert plan.scratch_bytes == (2 * ALIGN + 10) * 4


def test_dry_plan_records_steps_without_compiling():
    plan = Plan(None, "dry", dry=True)
    shape = GemmShape(m=4, n=6, k=8, lda=8, ldb=6, ldc=6)
    plan.gemm(shape, Ref("a"), 0, Ref("b"), 0, Ref("c"), 0)
    ref, off, step, packed = plan.pack_b(shape, Ref("b"), 0, count=2)
    plan.gemm_split(shape, Ref("a"), 0, Ref("b"), 0, Ref("c"), 0, splits=2)
    assert ref is SCRATCH and packed and step >= shape.k * shape.n
    assert plan.describe() == "gemmx2 pack_bx1 splitk_reducex1"
    assert plan.scratch_elems >= off + 2 * step + 2 * 4 * 6


def test_gather_rows_and_index_table(engine, stream):
    """Two gathers through one uploaded index table; the second launched for 2 of 4 rows."""
    rng = np.random.default_rng(0)
    src = rng.standard_normal((5, 3)).astype(np.float32)
    idx1, idx2 = np.array([4, -1, 0, 2]), np.array([1, 3, 3, 0])
    plan = Plan(engine, "gather")
    for i, idx in enumerate((idx1, idx2)):
        k = plan.get("rowgather", RowGather(width=3, src_ld=3, dst_ld=3), build_row_gather)
        plan.launch(k, rows=None if i == 0 else 2, dst=Ref("dst"), src=Ref("src"), idx=INDEX,
                    d_off=12 * i, s_off=0, i_off=plan.index(idx), nrows=4)
    s, d = _mem(engine, src), _mem(engine, np.full(24, 7.0, np.float32))
    plan.execute(stream, {"src": s, "dst": d})
    stream.wait()
    got = d.to_numpy().reshape(8, 3)
    want1 = np.where(idx1[:, None] >= 0, src[np.maximum(idx1, 0)], 0)
    np.testing.assert_array_equal(got[:4], want1)
    np.testing.assert_array_equal(got[4:6], src[idx2[:2]])
    np.testing.assert_array_equal(got[6:], 7.0)  # rows past the limit are not launched


@pytest.mark.parametrize("splits", [2, 3])
def test_split_and_batched_gemms(engine, stream, splits):
    rng = np.random.default_rng(splits)
    m, n, k = 5, 7, 12
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c0 = rng.standard_normal((m, n)).astype(np.float32)
    plan = Plan(engine, "split")
    plan.gemm_split(GemmShape(m=m, n=n, k=k, lda=k, ldb=n, ldc=n, beta=1.0), Ref("a"), 0,
                    Ref("b"), 0, Ref("c"), 0, splits=splits)
    # then two batched 1 x n products of a's first two rows, into rows of d
    plan.gemm_batched(GemmShape(m=1, n=n, k=k, lda=k, ldb=n, ldc=n), 2, k, 0, n, Ref("a"), 0,
                      Ref("b"), 0, Ref("d"), 0)
    mems = {"a": _mem(engine, a), "b": _mem(engine, b), "c": _mem(engine, c0),
            "d": _mem(engine, np.zeros(2 * n, np.float32))}
    plan.execute(stream, mems)
    stream.wait()
    want = a.astype(np.float64) @ b + c0
    np.testing.assert_allclose(mems["c"].to_numpy().reshape(m, n), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(mems["d"].to_numpy().reshape(2, n), (a[:2] @ b), rtol=1e-5,
                               atol=1e-5)


def test_gemm_epilogue_operands_bound_by_the_caller(engine, stream):
    """Scale operands of a GEMM epilogue come from the ``epilogue`` mapping (any plan
    buffers, no execute-argument convention), in a single and a batched GEMM."""
    rng = np.random.default_rng(7)
    m, n, k = 3, 4, 5
    a = rng.standard_normal((2, m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    ws = rng.uniform(0.5, 2, n).astype(np.float32)
    scales = (("src", ()), ("wei", (1, n)), ("dst", ()))
    ops = {"src_scale": Ref("s"), "wei_scale": Ref("w"), "dst_scale": Ref("d")}
    plan = Plan(engine, "scaled")
    plan.gemm(GemmShape(m=m, n=n, k=k, lda=k, ldb=n, ldc=n, scales=scales), Ref("a"), 0,
              Ref("b"), 0, Ref("c"), 0, epilogue=ops)
    plan.gemm_batched(GemmShape(m=m, n=n, k=k, lda=k, ldb=n, ldc=n, epi_batch=(2,),
                                scales=(("src", ()), ("wei", (1, 1, n)))), 2, m * k, 0, m * n,
                      Ref("a"), 0, Ref("b"), 0, Ref("e"), 0,
                      epilogue={"src_scale": Ref("s"), "wei_scale": Ref("w")})
    with pytest.raises(ValueError, match="bias given both"):
        plan.gemm(GemmShape(m=m, n=n, k=k, lda=k, ldb=n, ldc=n), Ref("a"), 0, Ref("b"), 0,
                  Ref("c"), 0, bias=Ref("x"), epilogue={"bias": Ref("x")})
    mems = {"a": _mem(engine, a), "b": _mem(engine, b), "s": _mem(engine, [0.5]),
            "w": _mem(engine, ws), "d": _mem(engine, [4.0]),
            "c": _mem(engine, np.zeros(m * n, np.float32)),
            "e": _mem(engine, np.zeros(2 * m * n, np.float32))}
    plan.execute(stream, mems)
    stream.wait()
    prod = a.astype(np.float64) @ b * ws
    np.testing.assert_allclose(mems["c"].to_numpy().reshape(m, n), prod[0] * 0.5 / 4,
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(mems["e"].to_numpy().reshape(2, m, n), prod * 0.5, rtol=1e-5,
                               atol=1e-5)


def test_zero_fill_of_bytes(engine, stream):
    plan = Plan(engine, "fill")
    plan.zero(Ref("x"), 3, 6, itemsize=1)  # an odd byte span: filled byte by byte
    x = _mem(engine, np.arange(1, 12, dtype=np.uint8), dt.u8)
    plan.execute(stream, {"x": x})
    stream.wait()
    want = np.arange(1, 12, dtype=np.uint8)
    want[3:9] = 0
    np.testing.assert_array_equal(x.to_numpy(), want)


def test_primitive_steps_bind_views_by_name(engine, stream):
    """A plan of primitives (as the MIOpen and MXNet layers build): a reorder reading a
    transposed view of the call's buffer."""
    src_md = dnnl.memory.desc([3, 4], dt.f32, tag.ba)
    dst_md = dnnl.memory.desc([3, 4], dt.f32, tag.ab)
    r = dnnl.reorder(dnnl.reorder.primitive_desc(engine, src_md, engine, dst_md))
    dst = dnnl.memory(dst_md, engine)
    plan = Plan(engine, "prims")
    plan.primitive(r, {dnnl.ARG_FROM: Bind("x", src_md), dnnl.ARG_TO: dst})
    x = np.arange(12, dtype=np.float32)
    plan.run(stream, {"x": _mem(engine, x)})
    stream.wait()
    np.testing.assert_array_equal(dst.to_numpy().reshape(3, 4), x.reshape(4, 3).T)
