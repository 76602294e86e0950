"""bf16 RNN backward (oneDNN's data-type table: bf16 input data, recurrent data, weights and
output data; f32 bias and LSTM cell state, bf16 also accepted; every ``diff_*`` tensor f32):
forward_training + backward of each cell kind, one bidirectional-concat problem, two 2-layer
stacks and the bf16 bias / cell-state variant, against the float64 reference evaluated on the
bf16 values; accumulate vs overwrite of the diff weights; ``any`` descs; the data-type errors
(f16 backward, bf16 diff tensors, LSTMP in bf16, descs that disagree with the hint).

Tolerances. The inputs handed to the primitive are bf16-representable (rounded here, test
side, to nearest even) and the reference receives exactly those values, so input rounding is
no error source. What else could be bf16? pydnnl's bf16 forward converts its inputs to f32
and computes in f32; the workspace backward reads (initial states, every step's hidden and
cell states, activated gates, LBR's recurrent GEMM results) holds f32, like every workspace
region; only the forward's user-visible dst_layer / dst_iter (/ dst_iter_c when bf16) are
rounded, and backward reads none of them. diff_dst is f32, the diff outputs are f32. So the
only differences from the float64 reference are f32 roundings of the same computation as the
f32 backward, and the f32 criterion of those tests applies unchanged (``assert_close``:
|got - ref| <= 1e-5 max|ref|). A bf16 rounding inside the backward (relative error up to
2^-8, bf16 keeping 8 significant bits) would exceed it by two orders of magnitude:
``test_bf16_rounding_is_visible`` shows the comparison resolves it. The forward's bf16
outputs carry one more rounding (see ``test_forward_outputs``).
"""
from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from rnn_bwd_helpers import (  # noqa: E402
    CELLS,
    DIFF,
    DIFF_OUTPUTS,
    DIFF_WEIGHTS,
    FWD,
    FWD_INPUTS,
    FWD_OUTPUTS,
    OVERWRITE,
    arrays,
    assert_close,
    bwd_pd,
    diff_descs,
    diff_memories,
    dims_of,
    expected_outputs,
    fwd_descs,
    fwd_pd,
    gradients,
    md,
    problem,
    ref_forward,
    run_backward,
)

import pydnnl as dnnl  # noqa: E402
from pydnnl.reference.rnn import rnn_backward  # noqa: E402

dt = dnnl.memory.data_type
tag = dnnl.memory.format_tag
F32, BF16, F16 = dt.f32, dt.bf16, dt.f16
_CELL_STATE = ("src_iter_c_desc", "dst_iter_c_desc")


def bf16_round(x: np.ndarray) -> np.ndarray:
    """float32 -> the nearest bf16 value (ties to even), as float32 (test-side: the top 16 bits
    of the f32 pattern after adding half an ulp of bf16, one more when the kept bit is odd)."""
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    kept = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return (kept.astype(np.uint32) << 16).view(np.float32).reshape(np.shape(x))


def bf16_descs(p, *, bias=F32, cell=F32, any_weights=False) -> dict:
    """The problem's forward descs in oneDNN's bf16 configuration: data bf16, bias ``bias``,
    LSTM cell state ``cell``; AUGRU attention bf16 (as the data); weights as ``any``."""
    out = {}
    for n, d in fwd_descs(p).items():
        if d is None:
            out[n] = None
            continue
        dtype = bias if n == "bias_desc" else cell if n in _CELL_STATE else BF16
        t = tag.any if any_weights and n.startswith("weights_") else FWD[n][1]
        out[n] = md(dims_of(p, n), t, dtype)
    return out


def rounded(p) -> dict:
    """arrays(p) with every forward input rounded to bf16 (diff_dst stays f32: it is f32)."""
    return {k: (v if v is None or k.startswith("diff_") else bf16_round(v))
            for k, v in arrays(p).items()}


def run_forward_bf16(engine, stream, p, fpd, fprim=None) -> dict:
    """forward_training on the bf16-rounded inputs; the argument map."""
    a = rounded(p)
    args = {}
    for n in FWD_INPUTS:
        d = getattr(fpd, n)()
        if not d.is_zero():
            m = dnnl.memory(d, engine, a[FWD[n][2]])
            # the values are bf16-representable: the memory holds them exactly
            assert np.array_equal(m.to_numpy(), a[FWD[n][2]]), n
            args[FWD[n][0]] = m
    for n in FWD_OUTPUTS:
        d = getattr(fpd, n)()
        if not d.is_zero():
            args[FWD[n][0]] = dnnl.memory(d, engine)
    args[dnnl.ARG_WORKSPACE] = dnnl.memory(fpd.workspace_desc(), engine)
    (fprim or p.c.fwd_cls(fpd)).execute(stream, args)
    return args


_REF: dict = {}


def ref_bf16(p) -> tuple[dict, tuple]:
    """(float64 reference gradients, reference forward outputs) on the bf16-rounded inputs."""
    if p not in _REF:
        a = rounded(p)
        dl, di, dc, cache = ref_forward(p, a)
        grads = rnn_backward(p.c.cell, cache, a["diff_dst_layer"], a["diff_dst_iter"],
                             a["diff_dst_iter_c"])
        _REF[p] = (grads, (dl, di, dc))
    return _REF[p]


# name -> (problem, bias data type, cell-state data type)
CASES = {
    "rnn_relu": (problem("rnn_relu"), F32, F32),
    "lstm": (problem("lstm"), F32, F32),
    "lstm_peephole": (problem("lstm_peephole"), F32, F32),
    "lstm_bf16_bias_cell": (problem("lstm"), BF16, BF16),
    "gru": (problem("gru"), F32, F32),
    "gru_noiter": (problem("gru", with_iter=False), F32, F32),
    "lbr_gru": (problem("lbr_gru"), F32, F32),
    "augru": (problem("augru"), F32, F32),
    "lbr_augru": (problem("lbr_augru"), F32, F32),
    "lstm_peephole_bidirectional_concat": (problem("lstm_peephole", "bidirectional_concat"),
                                           F32, F32),
    "rnn_tanh_stack_right2left": (problem("rnn_tanh", "unidirectional_right2left", 2), F32, F32),
    "lbr_gru_stack_bidirectional_sum": (problem("lbr_gru", "bidirectional_sum", 2), F32, F32),
    # a layer GEMM of 128 x 128 x 128: NVIDIA devices run it on bf16 tensor cores
    "lstm_tensor_core_layer": (problem("lstm", T=16, N=8, SLC=128, DHC=32), F32, F32),
}

_RUNS: dict = {}


def run_case(engine, stream, name: str):
    """(forward argument map, gradients by reference name) of one case; once per device."""
    key = (id(engine), name)
    if key not in _RUNS:
        p, bias, cell = CASES[name]
        fd = bf16_descs(p, bias=bias, cell=cell)
        fpd = fwd_pd(engine, p, fd)
        bpd = bwd_pd(engine, p, fpd, fd, diff_descs(p))
        fargs = run_forward_bf16(engine, stream, p, fpd)
        _RUNS[key] = (fargs, gradients(run_backward(engine, stream, p, bpd, fargs)))
    return _RUNS[key]


@pytest.mark.parametrize("name", list(CASES))
def test_gradients_match_reference(engine, stream, name):
    p = CASES[name][0]
    _, got = run_case(engine, stream, name)
    assert set(got) == expected_outputs(p)
    ref, _ = ref_bf16(p)
    for g_name, g in got.items():
        assert_close(g, np.reshape(ref[g_name], g.shape), f"{name} {g_name}")


@pytest.mark.parametrize("name", ["lstm_bf16_bias_cell", "gru",
                                  "lstm_peephole_bidirectional_concat"])
def test_forward_outputs(engine, stream, name):
    """The forward_training outputs of the same runs: bf16 outputs are the f32 result y rounded
    once to nearest (8 significant bits: |round(y) - y| <= 2^-8 |y|), so with |y - r| <= e =
    1e-5 max|r| (the f32 criterion) |round(y) - r| <= 2^-8 |r| + (1 + 2^-8) e; f32 outputs
    (the cell state in the f32 configuration) meet e alone."""
    p, _, cell = CASES[name]
    fargs, _ = run_case(engine, stream, name)
    _, outs = ref_bf16(p)
    for (n, arg), want in zip((("dst_layer", dnnl.ARG_DST_LAYER), ("dst_iter", dnnl.ARG_DST_ITER),
                               ("dst_iter_c", dnnl.ARG_DST_ITER_C)), outs):
        if want is None or arg not in fargs:
            continue
        m = fargs[arg]
        got = m.to_numpy().astype(np.float64)
        want = np.reshape(np.asarray(want, np.float64), got.shape)
        e = 1e-5 * float(np.abs(want).max())
        rounding = m.get_desc().get_data_type() == BF16
        assert rounding == (n != "dst_iter_c" or cell == BF16), n
        tol = (2.0 ** -8 * np.abs(want) + (1 + 2.0 ** -8) * e) if rounding else e
        assert np.all(np.abs(got - want) <= tol), (
            f"{name} {n}: max |diff| {np.abs(got - want).max():.3g}")


def test_bf16_rounding_is_visible(first_engine):
    """The criterion resolves one bf16 rounding: the gradients of the bf16 run differ from the
    reference on the unrounded f32 inputs by far more than it allows (so matching the rounded
    reference above says the primitive computed on the bf16 values, in f32)."""
    stream = dnnl.stream(first_engine)
    p = CASES["lstm"][0]
    _, got = run_case(first_engine, stream, "lstm")
    a = arrays(p)
    *_, cache = ref_forward(p, a)
    unrounded = rnn_backward(p.c.cell, cache, a["diff_dst_layer"], a["diff_dst_iter"],
                             a["diff_dst_iter_c"])
    worst = max(float(np.abs(g - np.reshape(unrounded[k], g.shape)).max())
                / float(np.abs(unrounded[k]).max()) for k, g in got.items())
    assert worst > 1e-3  # 100x the criterion


# --------------------------------------------------------------------------------------------
# accumulate vs overwrite, any
# --------------------------------------------------------------------------------------------
def test_accumulate_then_overwrite(engine, stream):
    """Without diff_weights_overwrite the weight gradients are added to the f32 diff memories
    (twice: old + 2 g); with it they are overwritten; diff_src_* are overwritten in both."""
    p = problem("lstm_peephole", "bidirectional_concat")
    fd = bf16_descs(p)
    fpd = fwd_pd(engine, p, fd)
    acc = bwd_pd(engine, p, fpd, fd, diff_descs(p), flags=None)
    ow = bwd_pd(engine, p, fpd, fd, diff_descs(p), flags=OVERWRITE)
    ref, _ = ref_bf16(p)
    rng = np.random.default_rng(3)
    old = {n: (rng.standard_normal(dims_of(p, n)) * 3).astype(np.float32)
           for n in DIFF_OUTPUTS if not getattr(acc, n)().is_zero()}
    assert {"diff_weights_layer_desc", "diff_weights_iter_desc", "diff_weights_peephole_desc",
            "diff_bias_desc"} == set(DIFF_WEIGHTS) & set(old)
    _, outs = diff_memories(engine, p, acc, prefill=old)
    acc_prim, ow_prim, fprim = p.c.bwd_cls(acc), p.c.bwd_cls(ow), p.c.fwd_cls(fpd)
    for times in (1, 2):
        fargs = run_forward_bf16(engine, stream, p, fpd, fprim)
        run_backward(engine, stream, p, acc, fargs, bprim=acc_prim, outs=outs)
        for n, o in old.items():
            g = np.reshape(ref[DIFF[n][1]], o.shape)
            assert_close(outs[n].to_numpy(), o + times * g if n in DIFF_WEIGHTS else g,
                         f"accumulate x{times} {n}")
    fargs = run_forward_bf16(engine, stream, p, fpd, fprim)
    run_backward(engine, stream, p, ow, fargs, bprim=ow_prim, outs=outs)
    for n, o in old.items():
        assert_close(outs[n].to_numpy(), np.reshape(ref[DIFF[n][1]], o.shape), f"overwrite {n}")


def test_any_descs_resolve(engine, stream):
    """bf16 weights given as ``any`` resolve to bf16 ldigo through the hint; diff descs given
    as ``any`` with f32 resolve to f32; the run matches the reference."""
    p = problem("gru", "unidirectional_right2left", 2)
    fd = bf16_descs(p, any_weights=True)
    fpd = fwd_pd(engine, p, fd)
    dd = {n: (None if d is None else md(d.get_dims(), tag.any, F32))
          for n, d in diff_descs(p).items()}
    bpd = bwd_pd(engine, p, fpd, fd, dd)
    for n in ("weights_layer_desc", "weights_iter_desc"):
        assert getattr(bpd, n)() == getattr(fpd, n)()
        assert getattr(bpd, n)().get_data_type() == BF16
    for n, d in dd.items():
        if d is not None:
            got = getattr(bpd, n)()
            assert got.get_data_type() == F32 and not got.is_any(), n
    fargs = run_forward_bf16(engine, stream, p, fpd)
    got = gradients(run_backward(engine, stream, p, bpd, fargs))
    ref, _ = ref_bf16(p)
    for g_name, g in got.items():
        assert_close(g, np.reshape(ref[g_name], g.shape), f"any {g_name}")


# --------------------------------------------------------------------------------------------
# errors
# --------------------------------------------------------------------------------------------
def _raises(fn, *words, kind):
    with pytest.raises(dnnl.error) as e:
        fn()
    assert isinstance(e.value, kind), f"{type(e.value).__name__} is not a {kind.__name__}"
    for w in words:
        assert w in str(e.value), f"{w!r} not in message {str(e.value)!r}"


def test_f16_backward_unimplemented(first_engine):
    """oneDNN lists f16 for forward propagation only: forward_training exists, backward is
    unimplemented."""
    p = problem("lstm")
    fd = {n: (None if d is None else md(d.get_dims(), FWD[n][1], F16))
          for n, d in fwd_descs(p).items()}
    fpd = fwd_pd(first_engine, p, fd)
    _raises(lambda: bwd_pd(first_engine, p, fpd, fd, diff_descs(p)), "lstm_backward", "f16",
            "forward", kind=dnnl.unimplemented)


@pytest.mark.parametrize("name", ["diff_src_layer_desc", "diff_weights_iter_desc",
                                  "diff_bias_desc", "diff_dst_iter_c_desc"])
def test_bf16_diff_desc_unimplemented(first_engine, name):
    """oneDNN: "all diff_* tensors are in f32" (its descriptor check answers unimplemented)."""
    p = problem("lstm")
    fd = bf16_descs(p)
    fpd = fwd_pd(first_engine, p, fd)
    dd = diff_descs(p)
    dd[name] = md(dims_of(p, name), FWD[name[5:]][1], BF16)
    _raises(lambda: bwd_pd(first_engine, p, fpd, fd, dd), name, "f32", "bf16",
            kind=dnnl.unimplemented)


def test_descs_disagree_with_hint(first_engine):
    """f32 forward descs with a bf16 hint: the problems differ, the message says how."""
    p = problem("gru")
    fpd = fwd_pd(first_engine, p, bf16_descs(p))
    _raises(lambda: bwd_pd(first_engine, p, fpd, fwd_descs(p), diff_descs(p)), "hint_fwd_pd",
            "f32", "bf16", kind=dnnl.invalid_arguments)


def test_bf16_projection_unimplemented(first_engine):
    """Projection LSTM has no bf16 configuration (oneDNN: not supported)."""
    p = problem("lstm_projection")
    assert CELLS[p.cfg].projection
    fpd = fwd_pd(first_engine, p)
    _raises(lambda: bwd_pd(first_engine, p, fpd, bf16_descs(p), diff_descs(p)), "projection",
            "bf16", kind=dnnl.unimplemented)


def test_impl_says_where_the_layer_gemm_runs(engine, stream):
    """A one-layer bf16 RNN's layer GEMM multiplies bf16 values exactly: on tensor cores of
    that kind where the device has them (and the shape suits them), f32 elsewhere; the
    gradients of that case match the reference above."""
    p = CASES["lstm_tensor_core_layer"][0]
    fpd = fwd_pd(engine, p, bf16_descs(p))
    info = engine.info
    arch = str(getattr(info, "arch", ""))
    tc = bool(info.inline_ptx) and arch[3:].isdigit() and int(arch[3:]) >= 80
    want = "bf16: layer GEMM on bf16 tensor cores" if tc else "bf16: computed in f32"
    assert want in fpd.impl_info_str(), fpd.impl_info_str()
