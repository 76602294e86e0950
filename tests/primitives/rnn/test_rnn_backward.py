"""RNN backward primitives on every device present: the gradients of every cell kind x direction
x {1, 2} layers x {with, without} state tensors against (a) the float64 reference's analytic
backward (``rnn_backward``) and (b) finite differences of the float64 reference forward;
accumulate vs overwrite of the diff weights; explicit non-canonical and ``any`` diff layouts;
absent diff_dst_iter / diff_src_iter; keyword and positional construction.

Problems are tiny (T = 3, N = 2, channels <= 5) and share their shapes across cell kinds, so
the kernels compiled for one test serve the others; forward + backward of each (device,
problem) runs once and both comparisons read the same result.
"""
from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from rnn_bwd_helpers import (  # noqa: E402
    AUGRU,
    DIFF,
    DIFF_OUTPUTS,
    DIFF_WEIGHTS,
    DIRECTIONS,
    FWD,
    NON_AUGRU,
    OVERWRITE,
    SENTINEL,
    arrays,
    assert_close,
    bwd_pd,
    diff_descs,
    dims_of,
    expected_outputs,
    fd_check,
    fwd_descs,
    fwd_pd,
    gradients,
    md,
    pack,
    problem,
    read_raw,
    ref_gradients,
    run_backward,
    run_forward,
    tag,
    unpack,
    write_raw,
)

import pydnnl as dnnl  # noqa: E402

# --------------------------------------------------------------------------------------------
# 1. the whole matrix: analytic reference and finite differences
# --------------------------------------------------------------------------------------------
CASES = [(cfg, d, L, it) for cfg in NON_AUGRU for d in DIRECTIONS for L in (1, 2)
         for it in (True, False)]
CASES += [(cfg, "unidirectional_left2right", 1, it) for cfg in AUGRU for it in (True, False)]
CASE_IDS = [f"{cfg}-{d}-L{L}-{'iter' if it else 'noiter'}" for cfg, d, L, it in CASES]

_RUNS: dict = {}


def primitive_gradients(engine, stream, p) -> dict[str, np.ndarray]:
    """forward_training then backward (overwrite) on the device; once per (device, problem)."""
    key = (id(engine), p)
    if key not in _RUNS:
        fpd = fwd_pd(engine, p)
        fargs = run_forward(engine, stream, p, fpd)
        bpd = bwd_pd(engine, p, fpd)
        _RUNS[key] = gradients(run_backward(engine, stream, p, bpd, fargs))
    return _RUNS[key]


@pytest.mark.sampled(every=3)
@pytest.mark.parametrize("cfg,direction,L,with_iter", CASES, ids=CASE_IDS)
def test_gradients_match_reference(engine, stream, cfg, direction, L, with_iter):
    p = problem(cfg, direction, L, with_iter=with_iter)
    got = primitive_gradients(engine, stream, p)
    assert set(got) == expected_outputs(p)
    ref = ref_gradients(p)
    for name, g in got.items():
        assert_close(g, np.reshape(ref[name], g.shape), f"{cfg} {direction} L{L} {name}")


@pytest.mark.sampled(every=3)
@pytest.mark.parametrize("cfg,direction,L,with_iter", CASES, ids=CASE_IDS)
def test_gradients_match_finite_differences(engine, stream, cfg, direction, L, with_iter):
    """Directional derivatives of the primitive's gradients vs central differences of the
    float64 reference forward (tolerance: see FD_REL / FD_ABS in rnn_bwd_helpers)."""
    p = problem(cfg, direction, L, with_iter=with_iter)
    got = primitive_gradients(engine, stream, p)
    bad = fd_check(p, got)
    assert not bad, "\n".join(bad)


def test_fd_oracle_rejects_wrong_gradients():
    """The finite-difference check accepts the exact gradients and rejects slightly wrong ones
    (so test_gradients_match_finite_differences can fail)."""
    for p in (problem("lstm_peephole_projection", "bidirectional_concat", 2),
              problem("lbr_augru"), problem("rnn_relu", "bidirectional_sum", 2)):
        ref = {k: v for k, v in ref_gradients(p).items() if v is not None}
        assert not fd_check(p, ref), fd_check(p, ref)
        for name, g in ref.items():
            wrong = np.array(g, np.float64)
            idx = np.unravel_index(np.argmax(np.abs(wrong)), wrong.shape)
            wrong[idx] += 0.01 * np.abs(wrong).max()   # one element 1% off
            assert fd_check(p, {name: wrong}, ndirs=2), f"{p.cfg} {name}: 1% error not detected"


# --------------------------------------------------------------------------------------------
# 2. accumulate vs overwrite
# --------------------------------------------------------------------------------------------
ACC_CASES = [("lstm_peephole_projection", "bidirectional_concat", 2),
             ("lbr_gru", "bidirectional_sum", 1),
             ("augru", "unidirectional_left2right", 1),
             ("rnn_relu", "unidirectional_right2left", 2)]
_GOI = {"diff_weights_layer_desc": "ldgoi", "diff_weights_iter_desc": "ldgoi",
        "diff_weights_projection_desc": "ldoi"}


def _tag_of(name: str, tags: dict) -> str:
    return tags.get(name, FWD[name[5:]][1])


@pytest.mark.parametrize("layout", ["plain", "ldgoi"])
@pytest.mark.parametrize("cfg,direction,L", ACC_CASES)
def test_accumulate_then_overwrite(engine, stream, cfg, direction, L, layout):
    """Without diff_weights_overwrite the weight gradients are added to what the memories held
    (twice: old + 2 g); with it they are overwritten. diff_src_* (and diff_augru_attention)
    are overwritten in both modes. Memories are filled and read as raw storage packed here."""
    p = problem(cfg, direction, L)
    tags = _GOI if layout == "ldgoi" else {}
    ref = ref_gradients(p)
    fpd = fwd_pd(engine, p)
    dd = diff_descs(p, tags)
    acc = bwd_pd(engine, p, fpd, ddescs=dd, flags=None)
    ow = bwd_pd(engine, p, fpd, ddescs=dd, flags=OVERWRITE)
    assert acc.get_flags() == dnnl.rnn_flags.undef
    assert ow.get_flags() == dnnl.rnn_flags.diff_weights_overwrite
    rng = np.random.default_rng(1)
    old = {}
    outs = {}
    for n in DIFF_OUTPUTS:
        d = getattr(acc, n)()
        if d.is_zero():
            continue
        assert d == getattr(ow, n)()
        old[n] = (rng.standard_normal(d.get_dims()) * 3).astype(np.float32)
        m = dnnl.memory(d, engine)
        write_raw(m, pack(_tag_of(n, tags), old[n]))
        outs[n] = m
    expected = {"diff_weights_layer_desc", "diff_weights_iter_desc", "diff_bias_desc"}
    expected |= {"diff_weights_peephole_desc"} if p.c.peephole else set()
    expected |= {"diff_weights_projection_desc"} if p.c.projection else set()
    assert set(DIFF_WEIGHTS) & set(old) == expected

    def read(n):
        return unpack(_tag_of(n, tags), read_raw(outs[n]), dims_of(p, n))

    acc_prim, ow_prim, fprim = p.c.bwd_cls(acc), p.c.bwd_cls(ow), p.c.fwd_cls(fpd)
    for times in (1, 2):
        fargs = run_forward(engine, stream, p, fpd, fprim)
        run_backward(engine, stream, p, acc, fargs, bprim=acc_prim, outs=outs)
        for n in old:
            g = np.reshape(ref[DIFF[n][1]], old[n].shape)
            want = old[n] + times * g if n in DIFF_WEIGHTS else g
            assert_close(read(n), want, f"accumulate x{times} {n}")
    fargs = run_forward(engine, stream, p, fpd, fprim)
    run_backward(engine, stream, p, ow, fargs, bprim=ow_prim, outs=outs)
    for n in old:
        assert_close(read(n), np.reshape(ref[DIFF[n][1]], old[n].shape), f"overwrite {n}")


# --------------------------------------------------------------------------------------------
# 3. layouts
# --------------------------------------------------------------------------------------------
LAYOUT_CASES = [("lstm_peephole_projection", "bidirectional_concat", 2),
                ("gru", "unidirectional_right2left", 2),
                ("lbr_augru", "unidirectional_left2right", 1),
                ("rnn_tanh", "bidirectional_sum", 1)]


@pytest.mark.parametrize("cfg,direction,L", LAYOUT_CASES)
def test_explicit_noncanonical_diff_layouts(engine, stream, cfg, direction, L):
    """ldgoi diff_weights_layer/iter, ldoi diff_weights_projection, ntc diff_src_layer and
    diff_dst_layer: results packed as those tags say (storage written and read here)."""
    p = problem(cfg, direction, L)
    tags = dict(_GOI, diff_src_layer_desc="ntc", diff_dst_layer_desc="ntc")
    fpd = fwd_pd(engine, p)
    bpd = bwd_pd(engine, p, fpd, ddescs=diff_descs(p, tags))
    for n in ("diff_weights_layer_desc", "diff_src_layer_desc"):
        assert getattr(bpd, n)() == md(dims_of(p, n), tags[n])
    fargs = run_forward(engine, stream, p, fpd)
    a = arrays(p)
    ddl = dnnl.memory(bpd.diff_dst_layer_desc(), engine)
    write_raw(ddl, pack("ntc", a["diff_dst_layer"]))
    outs = {}
    for n in DIFF_OUTPUTS:
        d = getattr(bpd, n)()
        if not d.is_zero():
            outs[n] = dnnl.memory(d, engine, np.full(d.get_dims(), SENTINEL, np.float32))
    args = {FWD[n][0]: fargs[FWD[n][0]] for n in FWD if FWD[n][0] in fargs}
    args[dnnl.ARG_WORKSPACE] = fargs[dnnl.ARG_WORKSPACE]
    args[dnnl.ARG_DIFF_DST_LAYER] = ddl
    for n in ("diff_dst_iter_desc", "diff_dst_iter_c_desc"):
        if not getattr(bpd, n)().is_zero():
            args[DIFF[n][0]] = dnnl.memory(getattr(bpd, n)(), engine, a[DIFF[n][1]])
    for n, m in outs.items():
        args[DIFF[n][0]] = m
    p.c.bwd_cls(bpd).execute(stream, args)
    stream.wait()
    ref = ref_gradients(p)
    for n, m in outs.items():
        got = unpack(_tag_of(n, tags), read_raw(m), dims_of(p, n))
        assert_close(got, np.reshape(ref[DIFF[n][1]], got.shape), f"{cfg} {n}")


@pytest.mark.parametrize("cfg,direction,L", LAYOUT_CASES)
def test_any_diff_descs_resolve(engine, stream, cfg, direction, L):
    """format_tag.any for every desc of the backward pd: the forward descs resolve to the
    hint's, the diff descs to concrete layouts reported by the queries, which then work."""
    p = problem(cfg, direction, L)
    fpd = fwd_pd(engine, p)
    fany = {n: (None if d is None else md(d.get_dims(), tag.any))
            for n, d in fwd_descs(p).items()}
    dany = {n: (None if d is None else md(d.get_dims(), tag.any))
            for n, d in diff_descs(p).items()}
    bpd = bwd_pd(engine, p, fpd, fany, dany)
    for n, d in fany.items():
        if d is not None:
            assert getattr(bpd, n)() == getattr(fpd, n)(), n
    for n, d in dany.items():
        got = getattr(bpd, n)()
        if d is None:
            assert got.is_zero(), n
            continue
        assert not got.is_any() and not got.is_zero(), f"{n}: {got!r}"
        assert got.get_dims() == d.get_dims(), n
        assert got.get_data_type() == dnnl.memory.data_type.f32, n
        assert got.get_size() >= 4 * int(np.prod(d.get_dims())), n
        assert bpd.query_md(dnnl.query.exec_arg_md, DIFF[n][0]) == got, n
    assert bpd.workspace_desc() == fpd.workspace_desc()
    fargs = run_forward(engine, stream, p, fpd)
    got = gradients(run_backward(engine, stream, p, bpd, fargs))
    ref = ref_gradients(p)
    for name, g in got.items():
        assert_close(g, np.reshape(ref[name], g.shape), f"{cfg} any {name}")


# --------------------------------------------------------------------------------------------
# 4. optional tensors
# --------------------------------------------------------------------------------------------
_NONE_CASES = [(cfg, ddi, ddic) for cfg in ("lstm", "lstm_peephole_projection")
               for ddi, ddic in ((False, False), (True, False), (False, True))]
_NONE_CASES += [("gru", False, False), ("rnn_relu", False, False)]


@pytest.mark.parametrize("cfg,ddi,ddic", _NONE_CASES,
                         ids=[f"{c}-{'ddi' if a else 'noddi'}-{'ddic' if b else 'noddic'}"
                              for c, a, b in _NONE_CASES])
def test_absent_diff_dst_iter_means_zero(engine, stream, cfg, ddi, ddic):
    """diff_dst_iter / diff_dst_iter_c None: that output gradient is zero."""
    p = problem(cfg, "bidirectional_concat", 2)
    omit = ([] if ddi else ["diff_dst_iter_desc"]) + ([] if ddic else ["diff_dst_iter_c_desc"])
    fpd = fwd_pd(engine, p)
    bpd = bwd_pd(engine, p, fpd, ddescs=diff_descs(p, omit=omit))
    for n in omit:
        assert getattr(bpd, n)().is_zero()
    fargs = run_forward(engine, stream, p, fpd)
    got = gradients(run_backward(engine, stream, p, bpd, fargs))
    ref = ref_gradients(p, ddi=ddi, ddic=ddic)
    full = ref_gradients(p)
    assert set(got) == expected_outputs(p)
    for name, g in got.items():
        assert_close(g, np.reshape(ref[name], g.shape), f"{cfg} {name}")
    # the omitted gradient did matter: the result differs from the full problem's
    assert not np.allclose(got["diff_src_iter"], full["diff_src_iter"], rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("cfg", ["lstm", "gru", "rnn_logistic"])
def test_absent_diff_src_iter_is_not_computed(engine, stream, cfg):
    """src_iter given, diff_src_iter (and _c) None: the pd reports zero descs and takes no such
    argument; the other gradients are unchanged."""
    p = problem(cfg, "bidirectional_sum", 2)
    fpd = fwd_pd(engine, p)
    omit = ["diff_src_iter_desc", "diff_src_iter_c_desc"]
    bpd = bwd_pd(engine, p, fpd, ddescs=diff_descs(p, omit=omit))
    assert bpd.diff_src_iter_desc().is_zero() and bpd.diff_src_iter_c_desc().is_zero()
    assert bpd.query_md(dnnl.query.exec_arg_md, dnnl.ARG_DIFF_SRC_ITER).is_zero()
    fargs = run_forward(engine, stream, p, fpd)
    got = gradients(run_backward(engine, stream, p, bpd, fargs))
    assert "diff_src_iter" not in got and "diff_src_iter_c" not in got
    ref = ref_gradients(p)
    for name, g in got.items():
        assert_close(g, np.reshape(ref[name], g.shape), f"{cfg} {name}")
    # passing the memory anyway is an error naming the argument
    stray = dnnl.memory(md(dims_of(p, "src_iter_desc"), "ldnc"), engine)
    fargs = run_forward(engine, stream, p, fpd)
    with pytest.raises(dnnl.error, match="DIFF_SRC_ITER"):
        run_backward(engine, stream, p, bpd, fargs,
                     outs={"diff_src_iter_desc": stray, **{
                         n: dnnl.memory(getattr(bpd, n)(), engine)
                         for n in DIFF_OUTPUTS if not getattr(bpd, n)().is_zero()}})


@pytest.mark.parametrize("cfg", ["lstm", "lbr_gru"])
def test_diff_src_iter_without_src_iter(engine, stream, cfg):
    """src_iter None (zeros) with diff_src_iter requested: the gradient w.r.t. the zero
    initial state."""
    p = problem(cfg, "unidirectional_right2left", 2, with_iter=False)
    fpd = fwd_pd(engine, p)
    dd = diff_descs(p)
    dd["diff_src_iter_desc"] = md(dims_of(p, "src_iter_desc"), "ldnc")
    if p.c.has_c:
        dd["diff_src_iter_c_desc"] = md(dims_of(p, "src_iter_c_desc"), "ldnc")
    bpd = bwd_pd(engine, p, fpd, ddescs=dd)
    fargs = run_forward(engine, stream, p, fpd)
    got = gradients(run_backward(engine, stream, p, bpd, fargs))
    ref = ref_gradients(p)
    assert "diff_src_iter" in got
    for name, g in got.items():
        assert_close(g, np.reshape(ref[name], g.shape), f"{cfg} {name}")


# --------------------------------------------------------------------------------------------
# 5. construction
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cfg", ["rnn_relu", "lstm_peephole_projection", "lbr_augru"])
def test_keyword_construction_equals_positional(engine, stream, cfg):
    p = problem(cfg, "unidirectional_left2right", 1)
    fpd = fwd_pd(engine, p)
    kw = bwd_pd(engine, p, fpd, mode="keyword")
    assert isinstance(kw, p.c.bwd_cls.primitive_desc)
    assert kw.get_prop_kind() == dnnl.prop_kind.backward
    assert kw.get_direction() == dnnl.rnn_direction.unidirectional_left2right
    fargs = run_forward(engine, stream, p, fpd)
    got = gradients(run_backward(engine, stream, p, kw, fargs))
    want = primitive_gradients(engine, stream, p)
    assert set(got) == set(want)
    for name in got:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_vanilla_alpha_positional(engine, stream):
    """vanilla_rnn_backward takes (..., hint_fwd_pd, attr, alpha, beta) positionally; the
    ReLU slope alpha = 0.1 reaches the backward (negative pre-activations occur here)."""
    p = problem("rnn_relu", "bidirectional_concat", 2)
    c = p.c
    fpd = fwd_pd(engine, p)
    alld = {**fwd_descs(p), **diff_descs(p)}
    from rnn_bwd_helpers import bwd_signature
    bpd = c.bwd_cls.primitive_desc(engine, dnnl.prop_kind.backward, dnnl.algorithm.eltwise_relu,
                                   dnnl.rnn_direction.bidirectional_concat,
                                   *[alld[n] for n in bwd_signature(c)], fpd, None, 0.1, 0.0,
                                   flags=OVERWRITE)
    fargs = run_forward(engine, stream, p, fpd)
    got = gradients(run_backward(engine, stream, p, bpd, fargs))
    ref = ref_gradients(p)
    for name, g in got.items():
        assert_close(g, np.reshape(ref[name], g.shape), name)


@pytest.mark.parametrize("cfg", ["lstm_peephole_projection", "rnn_tanh"])
def test_single_step_sic_differs_from_dic(engine, stream, cfg):
    """T = 1 lifts SIC = DIC: the src_iter gradient has SIC columns."""
    p = problem(cfg, "bidirectional_concat", 1, T=1, SIC=2)
    fpd = fwd_pd(engine, p)
    bpd = bwd_pd(engine, p, fpd)
    fargs = run_forward(engine, stream, p, fpd)
    got = gradients(run_backward(engine, stream, p, bpd, fargs))
    ref = ref_gradients(p)
    assert got["diff_src_iter"].shape == (1, 2, 2, 2)
    for name, g in got.items():
        assert_close(g, np.reshape(ref[name], g.shape), f"{cfg} {name}")
    assert not fd_check(p, got)


def test_backward_pd_queries(engine):
    p = problem("lstm_peephole_projection", "bidirectional_concat", 2)
    fpd = fwd_pd(engine, p)
    bpd = bwd_pd(engine, p, fpd)
    assert bpd.get_prop_kind() == dnnl.prop_kind.backward
    assert bpd.get_cell_kind() == dnnl.algorithm.vanilla_lstm
    assert bpd.get_direction() == dnnl.rnn_direction.bidirectional_concat
    assert bpd.workspace_desc() == fpd.workspace_desc()
    assert bpd.query_md(dnnl.query.exec_arg_md, dnnl.ARG_WORKSPACE) == fpd.workspace_desc()
    for n, (arg, _) in DIFF.items():
        assert bpd.query_md(dnnl.query.exec_arg_md, arg) == getattr(bpd, n)(), n
        if n == "diff_attention_desc":
            assert getattr(bpd, n)().is_zero()
        else:
            assert getattr(bpd, n)() == md(dims_of(p, n), FWD[n[5:]][1]), n
    assert bpd.diff_src_desc(0) == bpd.diff_src_layer_desc()
    assert bpd.diff_weights_desc(0) == bpd.diff_weights_layer_desc()
    assert bpd.diff_dst_desc(0) == bpd.diff_dst_layer_desc()


# --------------------------------------------------------------------------------------------
# 6. the CPU weight-gradient path through transposed and packed scratch copies
# --------------------------------------------------------------------------------------------
COPIES_CASES = [("lstm", "bidirectional_concat"),
                ("lstm_peephole_projection", "unidirectional_left2right"),
                ("lbr_gru", "unidirectional_right2left")]


@pytest.mark.parametrize("cfg,direction", COPIES_CASES)
def test_weight_gradient_copies_match_reference(engine, stream, monkeypatch, cfg, direction):
    """CPUs copy A transposed and B packed before the weight-gradient GEMMs once B outgrows
    the cache (``heuristics.rnn.weight_gradient_copies``); the tiny problems here never do, so
    the rule is forced on and the gradients still match the reference."""
    from pydnnl.runtime.heuristics import rnn as rnn_rules

    if not engine.info.is_cpu:
        pytest.skip("the copies are a CPU path")
    calls = []

    def always(info, k, n, itemsize=4):
        calls.append((k, n))
        return info.is_cpu

    monkeypatch.setattr(rnn_rules, "weight_gradient_copies", always)
    p = problem(cfg, direction, 2)
    fpd = fwd_pd(engine, p)
    fargs = run_forward(engine, stream, p, fpd)
    bpd = bwd_pd(engine, p, fpd)
    got = gradients(run_backward(engine, stream, p, bpd, fargs))
    assert calls, "the backward plan never asked the copies rule"
    ref = ref_gradients(p)
    for name, g in got.items():
        assert_close(g, np.reshape(ref[name], g.shape), f"{cfg} {direction} copies {name}")


@pytest.mark.parametrize("cfg,direction", [("lstm", "unidirectional_left2right"),
                                           ("lbr_gru", "bidirectional_concat")])
def test_first_step_weight_gradient_follows_its_siblings_copies(engine, stream, monkeypatch,
                                                                 cfg, direction):
    """The recurrent weights' first-step term (h0, k = N rows) takes the copies path of the
    steps after it (k = (T-1) * N) where only those pass the rule, with their GEMM's tile, so
    it adds no GEMM program of its own; the gradients match the reference."""
    from pydnnl.runtime import gemm as runtime_gemm
    from pydnnl.runtime.heuristics import rnn as rnn_rules

    if not engine.info.is_cpu:
        pytest.skip("the copies are a CPU path")
    p = problem(cfg, direction)

    def longer_than_n(info, k, n, itemsize=4):
        return info.is_cpu and k > p.N

    monkeypatch.setattr(rnn_rules, "weight_gradient_copies", longer_than_n)
    asked = []
    real = runtime_gemm.get_gemm

    def spy(eng, shape, *a, **kw):
        asked.append((shape.k, shape.trans_a, kw.get("params")))
        return real(eng, shape, *a, **kw)

    import pydnnl.primitives.rnn.plan_backward as PB
    monkeypatch.setattr(PB, "get_gemm", spy)
    fpd = fwd_pd(engine, p)
    fargs = run_forward(engine, stream, p, fpd)
    bpd = bwd_pd(engine, p, fpd)
    got = gradients(run_backward(engine, stream, p, bpd, fargs))
    # the h0 term (k = N) was copied (A no longer transposed) and given its sibling's tile
    h0 = [a for a in asked if a[0] == p.N and not a[1]]
    assert h0 and all(params is not None for _, _, params in h0)
    ref = ref_gradients(p)
    for name, g in got.items():
        assert_close(g, np.reshape(ref[name], g.shape), f"{cfg} {direction} h0 copies {name}")
