"""Streams: flags, wait, out-of-order queues and kernel profiling."""
from __future__ import annotations

import numpy as np
import pyopencl as cl
import pytest

import pydnnl as dnnl

DIMS = [2, 10, 3, 3]  # nChw8c pads C from 10 to 16


def _mds():
    return (dnnl.memory.desc(DIMS, dnnl.memory.data_type.f32, dnnl.memory.format_tag.nchw),
            dnnl.memory.desc(DIMS, dnnl.memory.data_type.f32, dnnl.memory.format_tag.nChw8c))


def test_default_flags(engine):
    s = dnnl.stream(engine)
    assert s.get_flags() == dnnl.stream.flags.in_order == dnnl.stream.flags.default_flags
    assert s.get_engine() == engine
    assert not s.out_of_order
    assert not s.queue.properties & cl.command_queue_properties.OUT_OF_ORDER_EXEC_MODE_ENABLE
    assert not s.queue.properties & cl.command_queue_properties.PROFILING_ENABLE
    assert s.wait() is s


def test_out_of_order_flag(engine):
    s = dnnl.stream(engine, dnnl.stream.flags.out_of_order)
    assert s.get_flags() == dnnl.stream.flags.out_of_order
    supported = bool(engine.device.queue_properties
                     & cl.command_queue_properties.OUT_OF_ORDER_EXEC_MODE_ENABLE)
    assert s.out_of_order == supported
    assert bool(s.queue.properties
                & cl.command_queue_properties.OUT_OF_ORDER_EXEC_MODE_ENABLE) == supported


def test_out_of_order_stream_runs_padded_reorder(engine):
    """Filling the padding and the conversion are two commands; they must stay ordered."""
    src_md, dst_md = _mds()
    s = dnnl.stream(engine, dnnl.stream.flags.out_of_order)
    x = np.arange(np.prod(DIMS), dtype=np.float32).reshape(DIMS) + 1
    src = dnnl.memory(src_md, engine, x)
    r = dnnl.reorder(src, dnnl.memory(dst_md, engine))
    for _ in range(5):
        dst = dnnl.memory(dst_md, engine)
        r.execute(s, src, dst)
        s.wait()
        assert np.array_equal(dst.to_numpy(), x)
        raw = dst.read_raw().reshape(2, 2, 3, 3, 8)
        assert np.all(raw[:, 1, :, :, 2:] == 0)  # channels 10..15 are padding


def test_bad_flags_and_engine(engine):
    with pytest.raises(dnnl.invalid_arguments, match="exclude"):
        dnnl.stream(engine, dnnl.stream.flags.in_order | dnnl.stream.flags.out_of_order)
    with pytest.raises(dnnl.invalid_arguments, match="flags"):
        dnnl.stream(engine, 0x40)
    with pytest.raises(dnnl.invalid_arguments, match="engine"):
        dnnl.stream("cpu")


def test_profiling_records_kernel_times(engine):
    src_md, dst_md = _mds()
    s = dnnl.stream(engine, dnnl.stream.flags.in_order | dnnl.stream.flags.profiling)
    assert s.queue.properties & cl.command_queue_properties.PROFILING_ENABLE
    x = np.ones(DIMS, np.float32)
    src, dst = dnnl.memory(src_md, engine, x), dnnl.memory(dst_md, engine)
    back = dnnl.memory(src_md, engine)
    to_blocked, to_plain = dnnl.reorder(src, dst), dnnl.reorder(dst, back)
    for _ in range(3):
        to_blocked.execute(s, src, dst)
        to_plain.execute(s, dst, back)
    times = s.get_kernel_times()
    names = [n for n, _ in times]
    # into the padded layout: a padding fill then the kernel; back to plain: the kernel only
    assert names == ["reorder_zero_padding", "pydnnl_reorder", "pydnnl_reorder"] * 3
    assert all(isinstance(t, float) and t >= 0 for _, t in times)
    assert sum(t for _, t in times) > 0
    assert s.get_kernel_times() == []  # reset by the previous call
    to_plain.execute(s, dst, back)
    assert len(s.get_kernel_times(reset=False)) == 1
    assert len(s.get_kernel_times()) == 1
    assert np.array_equal(back.to_numpy(), x)


def test_kernel_times_need_profiling(engine):
    with pytest.raises(dnnl.invalid_arguments, match="profiling"):
        dnnl.stream(engine).get_kernel_times()
