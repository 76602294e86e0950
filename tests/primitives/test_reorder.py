"""The reorder primitive on every device present: layouts, data types, quantization attributes,
cross-engine copies and argument validation.

Oracles are computed here with numpy, independently of pydnnl's host-side packing: raw device
storage is compared with np.transpose of the logical array (plain layouts), with closed-form
offsets (blocked layouts), with numpy casts (f16), a frexp-based round-to-nearest-even (bf16) and
np.clip(np.rint(...)) (integers).
"""
from __future__ import annotations

import itertools
import string

import numpy as np
import pyopencl as cl
import pytest

import pydnnl as dnnl

md_ = dnnl.memory.desc
dt = dnnl.memory.data_type
tag = dnnl.memory.format_tag
LETTERS = string.ascii_lowercase
RNG = np.random.default_rng(11)
SCALES, ZPS = dnnl.ARG_ATTR_SCALES, dnnl.ARG_ATTR_ZERO_POINTS
FROM, TO = dnnl.ARG_FROM, dnnl.ARG_TO


# -- independent oracles -------------------------------------------------------------------------
def bf16_round(x: np.ndarray) -> np.ndarray:
    """Round to 8 significant bits, ties to even (finite inputs), as float32."""
    m, e = np.frexp(np.asarray(x, np.float64))
    return np.ldexp(np.rint(np.ldexp(m, 8)), e - 8).astype(np.float32)


def bf16_bits(x: np.ndarray) -> np.ndarray:
    return (bf16_round(x).view(np.uint32) >> 16).astype(np.uint16)


def quantize(v: np.ndarray, np_type) -> np.ndarray:
    info = np.iinfo(np_type)
    return np.clip(np.rint(v), info.min, info.max).astype(np_type)


def padded_raw(x: np.ndarray, offsets: np.ndarray, size: int, fill=0) -> np.ndarray:
    raw = np.full(size, fill, dtype=x.dtype)
    raw[offsets] = x
    return raw


def nchw_blocked_offset(dims, B):
    N, C, H, W = dims
    Cb = -(-C // B)
    n, c, h, w = np.indices(dims)
    return ((n * Cb + c // B) * H + h) * W * B + w * B + c % B


def oihw8i8o_offset(dims):
    O, I, H, W = dims
    Ib = -(-I // 8)
    o, i, h, w = np.indices(dims)
    return ((((o // 8) * Ib + i // 8) * H + h) * W + w) * 64 + (i % 8) * 8 + o % 8


def goihw16i16o_offset(dims):
    G, O, I, H, W = dims
    Ob, Ib = -(-O // 16), -(-I // 16)
    g, o, i, h, w = np.indices(dims)
    return (((((g * Ob + o // 16) * Ib + i // 16) * H + h) * W + w) * 256
            + (i % 16) * 16 + o % 16)


# tag, dims, padded element count, offset formula
BLOCKED = [
    ("nChw8c", [2, 10, 3, 5], 2 * 16 * 15, lambda d: nchw_blocked_offset(d, 8)),
    ("nChw16c", [2, 20, 3, 2], 2 * 32 * 6, lambda d: nchw_blocked_offset(d, 16)),
    ("OIhw8i8o", [10, 13, 3, 2], 16 * 16 * 6, oihw8i8o_offset),
    ("gOIhw16i16o", [2, 20, 17, 2, 2], 2 * 32 * 32 * 4, goihw16i16o_offset),
]


# -- helpers ------------------------------------------------------------------------------------
def filled(md, engine, value):
    """A memory whose every storage element (padding and gaps included) holds ``value``."""
    raw = np.full(md.get_size() // md.get_data_type().itemsize, value,
                  dtype=md.get_data_type().storage_dtype)
    buf = cl.Buffer(engine.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR,
                    hostbuf=raw)
    return dnnl.memory(md, engine, buf)


def from_raw(md, engine, raw):
    """A memory holding exactly the storage ``raw`` (built by the test, not by pydnnl)."""
    raw = np.ascontiguousarray(raw)
    assert raw.nbytes == md.get_size()
    buf = cl.Buffer(engine.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR,
                    hostbuf=raw)
    return dnnl.memory(md, engine, buf)


def plain_raw(x, perm):
    return np.transpose(x, perm).ravel()


def run(src, dst, stream, attr=None, extra=None):
    r = dnnl.reorder(src, dst, attr) if attr is not None else dnnl.reorder(src, dst)
    if extra:
        r.execute(stream, {FROM: src, TO: dst, **extra})
    else:
        r.execute(stream, src, dst)
    stream.wait()
    return r


def other_engine(engine):
    """Another device than ``engine`` (a simulator when nothing else), or None."""
    for kind in (dnnl.engine.kind.cpu, dnnl.engine.kind.gpu):
        for i in range(dnnl.engine.get_count(kind)):
            e = dnnl.engine(kind, i)
            if e != engine:
                return e
    try:
        return dnnl.engine.from_name("Oclgrind")
    except dnnl.error:
        return None


# -- layouts ------------------------------------------------------------------------------------
RANK_DIMS = {2: [3, 5], 3: [2, 3, 5], 4: [2, 3, 4, 5], 5: [2, 3, 2, 4, 3]}


@pytest.mark.parametrize("rank", [2, 3, 4, 5])
def test_plain_to_every_permutation(engine, stream, first_device, rank):
    """Every permutation on the first device; every 7th of the 120 5-D ones on the others."""
    dims = RANK_DIMS[rank]
    x = RNG.standard_normal(dims).astype(np.float32)
    plain = "".join(LETTERS[:rank])
    src = from_raw(md_(dims, dt.f32, plain), engine, x.ravel())
    bad = []
    perms = list(itertools.permutations(range(rank)))
    for perm in perms if first_device or rank < 5 else perms[::7]:
        name = "".join(LETTERS[i] for i in perm)
        dst = filled(md_(dims, dt.f32, name), engine, np.nan)
        run(src, dst, stream)
        if not np.array_equal(dst.read_raw(), plain_raw(x, perm)):
            bad.append(name)
    assert not bad, f"wrong results for {plain} -> {bad}"


@pytest.mark.parametrize("a,b", [("ba", "ab"), ("cba", "bca"), ("bdca", "acdb"),
                                 ("edcba", "acebd")])
def test_permutation_to_permutation(engine, stream, a, b):
    rank = len(a)
    dims = RANK_DIMS[rank]
    x = RNG.standard_normal(dims).astype(np.float32)
    pa, pb = [LETTERS.index(c) for c in a], [LETTERS.index(c) for c in b]
    src = from_raw(md_(dims, dt.f32, a), engine, plain_raw(x, pa))
    dst = filled(md_(dims, dt.f32, b), engine, np.nan)
    run(src, dst, stream)
    assert np.array_equal(dst.read_raw(), plain_raw(x, pb))
    assert np.array_equal(dst.to_numpy(), x)


@pytest.mark.parametrize("dims,a,b", [([3, 70], "ab", "ba"), ([70, 3], "ab", "ba"),
                                      ([2, 37, 3], "abc", "cab")])
def test_dims_larger_than_a_work_group(engine, stream, dims, a, b):
    x = RNG.standard_normal(dims).astype(np.float32)
    pa, pb = [LETTERS.index(c) for c in a], [LETTERS.index(c) for c in b]
    src = from_raw(md_(dims, dt.f32, a), engine, plain_raw(x, pa))
    dst = filled(md_(dims, dt.f32, b), engine, np.nan)
    run(src, dst, stream)
    assert np.array_equal(dst.read_raw(), plain_raw(x, pb))


@pytest.mark.parametrize("name,dims,size,offset", BLOCKED, ids=[b[0] for b in BLOCKED])
def test_plain_to_blocked(engine, stream, name, dims, size, offset):
    x = RNG.standard_normal(dims).astype(np.float32)
    plain = "".join(LETTERS[:len(dims)])
    src = from_raw(md_(dims, dt.f32, plain), engine, x.ravel())
    dst = filled(md_(dims, dt.f32, getattr(tag, name)), engine, np.nan)
    run(src, dst, stream)
    # padding (the NaN sentinel before) comes out zero
    assert np.array_equal(dst.read_raw(), padded_raw(x, offset(dims), size))


@pytest.mark.parametrize("name,dims,size,offset", BLOCKED, ids=[b[0] for b in BLOCKED])
def test_blocked_to_plain(engine, stream, name, dims, size, offset):
    x = RNG.standard_normal(dims).astype(np.float32)
    # padding holds junk: it must not leak into the result
    src = from_raw(md_(dims, dt.f32, getattr(tag, name)), engine,
                   padded_raw(x, offset(dims), size, fill=999.0))
    perm = list(range(len(dims)))[::-1]  # into the reversed plain layout
    dst = filled(md_(dims, dt.f32, "".join(LETTERS[i] for i in perm)), engine, np.nan)
    run(src, dst, stream)
    assert np.array_equal(dst.read_raw(), plain_raw(x, perm))


def test_blocked_to_blocked(engine, stream):
    dims = [2, 20, 3, 2]
    x = RNG.standard_normal(dims).astype(np.float32)
    n8 = nchw_blocked_offset(dims, 8)
    src = from_raw(md_(dims, dt.f32, tag.nChw8c), engine, padded_raw(x, n8, 2 * 24 * 6, 5.0))
    dst = filled(md_(dims, dt.f32, tag.nChw16c), engine, np.nan)
    run(src, dst, stream)
    assert np.array_equal(dst.read_raw(), padded_raw(x, nchw_blocked_offset(dims, 16), 2 * 32 * 6))


def test_strided_dst_keeps_gaps(engine, stream):
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    src = from_raw(md_([3, 4], dt.f32, tag.ab), engine, x.ravel())
    dst = filled(md_([3, 4], dt.f32, [1, 5]), engine, -1.0)  # column-major, leading dim 5
    run(src, dst, stream)
    expected = np.full(18, -1.0, np.float32)  # last element at 2 + 3 * 5
    expected[np.add.outer(np.arange(3), np.arange(4) * 5)] = x
    assert np.array_equal(dst.read_raw(), expected)


def test_into_submemory_leaves_the_rest_alone(engine, stream):
    """Reordering into a part of a bigger tensor (oneDNN's concat idiom) writes only that part."""
    x = RNG.standard_normal((1, 10, 3, 3)).astype(np.float32)
    full_md = md_([2, 10, 3, 3], dt.f32, tag.nChw8c)
    parent = filled(full_md, engine, 7.0)
    sub = dnnl.memory(full_md.submemory_desc([1, 10, 3, 3], [1, 0, 0, 0]), engine, parent.buffer)
    src = from_raw(md_([1, 10, 3, 3], dt.f32, tag.nchw), engine, x.ravel())
    run(src, sub, stream)
    raw = parent.read_raw()
    assert np.all(raw[:2 * 9 * 8] == 7.0)  # batch 0 untouched
    assert np.array_equal(raw[2 * 9 * 8:],
                          padded_raw(x, nchw_blocked_offset([1, 10, 3, 3], 8), 2 * 9 * 8))
    # a plain sub-block inside a matrix
    y = RNG.standard_normal((2, 3)).astype(np.float32)
    mat = filled(md_([4, 6], dt.f32, tag.ab), engine, 7.0)
    part = dnnl.memory(mat.get_desc().submemory_desc([2, 3], [1, 2]), engine, mat.buffer)
    run(from_raw(md_([2, 3], dt.f32, tag.ab), engine, y.ravel()), part, stream)
    expected = np.full((4, 6), 7.0, np.float32)
    expected[1:3, 2:5] = y
    assert np.array_equal(mat.to_numpy(), expected)


# -- data types ---------------------------------------------------------------------------------
def _float_values():
    x = RNG.uniform(-4, 4, (4, 8)).astype(np.float32)
    x[0] = [1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -8), 70000.0, -70000.0,
            1 + 2 ** -11, 1 + 3 * 2 ** -11, 2 ** -20]  # bf16 and f16 ties, f16 overflow, tiny
    return x


@pytest.mark.parametrize("name", ["f16", "bf16"])
def test_f32_half_round_trip(engine, stream, name):
    x = _float_values()
    dims = list(x.shape)
    src = from_raw(md_(dims, dt.f32, tag.ab), engine, x.ravel())
    half = filled(md_(dims, getattr(dt, name), tag.ba), engine, 0x7E00)
    run(src, half, stream)
    if name == "f16":
        expected_bits = x.T.astype(np.float16).view(np.uint16).ravel()
        expected_vals = x.astype(np.float16).astype(np.float32)
    else:
        expected_bits = bf16_bits(x.T).ravel()
        expected_vals = bf16_round(x)
    assert np.array_equal(half.read_raw().view(np.uint16), expected_bits)
    back = filled(md_(dims, dt.f32, tag.ab), engine, np.nan)
    run(half, back, stream)
    assert np.array_equal(back.read_raw().reshape(dims), expected_vals)  # widening is exact


@pytest.mark.parametrize("name,np_type", [("s8", np.int8), ("u8", np.uint8), ("s32", np.int32)])
def test_f32_integer_round_trip(engine, stream, name, np_type):
    x = RNG.uniform(-300, 300, (3, 8)).astype(np.float32)
    x[0] = [2.5, 3.5, -2.5, -3.5, 0.5, 1024.0, -1000.0, 127.5]  # ties to even, saturation
    dims = list(x.shape)
    src = from_raw(md_(dims, dt.f32, tag.ab), engine, x.ravel())
    q = filled(md_(dims, getattr(dt, name), tag.ab), engine, 99)
    run(src, q, stream)
    expected = quantize(x, np_type)
    assert np.array_equal(q.read_raw().reshape(dims), expected)
    back = filled(md_(dims, dt.f32, tag.ba), engine, np.nan)
    run(q, back, stream)
    assert np.array_equal(back.to_numpy(), expected.astype(np.float32))


def test_s8_to_u8_saturates(engine, stream):
    x = np.arange(-128, 128, dtype=np.int8).reshape(16, 16)
    src = from_raw(md_([16, 16], dt.s8, tag.ab), engine, x.ravel())
    dst = filled(md_([16, 16], dt.u8, tag.ab), engine, 77)
    run(src, dst, stream)
    assert np.array_equal(dst.read_raw().reshape(16, 16), np.clip(x.astype(np.int32), 0, 255))


def test_layout_and_type_together(engine, stream):
    dims = [2, 10, 3, 5]
    x = RNG.standard_normal(dims).astype(np.float32)
    src = from_raw(md_(dims, dt.f32, tag.nchw), engine, x.ravel())
    dst = filled(md_(dims, dt.bf16, tag.nChw8c), engine, 0x7FC0)
    run(src, dst, stream)
    assert np.array_equal(dst.read_raw(),
                          padded_raw(bf16_bits(x), nchw_blocked_offset(dims, 8), 2 * 16 * 15))


def test_f64(engine, stream):
    if not engine.info.fp64:
        with pytest.raises(dnnl.invalid_arguments, match="fp64"):
            dnnl.reorder.primitive_desc(engine, md_([4], dt.f32, tag.a),
                                        engine, md_([4], dt.f64, tag.a))
        return
    x = RNG.standard_normal((3, 4))
    src = from_raw(md_([3, 4], dt.f64, tag.ab), engine, x.ravel())
    dst = filled(md_([3, 4], dt.f32, tag.ba), engine, np.nan)
    run(src, dst, stream)
    assert np.array_equal(dst.read_raw(), x.T.astype(np.float32).ravel())


# -- quantization attributes --------------------------------------------------------------------
def scales_mem(engine, values, np_type=np.float32):
    values = np.asarray(values, np_type)
    d = dt.f32 if np_type == np.float32 else dt.s32
    return from_raw(md_([values.size], d, tag.a), engine, values)


def masked(values, mask, dims):
    """Broadcast per-index scales (row-major over the masked dims) to ``dims``."""
    shape = [dims[d] if mask >> d & 1 else 1 for d in range(len(dims))]
    return np.asarray(values).reshape(shape)


def test_quantize_scale_mask0_and_zero_point(engine, stream):
    x = (RNG.integers(-800, 800, (4, 6)) / 8).astype(np.float32)
    x[0, :3] = [1000.0, -1000.0, 0.625]
    attr = dnnl.primitive_attr()
    attr.set_scales_mask(TO, 0)
    attr.set_zero_points_mask(TO, 0)
    src = from_raw(md_([4, 6], dt.f32, tag.ab), engine, x.ravel())
    dst = filled(md_([4, 6], dt.u8, tag.ba), engine, 1)
    run(src, dst, stream, attr, {SCALES | TO: scales_mem(engine, [0.25]),
                                  ZPS | TO: scales_mem(engine, [128], np.int32)})
    expected = quantize(x.astype(np.float64) / 0.25 + 128, np.uint8)
    assert np.array_equal(dst.to_numpy(), expected)


def test_dequantize_per_channel(engine, stream):
    dims = [2, 4, 3]
    x = RNG.integers(-128, 128, dims).astype(np.int8)
    sc = np.array([0.5, 2.0, 0.125, 4.0], np.float32)
    attr = dnnl.primitive_attr()
    attr.set_scales_mask(FROM, 1 << 1)
    attr.set_zero_points_mask(FROM, 0)
    src = from_raw(md_(dims, dt.s8, tag.abc), engine, x.ravel())
    dst = filled(md_(dims, dt.f32, tag.acb), engine, np.nan)
    run(src, dst, stream, attr, {SCALES | FROM: scales_mem(engine, sc),
                                  ZPS | FROM: scales_mem(engine, [-3], np.int32)})
    expected = masked(sc, 2, dims) * (x.astype(np.float64) + 3)
    assert np.array_equal(dst.to_numpy(), expected.astype(np.float32))


def test_all_four_with_multi_dim_masks(engine, stream):
    """dst = src_scale * (src - src_zp) / dst_scale + dst_zp, rounded to nearest even."""
    dims = [2, 3, 4]
    x = RNG.integers(-128, 128, dims).astype(np.int8)
    x.flat[:4] = [-128, 127, 5, -7]
    src_mask, dst_mask = 0b101, 0b010  # per (d0, d2) pair; per d1
    src_sc = (2.0 ** RNG.integers(-3, 3, 8)).astype(np.float32)
    dst_sc = np.array([0.5, 4.0, 1.0], np.float32)
    attr = dnnl.primitive_attr()
    attr.set_scales_mask(FROM, src_mask)
    attr.set_scales_mask(TO, dst_mask)
    attr.set_zero_points_mask(FROM, 0)
    attr.set_zero_points_mask(TO, 0)
    src = from_raw(md_(dims, dt.s8, tag.abc), engine, x.ravel())
    dst = filled(md_(dims, dt.u8, tag.cab), engine, 1)
    pd = dnnl.reorder.primitive_desc(engine, src.get_desc(), engine, dst.get_desc(), attr)
    assert pd.query_md(dnnl.query.exec_arg_md, SCALES | FROM).get_dims() == [8]
    assert pd.query_md(dnnl.query.exec_arg_md, SCALES | TO).get_dims() == [3]
    r = dnnl.reorder(pd)
    r.execute(stream, {FROM: src, TO: dst, SCALES | FROM: scales_mem(engine, src_sc),
                       SCALES | TO: scales_mem(engine, dst_sc),
                       ZPS | FROM: scales_mem(engine, [3], np.int32),
                       ZPS | TO: scales_mem(engine, [100], np.int32)})
    stream.wait()
    v = (masked(src_sc, src_mask, dims) * (x.astype(np.float64) - 3)
         / masked(dst_sc, dst_mask, dims) + 100)
    assert np.array_equal(dst.to_numpy(), quantize(v, np.uint8))


def test_float_scales(engine, stream):
    x = RNG.standard_normal((3, 5)).astype(np.float32)
    attr = dnnl.primitive_attr()
    attr.set_scales_mask(FROM, 1)
    sc = np.array([2.0, 0.5, -8.0], np.float32)
    src = from_raw(md_([3, 5], dt.f32, tag.ab), engine, x.ravel())
    dst = filled(md_([3, 5], dt.f16, tag.ab), engine, 0)
    run(src, dst, stream, attr, {SCALES | FROM: scales_mem(engine, sc)})
    assert np.array_equal(dst.to_numpy(), (x * sc[:, None]).astype(np.float16))


# -- API forms ----------------------------------------------------------------------------------
def test_api_forms_agree(engine, stream):
    dims = [2, 3, 4, 5]
    x = RNG.standard_normal(dims).astype(np.float32)
    src = from_raw(md_(dims, dt.f32, tag.nchw), engine, x.ravel())
    dst_md = md_(dims, dt.f32, tag.nhwc)
    expected = plain_raw(x, [0, 2, 3, 1])
    pd = dnnl.reorder.primitive_desc(engine, src.get_desc(), engine, dst_md, None)
    pd_kw = dnnl.reorder.primitive_desc(src_engine=engine, src_md=src.get_desc(),
                                        dst_engine=engine, dst_md=dst_md)
    for prim in (dnnl.reorder(pd), dnnl.reorder(pd_kw),
                 dnnl.reorder(src, dnnl.memory(dst_md, engine)),
                 dnnl.reorder(src, dnnl.memory(dst_md, engine), dnnl.primitive_attr())):
        for use_map in (False, True):
            dst = filled(dst_md, engine, np.nan)
            if use_map:
                prim.execute(stream, {dnnl.DNNL_ARG_FROM: src, dnnl.DNNL_ARG_TO: dst})
            else:
                prim.execute(stream, src, dst)
            stream.wait()
            assert np.array_equal(dst.read_raw(), expected)
    assert prim.get_primitive_desc().src_desc() == src.get_desc()
    assert prim.get_primitive_desc().dst_desc() == dst_md


# -- cross engine -------------------------------------------------------------------------------
def _two_cpu_runtimes():
    engs = [dnnl.engine(dnnl.engine.kind.cpu, i)
            for i in range(dnnl.engine.get_count(dnnl.engine.kind.cpu))]
    intel = [e for e in engs if "Intel" in e.info.platform]
    pocl = [e for e in engs if "Portable Computing Language" in e.info.platform]
    if not intel or not pocl:
        pytest.skip("cross-engine reorder needs both Intel's CPU runtime and PoCL")
    return intel[0], pocl[0]


@pytest.mark.parametrize("direction", ["intel->pocl", "pocl->intel"])
def test_cross_engine(direction):
    intel, pocl = _two_cpu_runtimes()
    a, b = (intel, pocl) if direction == "intel->pocl" else (pocl, intel)
    dims = [2, 10, 3, 5]
    x = RNG.standard_normal(dims).astype(np.float32)
    src = from_raw(md_(dims, dt.f32, tag.nchw), a, x.ravel())
    dst = filled(md_(dims, dt.f32, tag.nChw8c), b, np.nan)
    pd = dnnl.reorder.primitive_desc(a, src.get_desc(), b, dst.get_desc())
    assert pd.get_src_engine() == a and pd.get_dst_engine() == b
    r = dnnl.reorder(pd)
    for s in (dnnl.stream(a), dnnl.stream(b)):  # a stream on either engine
        dst = filled(dst.get_desc(), b, np.nan)
        r.execute(s, src, dst)
        s.wait()
        assert np.array_equal(dst.read_raw(),
                              padded_raw(x, nchw_blocked_offset(dims, 8), 2 * 16 * 15))
    # back, with a type change
    back = filled(md_(dims, dt.f16, tag.nhwc), a, 0)
    run(dst, back, dnnl.stream(b))
    assert np.array_equal(back.read_raw().view(np.uint16),
                          plain_raw(x.astype(np.float16), [0, 2, 3, 1]).view(np.uint16))


def test_cross_engine_with_scales_and_gaps():
    intel, pocl = _two_cpu_runtimes()
    x = RNG.standard_normal((3, 4)).astype(np.float32) * 50
    attr = dnnl.primitive_attr()
    attr.set_scales_mask(TO, 1 << 1)
    sc = np.array([0.5, 1.0, 2.0, 0.25], np.float32)
    src = from_raw(md_([3, 4], dt.f32, tag.ab), intel, x.ravel())
    mat = filled(md_([5, 6], dt.s8, tag.ab), pocl, 9)
    part = dnnl.memory(mat.get_desc().submemory_desc([3, 4], [1, 1]), pocl, mat.buffer)
    pd = dnnl.reorder.primitive_desc(intel, src.get_desc(), pocl, part.get_desc(), attr)
    # the scales are read by the conversion kernel, which runs on the source engine
    scale_md = pd.query_md(dnnl.query.exec_arg_md, SCALES | TO)
    r = dnnl.reorder(pd)
    s = dnnl.stream(pocl)
    r.execute(s, {FROM: src, TO: part, SCALES | TO: scales_mem(intel, sc)})
    s.wait()
    assert scale_md.get_dims() == [4]
    expected = np.full((5, 6), 9, np.int8)
    expected[1:4, 1:5] = quantize(x.astype(np.float64) / sc, np.int8)
    assert np.array_equal(mat.to_numpy(), expected)


# -- bad inputs ---------------------------------------------------------------------------------
SENTINEL = 42.0


@pytest.fixture(scope="module")
def bad_setup(engine):
    src = from_raw(md_([3, 4], dt.f32, tag.ab), engine, np.arange(12, dtype=np.float32))
    attr = dnnl.primitive_attr()
    attr.set_scales_mask(TO, 0)
    r = dnnl.reorder(dnnl.reorder.primitive_desc(engine, src.get_desc(), engine,
                                                 md_([3, 4], dt.f32, tag.ba), attr))
    return src, r


def _check_untouched(dst):
    assert np.all(dst.read_raw() == SENTINEL)


@pytest.mark.parametrize("case", ["missing_dst", "missing_scale", "unknown_key", "wrong_desc",
                                  "wrong_type", "wrong_scale_size", "not_memory", "not_a_map",
                                  "positional_count"])
def test_execute_rejects_bad_args(engine, stream, bad_setup, case):
    src, r = bad_setup
    dst = filled(md_([3, 4], dt.f32, tag.ba), engine, SENTINEL)
    one = scales_mem(engine, [2.0])
    args = {FROM: src, TO: dst, SCALES | TO: one}
    match = {
        "missing_dst": "missing argument ARG_DST",
        "missing_scale": r"missing argument ARG_ATTR_SCALES\|ARG_DST",
        "unknown_key": "unexpected argument ARG_WEIGHTS",
        "wrong_desc": r"argument ARG_DST has desc .*ab.*expects .*ba",
        "wrong_type": r"argument ARG_SRC has desc .*s32",
        "wrong_scale_size": r"ARG_ATTR_SCALES\|ARG_DST has desc .*\[2\]",
        "not_memory": "ARG_SRC must be a pydnnl.memory",
        "not_a_map": "must be a dict",
        "positional_count": "expected",
    }[case]
    if case == "missing_dst":
        del args[TO]
    elif case == "missing_scale":
        del args[SCALES | TO]
    elif case == "unknown_key":
        args[dnnl.ARG_WEIGHTS] = dnnl.memory(md_([3, 4], dt.f32, tag.ab), engine)
    elif case == "wrong_desc":
        args[TO] = other = filled(md_([3, 4], dt.f32, tag.ab), engine, SENTINEL)
    elif case == "wrong_type":
        args[FROM] = dnnl.memory(md_([3, 4], dt.s32, tag.ab), engine)
    elif case == "wrong_scale_size":
        args[SCALES | TO] = scales_mem(engine, [2.0, 3.0])
    elif case == "not_memory":
        args[FROM] = np.zeros((3, 4), np.float32)
    with pytest.raises(dnnl.invalid_arguments, match=match):
        if case == "not_a_map":
            r.execute(stream, [src, dst])
        elif case == "positional_count":
            r.execute(stream, src, dst, one)
        else:
            r.execute(stream, args)
    stream.wait()
    _check_untouched(dst)
    if case == "wrong_desc":
        _check_untouched(other)


def test_execute_rejects_other_engine(engine, stream, bad_setup):
    src, r = bad_setup
    other = other_engine(engine)
    if other is None:
        pytest.skip("only one OpenCL device present")
    dst = filled(md_([3, 4], dt.f32, tag.ba), engine, SENTINEL)
    one = scales_mem(engine, [2.0])
    foreign_src = from_raw(src.get_desc(), other, np.arange(12, dtype=np.float32))
    with pytest.raises(dnnl.invalid_arguments, match=r"ARG_SRC lives on .*"):
        r.execute(stream, {FROM: foreign_src, TO: dst, SCALES | TO: one})
    with pytest.raises(dnnl.invalid_arguments, match=r"ARG_ATTR_SCALES\|ARG_DST lives on"):
        r.execute(stream, {FROM: src, TO: dst, SCALES | TO: scales_mem(other, [2.0])})
    with pytest.raises(dnnl.invalid_arguments, match="stream is on"):
        r.execute(dnnl.stream(other), {FROM: src, TO: dst, SCALES | TO: one})
    _check_untouched(dst)


def test_pd_rejects_bad_descs(engine):
    a = md_([3, 4], dt.f32, tag.ab)
    with pytest.raises(dnnl.invalid_arguments, match=r"\[3, 4\].*\[4, 3\]"):
        dnnl.reorder.primitive_desc(engine, a, engine, md_([4, 3], dt.f32, tag.ab))
    with pytest.raises(dnnl.invalid_arguments, match=r"dst_md.*any"):
        dnnl.reorder.primitive_desc(engine, a, engine, md_([3, 4], dt.f32, tag.any))
    with pytest.raises(dnnl.invalid_arguments, match="src_md"):
        dnnl.reorder.primitive_desc(engine, md_(), engine, a)
    with pytest.raises(dnnl.invalid_arguments, match="src_md must be a memory.desc"):
        dnnl.reorder.primitive_desc(engine, [3, 4], engine, a)
    with pytest.raises(dnnl.invalid_arguments, match="dst_engine"):
        dnnl.reorder.primitive_desc(engine, a, "gpu", a)
    with pytest.raises(dnnl.invalid_arguments, match="engine"):
        dnnl.reorder.primitive_desc("cpu", a, engine, a)
    with pytest.raises(dnnl.invalid_arguments, match="missing dst_md"):
        dnnl.reorder.primitive_desc(engine, a, engine)
    with pytest.raises(dnnl.invalid_arguments, match="unknown keyword 'dst'"):
        dnnl.reorder.primitive_desc(engine, a, engine, dst=a)
    with pytest.raises(dnnl.invalid_arguments, match="attr"):
        dnnl.reorder.primitive_desc(engine, a, engine, a, "attr")


def test_pd_rejects_bad_attrs(engine):
    a = md_([3, 4], dt.f32, tag.ab)
    attr = dnnl.primitive_attr()
    attr.set_scales_mask(dnnl.ARG_WEIGHTS, 0)
    with pytest.raises(dnnl.invalid_arguments, match="ARG_WEIGHTS"):
        dnnl.reorder.primitive_desc(engine, a, engine, a, attr)
    attr = dnnl.primitive_attr()
    attr.set_zero_points_mask(TO, 1 << 2)
    with pytest.raises(dnnl.invalid_arguments, match=r"mask 4 .*2 dims"):
        dnnl.reorder.primitive_desc(engine, a, engine, a, attr)
    attr = dnnl.primitive_attr()
    ops = dnnl.post_ops()
    ops.append_eltwise(dnnl.algorithm.eltwise_relu)
    attr.set_post_ops(ops)
    with pytest.raises(dnnl.invalid_arguments, match="post-ops"):
        dnnl.reorder.primitive_desc(engine, a, engine, a, attr)
    with pytest.raises(dnnl.invalid_arguments, match="mask"):
        dnnl.primitive_attr().set_scales_mask(FROM, -1)


@pytest.mark.parametrize("n", [1, 5, 27, 33])
def test_one_dimension_shorter_than_a_work_group(engine, stream, n):
    x = np.arange(n, dtype=np.float32) - 3
    src = dnnl.memory(dnnl.memory.desc([n], dnnl.memory.data_type.f32, dnnl.memory.format_tag.a),
                      engine, x)
    dst = dnnl.memory(dnnl.memory.desc([n], dnnl.memory.data_type.s32, dnnl.memory.format_tag.a),
                      engine)
    dnnl.reorder(src, dst).execute(stream, src, dst)
    stream.wait()
    np.testing.assert_array_equal(dst.to_numpy(), x.astype(np.int32))
