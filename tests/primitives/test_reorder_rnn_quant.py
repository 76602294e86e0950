"""Quantizing reorders of int8 RNNs (oneDNN's ``rnn_data_reorder`` and
``rnn_weights_reorder_s8``): f32 data and weights into u8/s8 with the RNN quantization
parameters of the primitive attributes, the reorders oneDNN refuses, and oneDNN's int8 LSTM
example flow (``examples/cpu_rnn_inference_int8.cpp``) at a tiny size.

Oracles are numpy's: oneDNN computes ``x * scale + shift`` (data) or ``w * scale`` (weights) in
f32, each operation rounded, then saturates and rounds half to even. numpy's float32
arithmetic rounds each operation the same way and ``np.rint`` rounds half to even, so the
quantized values must be equal, not close. The values include exact ties (.5 after scaling),
values beyond the type's range, and one value where a fused multiply-add (one rounding) would
round the other way than oneDNN's two roundings.
"""
from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.reference.rnn_int8 import rnn_int8_forward

dt, tag = dnnl.memory.data_type, dnnl.memory.format_tag
MD = dnnl.memory.desc
LIMITS = {"u8": (0, 255, np.uint8), "s8": (-128, 127, np.int8)}
RNG = np.random.default_rng(5)


def quantize_data(x, scale, shift, name):
    """oneDNN's data quantization, in numpy float32: two roundings, then rint and clip."""
    lo, hi, np_type = LIMITS[name]
    v = np.asarray(x, np.float32) * np.float32(scale) + np.float32(shift)
    return np.clip(np.rint(v), lo, hi).astype(np_type)


def quantize_weights(w, scales):
    """oneDNN's weights quantization: ``w * scale`` in float32, rint, clip to s8."""
    return np.clip(np.rint(np.asarray(w, np.float32) * np.asarray(scales, np.float32)),
                   -128, 127).astype(np.int8)


def reorder(eng, s, x, src_md, dst_md, attr):
    src = dnnl.memory(src_md, eng, x)
    dst = dnnl.memory(dst_md, eng)
    r = dnnl.reorder(src, dst, attr)
    r.execute(s, src, dst)
    s.wait()
    return dst.to_numpy(), r.get_primitive_desc()


def data_attr(scale, shift):
    attr = dnnl.primitive_attr()
    attr.set_rnn_data_qparams(scale, shift)
    return attr


# -- data ---------------------------------------------------------------------------------------
# (data type, scale, shift, values with their hand-computed codes)
DATA_TIES = {
    # 0.125 * 4 + 10 = 10.5 -> 10; 11.5 -> 12; -0.5 -> 0; 255.5 -> 255; beyond: 255, 0
    "u8": (4.0, 10.0, [0.125, 0.375, -2.625, 61.375, 100.0, -100.0, 0.0, 1.0],
           [10, 12, 0, 255, 255, 0, 10, 14]),
    # 0.5 -> 0; 1.5 -> 2; -0.5 -> 0; -1.5 -> -2; 127.5 -> 127; -128.5 -> -128; beyond
    "s8": (4.0, 0.0, [0.125, 0.375, -0.125, -0.375, 31.875, -32.125, 1000.0, -1000.0],
           [0, 2, 0, -2, 127, -128, 127, -128]),
}


@pytest.mark.parametrize("name,layout", [("u8", "tnc"), ("s8", "ldnc"), ("u8", "ldnc")])
def test_data_quantization(engine, stream, name, layout):
    scale, shift, ties, codes = DATA_TIES[name]
    dims = [2, 3, 8] if layout == "tnc" else [1, 2, 3, 8]
    x = RNG.uniform(-40, 40, dims).astype(np.float32)
    x.reshape(-1, 8)[0] = ties
    attr = data_attr(scale, shift)
    # weights parameters in the same attribute (as oneDNN's example) leave data alone
    attr.set_rnn_weights_qparams(0, [3.0])
    q, pd = reorder(engine, stream, x, MD(dims, dt.f32, layout),
                    MD(dims, getattr(dt, name), layout), attr)
    assert np.array_equal(q.reshape(-1, 8)[0], codes)
    assert np.array_equal(q, quantize_data(x, scale, shift, name))
    assert "rnn_data" in pd.impl_info_str()


def test_data_two_roundings(engine, stream):
    """oneDNN's example parameters (scale 63, shift 64): x = f32(-63.5 / 63) gives
    f32(x * 63) = -63.5 exactly, so x * 63 + 64 = 0.5 -> 0; the exact product is a little
    above -63.5, and a fused multiply-add would give 0.5000019 -> 1."""
    x = RNG.uniform(-2.5, 2.5, (3, 2, 16)).astype(np.float32)
    tie = np.float32(-63.5 / 63)
    assert np.float32(tie * np.float32(63)) == -63.5 and float(tie) * 63 + 64 > 0.5
    x[0, 0, :4] = tie
    q, _ = reorder(engine, stream, x, MD([3, 2, 16], dt.f32, tag.tnc),
                   MD([3, 2, 16], dt.u8, tag.tnc), data_attr(63.0, 64.0))
    assert np.all(q[0, 0, :4] == 0)
    assert np.array_equal(q, quantize_data(x, 63.0, 64.0, "u8"))


def test_data_into_a_time_slice(first_engine):
    """A tnc view at an offset (a time step of a longer sequence) is still tnc."""
    s = dnnl.stream(first_engine)
    x = RNG.uniform(-1, 1, (1, 2, 5)).astype(np.float32)
    full = dnnl.memory(MD([3, 2, 5], dt.u8, tag.tnc), first_engine,
                       np.full((3, 2, 5), 7, np.uint8))
    part = dnnl.memory(full.get_desc().submemory_desc([1, 2, 5], [1, 0, 0]), first_engine,
                       full.buffer)
    src = dnnl.memory(MD([1, 2, 5], dt.f32, tag.tnc), first_engine, x)
    dnnl.reorder(src, part, data_attr(63.0, 64.0)).execute(s, src, part)
    s.wait()
    got = full.to_numpy()
    assert np.all(got[0] == 7) and np.all(got[2] == 7)
    assert np.array_equal(got[1], quantize_data(x[0], 63.0, 64.0, "u8"))


def test_default_qparams_are_a_plain_reorder(first_engine):
    """oneDNN's defaults (scale 1, shift 0; weights scales 1) count as no RNN parameters: an
    f32 -> f32 reorder with them is an ordinary one."""
    s = dnnl.stream(first_engine)
    attr = data_attr(1.0, 0.0)
    attr.set_rnn_weights_qparams(24, [1.0] * 6)
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    y, pd = reorder(first_engine, s, x, MD([2, 3, 4], dt.f32, tag.tnc),
                    MD([2, 3, 4], dt.f32, tag.ntc), attr)
    assert np.array_equal(y, x) and "rnn" not in pd.impl_info_str()


# -- weights ------------------------------------------------------------------------------------
def _weights(dims):
    """Multiples of 1/16 in [-80, 80): with power-of-two scales many products are exact ties,
    and many saturate."""
    w = RNG.integers(-1280, 1280, dims).astype(np.float32) / 16
    w.reshape(-1)[:6] = [0.25, 0.75, -0.25, -0.75, 63.75, -64.25]  # x 2: ties and range ends
    return w


# (id, dims, src tag, dst tag, mask; weights: scales per (g, o) or per o)
WEIGHTS_CASES = [
    ("ldigo-mask24", [1, 2, 3, 4, 5], tag.ldigo, tag.ldigo, 24),
    ("ldgoi-to-ldigo-mask0", [2, 1, 3, 4, 5], tag.ldgoi, tag.ldigo, 0),
    ("ldio-projection-mask8", [1, 2, 6, 5], tag.ldio, tag.ldio, 8),
    ("ldoi-to-ldio-projection-mask0", [1, 1, 6, 5], tag.ldoi, tag.ldio, 0),
]


@pytest.mark.parametrize("case", WEIGHTS_CASES, ids=[c[0] for c in WEIGHTS_CASES])
def test_weights_quantization(engine, stream, case):
    _, dims, src_tag, dst_tag, mask = case
    projection = len(dims) == 4
    n = dims[3] * dims[4] if not projection else dims[3]
    # powers of two (exact ties) and oneDNN's example values (30, 65.5)
    pool = np.array([2.0, 0.5, 4.0, 30.0, 65.5, 2.0, 1.0, 8.0], np.float32)
    scales = np.resize(pool, n) if mask else pool[:1]
    w = _weights(dims)
    # one attribute with every RNN parameter, as oneDNN's example passes to every reorder
    attr = data_attr(63.0, 64.0)
    attr.set_rnn_weights_qparams(0, [7.0]) if projection else \
        attr.set_rnn_weights_qparams(mask, scales.tolist())
    if projection:
        attr.set_rnn_weights_projection_qparams(mask, scales.tolist())
    q, pd = reorder(engine, stream, w, MD(dims, dt.f32, src_tag), MD(dims, dt.s8, dst_tag), attr)
    per = scales.reshape(dims[3:]) if mask else scales[0]
    assert np.array_equal(q, quantize_weights(w, per))
    if not mask:  # scale 2: 0.5 -> 0, 1.5 -> 2, -0.5 -> 0, -1.5 -> -2, 127.5 -> 127, -128.5
        assert q.reshape(-1)[:6].tolist() == [0, 2, 0, -2, 127, -128]
    assert ("rnn_weights_projection" if projection else "rnn_weights") in pd.impl_info_str()


def test_4d_s8_data_without_projection_qparams(first_engine):
    """A 4-dims f32 -> s8 reorder between ldnc layouts is data (oneDNN's rule) unless
    projection scales are set."""
    s = dnnl.stream(first_engine)
    x = RNG.uniform(-5, 5, (1, 1, 2, 6)).astype(np.float32)
    q, pd = reorder(first_engine, s, x, MD(x.shape, dt.f32, tag.ldnc),
                    MD(x.shape, dt.s8, tag.ldnc), data_attr(32.0, 0.0))
    assert np.array_equal(q, quantize_data(x, 32.0, 0.0, "s8"))
    assert "rnn_data" in pd.impl_info_str()


def test_s8_weights_are_copied(first_engine):
    """s8 weights take no quantization (oneDNN's s8 input): only the layout changes."""
    s = dnnl.stream(first_engine)
    w = RNG.integers(-128, 128, (1, 1, 3, 4, 2)).astype(np.int8)
    attr = dnnl.primitive_attr()
    attr.set_rnn_weights_qparams(24, [5.0] * 8)
    q, _ = reorder(first_engine, s, w, MD(w.shape, dt.s8, tag.ldgoi),
                   MD(w.shape, dt.s8, tag.ldigo), attr)
    assert np.array_equal(q, w)


# -- what oneDNN refuses ------------------------------------------------------------------------
def _refusal_cases():
    f32, u8, s8 = dt.f32, dt.u8, dt.s8
    w5, w4 = [1, 1, 3, 4, 5], [1, 1, 6, 5]

    def attr(data=(63.0, 64.0), weights=None, proj=None, scales_to=False):
        a = dnnl.primitive_attr()
        if data:
            a.set_rnn_data_qparams(*data)
        if weights:
            a.set_rnn_weights_qparams(*weights)
        if proj:
            a.set_rnn_weights_projection_qparams(*proj)
        if scales_to:
            a.set_scales_mask(dnnl.ARG_TO, 0)
        return a

    return [
        ("f32-to-f32", MD([2, 3, 4], f32, tag.tnc), MD([2, 3, 4], f32, tag.tnc), attr(),
         dnnl.unimplemented, r"f32 -> u8/s8 data .*got f32:tnc.* -> f32:tnc"),
        ("u8-dequantize", MD([2, 3, 4], u8, tag.tnc), MD([2, 3, 4], f32, tag.tnc), attr(),
         dnnl.unimplemented, "RNN quantization parameters apply to"),
        ("data-dst-ntc", MD([2, 3, 4], f32, tag.tnc), MD([2, 3, 4], u8, tag.ntc), attr(),
         dnnl.unimplemented, r"tnc layouts on both sides .*dst_md is u8:ntc"),
        ("data-src-ldnc-strided", MD([1, 1, 3, 4], f32, [12, 12, 1, 3]),
         MD([1, 1, 3, 4], u8, tag.ldnc), attr(), dnnl.unimplemented,
         r"ldnc layouts on both sides .*src_md"),
        ("u8-weights", MD(w5, f32, tag.ldigo), MD(w5, u8, tag.ldigo), attr(),
         dnnl.unimplemented, "RNN quantization parameters apply to"),
        ("weights-src-layout", MD([1, 2, 3, 4, 5], f32, "acbde"),
         MD([1, 2, 3, 4, 5], s8, tag.ldigo),
         attr(weights=(0, [2.0])), dnnl.unimplemented,
         r"dense ldigo or ldgoi src_md .*got f32:acbde"),
        ("weights-blocked-dst", MD([1, 1, 16, 1, 16], f32, tag.ldigo),
         MD([1, 1, 16, 1, 16], s8, "abcDE16e4d"), attr(weights=(0, [2.0])),
         dnnl.unimplemented, "plain s8 layout"),
        ("weights-mask", MD(w5, f32, tag.ldigo), MD(w5, s8, tag.ldigo),
         attr(weights=(16, [2.0] * 5)), dnnl.unimplemented,
         r"set_rnn_weights_qparams mask must be one of 0, 24 .*got 16"),
        ("projection-mask", MD(w4, f32, tag.ldio), MD(w4, s8, tag.ldio),
         attr(proj=(4, [2.0] * 6)), dnnl.unimplemented,
         r"set_rnn_weights_projection_qparams mask must be one of 0, 8 .*got 4"),
        ("weights-count", MD(w5, f32, tag.ldigo), MD(w5, s8, tag.ldigo),
         attr(weights=(24, [2.0] * 3)), dnnl.invalid_arguments,
         r"mask 24 needs 20 scales \(G \* O = 4 \* 5\), got 3"),
        ("projection-count", MD(w4, f32, tag.ldoi), MD(w4, s8, tag.ldio),
         attr(proj=(0, [2.0, 3.0])), dnnl.invalid_arguments, "mask 0 needs 1 scale, got 2"),
        ("with-scales", MD([2, 3, 4], f32, tag.tnc), MD([2, 3, 4], u8, tag.tnc),
         attr(scales_to=True), dnnl.unimplemented, "do not combine with scales"),
    ]


REFUSALS = _refusal_cases()


@pytest.mark.parametrize("case", REFUSALS, ids=[c[0] for c in REFUSALS])
def test_refusals_leave_the_output_alone(first_engine, case):
    _, src_md, dst_md, attr, err, match = case
    dst = dnnl.memory(dst_md, first_engine,
                      np.full(dst_md.get_dims(), 90, dst_md.get_data_type().storage_dtype))
    before = dst.read_raw().view(np.uint8).copy()
    src = dnnl.memory(src_md, first_engine)
    with pytest.raises(err, match=match):
        dnnl.reorder(src, dst, attr)
    with pytest.raises(err, match=match):
        dnnl.reorder.primitive_desc(first_engine, src_md, first_engine, dst_md, attr)
    assert np.array_equal(dst.read_raw().view(np.uint8), before)


# -- oneDNN's int8 LSTM example, tiny ------------------------------------------------------------
def test_example_flow_bidirectional_then_unidirectional(first_engine):
    """examples/cpu_rnn_inference_int8.cpp at T=3, N=2, C=4: f32 data and ldigo weights are
    quantized by reorders with the RNN's own attribute; a bidirectional_concat LSTM (u8 out)
    feeds a unidirectional one (f32 out). Each reorder's output equals numpy's quantization;
    each LSTM matches the int8 reference on the inputs it was given, within the criteria of
    tests/primitives/rnn/test_rnn_int8.py (one quantization step at most, on <= 3% of the
    elements: f32 accumulations put a state on the other side of a rounding boundary)."""
    eng, s = first_engine, dnnl.stream(first_engine)
    T, N, C, G = 3, 2, 4, 4
    data_scale, data_shift = 63.0, 64.0
    weights_scales = np.array([30.0] * (G * C // 2) + [65.5] * (G * C // 2), np.float32)
    attr = dnnl.primitive_attr()
    attr.set_rnn_data_qparams(data_scale, data_shift)
    attr.set_rnn_weights_qparams((1 << 3) + (1 << 4), weights_scales.tolist())
    rng = np.random.default_rng(1)
    net_src = rng.uniform(-1, 1, (T, N, C)).astype(np.float32)

    def layer(src_mem, direction, slc, D, dst_dt, bias):
        wl = rng.uniform(-1.5, 1.5, (1, D, slc, G, C)).astype(np.float32)
        wi = rng.uniform(-1.5, 1.5, (1, D, C, G, C)).astype(np.float32)
        dlc = C * D
        pd = dnnl.lstm_forward.primitive_desc(
            eng, dnnl.prop_kind.forward_inference, direction, src_mem.get_desc(), None, None,
            MD([1, D, slc, G, C], dt.s8, tag.any), MD([1, D, C, G, C], dt.s8, tag.any),
            MD([1, D, G, C], dt.f32, tag.ldgo), MD([T, N, dlc], dst_dt, tag.any), None, None,
            attr)
        mems = {}
        for arg, w, qdesc in ((dnnl.ARG_WEIGHTS_LAYER, wl, pd.weights_layer_desc()),
                              (dnnl.ARG_WEIGHTS_ITER, wi, pd.weights_iter_desc())):
            user = dnnl.memory(MD(list(w.shape), dt.f32, tag.ldigo), eng, w)
            mems[arg] = dnnl.memory(qdesc, eng)
            dnnl.reorder(dnnl.reorder.primitive_desc(user, mems[arg], attr)).execute(
                s, user, mems[arg])
        s.wait()
        for arg, w in ((dnnl.ARG_WEIGHTS_LAYER, wl), (dnnl.ARG_WEIGHTS_ITER, wi)):
            assert np.array_equal(mems[arg].to_numpy(),
                                  quantize_weights(w, weights_scales.reshape(G, C)))
        dst = dnnl.memory(pd.dst_layer_desc(), eng)
        dnnl.lstm_forward(pd).execute(s, {
            dnnl.ARG_SRC_LAYER: src_mem, **mems,
            dnnl.ARG_BIAS: dnnl.memory(pd.bias_desc(), eng, bias), dnnl.ARG_DST_LAYER: dst})
        s.wait()
        ref = rnn_int8_forward(
            "vanilla_lstm", src_mem.to_numpy(), None, None, mems[dnnl.ARG_WEIGHTS_LAYER].to_numpy(),
            mems[dnnl.ARG_WEIGHTS_ITER].to_numpy(), bias, direction=direction.name,
            data_scale=data_scale, data_shift=data_shift, weights_scales=weights_scales,
            dst_layer_dt=dst_dt.name)["dst_layer"]
        got = dst.to_numpy().astype(np.float64)
        unit = 1.0 if dst_dt == dt.u8 else 1.0 / data_scale
        diff = np.abs(got - ref)
        assert diff.max() <= unit * (1 + 1e-5), diff.max()
        assert np.mean(diff > unit * 1e-3) <= 0.03
        return dst

    # the encoder's first layer: f32 tnc data quantized by a reorder into the pd's u8 layout
    user_src = dnnl.memory(MD([T, N, C], dt.f32, tag.tnc), eng, net_src)
    src_md_any = MD([T, N, C], dt.u8, tag.any)
    probe = dnnl.lstm_forward.primitive_desc(
        eng, dnnl.prop_kind.forward_inference, dnnl.rnn_direction.bidirectional_concat,
        src_md_any, None, None, MD([1, 2, C, G, C], dt.s8, tag.any),
        MD([1, 2, C, G, C], dt.s8, tag.any), MD([1, 2, G, C], dt.f32, tag.ldgo),
        MD([T, N, 2 * C], dt.u8, tag.any), None, None, attr)
    src_q = dnnl.memory(probe.src_layer_desc(), eng)
    r = dnnl.reorder(dnnl.reorder.primitive_desc(user_src, src_q, attr))
    r.execute(s, {dnnl.ARG_FROM: user_src, dnnl.ARG_TO: src_q})
    s.wait()
    assert np.array_equal(src_q.to_numpy(), quantize_data(net_src, data_scale, data_shift, "u8"))
    enc = layer(src_q, dnnl.rnn_direction.bidirectional_concat, C, 2, dt.u8,
                rng.uniform(-1, 1, (1, 2, G, C)).astype(np.float32))
    layer(enc, dnnl.rnn_direction.unidirectional_left2right, 2 * C, 1, dt.f32,
          rng.uniform(-1, 1, (1, 1, G, C)).astype(np.float32))


# -- under the Oclgrind simulator ---------------------------------------------------------------
sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "kernels"))
from oclgrind_helpers import has_oclgrind, run_probe  # noqa: E402

OCLGRIND_PROBE = r"""import json
import numpy as np
import pydnnl as dnnl
MD, dt, tag = dnnl.memory.desc, dnnl.memory.data_type, dnnl.memory.format_tag
eng = dnnl.engine.from_name("Oclgrind")
s = dnnl.stream(eng)
rng = np.random.default_rng(2)
res = {}
attr = dnnl.primitive_attr()
attr.set_rnn_data_qparams(63.0, 64.0)
sc = np.array([30.0, 65.5, 2.0] * 4, np.float32)
attr.set_rnn_weights_qparams(24, sc.tolist())
x = rng.uniform(-3, 3, (2, 3, 37)).astype(np.float32)
src = dnnl.memory(MD(x.shape, dt.f32, tag.tnc), eng, x)
dst = dnnl.memory(MD(x.shape, dt.u8, tag.tnc), eng)
dnnl.reorder(src, dst, attr).execute(s, src, dst); s.wait()
exp = np.clip(np.rint(x * np.float32(63) + np.float32(64)), 0, 255)
res["data"] = bool(np.array_equal(dst.to_numpy(), exp))
w = rng.uniform(-3, 3, (1, 2, 5, 4, 3)).astype(np.float32)
src = dnnl.memory(MD(w.shape, dt.f32, tag.ldgoi), eng, w)
dst = dnnl.memory(MD(w.shape, dt.s8, tag.ldigo), eng)
dnnl.reorder(src, dst, attr).execute(s, src, dst); s.wait()
exp = np.clip(np.rint(w * sc.reshape(4, 3)), -128, 127)
res["weights"] = bool(np.array_equal(dst.to_numpy(), exp))
print(json.dumps(res))
"""


@pytest.mark.skipif(not has_oclgrind(), reason="the Oclgrind simulator is not installed")
def test_quantizing_reorders_clean_under_oclgrind():
    """The data kernel (scalar scale and shift, the no-contraction helper) and the weights
    kernel (scales read from the plan's table) under every Oclgrind check, stderr read."""
    assert run_probe(OCLGRIND_PROBE) == {"data": True, "weights": True}
