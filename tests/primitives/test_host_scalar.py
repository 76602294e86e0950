"""Host-scalar scales and zero points (oneDNN v3.8+: ``memory.desc.host_scalar``,
``primitive_attr.set_host_scale`` / ``set_host_zero_point``).

Each primitive runs twice on the same data: once with its scales and zero points in device
memories (``set_scales_mask`` / ``set_zero_points_mask``), once with the same values as host
scalars. The two results must be identical (the kernels are the same, only where the value
comes from differs), and both must match the numpy reference of oneDNN's quantized formula
(:mod:`pydnnl.reference`), with the tolerances of the int8 tests: an integer dst within one
unit where the exact value lies at a rounding tie, equal elsewhere; a float dst within 16 f32
ulps of the largest magnitude in the chain. A changed host value reaches the kernels with
no compilation at execute. Wrong kinds (device memory where a host scalar was declared and
the other way round, another data type) raise ``invalid_arguments`` and leave dst untouched.
"""
from __future__ import annotations

import numpy as np
import pytest
from int8_helpers import check_quantized  # noqa: E402

import pydnnl as dnnl
from pydnnl.error import invalid_arguments, unimplemented
from pydnnl.reference.conv_int8 import conv_int8
from pydnnl.reference.inner_product import inner_product_forward
from pydnnl.reference.matmul import matmul_int8, quantize

dt = dnnl.memory.data_type
MD, A, PK = dnnl.memory.desc, dnnl.algorithm, dnnl.prop_kind
S, Z = dnnl.ARG_ATTR_SCALES, dnnl.ARG_ATTR_ZERO_POINTS
SRC, WEI, DST, BIAS = dnnl.ARG_SRC, dnnl.ARG_WEIGHTS, dnnl.ARG_DST, dnnl.ARG_BIAS
NP = {dt.u8: np.uint8, dt.s8: np.int8, dt.s32: np.int32, dt.f32: np.float32}


_check = check_quantized


def _attr(host: bool, scales: dict, zps: dict) -> dnnl.primitive_attr:
    """Common scales and zero points for the arguments in ``scales`` / ``zps`` (``{arg:
    data type of the host scalar}``): host scalars, or device memories (f32 / s32)."""
    attr = dnnl.primitive_attr()
    for arg, t in scales.items():
        attr.set_host_scale(arg, t) if host else attr.set_scales_mask(arg, 0)
    for arg, t in zps.items():
        attr.set_host_zero_point(arg, t) if host else attr.set_zero_points_mask(arg, 0)
    return attr


def _quant_args(pd, engine, values: dict) -> dict:
    """``{ARG_ATTR_*| arg: memory}`` holding ``values`` (one number each) in the kind the
    descriptor asks for: a host scalar, or a one-element device memory."""
    out = {}
    for key, v in values.items():
        md = pd.query_md(dnnl.query.exec_arg_md, key)
        if md.is_host_scalar():
            out[key] = dnnl.memory(md, v)
        else:
            out[key] = dnnl.memory(md, engine, np.array([v], NP[md.data_type]))
    return out


def _no_compile(monkeypatch):
    """Make any kernel look-up fail: execute must find every kernel bound already."""
    import pydnnl.runtime.gemm as gemm_mod
    import pydnnl.runtime.kernel_cache as cache_mod
    import pydnnl.runtime.plan as plan_mod

    def refuse(*a, **k):
        raise AssertionError("a kernel was looked up (compiled) at execute")

    for mod in (cache_mod, plan_mod, gemm_mod):
        monkeypatch.setattr(mod, "get_kernel", refuse)


# -- descs, memories, attributes ------------------------------------------------------------
def test_host_scalar_desc_and_memory():
    md = MD.host_scalar(dt.f32)
    assert md.is_host_scalar() and not md.is_zero()
    assert md.get_format_kind() == dnnl.memory.format_kind.host_scalar
    assert md.get_ndims() == 1 and md.get_dims() == [1] and md.get_size() == 4
    assert md.get_data_type() == dt.f32
    assert md == MD.host_scalar("f32") and md != MD.host_scalar(dt.bf16)
    assert md != MD([1], dt.f32, "a")
    m = dnnl.memory(md, 0.25)
    assert m.is_host_scalar() and m.get_engine() is None
    assert m.get_host_scalar_value() == np.float32(0.25)
    m.set_host_scalar_value(3)
    assert m.get_host_scalar_value() == 3.0 and m.to_numpy().tolist() == [3.0]
    assert repr(m) == "memory(memory.desc.host_scalar(f32), 3.0)"
    b = dnnl.memory(MD.host_scalar(dt.bf16), 0.1)  # stored as bf16: rounded
    assert b.get_host_scalar_value() == np.float32(0.10009765625)
    z = dnnl.memory(MD.host_scalar(dt.u8), 255)
    assert z.get_host_scalar_value() == 255 and z.get_desc().get_size() == 1


@pytest.mark.parametrize("case", ["engine", "text", "bool", "range", "fraction", "undef",
                                  "buffer", "device_get", "layout"])
def test_host_scalar_memory_refusals(engine, case):
    md = MD.host_scalar(dt.s32)
    with pytest.raises(invalid_arguments) as e:
        if case == "engine":
            dnnl.memory(md, engine, 1)
        elif case == "text":
            dnnl.memory(md, "2")
        elif case == "bool":
            dnnl.memory(md, True)
        elif case == "range":
            dnnl.memory(MD.host_scalar(dt.s8), 128)
        elif case == "fraction":
            dnnl.memory(md, 1.5)
        elif case == "undef":
            MD.host_scalar(dt.undef)
        elif case == "buffer":
            dnnl.memory(md, 1).get_data_handle()
        elif case == "device_get":
            dnnl.memory(MD([1], dt.s32, "a"), engine).get_host_scalar_value()
        else:
            md.element_offsets()
    msg = str(e.value)
    assert {"engine": "no engine", "text": "'2'", "bool": "True", "range": "[-128, 127]",
            "fraction": "1.5", "undef": "undef", "buffer": "no device buffer",
            "device_get": "host-scalar memory", "layout": "host scalar"}[case] in msg, msg


def test_attr_host_setters_and_queries():
    attr = dnnl.primitive_attr()
    assert attr.get_scales(SRC) is None and attr.get_zero_points(SRC) is None
    attr.set_host_scale(SRC)
    attr.set_host_scale(DST, dt.bf16)
    attr.set_host_zero_point(SRC, dt.u8)
    attr.set_host_zero_point(DST)
    assert attr.get_scales(SRC) == (0, [], dt.f32, True)
    assert attr.get_scales(DST) == (0, [], dt.bf16, True)
    assert attr.get_zero_points(SRC) == (0, [], dt.u8, True)
    assert attr.get_zero_points(DST) == (0, [], dt.s32, True)
    assert attr.get_scales_mask(SRC) == 0 and attr.scales_on_host(DST)
    assert attr.zero_point_on_host(SRC) and not attr.is_default()
    other = dnnl.primitive_attr()
    other.set_scales_mask(SRC, 0)
    other.set_scales_mask(DST, 0)
    other.set_zero_points_mask(SRC, 0)
    other.set_zero_points_mask(DST, 0)
    assert other.get_scales(SRC) == (0, [], dt.f32, False)
    assert other.key() != attr.key()  # a different primitive: the kernels' inputs differ
    attr.set_scales_mask(SRC, 0)  # a later setter replaces the kind
    assert not attr.scales_on_host(SRC)
    attr.set_scales(SRC, 0, [], dt.f16, True)
    assert attr.get_scales(SRC) == (0, [], dt.f16, True)


@pytest.mark.parametrize("case", ["scale_mask", "zp_mask", "scale_type", "zp_type", "dst_zp_s8",
                                  "device_bf16", "groups"])
def test_attr_host_setter_refusals(case):
    attr = dnnl.primitive_attr()
    err = unimplemented if case in ("device_bf16", "groups") else invalid_arguments
    with pytest.raises(err) as e:
        if case == "scale_mask":
            attr.set_scales(SRC, 2, [], dt.f32, True)
        elif case == "zp_mask":
            attr.set_zero_points(SRC, 1, [], dt.s32, True)
        elif case == "scale_type":
            attr.set_host_scale(SRC, dt.s32)
        elif case == "zp_type":
            attr.set_host_zero_point(SRC, dt.f32)
        elif case == "dst_zp_s8":
            attr.set_host_zero_point(DST, dt.s8)
        elif case == "device_bf16":
            attr.set_scales(SRC, 0, [], dt.bf16, False)
        else:
            attr.set_scales(WEI, 1, [1, 4])
    msg = str(e.value)
    assert {"scale_mask": "mask 0, got 2", "zp_mask": "mask 0, got 1", "scale_type": "s32",
            "zp_type": "f32", "dst_zp_s8": "s8", "device_bf16": "bf16",
            "groups": "groups"}[case] in msg, msg
    assert attr.get_scales(SRC) is None and attr.get_zero_points(SRC) is None


def test_host_scalar_desc_refused_as_tensor(engine):
    with pytest.raises(invalid_arguments, match="src_desc is memory.desc.host_scalar"):
        dnnl.matmul.primitive_desc(engine, MD.host_scalar(dt.f32), MD([3, 2], dt.f32, "ab"),
                                   MD([1, 2], dt.f32, "ab"))


# -- int8 convolution ----------------------------------------------------------------------
_CONV = dict(mb=2, ic=4, oc=6, sp=(5, 4), k=(3, 3), s=(1, 2), p=(1, 1))


def _conv_pd(engine, src_t, dst_t, attr):
    c = _CONV
    dsp = [(i + 2 * p - k) // s + 1 for i, k, s, p in zip(c["sp"], c["k"], c["s"], c["p"])]
    pd = dnnl.convolution_forward.primitive_desc(
        engine, PK.forward_inference, A.convolution_direct,
        MD([c["mb"], c["ic"], *c["sp"]], src_t, "abcd"), MD([c["oc"], c["ic"], *c["k"]], dt.s8,
                                                                "any"),
        MD([c["oc"]], dt.f32, "a"), MD([c["mb"], c["oc"], *dsp], dst_t, "abcd"),
        list(c["s"]), list(c["p"]), list(c["p"]), attr=attr)
    return pd, dsp


def _conv_data(src_t):
    c, rng = _CONV, np.random.default_rng(5)
    lo, hi = (0, 256) if src_t == dt.u8 else (-128, 128)
    x = rng.integers(lo, hi, (c["mb"], c["ic"], *c["sp"])).astype(NP[src_t])
    w = rng.integers(-128, 128, (c["oc"], c["ic"], *c["k"])).astype(np.int8)
    bias = rng.standard_normal(c["oc"]).astype(np.float32) * 20
    return x, w, bias


@pytest.mark.parametrize("src_t,dst_t", [(dt.u8, dt.u8), (dt.u8, dt.f32), (dt.s8, dt.s8)],
                         ids=lambda t: t.name)
def test_conv_int8_host_scalars(engine, src_t, dst_t, monkeypatch):
    """src and dst scales and zero points as host scalars: the device-memory result bit for
    bit, and the reference; a second value through the same primitive, nothing compiled."""
    x, w, bias = _conv_data(src_t)
    scales, zps = {SRC: dt.f32, DST: dt.f32}, {SRC: dt.s32, DST: dt.s32}
    vals = {S | SRC: 2.0 ** -10, S | DST: 2.0, Z | SRC: 3, Z | DST: 7}
    out = {}
    prims = {}
    for host in (False, True):
        pd, dsp = _conv_pd(engine, src_t, dst_t, _attr(host, scales, zps))
        if host:
            assert pd.query_md(dnnl.query.exec_arg_md, S | SRC) == MD.host_scalar(dt.f32)
            assert pd.query_md(dnnl.query.exec_arg_md, Z | DST) == MD.host_scalar(dt.s32)
        s = dnnl.stream(engine)
        args = {SRC: dnnl.memory(pd.src_desc(), engine, x),
                WEI: dnnl.memory(pd.weights_desc(), engine, w),
                BIAS: dnnl.memory(pd.bias_desc(), engine, bias),
                DST: dnnl.memory(pd.dst_desc(), engine), **_quant_args(pd, engine, vals)}
        prim = dnnl.convolution_forward(pd)
        prim.execute(s, args)
        s.wait()
        out[host] = args[DST].to_numpy().astype(np.float64)
        prims[host] = (prim, args, s)
    assert np.array_equal(out[True], out[False])
    c = _CONV

    def ref(sc_src, zp_src):
        return conv_int8(x, w, c["s"], c["p"], dsp, None, 1, bias, sc_src, 1.0, vals[S | DST],
                         zp_src, vals[Z | DST])

    y = ref(vals[S | SRC], vals[Z | SRC])
    _check(out[True], y, dst_t, float(np.abs(y).max()))
    # new host values through the same primitive: no kernel built, the new result
    _no_compile(monkeypatch)
    prim, args, s = prims[True]
    args[S | SRC].set_host_scalar_value(2.0 ** -9)
    args[Z | SRC].set_host_scalar_value(-2 if src_t == dt.s8 else 5)
    prim.execute(s, args)
    s.wait()
    y2 = ref(2.0 ** -9, args[Z | SRC].get_host_scalar_value())
    _check(args[DST].to_numpy().astype(np.float64), y2, dst_t, float(np.abs(y2).max()))


# -- int8 matmul -----------------------------------------------------------------------------
M, K, N = 5, 11, 6


@pytest.mark.parametrize("zp_t", [dt.s32, dt.u8], ids=lambda t: t.name)
def test_matmul_int8_host_scalars(engine, zp_t):
    """A bf16 host src scale (a power of two, exact) with a per-N device weights scale, host
    src / dst zero points of ``zp_t`` (s32 dst), against device memories and the reference."""
    rng = np.random.default_rng(7)
    a = rng.integers(0, 256, (M, K)).astype(np.uint8)
    b = rng.integers(-128, 128, (K, N)).astype(np.int8)
    wsc = np.array([0.5, 1.0, 2.0, 0.25, 4.0, 1.0], np.float32)
    vals = {S | SRC: 0.0625, S | DST: 2.0, Z | SRC: 9, Z | DST: 4}
    out = {}
    for host in (False, True):
        attr = _attr(host, {SRC: dt.bf16, DST: dt.f32}, {SRC: zp_t, DST: dt.s32})
        attr.set_scales_mask(WEI, 1 << 1)  # per N, in a device memory either way
        pd = dnnl.matmul.primitive_desc(engine, MD([M, K], dt.u8, "ab"), MD([K, N], dt.s8, "ab"),
                                        MD([M, N], dt.f32, "ab"), attr)
        s = dnnl.stream(engine)
        args = {SRC: dnnl.memory(pd.src_desc(), engine, a),
                WEI: dnnl.memory(pd.weights_desc(), engine, b),
                DST: dnnl.memory(pd.dst_desc(), engine),
                S | WEI: dnnl.memory(pd.query_md(dnnl.query.exec_arg_md, S | WEI), engine, wsc),
                **_quant_args(pd, engine, vals)}
        dnnl.matmul(pd).execute(s, args)
        s.wait()
        out[host] = args[DST].to_numpy().astype(np.float64)
    assert np.array_equal(out[True], out[False])
    y = matmul_int8(a, b, None, vals[S | SRC], wsc, vals[S | DST], vals[Z | SRC], 0, vals[Z | DST])
    _check(out[True], y, dt.f32, float(np.abs(y).max()))


# -- inner product (f32) ---------------------------------------------------------------------
def test_inner_product_host_scales(engine):
    """f32 inner product: host src and dst scales, a per-output-channel device weights scale
    (oneDNN's formula ``src_scale * wei_scale * (src . wei) + bias) / dst_scale``)."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((3, 7)).astype(np.float32)
    w = rng.standard_normal((4, 7)).astype(np.float32)
    bias = rng.standard_normal(4).astype(np.float32)
    wsc = np.array([1.0, 0.5, 2.0, 0.25], np.float32)
    vals = {S | SRC: 0.75, S | DST: 4.0}
    out = {}
    for host in (False, True):
        attr = _attr(host, {SRC: dt.f32, DST: dt.f32}, {})
        attr.set_scales_mask(WEI, 1)
        pd = dnnl.inner_product_forward.primitive_desc(
            engine, PK.forward_inference, MD([3, 7], dt.f32, "ab"), MD([4, 7], dt.f32, "any"),
            MD([4], dt.f32, "a"), MD([3, 4], dt.f32, "ab"), attr)
        s = dnnl.stream(engine)
        args = {SRC: dnnl.memory(pd.src_desc(), engine, x),
                WEI: dnnl.memory(pd.weights_desc(), engine, w),
                BIAS: dnnl.memory(pd.bias_desc(), engine, bias),
                DST: dnnl.memory(pd.dst_desc(), engine),
                S | WEI: dnnl.memory(pd.query_md(dnnl.query.exec_arg_md, S | WEI), engine, wsc),
                **_quant_args(pd, engine, vals)}
        dnnl.inner_product_forward(pd).execute(s, args)
        s.wait()
        out[host] = args[DST].to_numpy().astype(np.float64)
    assert np.array_equal(out[True], out[False])
    y = (vals[S | SRC] * wsc * inner_product_forward(x, w) + bias) / vals[S | DST]
    assert np.abs(out[True] - y).max() <= 1e-5 * max(1.0, np.abs(y).max())


# -- wrong kinds at execute ------------------------------------------------------------------
@pytest.mark.parametrize("case", ["device_for_host", "host_for_device", "host_type"])
def test_host_scalar_kind_mismatch(engine, case):
    """The argument named, what was expected and what came; dst keeps its content."""
    host = case != "host_for_device"
    attr = _attr(host, {SRC: dt.f32}, {DST: dt.s32})
    pd = dnnl.matmul.primitive_desc(engine, MD([M, K], dt.u8, "ab"), MD([K, N], dt.s8, "ab"),
                                    MD([M, N], dt.s32, "ab"), attr)
    rng = np.random.default_rng(1)
    sentinel = np.full((M, N), 12345, np.int32)
    args = {SRC: dnnl.memory(pd.src_desc(), engine, rng.integers(0, 9, (M, K)).astype(np.uint8)),
            WEI: dnnl.memory(pd.weights_desc(), engine,
                             rng.integers(-4, 5, (K, N)).astype(np.int8)),
            DST: dnnl.memory(pd.dst_desc(), engine, sentinel),
            **_quant_args(pd, engine, {S | SRC: 0.5, Z | DST: 1})}
    if case == "device_for_host":
        args[S | SRC] = dnnl.memory(MD([1], dt.f32, "a"), engine, np.array([0.5], np.float32))
        want = ["ARG_ATTR_SCALES|ARG_SRC", "host-scalar memory", "got a device memory"]
    elif case == "host_for_device":
        args[Z | DST] = dnnl.memory(MD.host_scalar(dt.s32), 1)
        want = ["ARG_ATTR_ZERO_POINTS|ARG_DST", "device memory of memory.desc([1], s32",
                "got a host scalar"]
    else:
        args[S | SRC] = dnnl.memory(MD.host_scalar(dt.bf16), 0.5)
        want = ["ARG_ATTR_SCALES|ARG_SRC", "host_scalar(bf16)", "expects "
                "memory.desc.host_scalar(f32)"]
    s = dnnl.stream(engine)
    with pytest.raises(invalid_arguments) as e:
        dnnl.matmul(pd).execute(s, args)
    for w in want:
        assert w in str(e.value), str(e.value)
    s.wait()
    assert np.array_equal(args[DST].to_numpy(), sentinel)


# -- reorder and binary ----------------------------------------------------------------------
def test_reorder_and_binary_host_scalars(engine):
    """A quantizing reorder (f32 -> s8, dst scale and zero point) and a binary add with a
    scaled src1, host scalars against device memories and numpy."""
    x = np.linspace(-20, 20, 12, dtype=np.float32).reshape(3, 4)
    res = {}
    for host in (False, True):
        attr = _attr(host, {dnnl.ARG_TO: dt.f32}, {dnnl.ARG_TO: dt.s32})
        src = dnnl.memory(MD([3, 4], dt.f32, "ab"), engine, x)
        dst = dnnl.memory(MD([3, 4], dt.s8, "ba"), engine)
        pd = dnnl.reorder.primitive_desc(src, dst, attr)
        s = dnnl.stream(engine)
        q = _quant_args(pd, engine, {S | dnnl.ARG_TO: 0.25, Z | dnnl.ARG_TO: -3})
        dnnl.reorder(pd).execute(s, {dnnl.ARG_FROM: src, dnnl.ARG_TO: dst, **q})
        s.wait()
        res["reorder", host] = dst.to_numpy()
    assert np.array_equal(res["reorder", True], res["reorder", False])
    assert np.array_equal(res["reorder", True], quantize(x / 0.25 - 3, "s8"))
    y = np.arange(12, dtype=np.float32).reshape(3, 4)
    for host in (False, True):
        attr = _attr(host, {dnnl.ARG_SRC_1: dt.f16}, {})
        md = MD([3, 4], dt.f32, "ab")
        pd = dnnl.binary.primitive_desc(engine, A.binary_add, md, md, md, attr)
        s = dnnl.stream(engine)
        args = {dnnl.ARG_SRC_0: dnnl.memory(md, engine, x),
                dnnl.ARG_SRC_1: dnnl.memory(md, engine, y), dnnl.ARG_DST: dnnl.memory(md, engine),
                **_quant_args(pd, engine, {S | dnnl.ARG_SRC_1: 1.5})}
        dnnl.binary(pd).execute(s, args)
        s.wait()
        res["binary", host] = args[dnnl.ARG_DST].to_numpy()
    assert np.array_equal(res["binary", True], res["binary", False])
    assert np.allclose(res["binary", True], x + 1.5 * y, rtol=1e-6, atol=1e-6)


def test_host_scalar_memory_refused_as_tensor(engine):
    dst = dnnl.memory(MD([1], dt.s8, "a"), engine)
    with pytest.raises(invalid_arguments, match=r"src is memory\(memory.desc.host_scalar\(f32\)"):
        dnnl.reorder(dnnl.memory(MD.host_scalar(dt.f32), 1.0), dst)


def test_host_values_back_to_back_out_of_order(engine):
    """Two executions queued without a wait between them, each with its own host scale and
    dst: each result has its own value (a device copy is never rewritten under a kernel)."""
    rng = np.random.default_rng(3)
    a = rng.integers(0, 256, (M, K)).astype(np.uint8)
    b = rng.integers(-128, 128, (K, N)).astype(np.int8)
    attr = _attr(True, {SRC: dt.f32}, {SRC: dt.s32})
    pd = dnnl.matmul.primitive_desc(engine, MD([M, K], dt.u8, "ab"), MD([K, N], dt.s8, "ab"),
                                    MD([M, N], dt.f32, "ab"), attr)
    prim = dnnl.matmul(pd)
    s = dnnl.stream(engine, dnnl.stream.flags.out_of_order)
    srcm, weim = dnnl.memory(pd.src_desc(), engine, a), dnnl.memory(pd.weights_desc(), engine, b)
    runs = [(0.5, 3), (0.25, 100), (0.5, 3)]
    dsts = []
    for scale, zp in runs:
        dst = dnnl.memory(pd.dst_desc(), engine)
        prim.execute(s, {SRC: srcm, WEI: weim, DST: dst,
                         S | SRC: dnnl.memory(MD.host_scalar(dt.f32), scale),
                         Z | SRC: dnnl.memory(MD.host_scalar(dt.s32), zp)})
        dsts.append(dst)
    s.wait()
    for (scale, zp), dst in zip(runs, dsts):
        y = matmul_int8(a, b, None, scale, 1.0, 1.0, zp)
        _check(dst.to_numpy().astype(np.float64), y, dt.f32, float(np.abs(y).max()))
