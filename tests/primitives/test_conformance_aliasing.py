"""Execute rejects outputs whose storage overlaps another argument (issue 20).

An RNN run with ARG_DST_LAYER over the bytes of ARG_SRC_LAYER used to run and return wrong
values. Oracles: the float64 numpy reference (pydnnl.reference.rnn) for the runs that must
still work (separate regions of one buffer), a closed form for in-place eltwise.
"""
from __future__ import annotations

import numpy as np
import pyopencl as cl
import pytest

import pydnnl as dnnl
from pydnnl.reference.rnn import rnn_backward, rnn_forward

dt, tag = dnnl.memory.data_type, dnnl.memory.format_tag
T, N, C = 3, 2, 16          # SLC == DIC, so src_layer and dst_layer share one desc
RNG = np.random.default_rng(20)


def md(dims, t):
    return dnnl.memory.desc(dims, dt.f32, t)


def arrays():
    return {"src_layer": RNG.uniform(-1, 1, (T, N, C)),
            "weights_layer": RNG.uniform(-0.5, 0.5, (1, 1, C, 1, C)),
            "weights_iter": RNG.uniform(-0.5, 0.5, (1, 1, C, 1, C)),
            "bias": RNG.uniform(-0.5, 0.5, (1, 1, 1, C))}


def forward_pd(engine, prop=dnnl.prop_kind.forward_inference):
    layer = md([T, N, C], tag.tnc)
    return dnnl.vanilla_rnn_forward.primitive_desc(
        engine, prop, dnnl.algorithm.eltwise_tanh, dnnl.rnn_direction.unidirectional_left2right,
        layer, None, md([1, 1, C, 1, C], tag.ldigo), md([1, 1, C, 1, C], tag.ldigo),
        md([1, 1, 1, C], tag.ldgo), layer, None)


def weight_args(engine, a):
    return {dnnl.ARG_WEIGHTS_LAYER: dnnl.memory(md([1, 1, C, 1, C], tag.ldigo), engine,
                                                a["weights_layer"].astype(np.float32)),
            dnnl.ARG_WEIGHTS_ITER: dnnl.memory(md([1, 1, C, 1, C], tag.ldigo), engine,
                                               a["weights_iter"].astype(np.float32)),
            dnnl.ARG_BIAS: dnnl.memory(md([1, 1, 1, C], tag.ldgo), engine,
                                       a["bias"].astype(np.float32))}


def reference(a):
    y, _, _, _ = rnn_forward("vanilla_rnn", a["src_layer"], None, None, a["weights_layer"],
                             a["weights_iter"], a["bias"], activation="tanh", dtype=np.float64)
    return y


def sub_buffers(engine, nbytes, starts):
    """Memories of the layer desc on sub-buffers of one buffer, at byte ``starts``."""
    align = engine.device.mem_base_addr_align // 8
    assert all(s % align == 0 for s in starts), "sub-buffer origins must be aligned"
    big = cl.Buffer(engine.context, cl.mem_flags.READ_WRITE, max(starts) + nbytes)
    # the caller keeps ``big``: a runtime may free a released parent under its sub-buffers
    return big, [dnnl.memory(md([T, N, C], tag.tnc), engine, big.get_sub_region(s, nbytes))
                 for s in starts]


def test_rnn_dst_layer_same_memory_as_src_layer_raises_before_running(engine, stream):
    a = arrays()
    pd = forward_pd(engine)
    prim = dnnl.vanilla_rnn_forward(pd)
    x = dnnl.memory(pd.src_layer_desc(), engine, a["src_layer"].astype(np.float32))
    args = {dnnl.ARG_SRC_LAYER: x, dnnl.ARG_DST_LAYER: x, **weight_args(engine, a)}
    with pytest.raises(dnnl.invalid_arguments, match="ARG_SRC_LAYER and ARG_DST_LAYER"):
        prim.execute(stream, args)
    stream.wait()
    np.testing.assert_array_equal(x.to_numpy(), a["src_layer"].astype(np.float32))


def test_rnn_dst_layer_on_the_same_cl_buffer_raises(engine, stream):
    a = arrays()
    pd = forward_pd(engine)
    x = dnnl.memory(pd.src_layer_desc(), engine, a["src_layer"].astype(np.float32))
    y = dnnl.memory(pd.dst_layer_desc(), engine, x.get_data_handle())  # another wrapper
    with pytest.raises(dnnl.invalid_arguments, match="ARG_SRC_LAYER and ARG_DST_LAYER overlap"):
        dnnl.vanilla_rnn_forward(pd).execute(
            stream, {dnnl.ARG_SRC_LAYER: x, dnnl.ARG_DST_LAYER: y, **weight_args(engine, a)})
    stream.wait()
    np.testing.assert_array_equal(x.to_numpy(), a["src_layer"].astype(np.float32))


def test_rnn_overlapping_sub_buffers_raise_and_separate_ones_run(engine, stream):
    a = arrays()
    pd = forward_pd(engine)
    prim = dnnl.vanilla_rnn_forward(pd)
    nbytes = pd.src_layer_desc().get_size()
    align = engine.device.mem_base_addr_align // 8
    step = -(-nbytes // align) * align  # first aligned origin past src_layer's bytes
    big, (x, y_overlap, y_apart) = sub_buffers(engine, nbytes, [0, align, step])
    assert align < nbytes <= step
    x.write(a["src_layer"].astype(np.float32))
    w = weight_args(engine, a)
    with pytest.raises(dnnl.invalid_arguments, match="ARG_SRC_LAYER and ARG_DST_LAYER"):
        prim.execute(stream, {dnnl.ARG_SRC_LAYER: x, dnnl.ARG_DST_LAYER: y_overlap, **w})
    prim.execute(stream, {dnnl.ARG_SRC_LAYER: x, dnnl.ARG_DST_LAYER: y_apart, **w})
    stream.wait()
    np.testing.assert_allclose(y_apart.to_numpy(), reference(a), rtol=1e-5, atol=1e-5)


def test_rnn_backward_diff_src_layer_aliasing_diff_dst_layer_raises(engine, stream):
    a = arrays()
    fpd = forward_pd(engine, dnnl.prop_kind.forward_training)
    x = dnnl.memory(fpd.src_layer_desc(), engine, a["src_layer"].astype(np.float32))
    y = dnnl.memory(fpd.dst_layer_desc(), engine)
    ws = dnnl.memory(fpd.workspace_desc(), engine)
    w = weight_args(engine, a)
    dnnl.vanilla_rnn_forward(fpd).execute(
        stream, {dnnl.ARG_SRC_LAYER: x, dnnl.ARG_DST_LAYER: y, dnnl.ARG_WORKSPACE: ws, **w})
    layer, wl = md([T, N, C], tag.tnc), md([1, 1, C, 1, C], tag.ldigo)
    bpd = dnnl.vanilla_rnn_backward.primitive_desc(
        engine, dnnl.prop_kind.backward, dnnl.algorithm.eltwise_tanh,
        dnnl.rnn_direction.unidirectional_left2right, layer, None, wl, wl,
        md([1, 1, 1, C], tag.ldgo), layer, None, layer, None, wl, wl, md([1, 1, 1, C], tag.ldgo),
        layer, None, fpd)
    dy_np = RNG.uniform(-1, 1, (T, N, C))
    dy = dnnl.memory(bpd.diff_dst_layer_desc(), engine, dy_np.astype(np.float32))
    grads = {dnnl.ARG_DIFF_WEIGHTS_LAYER: dnnl.memory(bpd.diff_weights_layer_desc(), engine),
             dnnl.ARG_DIFF_WEIGHTS_ITER: dnnl.memory(bpd.diff_weights_iter_desc(), engine),
             dnnl.ARG_DIFF_BIAS: dnnl.memory(bpd.diff_bias_desc(), engine)}
    args = {dnnl.ARG_SRC_LAYER: x, dnnl.ARG_DST_LAYER: y, dnnl.ARG_WORKSPACE: ws,
            dnnl.ARG_DIFF_DST_LAYER: dy, **w, **grads}
    prim = dnnl.vanilla_rnn_backward(bpd)
    with pytest.raises(dnnl.invalid_arguments,
                       match="ARG_DIFF_DST_LAYER and ARG_DIFF_SRC_LAYER are the same memory"):
        prim.execute(stream, {**args, dnnl.ARG_DIFF_SRC_LAYER: dy})
    with pytest.raises(dnnl.invalid_arguments, match="ARG_SRC_LAYER and ARG_DIFF_SRC_LAYER"):
        prim.execute(stream, {**args, dnnl.ARG_DIFF_SRC_LAYER: x})
    stream.wait()
    np.testing.assert_array_equal(dy.to_numpy(), dy_np.astype(np.float32))
    # the same call with its own diff_src_layer runs and matches the float64 reference
    dx = dnnl.memory(bpd.diff_src_layer_desc(), engine)
    prim.execute(stream, {**args, dnnl.ARG_DIFF_SRC_LAYER: dx})
    stream.wait()
    _, _, _, cache = rnn_forward("vanilla_rnn", a["src_layer"], None, None, a["weights_layer"],
                                 a["weights_iter"], a["bias"], activation="tanh",
                                 dtype=np.float64)
    want = rnn_backward("vanilla_rnn", cache, dy_np, None, None)
    np.testing.assert_allclose(dx.to_numpy(), want["diff_src_layer"], rtol=1e-4, atol=1e-5)


def test_convolution_dst_aliasing_src_raises(engine, stream):
    x_md = md([1, 4, 5, 5], tag.nchw)
    pd = dnnl.convolution_forward.primitive_desc(
        engine, dnnl.prop_kind.forward_inference, dnnl.algorithm.convolution_direct, x_md,
        md([4, 4, 3, 3], tag.oihw), x_md, [1, 1], [1, 1], [1, 1])
    x = dnnl.memory(x_md, engine, np.ones((1, 4, 5, 5), np.float32))
    wt = dnnl.memory(pd.weights_desc(), engine, np.ones((4, 4, 3, 3), np.float32))
    with pytest.raises(dnnl.invalid_arguments, match="ARG_SRC and ARG_DST are the same memory"):
        dnnl.convolution_forward(pd).execute(
            stream, {dnnl.ARG_SRC: x, dnnl.ARG_WEIGHTS: wt, dnnl.ARG_DST: x})
    np.testing.assert_array_equal(x.to_numpy(), 1.0)


def test_matmul_and_inner_product_dst_aliasing_an_input_raise(engine, stream):
    sq = md([4, 4], tag.ab)
    mm = dnnl.matmul.primitive_desc(engine, sq, sq, sq)
    x = dnnl.memory(sq, engine, np.eye(4, dtype=np.float32))
    w = dnnl.memory(sq, engine, np.eye(4, dtype=np.float32))
    with pytest.raises(dnnl.invalid_arguments, match="ARG_WEIGHTS and ARG_DST"):
        dnnl.matmul(mm).execute(stream, {dnnl.ARG_SRC: x, dnnl.ARG_WEIGHTS: w,
                                         dnnl.ARG_DST: w})
    ip = dnnl.inner_product_forward.primitive_desc(
        engine, dnnl.prop_kind.forward_inference, sq, sq, sq)
    with pytest.raises(dnnl.invalid_arguments, match="ARG_SRC and ARG_DST"):
        dnnl.inner_product_forward(ip).execute(stream, {dnnl.ARG_SRC: x, dnnl.ARG_WEIGHTS: w,
                                                        dnnl.ARG_DST: x})


def test_eltwise_in_place_is_still_allowed(engine, stream):
    v = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    pd = dnnl.eltwise_forward.primitive_desc(
        engine, dnnl.prop_kind.forward_inference, dnnl.algorithm.eltwise_relu, md([3, 4], tag.ab),
        md([3, 4], tag.ab), 0.0, 0.0)
    m = dnnl.memory(pd.src_desc(), engine, v)
    dnnl.eltwise_forward(pd).execute(stream, {dnnl.ARG_SRC: m, dnnl.ARG_DST: m})
    stream.wait()
    np.testing.assert_array_equal(m.to_numpy(), np.maximum(v, 0))


def test_rnn_dst_layer_moved_onto_src_layer_after_a_run_raises(engine, stream):
    """The storage spans are kept per memory between executions; a data handle set after a
    run (here: dst_layer moved onto src_layer's buffer) is checked again."""
    a = arrays()
    pd = forward_pd(engine)
    prim = dnnl.vanilla_rnn_forward(pd)
    x = dnnl.memory(pd.src_layer_desc(), engine, a["src_layer"].astype(np.float32))
    y = dnnl.memory(pd.dst_layer_desc(), engine)
    args = {dnnl.ARG_SRC_LAYER: x, dnnl.ARG_DST_LAYER: y, **weight_args(engine, a)}
    prim.execute(stream, args)
    stream.wait()
    np.testing.assert_allclose(y.to_numpy(), reference(a), rtol=1e-5, atol=1e-5)
    y.set_data_handle(x.get_data_handle())
    with pytest.raises(dnnl.invalid_arguments, match="ARG_SRC_LAYER and ARG_DST_LAYER overlap"):
        prim.execute(stream, args)
    stream.wait()
    np.testing.assert_array_equal(x.to_numpy(), a["src_layer"].astype(np.float32))
