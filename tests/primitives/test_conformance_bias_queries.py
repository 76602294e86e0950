"""bias_desc()/diff_bias_desc() and weights_md index 1 as oneDNN numbers them (issue 20).

oneDNN's convolution, deconvolution, inner product and matmul pds answer ``weights_md`` index 1
with the bias (``diff_weights_md`` index 1 with the diff bias); RNN pds count the peephole and
projection only when present. Oracles: the descs passed in, and the float64 references for a
run through memories made from the queried descs.
"""
from __future__ import annotations

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.reference.inner_product import inner_product_forward
from pydnnl.reference.matmul import matmul

dt, tag, q = dnnl.memory.data_type, dnnl.memory.format_tag, dnnl.query
FWD = dnnl.prop_kind.forward_training


def md(dims, t=tag.any):
    return dnnl.memory.desc(dims, dt.f32, t)


def assert_bias_family(pd, bias, diff_bias):
    """Every way of asking for the bias and the diff bias agrees with the descs given."""
    for got in (pd.bias_desc(), pd.weights_desc(1), pd.query_md(q.weights_md, 1),
                pd.query_md(q.exec_arg_md, dnnl.ARG_BIAS)):
        assert got == bias
    for got in (pd.diff_bias_desc(), pd.diff_weights_desc(1), pd.query_md(q.diff_weights_md, 1),
                pd.query_md(q.exec_arg_md, dnnl.ARG_DIFF_BIAS)):
        assert got == diff_bias
    assert pd.weights_desc(2).is_zero() and pd.diff_weights_desc(2).is_zero()


def test_inner_product_bias_queries(cpu_engine):
    s, w, d, b = md([2, 3], tag.ab), md([4, 3], tag.ab), md([2, 4], tag.ab), md([4], tag.a)
    zero = dnnl.memory.desc()
    fwd = dnnl.inner_product_forward.primitive_desc(cpu_engine, FWD, s, w, b, d)
    assert_bias_family(fwd, b, zero)
    assert fwd.weights_desc(0) == w
    no_bias = dnnl.inner_product_forward.primitive_desc(cpu_engine, FWD, s, w, d)
    assert_bias_family(no_bias, zero, zero)
    bwd_d = dnnl.inner_product_backward_data.primitive_desc(cpu_engine, s, w, d, fwd)
    assert_bias_family(bwd_d, zero, zero)
    bwd_w = dnnl.inner_product_backward_weights.primitive_desc(cpu_engine, s, w, b, d, fwd)
    assert_bias_family(bwd_w, zero, b)
    assert bwd_w.diff_weights_desc(0) == w


def test_matmul_bias_queries(cpu_engine):
    s, w, d, b = md([2, 3], tag.ab), md([3, 4], tag.ab), md([2, 4], tag.ab), md([1, 4], tag.ab)
    assert_bias_family(dnnl.matmul.primitive_desc(cpu_engine, s, w, b, d), b, dnnl.memory.desc())
    assert_bias_family(dnnl.matmul.primitive_desc(cpu_engine, s, w, d), dnnl.memory.desc(),
                       dnnl.memory.desc())


@pytest.mark.parametrize("op", ["convolution", "deconvolution"])
def test_convolution_and_deconvolution_bias_queries(cpu_engine, op):
    fwd_cls = getattr(dnnl, f"{op}_forward")
    bwd_w_cls, bwd_d_cls = (getattr(dnnl, f"{op}_backward_weights"),
                            getattr(dnnl, f"{op}_backward_data"))
    alg = getattr(dnnl.algorithm, f"{op}_direct")
    s, w, d, b = (md([1, 2, 5], tag.ncw), md([2, 2, 3], tag.oiw), md([1, 2, 5], tag.ncw),
                  md([2], tag.a))
    zero, geo = dnnl.memory.desc(), ([1], [1], [1])
    fwd = fwd_cls.primitive_desc(cpu_engine, FWD, alg, s, w, b, d, *geo)
    assert_bias_family(fwd, b, zero)
    assert fwd.weights_desc(0) == w
    assert_bias_family(fwd_cls.primitive_desc(cpu_engine, FWD, alg, s, w, d, *geo), zero, zero)
    bwd_w = bwd_w_cls.primitive_desc(cpu_engine, alg, s, w, b, d, *geo, fwd)
    assert_bias_family(bwd_w, zero, b)
    assert bwd_w.diff_weights_desc(0) == w
    assert_bias_family(bwd_d_cls.primitive_desc(cpu_engine, alg, s, w, d, *geo, fwd), zero, zero)


def test_lstm_weights_md_counts_only_the_weights_present(cpu_engine):
    T, N, C, G = 2, 1, 3, 4
    layer, w = md([T, N, C], tag.tnc), md([1, 1, C, G, C], tag.ldigo)
    bias, peep = md([1, 1, G, C], tag.ldgo), md([1, 1, 3, C], tag.ldgo)
    direction = dnnl.rnn_direction.unidirectional_left2right
    plain = dnnl.lstm_forward.primitive_desc(cpu_engine, FWD, direction, layer, None, None, w, w,
                                             bias, layer, None, None)
    assert [plain.weights_desc(i) for i in range(3)] == [w, w, bias]
    assert plain.weights_desc(3).is_zero() and plain.weights_desc(4).is_zero()
    peephole = dnnl.lstm_forward.primitive_desc(cpu_engine, FWD, direction, layer, None, None, w,
                                                w, peep, bias, layer, None, None)
    assert [peephole.weights_desc(i) for i in range(4)] == [w, w, peep, bias]
    assert peephole.query_md(q.weights_md, 3) == bias == peephole.bias_desc()


def test_memories_from_the_queried_bias_desc_compute_the_reference(engine, stream):
    rng = np.random.default_rng(7)
    x, w, b = (rng.standard_normal(shape) for shape in ([2, 3], [4, 3], [4]))
    s, wd, d = md([2, 3], tag.ab), md([4, 3], tag.any), md([2, 4], tag.ab)
    ip = dnnl.inner_product_forward.primitive_desc(engine, FWD, s, wd, md([4]), d)
    mem = {dnnl.ARG_SRC: dnnl.memory(s, engine, x.astype(np.float32)),
           dnnl.ARG_WEIGHTS: dnnl.memory(ip.weights_desc(0), engine, w.astype(np.float32)),
           dnnl.ARG_BIAS: dnnl.memory(ip.weights_desc(1), engine, b.astype(np.float32)),
           dnnl.ARG_DST: dnnl.memory(d, engine)}
    dnnl.inner_product_forward(ip).execute(stream, mem)
    stream.wait()
    np.testing.assert_allclose(mem[dnnl.ARG_DST].to_numpy(), inner_product_forward(x, w, b),
                               rtol=1e-5, atol=1e-5)

    mm = dnnl.matmul.primitive_desc(engine, s, md([3, 4], tag.ab), md([1, 4], tag.ab), d)
    wt = w.T.copy()
    mem = {dnnl.ARG_SRC: dnnl.memory(s, engine, x.astype(np.float32)),
           dnnl.ARG_WEIGHTS: dnnl.memory(mm.weights_desc(), engine, wt.astype(np.float32)),
           dnnl.ARG_BIAS: dnnl.memory(mm.bias_desc(), engine, b[None].astype(np.float32)),
           dnnl.ARG_DST: dnnl.memory(d, engine)}
    dnnl.matmul(mm).execute(stream, mem)
    stream.wait()
    np.testing.assert_allclose(mem[dnnl.ARG_DST].to_numpy(), matmul(x, wt, b[None]), rtol=1e-5,
                               atol=1e-5)
