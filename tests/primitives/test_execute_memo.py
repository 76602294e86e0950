"""primitive.execute skips its argument checks only for the stream and memories that passed
them last time: every other call is checked in full. Oracles: closed forms (relu of known
values) and the error each check raises."""
from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import pydnnl as dnnl

dt, tag = dnnl.memory.data_type, dnnl.memory.format_tag


def relu_prim(engine, dims):
    md = dnnl.memory.desc(dims, dt.f32, tag.ab)
    pd = dnnl.eltwise_forward.primitive_desc(
        engine, dnnl.prop_kind.forward_inference, dnnl.algorithm.eltwise_relu, md, md, 0.0, 0.0)
    return dnnl.eltwise_forward(pd), md


def test_changed_arguments_are_checked_again(engine, stream):
    prim, md = relu_prim(engine, [3, 4])
    v = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    x, y = dnnl.memory(md, engine, v), dnnl.memory(md, engine)
    args = {dnnl.ARG_SRC: x, dnnl.ARG_DST: y}
    for _ in range(2):  # the second call takes the memo
        prim.execute(stream, args)
    stream.wait()
    np.testing.assert_array_equal(y.to_numpy(), np.maximum(v, 0))

    other = dnnl.memory(dnnl.memory.desc([4, 3], dt.f32, tag.ab), engine)
    with pytest.raises(dnnl.invalid_arguments, match="ARG_DST has desc"):
        prim.execute(stream, {dnnl.ARG_SRC: x, dnnl.ARG_DST: other})
    with pytest.raises(dnnl.invalid_arguments, match="missing argument ARG_DST"):
        prim.execute(stream, {dnnl.ARG_SRC: x})
    with pytest.raises(dnnl.invalid_arguments, match="unexpected argument"):
        prim.execute(stream, {**args, dnnl.ARG_WEIGHTS: y})
    with pytest.raises(dnnl.invalid_arguments, match="expected a pydnnl.stream"):
        prim.execute(object(), args)
    with pytest.raises(dnnl.invalid_arguments, match="must be a dict"):
        prim.execute(stream, list(args.items()))  # as long as the memoised dict
    with pytest.raises(dnnl.invalid_arguments, match="must be a pydnnl.memory"):
        prim.execute(stream, {dnnl.ARG_SRC: x, dnnl.ARG_DST: np.zeros((3, 4), np.float32)})
    # a fresh dict with the same memories passes (and runs) again
    y2 = dnnl.memory(md, engine)
    prim.execute(stream, {dnnl.ARG_SRC: x, dnnl.ARG_DST: y2})
    stream.wait()
    np.testing.assert_array_equal(y2.to_numpy(), np.maximum(v, 0))


def test_a_moved_handle_is_checked_again(engine, stream):
    """set_data_handle gives a memory a new buffer: a dst moved onto an input's buffer is
    refused although the same memory objects passed the checks before."""
    sq = dnnl.memory.desc([4, 4], dt.f32, tag.ab)
    prim = dnnl.matmul(dnnl.matmul.primitive_desc(engine, sq, sq, sq))
    a = np.arange(16, dtype=np.float32).reshape(4, 4)
    x, w = dnnl.memory(sq, engine, a), dnnl.memory(sq, engine, np.eye(4, dtype=np.float32))
    y = dnnl.memory(sq, engine)
    args = {dnnl.ARG_SRC: x, dnnl.ARG_WEIGHTS: w, dnnl.ARG_DST: y}
    for _ in range(2):
        prim.execute(stream, args)
    stream.wait()
    np.testing.assert_array_equal(y.to_numpy(), a)
    y.set_data_handle(w.get_data_handle())
    with pytest.raises(dnnl.invalid_arguments, match="ARG_WEIGHTS and ARG_DST overlap"):
        prim.execute(stream, args)
    stream.wait()
    np.testing.assert_array_equal(w.to_numpy(), np.eye(4, dtype=np.float32))


def test_the_memo_keeps_no_memory_alive(engine, stream):
    prim, md = relu_prim(engine, [2, 2])
    x, y = dnnl.memory(md, engine, np.ones((2, 2), np.float32)), dnnl.memory(md, engine)
    prim.execute(stream, {dnnl.ARG_SRC: x, dnnl.ARG_DST: y})
    stream.wait()
    ref = weakref.ref(y)
    del y
    gc.collect()
    assert ref() is None
