"""Binary post-op operands of data types other than f32 (bf16, f16, s8, u8, s32), read as f32
where each kernel loads them and combined in f32: convolution (two solvers), matmul, binary,
eltwise, softmax and pooling, per-channel and full operands, against float64 numpy computed
from the values the operand memories hold (bf16 and f16 rounded); a refused type raises
before anything is written; f32 operands keep the chain entries (and kernels) they had."""
from __future__ import annotations

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.kernels import post_ops as kpo
from pydnnl.memory.data_types import bf16_bits_to_f32, f32_to_bf16_bits
from pydnnl.reference import conv as R
from pydnnl.reference.pooling import pooling_forward as ref_pool
from pydnnl.reference.softmax import softmax_forward as ref_softmax

MD, DT, A = dnnl.memory.desc, dnnl.memory.data_type, dnnl.algorithm
F32, INF = DT.f32, dnnl.prop_kind.forward_inference
_INT = {DT.s8: np.int8, DT.u8: np.uint8, DT.s32: np.int32}
_NP_OP = {A.binary_add: np.add, A.binary_sub: np.subtract, A.binary_mul: np.multiply,
          A.binary_max: np.maximum, A.binary_min: np.minimum}


def _values(rng, dims, dt):
    """Operand values to give a memory of ``dt``."""
    if dt in _INT:
        lo = 0 if dt == DT.u8 else -7
        return rng.integers(lo, 8, size=dims).astype(_INT[dt])
    return (2 * rng.standard_normal(dims)).astype(np.float32)


def _stored(v, dt) -> np.ndarray:
    """The values a ``dt`` memory holds for ``v``, as float64 (bf16 and f16 rounded to
    nearest even)."""
    if dt == DT.bf16:
        return bf16_bits_to_f32(f32_to_bf16_bits(v)).astype(np.float64)
    if dt == DT.f16:
        return v.astype(np.float16).astype(np.float64)
    return np.asarray(v, np.float64)


def _chain(entries, rng):
    """``(attr, [(index, alg, values, dt)])`` of binary entries ``(alg, dims, dt, tag)``."""
    po, ops = dnnl.post_ops(), []
    for alg, dims, dt, tag in entries:
        ops.append((po.len(), alg, _values(rng, dims, dt), dt))
        po.append_binary(alg, MD(list(dims), dt, tag))
    attr = dnnl.primitive_attr()
    attr.set_post_ops(po)
    return attr, ops


def _operands(engine, pd, ops) -> dict:
    out = {}
    for i, _, v, _ in ops:
        arg = dnnl.ARG_ATTR_MULTIPLE_POST_OP(i) | dnnl.ARG_SRC_1
        out[arg] = dnnl.memory(pd.query_md(dnnl.query.exec_arg_md, arg), engine, v)
    return out


def _apply(y, ops) -> np.ndarray:
    for _, alg, v, dt in ops:
        y = _NP_OP[alg](y, _stored(v, dt))
    return y


def _check(got, ref):
    err = np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30)
    assert err <= 1e-5, f"max relative error {err:.3g}"


# a per-channel bf16 operand and a full f16 one (in another layout than dst)
N, C, H, W = 2, 8, 4, 4


def _float_chain(rng, dims=(N, C, H, W), full_tag="acdb"):
    per = (1, dims[1]) + (1,) * (len(dims) - 2)
    tag = "abcd"[:len(dims)]
    return _chain([(A.binary_add, per, DT.bf16, tag),
                   (A.binary_mul, dims, DT.f16, full_tag if len(dims) == 4 else tag)], rng)


@pytest.mark.parametrize("solver", ["direct", "implicit_gemm"])
def test_convolution(engine, stream, solver):
    rng = np.random.default_rng(1)
    attr, ops = _float_chain(rng)
    x = rng.standard_normal((N, 4, H, W)).astype(np.float32)
    w = rng.standard_normal((C, 4, 3, 3)).astype(np.float32) / 4
    pd = dnnl.convolution_forward.primitive_desc(
        engine, INF, A.convolution_auto, MD([N, 4, H, W], F32, "abcd"),
        MD([C, 4, 3, 3], F32, "abcd"), MD([N, C, H, W], F32, "abcd"), [1, 1], [1, 1], [1, 1],
        attr=attr, solver=solver)
    dst = dnnl.memory(pd.dst_desc(), engine)
    dnnl.convolution_forward(pd).execute(stream, {
        dnnl.ARG_SRC: dnnl.memory(pd.src_desc(), engine, x),
        dnnl.ARG_WEIGHTS: dnnl.memory(pd.weights_desc(), engine, w), dnnl.ARG_DST: dst,
        **_operands(engine, pd, ops)})
    stream.wait()
    ref = R.conv_forward(x, w, None, (1, 1), (0, 0), (1, 1), (1, 1), dtype=np.float64)
    _check(dst.to_numpy(), _apply(ref, ops))


def test_matmul(engine, stream):
    rng = np.random.default_rng(2)
    m, k, n = 5, 6, 8
    attr, ops = _chain([(A.binary_add, (1, n), DT.bf16, "ab"),
                        (A.binary_mul, (m, n), DT.f16, "ba"),
                        (A.binary_sub, (m, 1), DT.s8, "ab")], rng)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((k, n)).astype(np.float32)
    pd = dnnl.matmul.primitive_desc(engine, MD([m, k], F32, "ab"), MD([k, n], F32, "ab"),
                                    MD([m, n], F32, "ab"), attr)
    dst = dnnl.memory(pd.dst_desc(), engine)
    dnnl.matmul(pd).execute(stream, {
        dnnl.ARG_SRC: dnnl.memory(pd.src_desc(), engine, x),
        dnnl.ARG_WEIGHTS: dnnl.memory(pd.weights_desc(), engine, w), dnnl.ARG_DST: dst,
        **_operands(engine, pd, ops)})
    stream.wait()
    _check(dst.to_numpy(), _apply(x.astype(np.float64) @ w, ops))


def test_binary(engine, stream):
    rng = np.random.default_rng(3)
    attr, ops = _float_chain(rng)
    a = rng.standard_normal((N, C, H, W)).astype(np.float32)
    b = rng.standard_normal((1, C, 1, 1)).astype(np.float32)
    md = MD([N, C, H, W], F32, "abcd")
    pd = dnnl.binary.primitive_desc(engine, A.binary_add, md, MD([1, C, 1, 1], F32, "abcd"),
                                    md, attr)
    dst = dnnl.memory(pd.dst_desc(), engine)
    dnnl.binary(pd).execute(stream, {
        dnnl.ARG_SRC_0: dnnl.memory(md, engine, a),
        dnnl.ARG_SRC_1: dnnl.memory(MD([1, C, 1, 1], F32, "abcd"), engine, b), dnnl.ARG_DST: dst,
        **_operands(engine, pd, ops)})
    stream.wait()
    _check(dst.to_numpy(), _apply(a.astype(np.float64) + b, ops))


@pytest.mark.parametrize("types", ["bf16_f16", "s8_u8_s32"])
def test_eltwise(engine, stream, types):
    rng = np.random.default_rng(4)
    if types == "bf16_f16":
        attr, ops = _float_chain(rng)
    else:
        attr, ops = _chain([(A.binary_add, (1, C, 1, 1), DT.s8, "abcd"),
                            (A.binary_max, (N, C, H, W), DT.u8, "abcd"),
                            (A.binary_mul, (1, 1, 1, 1), DT.s32, "abcd")], rng)
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    md = MD([N, C, H, W], F32, "abcd")
    pd = dnnl.eltwise_forward.primitive_desc(engine, INF, A.eltwise_relu, md, md, 0.0, 0.0,
                                             attr)
    dst = dnnl.memory(pd.dst_desc(), engine)
    dnnl.eltwise_forward(pd).execute(stream, {
        dnnl.ARG_SRC: dnnl.memory(md, engine, x), dnnl.ARG_DST: dst,
        **_operands(engine, pd, ops)})
    stream.wait()
    _check(dst.to_numpy(), _apply(np.maximum(x.astype(np.float64), 0.0), ops))


def test_softmax(engine, stream):
    rng = np.random.default_rng(5)
    attr, ops = _float_chain(rng, dims=(3, 16), full_tag="ab")
    x = rng.standard_normal((3, 16)).astype(np.float32)
    md = MD([3, 16], F32, "ab")
    pd = dnnl.softmax_forward.primitive_desc(engine, INF, A.softmax_accurate, md, md, 1, attr)
    dst = dnnl.memory(pd.dst_desc(), engine)
    dnnl.softmax_forward(pd).execute(stream, {
        dnnl.ARG_SRC: dnnl.memory(md, engine, x), dnnl.ARG_DST: dst,
        **_operands(engine, pd, ops)})
    stream.wait()
    ref = ref_softmax(A.softmax_accurate, x.astype(np.float64), 1)
    _check(dst.to_numpy(), _apply(np.asarray(ref, np.float64), ops))


def test_pooling(engine, stream):
    rng = np.random.default_rng(6)
    attr, ops = _float_chain(rng, dims=(N, C, 3, 3))
    x = rng.standard_normal((N, C, 6, 6)).astype(np.float32)
    pd = dnnl.pooling_forward.primitive_desc(
        engine, INF, A.pooling_max, MD([N, C, 6, 6], F32, "abcd"), MD([N, C, 3, 3], F32, "abcd"),
        [2, 2], [2, 2], [0, 0], [0, 0], [0, 0], attr)
    dst = dnnl.memory(pd.dst_desc(), engine)
    dnnl.pooling_forward(pd).execute(stream, {
        dnnl.ARG_SRC: dnnl.memory(pd.src_desc(), engine, x), dnnl.ARG_DST: dst,
        **_operands(engine, pd, ops)})
    stream.wait()
    ref = ref_pool(x, "max", [2, 2], [2, 2], [0, 0], [0, 0], [0, 0])
    ref = ref[0] if isinstance(ref, tuple) else ref
    _check(dst.to_numpy(), _apply(np.asarray(ref, np.float64), ops))


def test_refused_type_and_wrong_memory_leave_dst_untouched(cpu_engine):
    eng = cpu_engine
    s = dnnl.stream(eng)
    md = MD([2, 4], F32, "ab")
    before = np.arange(8, dtype=np.float32).reshape(2, 4)
    dst = dnnl.memory(md, eng, before)
    po = dnnl.post_ops()
    po.append_binary(A.binary_add, MD([1, 4], DT.f64, "ab"))
    attr = dnnl.primitive_attr()
    attr.set_post_ops(po)
    with pytest.raises(dnnl.unimplemented, match="src1 data type f64"):
        dnnl.eltwise_forward.primitive_desc(eng, INF, A.eltwise_relu, md, md, 0.0, 0.0, attr)
    with pytest.raises(dnnl.unimplemented, match="src1 data type f64"):
        dnnl.matmul.primitive_desc(eng, MD([2, 3], F32, "ab"), MD([3, 4], F32, "ab"), md, attr)
    # a bf16 operand given an f32 memory: refused at execute, before any write
    po = dnnl.post_ops()
    po.append_binary(A.binary_add, MD([1, 4], DT.bf16, "ab"))
    attr.set_post_ops(po)
    pd = dnnl.eltwise_forward.primitive_desc(eng, INF, A.eltwise_relu, md, md, 0.0, 0.0, attr)
    arg = dnnl.ARG_ATTR_MULTIPLE_POST_OP(0) | dnnl.ARG_SRC_1
    assert pd.query_md(dnnl.query.exec_arg_md, arg).data_type == DT.bf16
    with pytest.raises(dnnl.invalid_arguments, match=r"expects memory.desc\(\[1, 4\], bf16"):
        dnnl.eltwise_forward(pd).execute(s, {
            dnnl.ARG_SRC: dnnl.memory(md, eng, np.ones((2, 4), np.float32)), dnnl.ARG_DST: dst,
            arg: dnnl.memory(MD([1, 4], F32, "ab"), eng, np.ones((1, 4), np.float32))})
    s.wait()
    np.testing.assert_array_equal(dst.to_numpy(), before)


def test_f32_entries_unchanged_and_typed_ones_described():
    assert kpo.binary_entry_alg(A.binary_add, F32) == int(A.binary_add)
    assert kpo.binary_entry_alg(A.binary_add, DT.bf16) == (int(A.binary_add), int(DT.bf16))
    f32 = ("binary", kpo.binary_entry_alg(A.binary_mul, F32), ((0, 1),), (4,), 4)
    bf16 = ("binary", kpo.binary_entry_alg(A.binary_mul, DT.bf16), ((0, 1),), (4,), 4)
    assert kpo.binary_alg(bf16) == A.binary_mul and kpo.src1_dt(bf16) == DT.bf16
    assert kpo.src1_dt(f32) == F32 and kpo.src1_c_type(bf16) == "ushort"
    assert kpo.describe((f32, bf16)) == "binary_mul:4+binary_mul:bf16:4"
