"""Memory objects: allocation, copying numpy arrays in and out of every kind of layout,
padding, handles, the buffer pool and bad inputs.

Oracles: numpy transposes for plain layouts, closed-form offsets for blocked ones, numpy casts
and an independent bfloat16 rounding written here.
"""
from __future__ import annotations

import numpy as np
import pyopencl as cl
import pytest

import pydnnl as dnnl
from pydnnl.memory.pool import BufferPool

md_ = dnnl.memory.desc
dt = dnnl.memory.data_type
tag = dnnl.memory.format_tag
RNG = np.random.default_rng(7)


def bf16_round(x: np.ndarray) -> np.ndarray:
    """Round to 8 significant bits, ties to even (frexp based, finite inputs)."""
    m, e = np.frexp(np.asarray(x, np.float64))
    return np.ldexp(np.rint(np.ldexp(m, 8)), e - 8).astype(np.float32)


def nchw8c_raw(x: np.ndarray) -> np.ndarray:
    """nChw8c storage of an nchw array, zero padded: reshape-and-transpose construction."""
    N, C, H, W = x.shape
    Cb = -(-C // 8)
    padded = np.zeros((N, Cb * 8, H, W), x.dtype)
    padded[:, :C] = x
    return padded.reshape(N, Cb, 8, H, W).transpose(0, 1, 3, 4, 2).ravel()


def test_alloc_and_getters(engine):
    md = md_([3, 5], dt.f32, tag.ab)
    m = dnnl.memory(md, engine)
    assert m.get_desc() == md and m.get_desc() is md
    assert m.get_engine() == engine
    assert isinstance(m.buffer, cl.Buffer) and m.get_data_handle() is m.buffer
    assert m.buffer.size >= md.get_size() == 60
    assert m.buffer.context == engine.context


@pytest.mark.parametrize("name", ["abcd", "acdb", "dcba", "bdac"])
def test_plain_layout_roundtrip(engine, name):
    dims = [2, 3, 4, 5]
    x = RNG.standard_normal(dims).astype(np.float32)
    m = dnnl.memory(md_(dims, dt.f32, name), engine, x)
    perm = ["abcd".index(c) for c in name]
    assert np.array_equal(m.read_raw(), np.transpose(x, perm).ravel())
    back = m.to_numpy()
    assert back.dtype == np.float32 and np.array_equal(back, x)
    assert np.array_equal(np.asarray(m), x)
    assert np.asarray(m, dtype=np.float64).dtype == np.float64


def test_strided_layout_with_gaps(engine):
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    m = dnnl.memory(md_([3, 4], dt.f32, [10, 2]), engine, x)
    raw = m.read_raw()
    assert raw.size == 27
    assert np.array_equal(raw[np.add.outer(np.arange(3) * 10, np.arange(4) * 2)], x)
    assert np.array_equal(m.to_numpy(), x)


def test_blocked_roundtrip_padding_zero(engine):
    dims = [2, 10, 3, 5]
    md = md_(dims, dt.f32, tag.nChw8c)
    # leave garbage in a pooled buffer of the same size, then reuse it
    junk = dnnl.memory(md_([md.get_size() // 4], dt.f32, tag.a), engine,
                       np.full(md.get_size() // 4, 7.0, np.float32))
    del junk
    x = RNG.standard_normal(dims).astype(np.float32)
    m = dnnl.memory(md, engine, x)
    raw = m.read_raw()
    assert raw.size == 2 * 16 * 3 * 5
    assert np.array_equal(raw, nchw8c_raw(x))  # padding (channels 10..15) is zero
    assert np.array_equal(m.to_numpy(), x)


def test_blocked_weights_roundtrip(engine):
    # OIhw8i8o: o and i padded to 16, inner block i-major then o
    dims = [10, 13, 3, 2]
    x = RNG.standard_normal(dims).astype(np.float32)
    m = dnnl.memory(md_(dims, dt.f32, tag.OIhw8i8o), engine, x)
    p = np.zeros((16, 16, 3, 2), np.float32)
    p[:10, :13] = x
    expected = p.reshape(2, 8, 2, 8, 3, 2).transpose(0, 2, 4, 5, 3, 1).ravel()
    assert np.array_equal(m.read_raw(), expected)
    assert np.array_equal(m.to_numpy(), x)


def test_data_types_roundtrip(engine):
    x = RNG.uniform(-3, 3, (4, 6)).astype(np.float32)
    # ties for bf16: 1 + 2^-8 -> 1, 1 + 3*2^-8 -> 1 + 2^-6, and their negatives
    x[0, :4] = [1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -8), -(1 + 3 * 2 ** -8)]
    for name, expected in [("f32", x), ("f16", x.astype(np.float16)),
                           ("bf16", bf16_round(x)), ("f64", x.astype(np.float64))]:
        if name == "f64" and not engine.info.fp64:
            continue
        m = dnnl.memory(md_([4, 6], getattr(dt, name), tag.ab), engine, x)
        back = m.to_numpy()
        assert back.dtype == expected.dtype, name
        assert np.array_equal(back, expected), name
    assert np.array_equal(bf16_round(x[0, :4]), [1.0, 1 + 2 ** -6, -1.0, -(1 + 2 ** -6)])
    # bf16 storage is the upper half of the float32 bit pattern
    raw = dnnl.memory(md_([4, 6], dt.bf16, tag.ab), engine, x).read_raw()
    assert raw.dtype == np.uint16
    assert np.array_equal(raw, (bf16_round(x).ravel().view(np.uint32) >> 16).astype(np.uint16))


@pytest.mark.parametrize("name,np_type", [("s8", np.int8), ("u8", np.uint8), ("s32", np.int32)])
def test_integer_roundtrip(engine, name, np_type):
    info = np.iinfo(np_type)
    x = np.array([[info.min, -1 if info.min < 0 else 0, 0, 1, info.max]], dtype=np.int64)
    m = dnnl.memory(md_([1, 5], getattr(dt, name), tag.ab), engine, x.astype(np_type))
    back = m.to_numpy()
    assert back.dtype == np_type and np.array_equal(back, x)


def test_write_replaces_content(engine):
    md = md_([2, 10, 3, 5], dt.f32, tag.nChw8c)
    m = dnnl.memory(md, engine, np.ones(md.get_dims(), np.float32))
    y = RNG.standard_normal(md.get_dims()).astype(np.float32)
    m.write(y)
    assert np.array_equal(m.read_raw(), nchw8c_raw(y))


def test_user_buffer_and_set_data_handle(engine):
    md = md_([3, 4], dt.f32, tag.ab)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    buf = cl.Buffer(engine.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=x)
    m = dnnl.memory(md, engine, buf)
    assert m.get_data_handle() is buf
    assert np.array_equal(m.to_numpy(), x)
    y = x[::-1].copy()
    buf2 = cl.Buffer(engine.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR,
                     hostbuf=y)
    m.set_data_handle(buf2)
    assert m.buffer is buf2
    assert np.array_equal(m.to_numpy(), y)
    small = cl.Buffer(engine.context, cl.mem_flags.READ_WRITE, 16)
    with pytest.raises(dnnl.invalid_arguments, match="16 bytes"):
        m.set_data_handle(small)
    assert m.buffer is buf2
    with pytest.raises(dnnl.invalid_arguments, match="pyopencl.Buffer"):
        m.set_data_handle(np.zeros(12, np.float32))
    with pytest.raises(dnnl.invalid_arguments, match="16 bytes"):
        dnnl.memory(md, engine, small)


def test_submemory_views_share_the_parent_buffer(engine):
    x = RNG.standard_normal((4, 6)).astype(np.float32)
    parent = dnnl.memory(md_([4, 6], dt.f32, tag.ab), engine, x)
    sub_md = parent.get_desc().submemory_desc([2, 3], [1, 2])
    sub = dnnl.memory(sub_md, engine, parent.buffer)
    assert np.array_equal(sub.to_numpy(), x[1:3, 2:5])
    y = np.full((2, 3), -5.0, np.float32)
    sub.write(y)
    expected = x.copy()
    expected[1:3, 2:5] = y
    assert np.array_equal(parent.to_numpy(), expected)  # the rest of the parent is untouched


def test_reshaped_and_permuted_views(engine):
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    m = dnnl.memory(md_([2, 3, 4], dt.f32, tag.acb), engine, x)
    r = dnnl.memory(m.get_desc().reshape([2, 3, 2, 2]), engine, m.buffer)
    assert np.array_equal(r.to_numpy(), x.reshape(2, 3, 2, 2))
    p = dnnl.memory(m.get_desc().permute_axes([2, 0, 1]), engine, m.buffer)
    assert np.array_equal(p.to_numpy(), np.transpose(x, np.argsort([2, 0, 1])))


def test_pool_reuses_freed_buffers(engine):
    pool = BufferPool.of(engine)
    pool.clear()  # start from an empty pool whatever earlier tests left in it
    md = md_([1237], dt.u8, tag.a)  # an unusual size
    m = dnnl.memory(md, engine)
    ptr = m.buffer.int_ptr
    del m
    hits, misses = pool.hits, pool.misses
    for _ in range(20):
        m = dnnl.memory(md, engine)
        assert m.buffer.int_ptr == ptr
        del m
    assert pool.hits == hits + 20 and pool.misses == misses
    # two live memories need two buffers
    a, b = dnnl.memory(md, engine), dnnl.memory(md, engine)
    assert a.buffer.int_ptr != b.buffer.int_ptr
    assert pool.misses == misses + 1


def test_user_buffers_never_enter_the_pool(engine):
    pool = BufferPool.of(engine)
    pool.clear()
    md = md_([997], dt.u8, tag.a)
    buf = cl.Buffer(engine.context, cl.mem_flags.READ_WRITE, 997)
    m = dnnl.memory(md, engine, buf)
    del m
    misses = pool.misses
    m2 = dnnl.memory(md, engine)
    assert m2.buffer.int_ptr != buf.int_ptr and pool.misses == misses + 1


# -- bad inputs ---------------------------------------------------------------------------------
def _sentinel_memory(engine, dtype=dt.f32):
    md = md_([3, 4], dtype, tag.ab)
    return dnnl.memory(md, engine, np.full((3, 4), 42, np.float32 if dtype == dt.f32 else np.int8))


def test_any_and_zero_memory_rejected(engine):
    with pytest.raises(dnnl.invalid_arguments, match="any"):
        dnnl.memory(md_([2, 3], dt.f32, tag.any), engine)
    with pytest.raises(dnnl.invalid_arguments, match="zero desc"):
        dnnl.memory(md_(), engine)
    with pytest.raises(dnnl.invalid_arguments, match="memory.desc"):
        dnnl.memory([2, 3], engine)
    with pytest.raises(dnnl.invalid_arguments, match="engine"):
        dnnl.memory(md_([2, 3], dt.f32, tag.ab), "cpu")


@pytest.mark.parametrize("bad,match", [
    (np.zeros((4, 3), np.float32), r"shape \[4, 3\].*\[3, 4\]"),
    (np.zeros((12,), np.float32), r"shape \[12\]"),
    (np.zeros((3, 4), np.complex64), "complex64"),
    (np.zeros((3, 4), bool), "bool"),
    (np.array([["a"] * 4] * 3), "<U1"),
])
def test_write_rejects_bad_arrays(engine, bad, match):
    m = _sentinel_memory(engine)
    with pytest.raises(dnnl.invalid_arguments, match=match):
        m.write(bad)
    assert np.all(m.to_numpy() == 42)
    with pytest.raises(dnnl.invalid_arguments, match=match):
        dnnl.memory(m.get_desc(), engine, bad)


def test_float_array_into_integer_memory_rejected(engine):
    m = _sentinel_memory(engine, dt.s8)
    with pytest.raises(dnnl.invalid_arguments, match=r"float64.*s8"):
        m.write(np.zeros((3, 4)))
    assert np.all(m.to_numpy() == 42)
