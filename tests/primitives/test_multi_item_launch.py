"""The launch shape GPUs get (several elements per work-item, ``wg`` apart, unrolled) computes
the same results on every device: the elementwise families with the heuristic forced to 3
elements per work-item, against the numpy references, on shapes that leave partial
work-groups (flat) and partial row spans (long rows)."""
from __future__ import annotations

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.reference.binary import binary as ref_binary
from pydnnl.reference.concat import concat as ref_concat
from pydnnl.reference.eltwise import eltwise_forward
from pydnnl.reference.sum import sum_ as ref_sum
from pydnnl.runtime.heuristics import binary as HB

F32 = dnnl.memory.data_type.f32
TAGS = {2: "ab", 3: "abc", 4: "abcd"}


@pytest.fixture(autouse=True)
def three_items(monkeypatch):
    monkeypatch.setattr(HB, "items", lambda info: 3)
    monkeypatch.setattr(HB, "ITEMS_GPU", 3)


def _mem(eng, x):
    md = dnnl.memory.desc(list(x.shape), F32, TAGS[x.ndim])
    return dnnl.memory(md, eng, np.ascontiguousarray(x, np.float32))


# (src0 dims, src1 dims): flat with a partial last group; rows of 1000 (3 x 256 lanes
# then a partial span); rows of 700 (2 x 256 per span); a per-channel broadcast
BINARY = [([3, 5, 7, 11], [3, 5, 7, 11]), ([2, 4, 1000], [1, 4, 1]),
          ([2, 3, 700], [2, 3, 1]), ([5, 999], [1, 999]), ([2, 6, 30, 30], [1, 6, 1, 1])]


@pytest.mark.parametrize("case", range(len(BINARY)))
def test_binary(engine, stream, case):
    d0, d1 = BINARY[case]
    rng = np.random.default_rng(case)
    a, b = rng.standard_normal(d0), rng.standard_normal(d1)
    ma, mb, mc = _mem(engine, a), _mem(engine, b), _mem(engine, np.zeros(d0))
    pd = dnnl.binary.primitive_desc(engine, dnnl.algorithm.binary_mul, ma.get_desc(),
                                    mb.get_desc(), mc.get_desc())
    dnnl.binary(pd).execute(stream, {dnnl.ARG_SRC_0: ma, dnnl.ARG_SRC_1: mb, dnnl.ARG_DST: mc})
    stream.wait()
    want = ref_binary(dnnl.algorithm.binary_mul, a.astype(np.float32), b.astype(np.float32))
    np.testing.assert_allclose(mc.to_numpy(), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dims", [[3, 5, 7, 11], [2, 1000]])
def test_sum_and_concat(engine, stream, dims):
    rng = np.random.default_rng(7)
    xs = [rng.standard_normal(dims).astype(np.float32) for _ in range(2)]
    mems = [_mem(engine, x) for x in xs]
    pd = dnnl.sum.primitive_desc(engine, [0.5, -2.0], [m.get_desc() for m in mems])
    dst = dnnl.memory(pd.dst_desc(), engine)
    dnnl.sum(pd).execute(stream, {dnnl.ARG_MULTIPLE_SRC + i: m for i, m in enumerate(mems)}
                         | {dnnl.ARG_DST: dst})
    stream.wait()
    np.testing.assert_allclose(dst.to_numpy(), ref_sum([0.5, -2.0], xs), rtol=1e-6, atol=1e-6)
    pd = dnnl.concat.primitive_desc(engine, 0, [m.get_desc() for m in mems])
    dst = dnnl.memory(pd.dst_desc(), engine)
    dnnl.concat(pd).execute(stream, {dnnl.ARG_MULTIPLE_SRC + i: m for i, m in enumerate(mems)}
                            | {dnnl.ARG_DST: dst})
    stream.wait()
    np.testing.assert_array_equal(dst.to_numpy(), ref_concat(0, xs))


@pytest.mark.parametrize("n", [1155, 3 * 256 * 4 + 5])
def test_eltwise_flat(engine, stream, n, monkeypatch):
    """The flat eltwise kernel with 3 elements per work-item (the GPU default is 4)."""
    from pydnnl.runtime.heuristics import eltwise as HE

    monkeypatch.setattr(HE, "flat_params", lambda info, count: (256, 3))
    x = np.random.default_rng(n).standard_normal([n]).astype(np.float32)
    md = dnnl.memory.desc([n], F32, "a")
    src, dst = dnnl.memory(md, engine, x), dnnl.memory(md, engine)
    pd = dnnl.eltwise_forward.primitive_desc(engine, dnnl.prop_kind.forward_inference,
                                             dnnl.algorithm.eltwise_tanh, md, md)
    dnnl.eltwise_forward(pd).execute(stream, {dnnl.ARG_SRC: src, dnnl.ARG_DST: dst})
    stream.wait()
    np.testing.assert_allclose(dst.to_numpy(), eltwise_forward(dnnl.algorithm.eltwise_tanh, x),
                               rtol=1e-5, atol=1e-6)


# channel concats of NCHW tensors (long rows per image, one image: a flat copy), bf16 -> f32
CONCAT = [([[2, 3, 20, 20], [2, 5, 20, 20]], "f32", "f32"),
          ([[1, 3, 20, 20], [1, 2, 20, 20], [1, 4, 20, 20]], "f32", "f32"),
          ([[2, 3, 11, 30], [2, 1, 11, 30]], "bf16", "f32")]


@pytest.mark.parametrize("case", range(len(CONCAT)))
def test_concat_in_one_launch(engine, stream, case, monkeypatch):
    """The one-launch concat of long rows GPUs take (kernels.concat.ConcatSpansProblem)."""
    monkeypatch.setattr(HB, "concat_spans", lambda info: True)
    shapes, sdt, ddt = CONCAT[case]
    rng = np.random.default_rng(case)
    S, D = getattr(dnnl.memory.data_type, sdt), getattr(dnnl.memory.data_type, ddt)
    mds = [dnnl.memory.desc(sh, S, "abcd") for sh in shapes]
    mems = [dnnl.memory(md, engine, rng.standard_normal(md.get_dims()).astype(np.float32))
            for md in mds]
    dims = list(shapes[0])
    dims[1] = sum(sh[1] for sh in shapes)
    pd = dnnl.concat.primitive_desc(engine, dnnl.memory.desc(dims, D, "abcd"), 1,
                                    [m.get_desc() for m in mems])
    p = dnnl.concat(pd)
    assert len(p._plan.steps) == 1  # one launch for every source
    dst = dnnl.memory(pd.dst_desc(), engine)
    p.execute(stream, {dnnl.ARG_MULTIPLE_SRC + i: m for i, m in enumerate(mems)}
              | {dnnl.ARG_DST: dst})
    stream.wait()
    np.testing.assert_array_equal(dst.to_numpy(), ref_concat(1, [m.to_numpy() for m in mems]))
