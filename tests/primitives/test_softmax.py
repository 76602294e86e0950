"""The softmax primitives on every device: forward (softmax and log-softmax, every axis)
against the float64 numpy reference and ONNX's reference evaluator (Softmax, LogSoftmax,
opset 13); backward against the reference and central finite differences of the numpy
forward; row and strided kernels; plain, channels-last, blocked, strided and ``any`` layouts;
in-place use; queries and errors (outputs untouched after a refused call)."""
from __future__ import annotations

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.reference import softmax as ref

A = dnnl.algorithm
dt, tag = dnnl.memory.data_type, dnnl.memory.format_tag
FWD, INF = dnnl.prop_kind.forward_training, dnnl.prop_kind.forward_inference
ALGS = [A.softmax_accurate, A.softmax_log]


def _md(dims, t):
    return dnnl.memory.desc(dims, dt.f32, t)


def _x(dims, seed=0, scale=4.0):
    return np.random.default_rng(seed).uniform(-scale, scale, dims).astype(np.float32)


def _close(got, want, rtol=2e-5, atol=2e-6):
    got = np.asarray(got, np.float64)
    err = np.where(got == want, 0.0, np.abs(got - want))  # equal infinities are exact
    bad = ~(err <= rtol * np.abs(want) + atol)
    assert not bad.any(), (f"{bad.sum()} of {bad.size} differ; max err {err.max():.3g}; "
                           f"first got {got[bad][:4]}, want {want[bad][:4]}")


def _fwd(eng, s, alg, x, axis, src_tag, dst_tag=tag.any, prop=FWD, inplace=False):
    pd = dnnl.softmax_forward.primitive_desc(eng, prop, alg, _md(x.shape, src_tag),
                                             _md(x.shape, dst_tag), axis)
    src = dnnl.memory(pd.src_desc(), eng, x)
    dst = src if inplace else dnnl.memory(pd.dst_desc(), eng)
    dnnl.softmax_forward(pd).execute(s, {dnnl.ARG_SRC: src, dnnl.ARG_DST: dst})
    s.wait()
    return pd, dst.to_numpy()


def _bwd(eng, s, alg, y, dd, axis, fpd, dst_tag=tag.any, diff_tag=tag.any, inplace=False):
    dims = y.shape
    pd = dnnl.softmax_backward.primitive_desc(eng, alg, _md(dims, diff_tag),
                                              _md(dims, diff_tag), _md(dims, dst_tag), axis, fpd)
    dst = dnnl.memory(pd.dst_desc(), eng, y)
    ddm = dnnl.memory(pd.diff_dst_desc(), eng, dd)
    dsm = ddm if inplace else dnnl.memory(pd.diff_src_desc(), eng)
    dnnl.softmax_backward(pd).execute(s, {dnnl.ARG_DST: dst, dnnl.ARG_DIFF_DST: ddm,
                                          dnnl.ARG_DIFF_SRC: dsm})
    s.wait()
    return pd, dsm.to_numpy()


# (dims, axis, src tag): rows along the innermost dim (row kernel) and along outer dims
# (strided kernel); channels-last, blocked channels, short and long rows
FWD_CASES = [
    ((5, 100), 1, "ab"), ((5, 100), 0, "ab"), ((3, 7), 1, "ab"), ((1000,), 0, "a"),
    ((2, 3, 4, 5), 1, "abcd"), ((2, 3, 4, 5), 3, "abcd"), ((2, 3, 4, 5), 0, "abcd"),
    ((2, 3, 4, 5), 1, "acdb"), ((2, 3, 4, 5), 2, "acdb"), ((2, 40, 3, 3), 1, "nChw16c"),
    ((2, 20, 3, 3), 3, "nChw8c"), ((3, 70, 2), 1, "acb"), ((2, 1, 5), 1, "abc"),
]


@pytest.mark.sampled(every=3)
@pytest.mark.parametrize("alg", ALGS, ids=lambda a: a.name)
@pytest.mark.parametrize("dims,axis,st", FWD_CASES,
                         ids=[f"{'x'.join(map(str, c[0]))}-ax{c[1]}-{c[2]}" for c in FWD_CASES])
def test_forward_matches_reference(engine, stream, alg, dims, axis, st):
    x = _x(dims, seed=len(dims) + axis)
    pd, y = _fwd(engine, stream, alg, x, axis, st)
    _close(y, ref.softmax_forward(alg, x, axis))
    assert pd.get_axis() == axis and pd.get_algorithm() == alg
    assert pd.get_prop_kind() == FWD


def _onnx(op, x, axis):
    import onnx
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    node = helper.make_node(op, ["x"], ["y"], axis=axis)
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(x.shape)) for n in "xy"]
    model = helper.make_model(helper.make_graph([node], "g", vi[:1], vi[1:]),
                              opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    return ReferenceEvaluator(model).run(None, {"x": x})[0]


@pytest.mark.parametrize("alg,op", [(A.softmax_accurate, "Softmax"),
                                    (A.softmax_log, "LogSoftmax")], ids=["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_forward_matches_onnx(engine, stream, alg, op, axis):
    x = _x((4, 40, 6), seed=axis, scale=6.0)
    _, y = _fwd(engine, stream, alg, x, axis, "abc", prop=INF)
    _close(y, _onnx(op, x, axis).astype(np.float64), rtol=1e-5, atol=1e-6)


def test_forward_is_stable_for_large_inputs(engine, stream):
    """Inputs near float32's limit: exp of the raw values overflows, the shifted ones do not."""
    x = np.array([[80.0, 88.0, 88.5, -1e30], [3e38, 3e38, 1e38, 0.0]], np.float32)
    for alg in ALGS:
        _, y = _fwd(engine, stream, alg, x, 1, "ab")
        assert np.isfinite(y[:, :3]).all()
        _close(y, ref.softmax_forward(alg, x, 1))


# (dims, axis, dst tag, diff tag)
BWD_CASES = [((4, 100), 1, "ab", "ab"), ((4, 50), 0, "ab", "ab"),
             ((2, 3, 4, 5), 1, "abcd", "acdb"), ((2, 3, 4, 5), 3, "acdb", "abcd"),
             ((2, 40, 2, 3), 1, "nChw16c", "nChw16c"), ((3, 6, 2), 2, "abc", "abc")]


@pytest.mark.sampled(every=3)
@pytest.mark.parametrize("alg", ALGS, ids=lambda a: a.name)
@pytest.mark.parametrize("dims,axis,yt,gt", BWD_CASES,
                         ids=[f"{'x'.join(map(str, c[0]))}-ax{c[1]}-{c[2]}-{c[3]}"
                              for c in BWD_CASES])
def test_backward_matches_reference(engine, stream, alg, dims, axis, yt, gt):
    x = _x(dims, seed=3)
    fpd, y = _fwd(engine, stream, alg, x, axis, yt, yt)
    dd = _x(dims, seed=4, scale=1.0)
    pd, g = _bwd(engine, stream, alg, y, dd, axis, fpd, yt, gt)
    _close(g, ref.softmax_backward(alg, dd, y, axis))
    assert pd.get_prop_kind() == dnnl.prop_kind.backward_data and pd.get_axis() == axis
    assert pd.diff_src_desc() == _md(dims, gt) and pd.dst_desc() == _md(dims, yt)


@pytest.mark.parametrize("alg", ALGS, ids=lambda a: a.name)
@pytest.mark.parametrize("dims,axis", [((3, 40), 1), ((5, 3, 4), 1)], ids=["row", "strided"])
def test_backward_matches_finite_differences(engine, stream, alg, dims, axis):
    """diff_src = d(sum(diff_dst * softmax(src))) / d src, by central differences in float64
    through the numpy forward."""
    x = _x(dims, seed=7, scale=2.0).astype(np.float64)
    w = _x(dims, seed=8, scale=1.0).astype(np.float64)
    h = 1e-6
    num = np.zeros_like(x)
    for i in np.ndindex(*dims):
        xp, xm = x.copy(), x.copy()
        xp[i] += h
        xm[i] -= h
        num[i] = np.sum(w * (ref.softmax_forward(alg, xp, axis)
                             - ref.softmax_forward(alg, xm, axis))) / (2 * h)
    tg = "abcdef"[:len(dims)]
    fpd, y = _fwd(engine, stream, alg, x.astype(np.float32), axis, tg, tg)
    _, g = _bwd(engine, stream, alg, y, w.astype(np.float32), axis, fpd, tg, tg)
    _close(g, num, rtol=1e-4, atol=2e-6)


def test_in_place(engine, stream):
    x = _x((6, 64), seed=9)
    for alg in ALGS:
        fpd, y = _fwd(engine, stream, alg, x, 1, "ab", "ab", inplace=True)
        _close(y, ref.softmax_forward(alg, x, 1))
        dd = _x((6, 64), seed=10, scale=1.0)
        _, g = _bwd(engine, stream, alg, y, dd, 1, fpd, "ab", "ab", inplace=True)
        _close(g, ref.softmax_backward(alg, dd, y, 1))


def test_strided_and_offset_layouts(engine, stream):
    """A src with gaps between rows and a sub-memory dst: only logical elements are read
    and written (the gaps keep their sentinel)."""
    dims = (4, 30)
    big = _md((4, 40), "ab")
    src_md = _md(dims, (48, 1))
    dst_md = big.submemory_desc(list(dims), [0, 5])
    pd = dnnl.softmax_forward.primitive_desc(engine, FWD, A.softmax_accurate, src_md, dst_md, 1)
    x = _x(dims, seed=11)
    src = dnnl.memory(src_md, engine, x)
    n = dst_md.nelems_physical()
    flat = dnnl.memory(_md((n,), "a"), engine, np.full(n, 7.0, np.float32))
    dst = dnnl.memory(dst_md, engine, flat.buffer)
    dnnl.softmax_forward(pd).execute(stream, {dnnl.ARG_SRC: src, dnnl.ARG_DST: dst})
    stream.wait()
    _close(dst.to_numpy(), ref.softmax_forward(A.softmax_accurate, x, 1))
    mask = np.ones(n, bool)
    mask[dst_md.element_offsets().ravel()] = False
    assert np.all(flat.to_numpy()[mask] == 7.0)


def test_any_follows_src(engine):
    for st in ("acdb", "nChw16c", "abcd"):
        pd = dnnl.softmax_forward.primitive_desc(engine, FWD, A.softmax_log,
                                                 _md((2, 16, 3, 3), st), _md((2, 16, 3, 3), "any"),
                                                 1)
        assert pd.dst_desc() == _md((2, 16, 3, 3), st)
        bpd = dnnl.softmax_backward.primitive_desc(
            engine, A.softmax_log, _md((2, 16, 3, 3), "any"), _md((2, 16, 3, 3), "any"),
            _md((2, 16, 3, 3), "any"), 1, pd)
        assert bpd.dst_desc() == pd.dst_desc() == bpd.diff_src_desc() == bpd.diff_dst_desc()


def test_keywords_and_queries(engine):
    md = _md((3, 5), "ab")
    pd = dnnl.softmax_forward.primitive_desc(aengine=engine, aprop_kind=INF,
                                             aalgorithm=A.softmax_accurate, src_desc=md,
                                             dst_desc=md, axis=1)
    assert pd.get_prop_kind() == INF and pd.src_desc() == md and pd.dst_desc() == md
    bpd = dnnl.softmax_backward.primitive_desc(engine, A.softmax_accurate, md, md, md, 1,
                                               hint_fwd_pd=pd)
    assert bpd.get_algorithm() == A.softmax_accurate and bpd.diff_dst_desc() == md
    assert "softmax" in bpd.impl_info_str()


def _refused(exc, fn):
    with pytest.raises(exc) as e:
        fn()
    return str(e.value)


def test_bad_descriptors(engine):
    md = _md((3, 5), "ab")
    mk = dnnl.softmax_forward.primitive_desc
    assert "axis" in _refused(dnnl.invalid_arguments, lambda: mk(engine, FWD,
                                                                 A.softmax_accurate, md, md, 2))
    assert "axis" in _refused(dnnl.invalid_arguments, lambda: mk(engine, FWD,
                                                                 A.softmax_accurate, md, md, -1))
    msg = _refused(dnnl.invalid_arguments,
                   lambda: mk(engine, FWD, A.softmax_accurate, md, _md((3, 6), "ab"), 1))
    assert "dst_desc dims [3, 6]" in msg and "[3, 5]" in msg
    assert "algorithm" in _refused(dnnl.invalid_arguments,
                                   lambda: mk(engine, FWD, A.eltwise_relu, md, md, 1))
    assert "prop_kind" in _refused(dnnl.invalid_arguments,
                                   lambda: mk(engine, dnnl.prop_kind.backward_data,
                                              A.softmax_accurate, md, md, 1))
    assert "src_desc" in _refused(dnnl.invalid_arguments,
                                  lambda: mk(engine, FWD, A.softmax_accurate, _md((3, 5), "any"),
                                             md, 1))
    s8 = dnnl.memory.desc((3, 5), dt.s8, "ab")
    assert "s8" in _refused(dnnl.unimplemented,
                            lambda: mk(engine, FWD, A.softmax_accurate, s8, s8, 1))
    attr = dnnl.primitive_attr()
    po = dnnl.post_ops()
    po.append_sum(1.0)  # oneDNN's softmax takes eltwise and binary, not sum
    attr.set_post_ops(po)
    assert "post-ops" in _refused(dnnl.unimplemented,
                                  lambda: mk(engine, FWD, A.softmax_accurate, md, md, 1, attr))
    fpd = mk(engine, FWD, A.softmax_accurate, md, md, 1)
    bk = dnnl.softmax_backward.primitive_desc
    assert "hint_fwd_pd" in _refused(dnnl.invalid_arguments,
                                     lambda: bk(engine, A.softmax_accurate, md, md, md, 1, None))
    assert "axis" in _refused(dnnl.invalid_arguments,
                              lambda: bk(engine, A.softmax_accurate, md, md, md, 0, fpd))
    assert "diff_dst_desc" in _refused(
        dnnl.invalid_arguments,
        lambda: bk(engine, A.softmax_accurate, md, _md((5, 3), "ab"), md, 1, fpd))


def test_bad_execute_leaves_outputs_untouched(engine, stream):
    md = _md((3, 5), "ab")
    pd = dnnl.softmax_forward.primitive_desc(engine, FWD, A.softmax_accurate, md, md, 1)
    prim = dnnl.softmax_forward(pd)
    src = dnnl.memory(md, engine, _x((3, 5)))
    dst = dnnl.memory(md, engine, np.full((3, 5), 5.0, np.float32))
    wrong = dnnl.memory(_md((3, 5), "ba"), engine, _x((3, 5)))
    for args in ({dnnl.ARG_SRC: wrong, dnnl.ARG_DST: dst}, {dnnl.ARG_DST: dst},
                 {dnnl.ARG_SRC: src, dnnl.ARG_DST: dst, dnnl.ARG_DIFF_DST: src}):
        with pytest.raises(dnnl.invalid_arguments):
            prim.execute(stream, args)
    stream.wait()
    assert np.all(dst.to_numpy() == 5.0)


# bf16 / f16 data, float computation. Inputs are compared as stored (rounded to their type
# first); the float64 reference of those values is then off from the output only by the
# output's rounding (at most half the type's epsilon, relative) plus float computation:
# rtol = one epsilon (bf16 2^-8, f16 2^-11), atol covers f16's subnormal spacing (2^-24) and
# float32 cancellation in log-softmax and the gradients (1e-5 for values up to 4).
EPS_T = {dt.bf16: 2.0 ** -8, dt.f16: 2.0 ** -11, dt.f32: 2.0 ** -21}
LOWP = [((64, 300), 1, "ab"), ((2, 40, 32), 1, "abc"), ((5, 7), 0, "ab"), ((3, 20, 6), 2, "abc")]


def _stored(eng, dims, t, data_type, x):
    m = dnnl.memory(dnnl.memory.desc(dims, data_type, t), eng, x)
    return m, np.asarray(m.to_numpy(), np.float64)


@pytest.mark.parametrize("sdt,ddt", [(dt.bf16, dt.bf16), (dt.f16, dt.f16), (dt.f32, dt.bf16),
                                     (dt.bf16, dt.f32), (dt.f16, dt.f32)],
                         ids=lambda d: d.name)
@pytest.mark.parametrize("dims,axis,st", LOWP,
                         ids=[f"{'x'.join(map(str, c[0]))}-ax{c[1]}" for c in LOWP])
def test_low_precision_forward_and_backward(engine, stream, dims, axis, st, sdt, ddt):
    for alg in ALGS:
        src, x = _stored(engine, dims, st, sdt, _x(dims, seed=axis))
        dmd = dnnl.memory.desc(dims, ddt, tag.any)
        pd = dnnl.softmax_forward.primitive_desc(engine, FWD, alg, src.get_desc(), dmd, axis)
        assert pd.dst_desc().data_type == ddt
        dst = dnnl.memory(pd.dst_desc(), engine)
        dnnl.softmax_forward(pd).execute(stream, {dnnl.ARG_SRC: src, dnnl.ARG_DST: dst})
        stream.wait()
        atol = 1e-5 if alg == A.softmax_log else 2.0 ** -24
        _close(dst.to_numpy(), ref.softmax_forward(alg, x, axis), rtol=EPS_T[ddt], atol=atol)
        # backward with dst as stored and diff tensors of src's type
        y = np.asarray(dst.to_numpy(), np.float64)
        ddm, dd = _stored(engine, dims, st, sdt, _x(dims, seed=5, scale=1.0))
        bpd = dnnl.softmax_backward.primitive_desc(
            engine, alg, dnnl.memory.desc(dims, sdt, tag.any), ddm.get_desc(),
            pd.dst_desc(), axis, pd)
        assert bpd.diff_src_desc().data_type == sdt
        dsm = dnnl.memory(bpd.diff_src_desc(), engine)
        dnnl.softmax_backward(bpd).execute(stream, {dnnl.ARG_DST: dst, dnnl.ARG_DIFF_DST: ddm,
                                                    dnnl.ARG_DIFF_SRC: dsm})
        stream.wait()
        _close(dsm.to_numpy(), ref.softmax_backward(alg, dd, y, axis), rtol=EPS_T[sdt],
               atol=1e-5)


def test_low_precision_in_place(engine, stream):
    dims = (6, 100)
    for d in (dt.bf16, dt.f16):
        src, x = _stored(engine, dims, "ab", d, _x(dims, seed=9))
        pd = dnnl.softmax_forward.primitive_desc(engine, FWD, A.softmax_accurate,
                                                 src.get_desc(), src.get_desc(), 1)
        dnnl.softmax_forward(pd).execute(stream, {dnnl.ARG_SRC: src, dnnl.ARG_DST: src})
        stream.wait()
        _close(src.to_numpy(), ref.softmax_forward(A.softmax_accurate, x, 1), rtol=EPS_T[d],
               atol=2.0 ** -24)


@pytest.mark.parametrize("subgroup", [False, True], ids=["tree", "subgroup"])
def test_online_row_kernel(engine, stream, subgroup):
    """The GPU forward (running max and rescaled sum, then one normalizing pass), forced on
    this device through the kernel generator, against the reference."""
    from dataclasses import replace

    from pydnnl.runtime.kernel import Kernel

    if subgroup and "cl_intel_required_subgroup_size" not in engine.info.extensions:
        pytest.skip("no Intel sub-groups")
    x = _x((9, 333), seed=11)
    x[0, 5] = -np.inf  # a -inf value contributes nothing
    for alg in ALGS:
        for ddt in (dt.f32, dt.bf16):
            md, dmd = _md(x.shape, "ab"), dnnl.memory.desc(x.shape, ddt, "ab")
            pd = dnnl.softmax_forward.primitive_desc(engine, FWD, alg, md, dmd, 1)
            p = replace(pd._problem, variant="row", vec=1, online=True, subgroup=subgroup,
                        wg=16 if subgroup else 64)
            from pydnnl.kernels.softmax import build_softmax

            k = Kernel(engine.context, engine.device, build_softmax(p))
            src, dst = dnnl.memory(md, engine, x), dnnl.memory(dmd, engine)
            k(stream, src.buffer, dst.buffer)
            stream.wait()
            _close(dst.to_numpy(), ref.softmax_forward(alg, x, 1), rtol=EPS_T[ddt] * 2,
                   atol=1e-5 if alg == A.softmax_log else 1e-7)


@pytest.mark.parametrize("runtime_axis", [False, True], ids=["baked", "runtime_axis"])
def test_register_row_kernel(engine, stream, runtime_axis):
    """The GPU forward with each work-item's share of the row in registers (one read of the
    row), forced on this device through the kernel generator: rows shorter than the
    registers hold (a partly filled last slot), rows that fill them exactly, post-ops, and
    with the axis length a kernel argument one program for two lengths."""
    from dataclasses import replace

    import numpy as np

    from pydnnl.kernels.softmax import build_softmax, runtime_form
    from pydnnl.runtime.kernel import Kernel

    for alg in ALGS:
        for cols, wg in ((333, 64), (256, 32), (40, 32)):
            x = _x((9, cols), seed=cols)
            x[0, 5] = -np.inf  # a -inf value contributes nothing
            for ddt in (dt.f32, dt.bf16):
                md, dmd = _md(x.shape, "ab"), dnnl.memory.desc(x.shape, ddt, "ab")
                pd = dnnl.softmax_forward.primitive_desc(engine, FWD, alg, md, dmd, 1)
                p = replace(pd._problem, variant="row", vec=1, online=True, subgroup=False,
                            wg=wg, cache=-(-cols // wg))
                sizes = {}
                if runtime_axis:
                    p = replace(p, cache=-(-512 // wg))  # one class for every length to 512
                    p, sizes = runtime_form(p, axis=True)
                    assert "sm_axis" in sizes
                ks = build_softmax(p)
                k = Kernel(engine.context, engine.device, ks)
                src, dst = dnnl.memory(md, engine, x), dnnl.memory(dmd, engine)
                k(stream, src.buffer, dst.buffer, *(np.int32(sizes[n]) for n in ks.arg_names[2:]))
                stream.wait()
                _close(dst.to_numpy(), ref.softmax_forward(alg, x, 1), rtol=EPS_T[ddt] * 2,
                       atol=1e-5 if alg == A.softmax_log else 1e-7)


def test_register_row_kernel_rejects_short_registers():
    """A row longer than its work-items' registers hold is refused at generation."""
    from pydnnl.kernels.softmax import SoftmaxProblem, build_softmax

    lay = (0, ((1, 100, ()), (1, 1, ())))
    p = SoftmaxProblem(log=False, backward=False, dims=(4, 100), axis=1, layouts=(lay, lay),
                       variant="row", wg=32, online=True, cache=3)
    with pytest.raises(ValueError, match="fewer than the axis length"):
        build_softmax(p)


def test_gpu_rule_keeps_rows_in_registers():
    """GPUs keep rows up to 16 values per work-item in registers; CPUs never."""
    from types import SimpleNamespace

    from pydnnl.runtime.heuristics.softmax import softmax_row_cache, softmax_row_wg

    gpu = SimpleNamespace(is_gpu=True, max_work_group_size=1024)
    cpu = SimpleNamespace(is_gpu=False, max_work_group_size=8192, simd_width=16)
    for length, want in ((512, 8), (1000, 16), (1024, 8), (4096, 16), (8192, 0)):
        assert softmax_row_cache(gpu, length, softmax_row_wg(gpu, length)) == want, length
    assert softmax_row_cache(cpu, 512, 16) == 0


def test_vector_row_kernel_chosen_on_cpus(engine, stream):
    """CPUs take one work-item per row in vectors (a tail shorter than a vector included);
    GPUs keep the work-group per row."""
    x = _x((7, 45), seed=3)
    md = _md(x.shape, "ab")
    for alg in ALGS:
        pd = dnnl.softmax_forward.primitive_desc(engine, FWD, alg, md, md, 1)
        want = "row" if engine.info.is_gpu else "vrow"
        assert pd._problem.variant == want
        src, dst = dnnl.memory(md, engine, x), dnnl.memory(md, engine)
        dnnl.softmax_forward(pd).execute(stream, {dnnl.ARG_SRC: src, dnnl.ARG_DST: dst})
        stream.wait()
        _close(dst.to_numpy(), ref.softmax_forward(alg, x, 1), rtol=1e-5, atol=1e-6)
