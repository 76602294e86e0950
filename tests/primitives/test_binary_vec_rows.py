"""The binary vector-row form (``BinaryVecProblem``, ``rules.vec_rows``: the CPU choice),
forced on every device with 8 lanes, against the numpy reference: per-channel operands on
``nchw`` (one value per row) and ``nhwc`` (a vector along the row), row broadcasts, src0
broadcast, rows that are whole vectors, whole vectors plus a tail, and shorter than one
vector; several rows per work-item with a short last work-item; scales, bf16/f16, a new
minibatch through the same program; the index-space form where the vector form does not
apply (comparisons, post-ops) and with the rule forced off."""
from __future__ import annotations

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.reference.binary import binary as ref_binary

A = dnnl.algorithm
dt, tag = dnnl.memory.data_type, dnnl.memory.format_tag
VEC_ALGS = [A.binary_add, A.binary_sub, A.binary_mul, A.binary_div, A.binary_max,
            A.binary_min]
# (src0 dims, src1 dims, tag): rows of 21 (2 vectors + 5), 16 (whole), 5 (short), 37
SHAPES = {"nchw_chan_tail": ([2, 3, 3, 7], [1, 3, 1, 1], "abcd"),
          "nchw_chan_whole": ([3, 2, 4, 4], [1, 2, 1, 1], "abcd"),
          "nhwc_chan_tail": ([2, 21, 2, 3], [1, 21, 1, 1], "acdb"),
          "nhwc_chan_short": ([3, 5, 2, 3], [1, 5, 1, 1], "acdb"),
          "row_bcast": ([3, 5, 37], [1, 1, 37], "abc"),
          "col_bcast": ([3, 5, 37], [3, 5, 1], "abc"),
          "src0_bcast": ([1, 3, 1, 21], [2, 3, 4, 21], "abcd")}


@pytest.fixture
def forced(monkeypatch):
    """8 lanes, 2 rows per work-item (the last work-item short where the row count is odd)."""
    from pydnnl.runtime.heuristics import binary as rules
    monkeypatch.setattr(rules, "vec_rows", lambda info, dims: (8, 2) if len(dims) > 1
                        else (0, 0))
    return rules


def _data(seed, dims, alg):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2, 2, dims)
    if alg == A.binary_div:
        x = np.where(np.abs(x) < 0.25, 0.75, x)
    return x.astype(np.float32)


def _kernel_names(prim) -> list[str]:
    return [st.kernel.src.source for st in prim._plan.steps]


def _run(engine, stream, alg, x0, x1, t, ddt=dt.f32, sdt=(dt.f32, dt.f32), attr=None,
         extra=None):
    dims = [max(a, b) for a, b in zip(x0.shape, x1.shape)]
    m0 = dnnl.memory.desc(list(x0.shape), sdt[0], t)
    m1 = dnnl.memory.desc(list(x1.shape), sdt[1], t)
    md = dnnl.memory.desc(dims, ddt, t)
    pd = (dnnl.binary.primitive_desc(engine, alg, m0, m1, md) if attr is None
          else dnnl.binary.primitive_desc(engine, alg, m0, m1, md, attr))
    a, b = dnnl.memory(m0, engine, x0), dnnl.memory(m1, engine, x1)
    c = dnnl.memory(md, engine)
    prim = dnnl.binary(pd)
    args = {dnnl.ARG_SRC_0: a, dnnl.ARG_SRC_1: b, dnnl.ARG_DST: c, **(extra or {})}
    prim.execute(stream, args)
    stream.wait()
    vec = any("reqd_work_group_size(1, 1, 1)" in src for src in _kernel_names(prim))
    return (a.to_numpy().astype(np.float64), b.to_numpy().astype(np.float64),
            c.to_numpy().astype(np.float64), vec)


def _close(got, want, rtol=2e-6):
    np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-6)


@pytest.mark.sampled(every=5)
@pytest.mark.parametrize("alg", VEC_ALGS, ids=[a.name[7:] for a in VEC_ALGS])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_vector_rows_match_reference(engine, stream, forced, alg, shape):
    d0, d1, t = SHAPES[shape]
    x0, x1 = _data(len(shape), d0, alg), _data(int(alg), d1, alg)
    a, b, y, vec = _run(engine, stream, alg, x0, x1, t)
    assert vec
    _close(y, ref_binary(alg, a, b))


@pytest.mark.parametrize("shape", ["nchw_chan_tail", "nhwc_chan_tail", "row_bcast"])
def test_vector_rows_scales(engine, stream, forced, shape):
    d0, d1, t = SHAPES[shape]
    x0, x1 = _data(1, d0, None), _data(2, d1, None)
    attr = dnnl.primitive_attr()
    attr.set_scales_mask(dnnl.ARG_SRC_0, 0)
    attr.set_scales_mask(dnnl.ARG_SRC_1, 0)
    s0 = dnnl.memory(dnnl.memory.desc([1], dt.f32, tag.x), engine, np.array([0.5], np.float32))
    s1 = dnnl.memory(dnnl.memory.desc([1], dt.f32, tag.x), engine, np.array([-3.0], np.float32))
    a, b, y, vec = _run(engine, stream, A.binary_mul, x0, x1, t, attr=attr,
                        extra={dnnl.ARG_ATTR_SCALES | dnnl.ARG_SRC_0: s0,
                               dnnl.ARG_ATTR_SCALES | dnnl.ARG_SRC_1: s1})
    assert vec
    _close(y, ref_binary(A.binary_mul, 0.5 * a, -3.0 * b))


@pytest.mark.parametrize("types", [(dt.bf16, dt.f32, dt.bf16), (dt.f16, dt.f16, dt.f16),
                                   (dt.f32, dt.bf16, dt.f16)],
                         ids=["bf16-f32-bf16", "f16", "f32-bf16-f16"])
@pytest.mark.parametrize("shape", ["nchw_chan_tail", "nhwc_chan_tail"])
def test_vector_rows_low_precision(engine, stream, forced, types, shape):
    d0, d1, t = SHAPES[shape]
    x0, x1 = _data(3, d0, None), _data(4, d1, None)
    a, b, y, vec = _run(engine, stream, A.binary_add, x0, x1, t, ddt=types[2],
                        sdt=types[:2])
    assert vec
    want = ref_binary(A.binary_add, a, b)
    eps = {dt.bf16: 2.0 ** -8, dt.f16: 2.0 ** -11}[types[2]]
    assert np.all(np.abs(y - want) <= (2 * eps + 2.0 ** -24) * np.abs(want) + 2.0 ** -24)


def test_vector_rows_new_minibatch_reuses_program(engine, stream, forced):
    """The row count is an argument: minibatch 2, 5 and 1 run one program (one problem)."""
    problems = set()
    for n in (2, 5, 1):
        x0, x1 = _data(n, [n, 21, 2, 3], None), _data(9, [1, 21, 1, 1], None)
        a, b, y, vec = _run(engine, stream, A.binary_add, x0, x1, "acdb")
        assert vec
        _close(y, ref_binary(A.binary_add, a, b))
        pd = dnnl.binary.primitive_desc(engine, A.binary_add,
                                        dnnl.memory.desc([n, 21, 2, 3], dt.f32, "acdb"),
                                        dnnl.memory.desc([1, 21, 1, 1], dt.f32, "acdb"),
                                        dnnl.memory.desc([n, 21, 2, 3], dt.f32, "acdb"))
        problems.add(pd._vec_problem(engine))
    assert len(problems) == 1 and None not in problems


@pytest.mark.parametrize("case", ["compare", "post_op", "rule_off", "flat"])
def test_index_space_form_where_vector_form_does_not_apply(engine, stream, forced,
                                                           monkeypatch, case):
    d0, d1, t = SHAPES["nhwc_chan_tail"]
    alg = A.binary_gt if case == "compare" else A.binary_add
    if case == "flat":
        d1 = d0
    x0, x1 = _data(5, d0, alg), _data(6, d1, alg)
    attr = None
    if case == "post_op":
        ops = dnnl.post_ops()
        ops.append_eltwise(A.eltwise_relu, 0.0, 0.0)
        attr = dnnl.primitive_attr()
        attr.set_post_ops(ops)
    if case == "rule_off":
        monkeypatch.setattr(forced, "vec_rows", lambda info, dims: (0, 0))
    a, b, y, vec = _run(engine, stream, alg, x0, x1, t, attr=attr)
    assert not vec
    want = ref_binary(alg, a, b)
    _close(y, np.maximum(want, 0) if case == "post_op" else want)


def test_rule_closed_form():
    """``vec_rows`` on made-up devices: GPUs and single-dim problems none; Intel's CPU runtime
    16 lanes, others 8; up to 16 rows, about 16384 values per work-item."""
    from types import SimpleNamespace

    from pydnnl.runtime.heuristics import binary as rules
    cpu = SimpleNamespace(is_gpu=False, runtime="intel")
    assert rules.vec_rows(SimpleNamespace(is_gpu=True, runtime="nvidia"), (8, 64)) == (0, 0)
    assert rules.vec_rows(cpu, (100,)) == (0, 0)
    assert rules.vec_rows(cpu, (32, 256, 3136)) == (16, 5)
    assert rules.vec_rows(cpu, (100352, 256)) == (16, 16)
    assert rules.vec_rows(SimpleNamespace(is_gpu=False, runtime="pocl"), (8192, 768)) == (8, 16)
