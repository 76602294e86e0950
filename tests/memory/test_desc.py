"""Memory descriptors: tags, strides, blocking, queries, equality and transformations.

Oracles: numpy's transpose/reshape strides for plain layouts, closed-form offset formulas for
blocked layouts (written out here from the oneDNN tag definitions).
"""
from __future__ import annotations

import itertools
import string

import numpy as np
import pytest

import pydnnl as dnnl

md_ = dnnl.memory.desc
dt = dnnl.memory.data_type
tag = dnnl.memory.format_tag
fk = dnnl.memory.format_kind
LETTERS = string.ascii_lowercase


def numpy_strides(dims, perm):
    """Element strides of the logical view of a C-contiguous array stored in order ``perm``."""
    base = np.empty([dims[i] for i in perm], dtype=np.float32)
    logical = base.transpose(np.argsort(perm))
    assert logical.shape == tuple(dims)
    return [s // 4 for s in logical.strides]


@pytest.mark.parametrize("rank", [1, 2, 3, 4, 5, 6])
def test_every_plain_permutation(rank):
    dims = [2, 3, 4, 5, 6, 7][:rank]
    n = 0
    for perm in itertools.permutations(range(rank)):
        name = "".join(LETTERS[i] for i in perm)
        md = md_(dims, dt.f32, getattr(tag, name))
        expected = numpy_strides(dims, perm)
        assert md.get_strides() == expected, name
        assert md.get_dims() == dims and md.get_ndims() == rank
        assert md.get_size() == 4 * int(np.prod(dims))
        assert md.get_format_kind() == fk.blocked and not md.is_zero()
        assert md.get_padded_dims() == dims
        assert md == md_(dims, dt.f32, expected)  # strides-built equals tag-built
        assert md_(dims, dt.f32, name) == md  # the tag given by name
        n += 1
    assert n == len(list(itertools.permutations(range(rank))))


# alias -> logical dimension order it is written against (oneDNN's naming convention)
ALIASES = {
    "x": "x", "nc": "nc", "tnc": "tnc", "ntc": "tnc", "ldnc": "ldnc", "ldigo": "ldigo",
    "ldgoi": "ldigo", "ldgo": "ldgo", "ldio": "ldio", "ldoi": "ldio", "ncw": "ncw",
    "nwc": "ncw", "nchw": "nchw", "nhwc": "nchw", "ncdhw": "ncdhw", "ndhwc": "ncdhw",
    "oihw": "oihw", "hwio": "oihw", "iohw": "oihw", "goihw": "goihw", "chwn": "nchw",
    "oi": "oi", "io": "oi",
}


@pytest.mark.parametrize("alias", sorted(ALIASES))
def test_named_alias(alias):
    logical = ALIASES[alias]
    perm = [logical.index(c) for c in alias]
    dims = [2, 3, 4, 5, 6][:len(alias)]
    md = md_(dims, dt.f32, getattr(tag, alias))
    assert md.get_strides() == numpy_strides(dims, perm)
    canonical = "".join(LETTERS[i] for i in perm)
    assert md == md_(dims, dt.f32, getattr(tag, canonical))
    assert md.format_name() == alias


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


# tag, dims (not multiples of the block), padded dims, expected strides, offset formula
BLOCKED = [
    ("nChw8c", [2, 10, 3, 5], [2, 16, 3, 5], [240, 120, 40, 8],
     lambda d: nchw_blocked_offset(d, 8)),
    ("nChw16c", [2, 20, 3, 2], [2, 32, 3, 2], [192, 96, 32, 16],
     lambda d: nchw_blocked_offset(d, 16)),
    ("OIhw8i8o", [10, 13, 3, 2], [16, 16, 3, 2], [768, 384, 128, 64], oihw8i8o_offset),
    ("gOIhw16i16o", [2, 20, 17, 2, 2], [2, 32, 32, 2, 2], [4096, 2048, 1024, 512, 256],
     goihw16i16o_offset),
]


@pytest.mark.parametrize("name,dims,padded,strides,offset", BLOCKED, ids=[b[0] for b in BLOCKED])
def test_blocked_tags(name, dims, padded, strides, offset):
    md = md_(dims, dt.f32, getattr(tag, name))
    assert md.get_dims() == dims
    assert md.get_padded_dims() == padded
    assert md.get_strides() == strides
    assert md.get_size() == 4 * int(np.prod(padded))  # padding included
    assert md.get_format_kind() == fk.blocked
    expected = offset(dims)
    assert np.array_equal(md.element_offsets(), expected)
    # every offset distinct and inside the buffer
    assert len(np.unique(expected)) == expected.size and expected.max() < np.prod(padded)
    # same layout under its canonical spelling; different from the plain layout
    canonical = getattr(tag, name).canonical
    assert md == md_(dims, dt.f32, canonical)
    assert md != md_(dims, dt.f32, "abcde"[:len(dims)])
    assert md_(dims, dt.f16, getattr(tag, name)).get_size() == 2 * int(np.prod(padded))


def test_blocked_exact_multiple_has_no_padding():
    md = md_([1, 16, 2, 2], dt.f32, tag.nChw8c)
    assert md.get_padded_dims() == [1, 16, 2, 2] and md.get_size() == 64 * 4


@pytest.mark.parametrize("name,size", [("f32", 4), ("f16", 2), ("bf16", 2), ("s8", 1), ("u8", 1),
                                       ("s32", 4), ("f64", 8)])
def test_data_types(name, size):
    d = getattr(dt, name)
    md = md_([3, 5], d, tag.ab)
    assert md.get_data_type() == d
    assert md.get_size() == 15 * size
    assert md_([3, 5], name, "ab") == md  # by name
    assert md != md_([3, 5], dt.f32 if d != dt.f32 else dt.f16, tag.ab)


def test_data_type_from_numpy():
    assert md_([2], np.float32, "a").get_data_type() == dt.f32
    assert md_([2], np.dtype("int8"), "a").get_data_type() == dt.s8
    assert md_([2], np.uint8, "a").get_data_type() == dt.u8


def test_zero_desc():
    z = md_()
    assert z.is_zero() and z.get_dims() == [] and z.get_size() == 0
    assert z.get_format_kind() == fk.undef and z.get_data_type() == dt.undef
    assert z == md_() and z != md_([1], dt.f32, tag.a)


def test_any_desc():
    a = md_([2, 3], dt.f32, tag.any)
    assert a.get_format_kind() == fk.any and not a.is_zero()
    assert a.get_dims() == [2, 3]
    assert a != md_([2, 3], dt.f32, tag.ab)


def test_equality_is_physical():
    assert md_([2, 3, 4, 5, 6], dt.f32, tag.ldigo) == md_([2, 3, 4, 5, 6], dt.f32, tag.abcde)
    assert md_([2, 1, 4, 5], dt.f32, tag.ldio) == md_([2, 1, 4, 5], dt.f32, tag.ldgo)
    assert md_([2, 3, 4, 5], dt.f32, tag.nchw) != md_([2, 3, 4, 5], dt.f32, tag.nhwc)
    assert md_([2, 3, 4, 5], dt.f32, tag.nchw) != md_([2, 3, 4, 6], dt.f32, tag.nchw)
    assert md_([2, 3, 4, 5], dt.f32, tag.nchw) != md_([2, 3, 4, 5], dt.s32, tag.nchw)
    assert md_([3, 4], dt.f32, tag.ab) == md_([3, 4], dt.f32, [4, 1])
    assert md_([3, 4], dt.f32, tag.ba) == md_([3, 4], dt.f32, [1, 3])
    # padded strides are a different layout from the dense one
    assert md_([3, 4], dt.f32, [8, 1]) != md_([3, 4], dt.f32, tag.ab)
    # hashing agrees with equality
    assert len({md_([2, 3, 4, 5, 6], dt.f32, tag.ldigo),
                md_([2, 3, 4, 5, 6], dt.f32, tag.abcde)}) == 1


def test_strided_with_gaps():
    md = md_([3, 4], dt.f32, [10, 2])
    assert md.get_strides() == [10, 2]
    # last element at 2*10 + 3*2 = 26
    assert md.get_size() == 27 * 4
    assert np.array_equal(md.element_offsets(), np.add.outer(np.arange(3) * 10, np.arange(4) * 2))


@pytest.mark.parametrize("perm,new_dims", [
    ((0, 1, 2), [6, 4]), ((0, 1, 2), [2, 12]), ((0, 1, 2), [24]), ((0, 1, 2), [2, 3, 2, 2]),
    ((0, 1, 2), [1, 6, 1, 4]), ((0, 2, 1), [2, 4, 3]), ((0, 2, 1), [2, 3, 2, 2]),
    ((2, 0, 1), [6, 4]), ((1, 0, 2), [3, 2, 4]), ((0, 2, 1), [6, 4]), ((1, 0, 2), [6, 4]),
])
def test_reshape_matches_numpy(perm, new_dims):
    dims = [2, 3, 4]
    name = "".join(LETTERS[i] for i in perm)
    md = md_(dims, dt.f32, name)
    # physical storage holding its own offsets; the logical view is a transpose of it
    base = np.arange(24, dtype=np.int64).reshape([dims[i] for i in perm])
    view = base.transpose(np.argsort(perm))
    try:
        r = np.reshape(view, new_dims, copy=False)
    except ValueError:  # numpy needs a copy: so must we refuse
        with pytest.raises(dnnl.invalid_arguments, match="without a copy"):
            md.reshape(new_dims)
        return
    out = md.reshape(new_dims)
    assert out.get_dims() == new_dims
    expected = [s // 8 for s in r.strides]
    got = out.get_strides()
    # strides of size-1 dims carry no information
    assert ([g for g, d in zip(got, new_dims) if d > 1]
            == [e for e, d in zip(expected, new_dims) if d > 1])
    assert np.array_equal(out.element_offsets(), r)
    assert out.get_size() == md.get_size()


def test_reshape_errors():
    md = md_([2, 3, 4], dt.f32, tag.abc)
    with pytest.raises(dnnl.invalid_arguments, match="25"):
        md.reshape([5, 5])
    with pytest.raises(dnnl.unimplemented):
        md_([2, 10, 3, 3], dt.f32, tag.nChw8c).reshape([2, 90])
    with pytest.raises(dnnl.invalid_arguments, match="any"):
        md_([2, 3], dt.f32, tag.any).reshape([6])


@pytest.mark.parametrize("src_tag,perm", [("abc", [1, 2, 0]), ("abc", [2, 0, 1]),
                                          ("acb", [0, 2, 1]), ("abcd", [3, 1, 0, 2]),
                                          ("ab", [1, 0])])
def test_permute_axes_oneDNN_semantics(src_tag, perm):
    dims = [2, 3, 4, 5][:len(src_tag)]
    md = md_(dims, dt.f32, src_tag)
    out = md.permute_axes(perm)
    # axis i becomes axis perm[i]
    for i, p in enumerate(perm):
        assert out.get_dims()[p] == dims[i]
    # same storage: the element at new index y is the old element at x with y[perm[i]] = x[i]
    old = md.element_offsets()
    expected = np.transpose(old, np.argsort(perm))
    assert np.array_equal(out.element_offsets(), expected)
    assert out.get_size() == md.get_size()


def test_permute_axes_transposes_ab_into_ba():
    out = md_([2, 3], dt.f32, tag.ab).permute_axes([1, 0])
    assert out == md_([3, 2], dt.f32, tag.ba)
    # relabel (n,c,h,w) as (n,h,w,c): nhwc storage is then plain, nchw storage is "adbc"
    nhwc = md_([2, 3, 4, 5], dt.f32, tag.nhwc)
    assert nhwc.permute_axes([0, 3, 1, 2]) == md_([2, 4, 5, 3], dt.f32, tag.abcd)
    nchw = md_([2, 3, 4, 5], dt.f32, tag.nchw)
    assert nchw.permute_axes([0, 3, 1, 2]) == md_([2, 4, 5, 3], dt.f32, tag.adbc)


def test_permute_axes_blocked():
    md = md_([2, 10, 3, 5], dt.f32, tag.nChw8c)
    out = md.permute_axes([1, 0, 2, 3])
    assert out.get_dims() == [10, 2, 3, 5]
    assert out.get_padded_dims() == [16, 2, 3, 5]
    assert np.array_equal(out.element_offsets(),
                          np.transpose(nchw_blocked_offset([2, 10, 3, 5], 8), (1, 0, 2, 3)))
    assert out == md_([10, 2, 3, 5], dt.f32, "bAcd8a")


def test_permute_axes_errors():
    with pytest.raises(dnnl.invalid_arguments, match="permutation"):
        md_([2, 3], dt.f32, tag.ab).permute_axes([0, 0])
    with pytest.raises(dnnl.invalid_arguments, match="permutation"):
        md_([2, 3], dt.f32, tag.ab).permute_axes([0, 1, 2])


def test_submemory_desc_plain():
    parent = md_([4, 6], dt.f32, tag.ab)
    sub = parent.submemory_desc([2, 3], [1, 2])
    assert sub.get_dims() == [2, 3]
    assert sub.get_strides() == [6, 1]
    expected = np.add.outer(np.arange(1, 3) * 6, np.arange(2, 5))
    assert np.array_equal(sub.element_offsets(), expected)
    assert sub != md_([2, 3], dt.f32, [6, 1])  # the offset is part of the layout


def test_submemory_desc_blocked():
    parent = md_([2, 16, 3, 3], dt.f32, tag.nChw8c)
    sub = parent.submemory_desc([2, 8, 3, 3], [0, 8, 0, 0])
    full = nchw_blocked_offset([2, 16, 3, 3], 8)
    assert np.array_equal(sub.element_offsets(), full[:, 8:16])
    with pytest.raises(dnnl.invalid_arguments, match="block"):
        parent.submemory_desc([2, 8, 3, 3], [0, 4, 0, 0])


def test_submemory_desc_errors():
    parent = md_([4, 6], dt.f32, tag.ab)
    with pytest.raises(dnnl.invalid_arguments, match=r"does not fit"):
        parent.submemory_desc([3, 3], [2, 0])
    with pytest.raises(dnnl.invalid_arguments, match="entries"):
        parent.submemory_desc([3], [0])


@pytest.mark.parametrize("dims,match", [([2, -3], r"dims\[1\].*-3"),
                                        ([0, 3], r"dims\[0\].*allow_empty"),
                                        ([], "dims"), ([1] * 13, "13")])
def test_bad_dims(dims, match):
    with pytest.raises(dnnl.invalid_arguments, match=match):
        md_(dims, dt.f32, "a" if len(dims) == 1 else tag.ab)


def test_empty_allowed_when_asked():
    md = md_([0, 3], dt.f32, tag.ab, allow_empty=True)
    assert md.get_dims() == [0, 3] and md.get_size() == 0


def test_tag_rank_mismatch():
    with pytest.raises(dnnl.invalid_arguments) as ei:
        md_([2, 3, 4], dt.f32, tag.nchw)
    msg = str(ei.value)
    assert "nchw" in msg and "[2, 3, 4]" in msg and "4 dims" in msg


@pytest.mark.parametrize("bad", ["nchwx", "abz", "aab", "aBc", "Abc1a", "", "NCHW"])
def test_unknown_tag(bad):
    with pytest.raises(dnnl.invalid_arguments, match="tag"):
        md_([2, 3, 4], dt.f32, bad)


def test_bad_strides_and_types():
    with pytest.raises(dnnl.invalid_arguments, match="entries"):
        md_([2, 3], dt.f32, [3, 1, 1])
    with pytest.raises(dnnl.invalid_arguments, match="overlap"):
        md_([2, 3], dt.f32, [2, 1])
    with pytest.raises(dnnl.invalid_arguments, match="non-negative"):
        md_([2, 3], dt.f32, [-3, 1])
    with pytest.raises(dnnl.invalid_arguments, match="data_type"):
        md_([2, 3], "float7", tag.ab)
    with pytest.raises(dnnl.invalid_arguments, match="undef"):
        md_([2, 3], dt.undef, tag.ab)
    with pytest.raises(dnnl.invalid_arguments, match="format_tag_or_strides"):
        md_([2, 3], dt.f32)
    with pytest.raises(dnnl.invalid_arguments, match="describes no layout"):
        md_([2, 3], dt.f32, tag.undef)


@pytest.mark.parametrize("args", [(None, dt.f32, tag.a), (None, dt.f32), (None, None, tag.a)])
def test_none_dims_with_other_arguments_raise(args):
    with pytest.raises(dnnl.invalid_arguments, match=r"dims.*None"):
        md_(*args)


@pytest.mark.parametrize("dims", [[2.0, 3], ["2", 3], [2, None], [True, 3], 5, "ab",
                                  [np.float32(2)], [2, -1]])
def test_dims_must_be_non_negative_ints(dims):
    with pytest.raises(dnnl.invalid_arguments, match="dims"):
        md_(dims, dt.f32, tag.any)


INT64_MAX = 2**63 - 1


@pytest.mark.parametrize("dims,fmt", [
    ([2**62, 8], tag.ab),                 # 2**65 elements
    ([2**62, 8], tag.any),                # no layout yet, the elements alone overflow
    ([2**61], tag.a),                     # 2**61 f32 elements = 2**63 bytes: one past int64
    ([2**31, 2**31, 2], tag.abc),
    ([1, 2**59 + 1], "Ab16a"),            # padding the blocked dim overflows
    ([3], [2**62]),                       # a stride whose span overflows
    ([1], [2**64]),                       # a stride that is not an int64
    ([0, 2**64], tag.ab),                 # an empty tensor still needs int64 dims
])
def test_dims_whose_byte_size_overflows_int64_raise(dims, fmt):
    with pytest.raises(dnnl.invalid_arguments, match=r"int64") as ei:
        md_(dims, dt.f32, fmt, allow_empty=True)
    assert str(dims[-1]) in str(ei.value)  # the message names the dims


def test_largest_int64_byte_size_is_accepted():
    # closed form: 2**61 - 1 f32 elements take 2**63 - 4 bytes, the last multiple of 4 that fits
    m = md_([2**61 - 1], dt.f32, tag.a)
    assert m.get_size() == 4 * (2**61 - 1) <= INT64_MAX
    assert md_([2**62 - 1], dt.u8, tag.a).get_size() == 2**62 - 1


def test_pack_of_dense_permutations_is_the_generic_scatter():
    """``pack`` / ``unpack`` of a plain dense layout (a permutation of the dims, size-1 dims
    anywhere) transpose instead of scattering per element: the same bytes as the scatter by
    ``element_offsets`` for every permutation and storage type, scalars broadcast; blocked
    layouts keep the scatter."""

    from pydnnl.memory.desc import MemoryDesc

    dt = dnnl.memory.data_type
    rng = np.random.default_rng(0)
    for dims in [(2, 3, 4, 5), (1, 3, 1, 5), (4, 1, 6), (7,)]:
        for perm in itertools.permutations(range(len(dims))):
            tag = "".join("abcd"[p] for p in perm)
            for t in (dt.f32, dt.bf16, dt.s8):
                md = MemoryDesc(dims, t, tag)
                v = rng.integers(-5, 5, size=dims).astype(t.storage_dtype)
                want = np.zeros(md.nelems_physical(), t.storage_dtype)
                want[md.element_offsets()] = v
                got = md.pack(v)
                assert got.dtype == want.dtype and np.array_equal(got, want), (dims, tag, t)
                assert np.array_equal(md.unpack(got), v)
    md = MemoryDesc((2, 3), dt.f32, "ba")
    assert np.array_equal(md.pack(np.float32(2.5)), np.full(6, 2.5, np.float32))
    blocked = MemoryDesc((2, 20, 3, 3), dt.f32, "aBcd16b")
    v = rng.random((2, 20, 3, 3)).astype(np.float32)
    assert blocked._dense_order() is None and np.array_equal(blocked.unpack(blocked.pack(v)), v)
