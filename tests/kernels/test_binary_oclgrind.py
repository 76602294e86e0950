"""Binary, sum and concat kernels under the Oclgrind simulator: every launch shape (flat, rows,
strided with division), broadcasts of either source, blocked layouts with padding, fused
post-ops and scales, in-place use, the CPU vector-row form (forced; a probe of its own), the
ternary select (an s8 condition), sums and concats of more sources than one kernel takes. No
out-of-bounds access, no use of uninitialized values, no data race, no API misuse, and results
that match the numpy references.

Oclgrind reports problems only on stderr, so the kernels run in a subprocess whose stderr is
read here; kernel caches are off so that every kernel is generated and built under Oclgrind.
"""
from __future__ import annotations

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from oclgrind_helpers import has_oclgrind, run_probe  # noqa: E402

PROBE = r"""
import json
import numpy as np
import pydnnl as dnnl
from pydnnl.reference.binary import binary as RB
from pydnnl.reference.sum import sum_ as RS
from pydnnl.reference.concat import concat as RC
from pydnnl.reference.post_ops import apply_post_ops

MD, F32, A = dnnl.memory.desc, dnnl.memory.data_type.f32, dnnl.algorithm
MS = dnnl.ARG_MULTIPLE_SRC
eng = dnnl.engine.from_name("Oclgrind")
assert eng.is_simulator
s = dnnl.stream(eng)
rng = np.random.default_rng(3)
results = {}

def close(got, want):
    return bool(np.allclose(got, want, rtol=2e-6, atol=1e-6))

def x(*dims):
    return rng.uniform(-2, 2, dims).astype(np.float32)

def binary(alg, a, b, ta, tb, td, inplace=False, attr=None, extra=None, prior=None):
    dims = [max(p, q) for p, q in zip(a.shape, b.shape)]
    args = [eng, alg, MD(a.shape, F32, ta), MD(b.shape, F32, tb), MD(dims, F32, td)]
    pd = dnnl.binary.primitive_desc(*args, attr) if attr else dnnl.binary.primitive_desc(*args)
    m0 = dnnl.memory(pd.src_desc(0), eng, a)
    m1 = dnnl.memory(pd.src_desc(1), eng, b)
    out = m0 if inplace else dnnl.memory(pd.dst_desc(), eng, prior)
    m = {dnnl.ARG_SRC_0: m0, dnnl.ARG_SRC_1: m1, dnnl.ARG_DST: out}
    m.update(extra or {})
    dnnl.binary(pd).execute(s, m)
    s.wait()
    return pd.impl_info_str(), out.to_numpy()

# flat: 546 elements (more than one work-group, not a multiple of one), in place
a, b = x(2, 3, 7, 13), x(2, 3, 7, 13)
impl, y = binary(A.binary_div, a, b, "abcd", "abcd", "abcd", inplace=True)
results["flat_inplace"] = impl.endswith("flat") and close(y, RB(A.binary_div, a, b))
# rows: inner dim 300 (> one work-group), src1 broadcast in the middle
a, b = x(2, 3, 300), x(2, 1, 300)
impl, y = binary(A.binary_ge, a, b, "abc", "abc", "any")
results["rows_broadcast"] = close(y, RB(A.binary_ge, a, b))
# strided (divisions), both sources broadcast, blocked dst with padding
a, b = x(2, 1, 3, 5), x(1, 20, 3, 1)
impl, y = binary(A.binary_max, a, b, "acdb", "abcd", "aBcd16b")
results["strided_blocked_both_broadcast"] = impl.endswith("strided") and close(
    y, RB(A.binary_max, a, b))
# scales and post-ops (sum reads dst, binary operand per channel), channels last
a, b, p, prior = x(2, 8, 3, 5), x(1, 8, 1, 1), x(1, 8, 1, 1), x(2, 8, 3, 5)
ops = dnnl.post_ops()
ops.append_sum(0.5)
ops.append_eltwise(A.eltwise_relu, 0.0, 0.0)
ops.append_binary(A.binary_mul, MD([1, 8, 1, 1], F32, "abcd"))
attr = dnnl.primitive_attr()
attr.set_post_ops(ops)
attr.set_scales_mask(dnnl.ARG_SRC_1, 0)
extra = {dnnl.ARG_ATTR_MULTIPLE_POST_OP(2) | dnnl.ARG_SRC_1:
             dnnl.memory(MD([1, 8, 1, 1], F32, "abcd"), eng, p),
         dnnl.ARG_ATTR_SCALES | dnnl.ARG_SRC_1: dnnl.memory(MD([1], F32, "a"), eng,
                                                           np.float32([2.0]))}
impl, y = binary(A.binary_sub, a, b, "acdb", "abcd", "acdb", attr=attr, extra=extra,
                 prior=prior)
results["scales_post_ops"] = close(y, apply_post_ops(RB(A.binary_sub, a, b, 1.0, 2.0), ops,
                                                     prior=prior, binary_srcs={2: p}))

def summ(xs, scales, tags, dtag=None, inplace=False):
    mds = [MD(v.shape, F32, t) for v, t in zip(xs, tags)]
    pd = (dnnl.sum.primitive_desc(eng, MD(xs[0].shape, F32, dtag), scales, mds) if dtag
          else dnnl.sum.primitive_desc(eng, scales, mds))
    m = {MS + i: dnnl.memory(md, eng, v) for i, (md, v) in enumerate(zip(mds, xs))}
    out = m[MS] if inplace else dnnl.memory(pd.dst_desc(), eng)
    m[dnnl.ARG_DST] = out
    dnnl.sum(pd).execute(s, m)
    s.wait()
    return pd.impl_info_str(), out.to_numpy()

xs = [x(2, 3, 7, 13) for _ in range(3)]
impl, y = summ(xs, [1.0, -0.5, 2.0], ["abcd"] * 3, inplace=True)
results["sum_flat_inplace"] = impl.endswith("flat") and close(y, RS([1.0, -0.5, 2.0], xs))
xs = [x(2, 20, 3, 5) for _ in range(3)]
impl, y = summ(xs, [1.0, 0.5, 0.25], ["aBcd16b", "acdb", "abcd"], "aBcd8b")
results["sum_strided_blocked"] = impl.endswith("strided") and close(y, RS([1.0, 0.5, 0.25], xs))
xs = [x(3, 4, 5) for _ in range(35)]  # two launches, the second accumulates
sc = list(np.linspace(-1, 1, 35))
impl, y = summ(xs, sc, ["abc"] * 34 + ["cba"])
results["sum_two_passes"] = close(y, RS(sc, xs))

def cat(xs, axis, tags, dtag=None):
    mds = [MD(v.shape, F32, t) for v, t in zip(xs, tags)]
    if dtag:
        dims = list(xs[0].shape)
        dims[axis] = sum(v.shape[axis] for v in xs)
        pd = dnnl.concat.primitive_desc(eng, MD(dims, F32, dtag), axis, mds)
    else:
        pd = dnnl.concat.primitive_desc(eng, axis, mds)
    m = {MS + i: dnnl.memory(md, eng, v) for i, (md, v) in enumerate(zip(mds, xs))}
    out = m[dnnl.ARG_DST] = dnnl.memory(pd.dst_desc(), eng)
    dnnl.concat(pd).execute(s, m)
    s.wait()
    return out.to_numpy()

xs = [x(2, 3, 4, 5), x(2, 7, 4, 5), x(2, 1, 4, 5)]
results["concat_channels_blocked"] = bool(np.array_equal(
    cat(xs, 1, ["abcd", "acdb", "aBcd8b"], "aBcd16b"), RC(1, xs)))
xs = [x(2, 3, 300), x(2, 3, 2)]
results["concat_rows_last_axis"] = bool(np.array_equal(cat(xs, 2, ["abc", "abc"]), RC(2, xs)))
xs = [x(1, 3, 4) for _ in range(34)]  # two launches, each on its own region
results["concat_two_passes"] = bool(np.array_equal(cat(xs, 0, ["abc", "acb"] * 17),
                                                   RC(0, xs)))

# new launch shapes and bf16/f16: long rows with a tail (300 = 256 + 44), short rows (32 x 8
# rows per work-group, 5 rows: a partial work-group), the one-launch innermost concat with rows
# of different lengths, a concat region starting inside a block
BF16, F16 = dnnl.memory.data_type.bf16, dnnl.memory.data_type.f16

def typed_binary(alg, a, b, ta, tb, td, dts):
    dims = [max(p, q) for p, q in zip(a.shape, b.shape)]
    pd = dnnl.binary.primitive_desc(eng, alg, MD(a.shape, dts[0], ta), MD(b.shape, dts[1], tb),
                                    MD(dims, dts[2], td))
    m0, m1 = dnnl.memory(pd.src_desc(0), eng, a), dnnl.memory(pd.src_desc(1), eng, b)
    out = dnnl.memory(pd.dst_desc(), eng)
    dnnl.binary(pd).execute(s, {dnnl.ARG_SRC_0: m0, dnnl.ARG_SRC_1: m1, dnnl.ARG_DST: out})
    s.wait()
    want = RB(alg, m0.to_numpy().astype(np.float64), m1.to_numpy().astype(np.float64))
    return bool(np.allclose(out.to_numpy(), want, rtol=2 ** -7, atol=1e-6))

a, b = x(2, 3, 300), x(1, 3, 1)
results["bf16_long_rows_tail"] = typed_binary(A.binary_mul, a, b, "abc", "abc", "any",
                                              (BF16, F32, BF16))
a, b = x(5, 32), x(5, 1)
results["f16_short_rows_partial"] = typed_binary(A.binary_add, a, b, "ab", "ab", "any",
                                                 (F16, F16, F32))

def typed_cat(xs, axis, tags, dt_, dtag=None):
    mds = [MD(v.shape, dt_, t) for v, t in zip(xs, tags)]
    dims = list(xs[0].shape)
    dims[axis] = sum(v.shape[axis] for v in xs)
    pd = dnnl.concat.primitive_desc(eng, MD(dims, dt_, dtag or "any"), axis, mds)
    m = {MS + i: dnnl.memory(md, eng, v) for i, (md, v) in enumerate(zip(mds, xs))}
    out = m[dnnl.ARG_DST] = dnnl.memory(pd.dst_desc(), eng)
    dnnl.concat(pd).execute(s, m)
    s.wait()
    return bool(np.array_equal(out.to_numpy(), RC(axis, [m[MS + i].to_numpy()
                                                          for i in range(len(xs))])))

results["f16_concat_innermost_one_launch"] = typed_cat([x(3, 5, 32), x(3, 5, 16)], 2,
                                                       ["abc", "abc"], F16)
results["bf16_concat_inside_block"] = typed_cat([x(2, 3, 4, 5), x(2, 9, 4, 5)], 1,
                                                ["abcd", "acdb"], BF16, "aBcd8b")

# run-time sizes (kernels.binary.runtime_form), two shapes of each class: long rows (272 =
# 256 + 16: a partial second work-group per row) over a run-time minibatch, flat with a run-time
# minibatch over rows of 15, channels-last short rows (16 rows per work-group, 15 or 14 rows:
# a partial work-group), a scalar broadcast collapsed to one run-time dim
for name, shapes, tg in (
        ("rt_long_rows", [((2, 3, 16, 17), (1, 3, 1, 1)), ((1, 3, 16, 17), (1, 3, 1, 1))], "abcd"),
        ("rt_flat_minibatch", [((2, 4, 3, 5), (1, 4, 1, 1)), ((3, 4, 3, 5), (1, 4, 1, 1))], "abcd"),
        ("rt_short_rows", [((1, 16, 3, 5), (1, 16, 1, 1)), ((2, 16, 7, 1), (1, 16, 1, 1))], "acdb"),
        ("rt_scalar", [((2, 3, 4, 5), (1, 1, 1, 1)), ((1, 3, 7, 5), (1, 1, 1, 1))], "abcd")):
    ok = True
    for d0, d1 in shapes:
        a, b = x(*d0), x(*d1)
        impl, y = binary(A.binary_sub, a, b, tg, tg, tg)
        ok = ok and close(y, RB(A.binary_sub, a, b))
    results[name] = ok

# binary_select (an s8 condition src2 of src0's dims): flat in place, src0 and its condition
# broadcast into a blocked dst with padding, bf16 src0 over long rows with a run-time minibatch
# (two shapes of one program)
S8 = dnnl.memory.data_type.s8

def select(a, b, c, ta, tb, tc, td, dts=(F32, F32, F32), inplace=False):
    dims = [max(p, q) for p, q in zip(a.shape, b.shape)]
    pd = dnnl.binary.primitive_desc(eng, A.binary_select, MD(a.shape, dts[0], ta),
                                    MD(b.shape, dts[1], tb), MD(c.shape, S8, tc),
                                    MD(dims, dts[2], td))
    m0, m1 = dnnl.memory(pd.src_desc(0), eng, a), dnnl.memory(pd.src_desc(1), eng, b)
    out = m0 if inplace else dnnl.memory(pd.dst_desc(), eng)
    want = RB(A.binary_select, m0.to_numpy(), m1.to_numpy(), src2=c)
    dnnl.binary(pd).execute(s, {dnnl.ARG_SRC_0: m0, dnnl.ARG_SRC_1: m1, dnnl.ARG_DST: out,
                                dnnl.ARG_SRC_2: dnnl.memory(pd.src_desc(2), eng, c)})
    s.wait()
    return pd.impl_info_str(), bool(np.array_equal(out.to_numpy(), want))

def cond(*dims):
    return rng.integers(-2, 3, dims).astype(np.int8)

impl, ok = select(x(2, 3, 7, 13), x(2, 3, 7, 13), cond(2, 3, 7, 13), "abcd", "abcd", "abcd",
                  "abcd", inplace=True)
results["select_flat_inplace"] = impl.endswith("flat") and ok
impl, ok = select(x(2, 1, 3, 5), x(2, 20, 3, 5), cond(2, 1, 3, 5), "acdb", "abcd", "abcd",
                  "aBcd16b")
results["select_strided_blocked_broadcast"] = impl.endswith("strided") and ok
ok = True
for n in (2, 1):
    ok = ok and select(x(n, 3, 300), x(1, 3, 1), cond(n, 3, 300), "abc", "abc", "abc", "abc",
                       dts=(BF16, F32, F32))[1]
results["select_bf16_rt_long_rows"] = ok

# the GPU launch shape (several elements per work-item, wg apart): flat with a partial group,
# long rows of 700 (spans of 2 x 256 and a partial one), sum and eltwise flat
from pydnnl.runtime.heuristics import binary as HB, eltwise as HE
HB.items = lambda info: 3
HE.flat_params = lambda info, count: (256, 3)
a, b = x(2, 3, 7, 13), x(2, 3, 7, 13)
impl, y = binary(A.binary_add, a, b, "abcd", "abcd", "abcd")
results["items3_flat"] = impl.endswith("flat") and close(y, RB(A.binary_add, a, b))
a, b = x(2, 3, 700), x(2, 3, 1)
impl, y = binary(A.binary_mul, a, b, "abc", "abc", "abc")
results["items3_long_rows"] = close(y, RB(A.binary_mul, a, b))
a, b = x(2, 3, 29, 29), x(1, 3, 1, 1)  # rows of 841, run-time minibatch: spans of 768, one partial
impl, y = binary(A.binary_mul, a, b, "abcd", "abcd", "abcd")
results["items3_rt_long_rows"] = close(y, RB(A.binary_mul, a, b))
xs = [x(2, 3, 7, 13) for _ in range(2)]
impl, y = summ(xs, [1.0, -0.5], ["abcd"] * 2)
results["items3_sum"] = close(y, RS([1.0, -0.5], xs))
v = x(1155)
md = MD([1155], F32, "a")
pd = dnnl.eltwise_forward.primitive_desc(eng, dnnl.prop_kind.forward_inference,
                                         A.eltwise_relu, md, md)
out = dnnl.memory(md, eng)
dnnl.eltwise_forward(pd).execute(s, {dnnl.ARG_SRC: dnnl.memory(md, eng, v), dnnl.ARG_DST: out})
s.wait()
results["items3_eltwise_flat"] = bool(np.array_equal(out.to_numpy(), np.maximum(v, 0)))
HB.concat_spans = lambda info: True  # one launch over long rows of every source
xs = [x(2, 3, 10, 10), x(2, 3, 10, 10), x(2, 5, 10, 10)]
results["concat_spans"] = bool(np.array_equal(cat(xs, 1, ["abcd"] * 3), RC(1, xs)))
print(json.dumps(results))
"""


@pytest.mark.skipif(not has_oclgrind(), reason="Oclgrind OpenCL platform not installed")
def test_binary_sum_concat_kernels_under_oclgrind():
    results = run_probe(PROBE)
    assert results and all(results.values()), results


PROBE_VEC = PROBE[:PROBE.index("# flat: 546 elements")] + r"""
# the CPU vector-row form (one work-item walks rows in float8 vectors), forced: 2 rows per
# work-item (a short last one), rows of 21 (2 vectors and a tail) with one per-channel value
# per row (nchw), rows of 21 channels read along (nhwc), rows of 5 (shorter than a vector),
# a row broadcast with scales, bf16 in and out
from pydnnl.runtime.heuristics import binary as HB
HB.vec_rows = lambda info, dims: (8, 2) if len(dims) > 1 else (0, 0)
a, b = x(3, 3, 3, 7), x(1, 3, 1, 1)
impl, y = binary(A.binary_mul, a, b, "abcd", "abcd", "abcd")
results["vec_nchw_channel"] = close(y, RB(A.binary_mul, a, b))
a, b = x(3, 21, 1, 3), x(1, 21, 1, 1)
impl, y = binary(A.binary_sub, a, b, "acdb", "acdb", "acdb", inplace=True)
results["vec_nhwc_channel_inplace"] = close(y, RB(A.binary_sub, a, b))
a, b = x(3, 5, 1, 3), x(1, 5, 1, 1)
impl, y = binary(A.binary_max, a, b, "acdb", "acdb", "acdb")
results["vec_nhwc_short_rows"] = close(y, RB(A.binary_max, a, b))
a, b = x(5, 37), x(1, 37)
attr = dnnl.primitive_attr()
attr.set_scales_mask(dnnl.ARG_SRC_1, 0)
sc1 = dnnl.memory(MD([1], F32, "a"), eng, np.array([2.0], np.float32))
impl, y = binary(A.binary_add, a, b, "ab", "ab", "ab", attr=attr,
                 extra={dnnl.ARG_ATTR_SCALES | dnnl.ARG_SRC_1: sc1})
results["vec_row_broadcast_scale"] = close(y, RB(A.binary_add, a, 2.0 * b))
BF16 = dnnl.memory.data_type.bf16
pd = dnnl.binary.primitive_desc(eng, A.binary_add, MD([3, 3, 3, 7], BF16, "abcd"),
                                MD([1, 3, 1, 1], BF16, "abcd"), MD([3, 3, 3, 7], BF16, "abcd"))
a, b = x(3, 3, 3, 7), x(1, 3, 1, 1)
m0, m1 = dnnl.memory(pd.src_desc(0), eng, a), dnnl.memory(pd.src_desc(1), eng, b)
out = dnnl.memory(pd.dst_desc(), eng)
dnnl.binary(pd).execute(s, {dnnl.ARG_SRC_0: m0, dnnl.ARG_SRC_1: m1, dnnl.ARG_DST: out})
s.wait()
want = RB(A.binary_add, m0.to_numpy().astype(np.float64), m1.to_numpy().astype(np.float64))
results["vec_bf16_channel"] = bool(np.allclose(out.to_numpy(), want, rtol=2 ** -7, atol=1e-6))
print(json.dumps(results))
"""


@pytest.mark.skipif(not has_oclgrind(), reason="Oclgrind OpenCL platform not installed")
def test_binary_vector_rows_under_oclgrind():
    # the optimizer pairs the row index's division and remainder behind LLVM's freeze, which
    # Oclgrind's uninitialized-value plugin cannot follow (as for the normalization kernels)
    results = run_probe(PROBE_VEC, OCLGRIND_BUILD_OPTIONS="-cl-opt-disable")
    assert set(results) == {"vec_nchw_channel", "vec_nhwc_channel_inplace",
                            "vec_nhwc_short_rows", "vec_row_broadcast_scale",
                            "vec_bf16_channel"}
    assert all(results.values()), results
