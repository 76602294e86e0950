"""The reduction primitive on every device: every algorithm over inner, outer, middle and all
dims against the float64 numpy reference, ONNX's reference evaluator (ReduceMax, ReduceMin,
ReduceSum, ReduceProd, ReduceMean, ReduceL1, ReduceL2, ReduceSumSquare; opset 18, axes as an
input, keepdims=1) and closed forms of the eps rules; row, strided and chunked kernels;
plain, channels-last, blocked, strided and ``any`` layouts; queries and errors (dst
untouched after a refused call)."""
from __future__ import annotations

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.reference.reduction import reduction as ref

A = dnnl.algorithm
dt = dnnl.memory.data_type
ALGS = [A.reduction_max, A.reduction_min, A.reduction_sum, A.reduction_mul, A.reduction_mean,
        A.reduction_norm_lp_max, A.reduction_norm_lp_sum, A.reduction_norm_lp_power_p_max,
        A.reduction_norm_lp_power_p_sum]


def _md(dims, t):
    return dnnl.memory.desc(dims, dt.f32, t)


def _x(alg, dims, seed=0):
    rng = np.random.default_rng(seed)
    if alg == A.reduction_mul:
        return rng.uniform(0.8, 1.25, dims).astype(np.float32)
    return rng.uniform(-2.0, 2.0, dims).astype(np.float32)


def _close(got, want, rtol=3e-5, atol=1e-6):
    got = np.asarray(got, np.float64)
    err = np.abs(got - want)
    bad = ~(err <= rtol * np.abs(want) + atol)
    assert not bad.any(), (f"{bad.sum()} of {bad.size} differ; max err {err.max():.3g}; "
                           f"first got {got[bad][:4]}, want {want[bad][:4]}")


def _run(eng, s, alg, x, ddims, st, dtg="any", p=1.0, eps=0.0):
    pd = dnnl.reduction.primitive_desc(eng, alg, _md(x.shape, st), _md(ddims, dtg), p, eps)
    src = dnnl.memory(pd.src_desc(), eng, x)
    dst = dnnl.memory(pd.dst_desc(), eng)
    dnnl.reduction(pd).execute(s, {dnnl.ARG_SRC: src, dnnl.ARG_DST: dst})
    s.wait()
    return pd, dst.to_numpy()


# (src dims, dst dims, src tag, dst tag)
CASES = [
    ((4, 6, 8, 8), (4, 6, 1, 1), "abcd", "any"),     # inner dims: row kernel
    ((4, 6, 8, 8), (1, 6, 8, 8), "abcd", "any"),     # outer dim: strided kernel
    ((4, 6, 8, 8), (1, 6, 1, 1), "abcd", "abcd"),    # all but channels
    ((4, 6, 8, 8), (4, 1, 8, 1), "abcd", "abcd"),    # scattered dims
    ((3, 5, 4, 7), (3, 1, 1, 7), "acdb", "any"),     # channels-last
    ((2, 20, 3, 3), (2, 1, 3, 3), "nChw16c", "any"),  # blocked, the blocked dim reduced
    ((2, 20, 3, 3), (1, 20, 1, 1), "nChw8c", "abcd"),  # blocked, the blocked dim kept
    ((9, 13), (9, 1), "ba", "ab"),                   # column-major
    ((3000,), (1,), "a", "a"),                       # one long reduction: chunked
]
CASE_IDS = [f"{'x'.join(map(str, c[0]))}-{'x'.join(map(str, c[1]))}-{c[2]}" for c in CASES]


@pytest.mark.sampled(every=5)
@pytest.mark.parametrize("alg", ALGS, ids=lambda a: a.name[10:])
@pytest.mark.parametrize("sdims,ddims,st,dtg", CASES, ids=CASE_IDS)
def test_matches_reference(engine, stream, alg, sdims, ddims, st, dtg):
    x = _x(alg, sdims, seed=len(sdims))
    p, eps = (2.5, 0.25) if "norm" in alg.name else (1.0, 0.0)
    pd, y = _run(engine, stream, alg, x, ddims, st, dtg, p, eps)
    _close(y, ref(alg, x, ddims, p, eps))
    assert pd.get_algorithm() == alg and pd.get_p() == p and pd.get_epsilon() == eps


def test_chunked_sum_of_many_values(engine, stream):
    """Few outputs of long reductions take the two-kernel path (partials in the scratchpad)."""
    x = _x(A.reduction_sum, (4000, 3, 2), seed=5)
    pd, y = _run(engine, stream, A.reduction_sum, x, (1, 1, 1), "abc")
    assert "split" in pd.impl_info_str() and pd.scratchpad_desc().get_size() > 0
    _close(y, ref(A.reduction_sum, x, (1, 1, 1)))
    for alg, ddims in ((A.reduction_sum, (1, 1, 1)), (A.reduction_mean, (1, 3, 1)),
                       (A.reduction_max, (1, 1, 2))):
        pd, y = _run(engine, stream, alg, x, ddims, "abc")
        _close(y, ref(alg, x, ddims))


def _onnx(op, x, axes):
    import onnx
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    node = helper.make_node(op, ["x", "axes"], ["y"], keepdims=1)
    out_shape = [1 if d in axes else v for d, v in enumerate(x.shape)]
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
        [helper.make_tensor("axes", TensorProto.INT64, [len(axes)], list(axes))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    onnx.checker.check_model(model)
    return ReferenceEvaluator(model).run(None, {"x": x})[0]


ONNX = [("ReduceMax", A.reduction_max, 1.0), ("ReduceMin", A.reduction_min, 1.0),
        ("ReduceSum", A.reduction_sum, 1.0), ("ReduceProd", A.reduction_mul, 1.0),
        ("ReduceMean", A.reduction_mean, 1.0), ("ReduceL1", A.reduction_norm_lp_sum, 1.0),
        ("ReduceL2", A.reduction_norm_lp_sum, 2.0),
        ("ReduceSumSquare", A.reduction_norm_lp_power_p_sum, 2.0)]


@pytest.mark.sampled(every=3)
@pytest.mark.parametrize("op,alg,p", ONNX, ids=[o[0] for o in ONNX])
@pytest.mark.parametrize("axes", [(2, 3), (0,), (1, 3)], ids=["inner", "outer", "mixed"])
def test_matches_onnx(engine, stream, op, alg, p, axes):
    x = _x(alg, (3, 4, 5, 6), seed=sum(axes))
    ddims = tuple(1 if d in axes else v for d, v in enumerate(x.shape))
    _, y = _run(engine, stream, alg, x, ddims, "abcd", p=p, eps=0.0)
    _close(y, _onnx(op, x, axes).astype(np.float64), rtol=1e-5)


def test_eps_rules_closed_form(engine, stream):
    """On zeros: max(0, eps) ** (1/p), (0 + eps) ** (1/p), max(0, eps), 0 + eps; on ones
    the sums of |x|^p count the values."""
    z = np.zeros((2, 8), np.float32)
    o = np.ones((2, 8), np.float32)
    for alg, x, p, eps, want in (
            (A.reduction_norm_lp_max, z, 2.0, 4.0, 2.0),
            (A.reduction_norm_lp_sum, z, 3.0, 8.0, 2.0),
            (A.reduction_norm_lp_power_p_max, z, 2.0, 0.5, 0.5),
            (A.reduction_norm_lp_power_p_sum, z, 2.0, 0.5, 0.5),
            (A.reduction_norm_lp_max, o, 2.0, 4.0, 8 ** 0.5),   # max(8, 4) = 8
            (A.reduction_norm_lp_max, o, 2.0, 16.0, 4.0),       # max(8, 16) = 16
            (A.reduction_norm_lp_sum, o, 1.0, 0.5, 8.5),
            (A.reduction_norm_lp_power_p_sum, o, 3.0, 1.0, 9.0),
            (A.reduction_mean, o * 3, 1.0, 0.0, 3.0)):
        _, y = _run(engine, stream, alg, x, (2, 1), "ab", p=p, eps=eps)
        _close(y, np.full((2, 1), want))


def test_any_follows_src(engine):
    for st, want in (("acdb", "acdb"), ("abcd", "abcd"), ("nChw16c", "nChw16c")):
        pd = dnnl.reduction.primitive_desc(engine, A.reduction_sum, _md((2, 16, 3, 3), st),
                                           _md((2, 16, 1, 1), "any"), 1.0, 0.0)
        assert pd.dst_desc() == _md((2, 16, 1, 1), want)


def test_keywords(engine):
    pd = dnnl.reduction.primitive_desc(aengine=engine, aalgorithm=A.reduction_mean,
                                       src_desc=_md((4, 5), "ab"), dst_desc=_md((1, 5), "ab"),
                                       p=0.0, eps=0.0)
    assert pd.src_desc() == _md((4, 5), "ab") and pd.get_algorithm() == A.reduction_mean
    assert "reduction" in pd.impl_info_str()


def _refused(exc, fn):
    with pytest.raises(exc) as e:
        fn()
    return str(e.value)


def test_bad_descriptors(engine):
    mk = dnnl.reduction.primitive_desc
    src = _md((4, 5), "ab")
    msg = _refused(dnnl.invalid_arguments, lambda: mk(engine, A.reduction_sum, src, src, 1, 0))
    assert "no dim is reduced" in msg
    msg = _refused(dnnl.invalid_arguments,
                   lambda: mk(engine, A.reduction_sum, src, _md((2, 5), "ab"), 1, 0))
    assert "[2, 5]" in msg and "[4, 5]" in msg
    assert "rank" in _refused(dnnl.invalid_arguments,
                              lambda: mk(engine, A.reduction_sum, src, _md((1,), "a"), 1, 0))
    assert "p >= 1" in _refused(dnnl.invalid_arguments,
                                lambda: mk(engine, A.reduction_norm_lp_sum, src,
                                           _md((4, 1), "ab"), 0.5, 0))
    assert "algorithm" in _refused(dnnl.invalid_arguments,
                                   lambda: mk(engine, A.softmax_log, src, _md((4, 1), "ab"), 1,
                                              0))
    assert "src_desc" in _refused(dnnl.invalid_arguments,
                                  lambda: mk(engine, A.reduction_sum, _md((4, 5), "any"),
                                             _md((4, 1), "ab"), 1, 0))
    assert "eps" in _refused(dnnl.invalid_arguments,
                             lambda: mk(engine, A.reduction_sum, src, _md((4, 1), "ab"), 1, "x"))
    s8 = dnnl.memory.desc((4, 5), dt.s8, "ab")
    assert "s8" in _refused(dnnl.unimplemented,
                            lambda: mk(engine, A.reduction_sum, s8, _md((4, 1), "ab"), 1, 0))
    attr = dnnl.primitive_attr()
    po = dnnl.post_ops()
    po.append_eltwise(A.eltwise_relu, 0.0, 0.0)
    attr.set_post_ops(po)
    assert "post-ops" in _refused(dnnl.unimplemented,
                                  lambda: mk(engine, A.reduction_sum, src, _md((4, 1), "ab"), 1,
                                             0, attr))


def test_bad_execute_leaves_dst_untouched(engine, stream):
    pd = dnnl.reduction.primitive_desc(engine, A.reduction_sum, _md((4, 5), "ab"),
                                       _md((4, 1), "ab"), 1.0, 0.0)
    prim = dnnl.reduction(pd)
    dst = dnnl.memory(_md((4, 1), "ab"), engine, np.full((4, 1), 3.0, np.float32))
    wrong = dnnl.memory(_md((4, 5), "ba"), engine, np.ones((4, 5), np.float32))
    for args in ({dnnl.ARG_SRC: wrong, dnnl.ARG_DST: dst}, {dnnl.ARG_DST: dst}):
        with pytest.raises(dnnl.invalid_arguments):
            prim.execute(stream, args)
    stream.wait()
    assert np.all(dst.to_numpy() == 3.0)


# bf16 / f16 src and dst, float accumulation. The reference is float64 over src as stored
# (rounded to its type first), so the output differs by its own rounding (half the type's
# epsilon, relative) and float32 accumulation over at most 4096 values (< 2^-12 relative to
# the sum of magnitudes, bounded here by atol): rtol = one epsilon of dst's type (bf16 2^-8,
# f16 2^-11), atol 1e-4 for sums whose terms cancel.
EPS_T = {dt.bf16: 2.0 ** -8, dt.f16: 2.0 ** -11, dt.f32: 2.0 ** -20}
LOWP = [((8, 64, 16), (1, 64, 16)), ((16, 49), (16, 1)), ((3, 300), (3, 1)),
        ((4, 1024), (1, 1)), ((5, 6, 7), (5, 1, 7))]


@pytest.mark.parametrize("sdt,ddt", [(dt.bf16, dt.bf16), (dt.f16, dt.f16), (dt.bf16, dt.f32),
                                     (dt.f32, dt.f16)], ids=lambda d: d.name)
@pytest.mark.parametrize("sdims,ddims", LOWP, ids=[f"{'x'.join(map(str, c[0]))}" for c in LOWP])
def test_low_precision(engine, stream, sdims, ddims, sdt, ddt):
    tags = "abcd"[:len(sdims)]
    for alg in (A.reduction_sum, A.reduction_max, A.reduction_mean,
                A.reduction_norm_lp_sum):
        src = dnnl.memory(dnnl.memory.desc(sdims, sdt, tags), engine, _x(alg, sdims, seed=2))
        x = np.asarray(src.to_numpy(), np.float64)
        pd = dnnl.reduction.primitive_desc(engine, alg, src.get_desc(),
                                           dnnl.memory.desc(ddims, ddt, "any"), 2.0, 0.0)
        assert pd.dst_desc().data_type == ddt
        dst = dnnl.memory(pd.dst_desc(), engine)
        dnnl.reduction(pd).execute(stream, {dnnl.ARG_SRC: src, dnnl.ARG_DST: dst})
        stream.wait()
        _close(dst.to_numpy(), ref(alg, x, ddims, 2.0, 0.0), rtol=EPS_T[ddt], atol=1e-4)


def _run_as(engine, stream, info, alg, x, ddims, p=1.0):
    """Run the stages :func:`plan_stages` picks for a device ``info`` on ``engine``."""
    from pydnnl.primitives.reduction import plan_stages, stages_plan

    tags = "abcd"[:x.ndim]
    md, dmd = dnnl.memory.desc(x.shape, dt.f32, tags), dnnl.memory.desc(ddims, dt.f32, tags)
    name = alg.name.removeprefix("reduction_")
    stages, scratch, impl = plan_stages(info, name, p, 0.0, md, dmd)
    plan = stages_plan(engine, "reduction", stages, scratch)
    src, dst = dnnl.memory(md, engine, x), dnnl.memory(dmd, engine)
    plan.execute(stream, {dnnl.ARG_SRC: src, dnnl.ARG_DST: dst})
    stream.wait()
    return impl, dst.to_numpy()


def test_vrow_chunks_over_runs_and_within_a_run(engine, stream):
    """Contiguous rows on CPUs (a work-item per output, vector loads with a scalar tail):
    chunked over the outer reduced runs (5 runs of 4100) and within one run (24000 values)."""
    from dataclasses import replace

    cpu = replace(engine.info, type="cpu", compute_units=2)
    for sdims, ddims, alg in (((5, 3, 4100), (1, 3, 1), A.reduction_sum),
                              ((5, 3, 4100), (1, 3, 1), A.reduction_norm_lp_max),
                              ((24000,), (1,), A.reduction_max)):
        x = _x(alg, sdims, seed=6)
        p = 2.5 if "norm" in alg.name else 1.0
        impl, y = _run_as(engine, stream, cpu, alg, x, ddims, p)
        assert impl.startswith("ocl:reduction:vrow:split"), impl
        _close(y, ref(alg, x, ddims, p, 0.0))


# the GPU's launch shapes (several contiguous rows per work-group, a row's lanes combined in a
# local tree; one row per group and chunks for long rows) run on this device too
GPU_SHAPES = [((70, 49), (70, 1), A.reduction_mean, "row"),       # 8 lanes x 32 rows, a tail
              ((6, 768), (6, 1), A.reduction_norm_lp_sum, "row"),  # 128 lanes x 2 rows
              ((3, 9000), (3, 1), A.reduction_max, "row:split"),   # 256 lanes, chunked
              ((5, 6, 3), (5, 1, 3), A.reduction_sum, "strided"),
              ((40, 9), (40, 1), A.reduction_min, "row")]          # 2 lanes x 128 rows


@pytest.mark.parametrize("sdims,ddims,alg,impl", GPU_SHAPES,
                         ids=["49", "768", "9000", "outer", "9"])
def test_gpu_launch_shapes(engine, stream, sdims, ddims, alg, impl):
    from dataclasses import replace

    gpu = replace(engine.info, type="gpu", max_work_group_size=256)
    x = _x(alg, sdims, seed=8)
    p = 2.0 if "norm" in alg.name else 1.0
    got_impl, y = _run_as(engine, stream, gpu, alg, x, ddims, p)
    assert got_impl.startswith("ocl:reduction:" + impl), got_impl
    _close(y, ref(alg, x, ddims, p, 0.0))


def _info(kind, cu, wg=1024):
    from pydnnl.engine import DeviceInfo

    return DeviceInfo(name="made-up", vendor="v", platform="p", driver_version="1",
                      device_version="OpenCL 3.0", type=kind, compute_units=cu,
                      global_mem_bytes=1 << 34, local_mem_bytes=1 << 16,
                      max_work_group_size=wg, max_clock_mhz=0, fp16=True, fp64=True,
                      preferred_float_vector_width=1)


def test_contiguous_row_rules_closed_form():
    """The launch rules of contiguous rows (runtime/heuristics/reduction.py) on made-up
    devices: GPU lanes per row near a quarter of the row, rows filling 256-item groups;
    CPU chunks only where outputs are too few for the compute units."""
    from pydnnl.runtime.heuristics import reduction as HR

    gpu = _info("gpu", 132)
    assert [(HR.row_lanes(gpu, r), HR.rows_per_group(gpu, HR.row_lanes(gpu, r)))
            for r in (5, 49, 768, 1024, 16384)] == [(1, 256), (8, 32), (128, 2), (256, 1),
                                                     (256, 1)]
    assert HR.row_lanes(_info("gpu", 8, wg=128), 16384) == 128
    cpu = _info("cpu", 2)
    assert HR.vrow_launch(cpu, 65536, 49, 1) == (64, 1)
    assert HR.vrow_launch(cpu, 64, 262144, 16) == (16, 2)    # 128 work-items: 16 per group
    assert HR.vrow_launch(cpu, 1, 24000, 1) == (1, 5)        # chunks of >= 4096 values
    assert HR.vrow_launch(cpu, 6, 20500, 5) == (2, 5)        # at most one chunk per run


def test_gpu_split_rule_closed_form():
    """GPUs split a reduction only below 4 work-groups per compute unit (H200: 132 units):
    1024 rows of 16384 run whole, 64 long outputs in ceil(528 / 64) = 9 chunks, 16 outputs
    of 16384 in 16384 / (16 * 256) = 4 (each chunk keeps 16 values per lane)."""
    from pydnnl.runtime.heuristics.softmax import reduction_splits

    gpu = _info("gpu", 132)
    assert reduction_splits(gpu, 1024, 16384, 256) == 1
    assert reduction_splits(gpu, 527, 16384, 256) == 2
    assert reduction_splits(gpu, 64, 262144, 256) == 9
    assert reduction_splits(gpu, 16, 16384, 256) == 4
    assert reduction_splits(_info("cpu", 2), 16, 1 << 20, 16) == 2
