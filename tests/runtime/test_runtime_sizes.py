"""Kernels with sizes as arguments: a new sequence length or batch reuses the programs of
the first creation (no kernel the first did not already get), and the results stay right."""
from __future__ import annotations

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.benchdnn import rnn as R
from pydnnl.kernels.source import KernelSource, eval_size, launch_size

# CPU devices only: GPU GEMMs (local tiles, NVIDIA's kernel) still bake their row counts
# (docs/architecture.md, "Sizes at run time")
CPU_ENGINES = [dnnl.engine(dnnl.engine.kind.cpu, i)
               for i in range(dnnl.engine.get_count(dnnl.engine.kind.cpu))]


@pytest.mark.parametrize("engine", CPU_ENGINES,
                         ids=[e.info.platform.split()[0] for e in CPU_ENGINES])
@pytest.mark.parametrize("alg, prop", [("VANILLA_LSTM", "FWD_I"), ("LBR_GRU", "BWD_DW"),
                                       ("VANILLA_LSTM", "BWD_DW")])
def test_new_sequence_length_and_batch_need_no_new_kernel(engine, requested, alg, prop):
    o = R.RnnOptions(alg=alg, prop=prop)
    # first T*N and N, then other ones in the same tile classes (m >= 8 and m < 8 rows)
    R.create(engine, R.parse_problem("l1t4mb3sic24"), o)
    first = set(requested)
    requested.clear()
    b = R.RnnBench(engine, R.parse_problem("l1t6mb2sic24"), o)
    assert set(requested) <= first, sorted(set(requested) - first)
    err = b.check() if b.bwd is None else b.check_backward()
    assert err <= R.tolerance(b.p, o)


def test_grid_expressions():
    src = KernelSource("k", "", None, (4, 1), ("a", "m"), grid=("((7 + m) // 8) * 4", "3"))
    assert launch_size(src, [None, 17]) == (12, 3)
    assert launch_size(src, {"m": 1}) == (4, 3)
    assert eval_size("max(m - 2, 1) % 5", {"m": 9}) == 2
    with pytest.raises(dnnl.error, match="no value for size 'n'"):
        eval_size("n + 1", {"m": 1})
    with pytest.raises(dnnl.error, match="unsupported"):
        eval_size("__import__('os')", {})
    # a grid survives the disk cache's JSON
    assert KernelSource.from_json(src.to_json()) == src


def test_dense_reorder_is_a_copy(engine, stream):
    """A plan's reorder between equal dense layouts (an RNN's dst_layer out of its state
    buffer) is a buffer copy step, with the offsets of both sides."""
    from pydnnl.kernels.reorder import ReorderProblem, contiguous_copy
    from pydnnl.runtime.plan import Plan, Ref

    f32, tag = dnnl.memory.data_type.f32, dnnl.memory.format_tag
    md = dnnl.memory.desc([3, 4, 5], f32, tag.abc)
    assert contiguous_copy(ReorderProblem.between(md, md)) == (0, 0, 60)
    t = dnnl.memory.desc([3, 4, 5], f32, tag.acb)
    assert contiguous_copy(ReorderProblem.between(md, t)) is None
    lay = ((1, 20, ()), (1, 5, ()), (1, 1, ()))
    prob = ReorderProblem.f32((3, 4, 5), (7, lay), 67, (2, lay), 62)
    assert contiguous_copy(prob) == (7, 2, 60)
    plan = Plan(engine, "copy test")
    plan.reorder(prob, Ref("x"), Ref("y"))
    assert [st.name for st in plan.steps] == ["copy"]
    x = np.arange(67, dtype=np.float32)
    flat = dnnl.memory.desc([67], f32, tag.a)
    src = dnnl.memory(flat, engine, x)
    dst = dnnl.memory(dnnl.memory.desc([62], f32, tag.a), engine,
                      np.full(62, -1.0, np.float32))
    plan.run(stream, {"x": src.buffer, "y": dst.buffer})
    stream.wait()
    out = dst.to_numpy()
    np.testing.assert_array_equal(out[2:], x[7:])
    np.testing.assert_array_equal(out[:2], [-1.0, -1.0])


def test_reorder_with_runtime_offsets_and_outer_size(engine, stream, requested):
    """A plan's reorder whose outer dimension and offsets are arguments: one program moves
    [T, N, C] (tnc, at an offset) into rows padded to 8 channels at another offset, for two
    values of T."""
    from pydnnl.kernels.reorder import ReorderProblem, runtime_form
    from pydnnl.runtime.plan import Plan, Ref

    f32, tag = dnnl.memory.data_type.f32, dnnl.memory.format_tag
    N, C = 3, 5
    for T in (4, 7):
        src_lay = (6, ((1, N * C, ()), (1, C, ()), (1, 1, ())))  # tnc from element 6
        dst_lay = (2, ((1, N * 8, ()), (1, 8, ()), (1, 1, ())))  # rows of 8 from element 2
        prob = ReorderProblem.f32((T, N, C), src_lay, 6 + T * N * C, dst_lay, 2 + T * N * 8)
        assert runtime_form(prob) is not None
        plan = Plan(engine, "runtime reorder")
        plan.reorder(prob, Ref("x"), Ref("y"))
        x = np.arange(6 + T * N * C, dtype=np.float32)
        src = dnnl.memory(dnnl.memory.desc([x.size], f32, tag.a), engine, x)
        dst = dnnl.memory(dnnl.memory.desc([2 + T * N * 8], f32, tag.a), engine,
                          np.full(2 + T * N * 8, -1.0, np.float32))
        plan.run(stream, {"x": src.buffer, "y": dst.buffer})
        stream.wait()
        out = dst.to_numpy()
        rows = out[2:].reshape(T, N, 8)
        np.testing.assert_array_equal(rows[:, :, :C], x[6:].reshape(T, N, C))
        np.testing.assert_array_equal(rows[:, :, C:], -1.0)  # the padding is not written
        np.testing.assert_array_equal(out[:2], [-1.0, -1.0])
    assert len({key for fam, key in requested if fam.startswith("reorder")}) == 1


def test_reorder_primitives_share_one_program_across_outer_sizes(engine, stream, requested):
    """User reorders whose outer size differs (T of an RNN's tnc data) ask for one program
    each: a layout change, a quantization with per-channel scales (mask without dim 0) and
    RNN data quantization (two scalars); each against numpy. A same-layout f32 reorder is a
    buffer copy (no program)."""
    f32, u8, tag = dnnl.memory.data_type.f32, dnnl.memory.data_type.u8, dnnl.memory.format_tag
    FROM, TO = dnnl.ARG_FROM, dnnl.ARG_TO
    N, C = 3, 5
    sc = np.array([0.5, 2.0, 0.25, 4.0, 1.0], np.float32)
    keys = []
    for T in (4, 7):
        requested.clear()
        rng = np.random.default_rng(T)
        x = (rng.integers(-64, 64, (T, N, C)) / 4).astype(np.float32)
        src = dnnl.memory(dnnl.memory.desc([T, N, C], f32, tag.abc), engine, x)
        got = {}
        # layout change (dim 0 stays outermost: the other strides do not depend on T)
        dst = dnnl.memory(dnnl.memory.desc([T, N, C], f32, tag.acb), engine)
        dnnl.reorder(src, dst).execute(stream, src, dst)
        got["layout"] = (dst, x)
        # per-channel scales on the source (mask over dim 2)
        attr = dnnl.primitive_attr()
        attr.set_scales_mask(FROM, 1 << 2)
        q = dnnl.memory(dnnl.memory.desc([T, N, C], f32, tag.acb), engine)
        smem = dnnl.memory(dnnl.memory.desc([C], f32, tag.a), engine, sc)
        dnnl.reorder(src, q, attr).execute(stream, {FROM: src, TO: q,
                                                    dnnl.ARG_ATTR_SCALES | FROM: smem})
        got["scaled"] = (q, x * sc)
        # RNN data quantization: round(x * 8 + 64), saturated to u8
        attr = dnnl.primitive_attr()
        attr.set_rnn_data_qparams(8.0, 64.0)
        d8 = dnnl.memory(dnnl.memory.desc([T, N, C], u8, tag.abc), engine)
        dnnl.reorder(src, d8, attr).execute(stream, src, d8)
        got["rnn_data"] = (d8, np.clip(np.rint(x.astype(np.float64) * 8 + 64), 0, 255))
        # same layout: a copy
        same = dnnl.memory(dnnl.memory.desc([T, N, C], f32, tag.abc), engine)
        dnnl.reorder(src, same).execute(stream, src, same)
        got["copy"] = (same, x)
        stream.wait()
        for name, (mem, want) in got.items():
            np.testing.assert_array_equal(mem.to_numpy(), want, err_msg=f"{name} T={T}")
        keys.append({key for fam, key in requested if fam.startswith("reorder")})
    assert len(keys[0]) == 3, keys[0]   # the copy asks for none
    assert keys[1] == keys[0], keys[1] - keys[0]


# the implicit-GEMM data and weight-gradient kernels and their zero-padding copy
# (conv_im2col, 16 channels or more) take minibatch and spatial sizes at run time
_IGEMM_FAMILIES = ("conv_igemm_data", "conv_igemm_pack_wei", "conv_igemm_wei", "conv_im2col")


@pytest.mark.parametrize("engine", CPU_ENGINES,
                         ids=[e.info.platform.split()[0] for e in CPU_ENGINES])
@pytest.mark.parametrize("geometry, stag", [("kh3ph1", "any"), ("kh3sh2ph1", "any"),
                                            ("kh1ph0", "nchw")])
def test_new_image_size_needs_no_new_implicit_gemm_kernel(engine, requested, geometry, stag):
    from pydnnl.benchdnn import conv as C
    from pydnnl.benchdnn.conv_problem import ConvProblem

    def problem(mb, ih, iw):
        oh = -(-ih // 2) if "sh2" in geometry else ih
        ow = -(-iw // 2) if "sh2" in geometry else iw
        return ConvProblem.parse(f"mb{mb}ic16ih{ih}iw{iw}oc24oh{oh}ow{ow}"
                                 f"{geometry}{geometry.replace('h', 'w')}")

    for d in ("FWD_B", "BWD_D", "BWD_WB"):
        o = C.ConvOptions(dir=d, alg="implicit_gemm", stag=stag, dtag=stag)
        C.ConvBench(engine, problem(1, 6, 6), o)
        first = {r for r in requested if r[0] in _IGEMM_FAMILIES}
        assert first
        for mb, ih, iw in ((2, 5, 9), (3, 11, 4)):
            requested.clear()
            b = C.ConvBench(engine, problem(mb, ih, iw), o)
            new = {r for r in requested if r[0] in _IGEMM_FAMILIES} - first
            assert not new, sorted(new)
            assert b.check() <= b.tolerance()


@pytest.mark.parametrize("engine", CPU_ENGINES[:1],
                         ids=[e.info.platform.split()[0] for e in CPU_ENGINES[:1]])
def test_implicit_gemm_sum_post_op_over_moved_last_tile(engine, requested):
    """A sum post-op reads the destination: the moved last row tile (run-time rows, more
    than a tile) must not add its shared rows twice; fewer rows than a tile clamp instead."""
    from pydnnl.benchdnn import conv as C
    from pydnnl.benchdnn.conv_problem import ConvProblem

    o = C.ConvOptions(dir="FWD_B", alg="implicit_gemm", post_ops="sum:0.5+relu")
    for desc in ("mb1ic5ih9oc24oh9kh3ph1", "mb2ic5ih7oc24oh7kh3ph1", "mb1ic5ih2oc24oh2kh3ph1"):
        b = C.ConvBench(engine, ConvProblem.parse(desc), o)
        assert b.check() <= b.tolerance(), desc
