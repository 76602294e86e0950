"""Bad inputs to the RNN forward primitives: every one raises a ``pydnnl.error`` subclass whose
message names the argument or dims involved; execute-time errors are raised before anything
is written to an output."""
from __future__ import annotations

import pathlib
import sys
from dataclasses import replace

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from rnn_helpers import (  # noqa: E402
    CONFIGS,
    DESCS,
    F32,
    all_engines,
    dims_of,
    dt,
    head,
    input_memories,
    make_descs,
    make_pd,
    problem,
    signature,
    tag,
)

import pydnnl as dnnl  # noqa: E402

FWD_INF = "forward_inference"


def md(dims, t=None, d=F32, allow_empty=False):
    if t is None:
        t = {3: "abc", 4: "abcd", 5: "abcde"}.get(len(dims), tag.any)
    return dnnl.memory.desc(list(dims), d, t, allow_empty=allow_empty)


def raises(engine, p, descs, *fragments, prop=FWD_INF, mode="positional", exc=dnnl.error):
    """Construct the pd; assert it raises ``exc`` with every fragment in its message."""
    with pytest.raises(exc) as e:
        make_pd(engine, p, prop, descs, mode=mode)
    msg = str(e.value)
    assert isinstance(e.value, dnnl.error)
    for f in fragments:
        assert f in msg, f"{f!r} not in {msg!r}"
    return msg


def test_baseline_problems_construct(cpu_engine):
    """The problems mutated below are valid as they are (so each error is the mutation's)."""
    for cfg in CONFIGS:
        for L in (1, 3):
            p = problem(cfg, "unidirectional_left2right", L)
            if CONFIGS[cfg].augru and L > 1:
                continue
            make_pd(cpu_engine, p, FWD_INF, make_descs(p))
            make_pd(cpu_engine, p, FWD_INF, make_descs(p), mode="keyword")


# --------------------------------------------------------------------------------------------
# shapes
# --------------------------------------------------------------------------------------------
_RANK_CASES = [("lstm_peephole_projection", n) for n in DESCS if n != "attention_desc"] + \
    [("augru", "attention_desc")]


@pytest.mark.parametrize("cfg,name", _RANK_CASES)
@pytest.mark.parametrize("delta", [-1, 1])
def test_wrong_rank(cpu_engine, cfg, name, delta):
    p = problem(cfg)
    descs = make_descs(p)
    if descs[name] is None:
        pytest.fail(f"{name} should be present in {cfg}")
    dims = dims_of(p, name)
    dims = dims[:-1] if delta < 0 else dims + [1]
    if name == "attention_desc" and delta < 0:
        dims = [2]  # [T, N] is accepted as well as [T, N, 1]; a rank-1 one is not
    descs[name] = md(dims, tag.any)
    raises(cpu_engine, p, descs, name, str(dims))


def test_slc_mismatch(cpu_engine):
    p = problem("lstm")
    d = make_descs(p)
    d["src_layer_desc"] = md([p.T, p.N, p.SLC + 2])
    raises(cpu_engine, p, d, "weights_layer_desc", "src_layer_desc", str(p.SLC), str(p.SLC + 2))


def test_dhc_mismatch_between_weights_and_bias(cpu_engine):
    p = problem("gru")
    d = make_descs(p)
    d["bias_desc"] = md([1, 1, 3, p.DHC + 1])
    raises(cpu_engine, p, d, "bias_desc", str([1, 1, 3, p.DHC + 1]), str([1, 1, 3, p.DHC]))


def test_dhc_mismatch_between_weights_layer_and_iter(cpu_engine):
    p = problem("lstm")
    d = make_descs(p)
    d["weights_iter_desc"] = md([1, 1, p.SIC, 4, p.DHC + 1])
    raises(cpu_engine, p, d, "weights_iter_desc", "weights_layer_desc", "DHC")


@pytest.mark.parametrize("direction,dlc", [("bidirectional_concat", 6), ("bidirectional_sum", 12),
                                           ("unidirectional_left2right", 5)])
def test_dlc_not_multiplier_times_dic(cpu_engine, direction, dlc):
    p = problem("rnn_tanh", direction)
    d = make_descs(p)
    d["dst_layer_desc"] = md([p.T, p.N, dlc])
    raises(cpu_engine, p, d, "DLC", str(dlc), f"DIC = {p.DLC}", direction)


def test_dlc_with_projection_uses_dic(cpu_engine):
    """With a projection DLC must be DIC (4), not DHC (6)."""
    p = problem("lstm_projection")
    d = make_descs(p)
    d["dst_layer_desc"] = md([p.T, p.N, p.DHC])
    raises(cpu_engine, p, d, "DLC = 6", "DIC = 4")


@pytest.mark.parametrize("cfg", ["rnn_relu", "lstm_projection", "gru"])
def test_stack_with_slc_different_from_dic(cpu_engine, cfg):
    p = problem(cfg, "unidirectional_left2right", 3, SLC=5)
    raises(cpu_engine, p, make_descs(p), "L = 3", "SLC (5)", f"DIC ({p.DIC})")


@pytest.mark.parametrize("cfg", ["rnn_tanh", "lstm", "lstm_projection"])
def test_sequence_with_sic_different_from_dic(cpu_engine, cfg):
    p = problem(cfg, SIC=3)
    assert p.T > 1
    raises(cpu_engine, p, make_descs(p), f"T = {p.T}", "SIC (3)", f"DIC ({p.DIC})")


@pytest.mark.parametrize("cfg", ["gru", "lbr_gru", "augru", "lbr_augru"])
def test_gru_kinds_need_sic_equal_dhc(cpu_engine, cfg):
    p = problem(cfg, T=1, SIC=3)  # T = 1: only the GRU rule applies
    raises(cpu_engine, p, make_descs(p), CONFIGS[cfg].cell, "SIC (3)", "DHC (6)")


@pytest.mark.parametrize("name,bad", [
    ("src_iter_desc", [1, 1, 3, 6]), ("src_iter_c_desc", [1, 1, 2, 5]),
    ("dst_iter_desc", [1, 2, 2, 6]), ("dst_iter_c_desc", [1, 1, 2, 7]),
    ("weights_peephole_desc", [1, 1, 4, 6]), ("weights_projection_desc", [1, 1, 5, 4]),
    ("dst_layer_desc", [4, 2, 6])])
def test_state_and_optional_dims(cpu_engine, name, bad):
    cfg = "lstm_peephole_projection" if name.startswith("weights_") else "lstm"
    p = problem(cfg)
    d = make_descs(p)
    d[name] = md(bad)
    raises(cpu_engine, p, d, name, str(bad))


def test_attention_dims(cpu_engine):
    p = problem("augru")
    d = make_descs(p)
    d["attention_desc"] = md([p.T, p.N, 2])
    raises(cpu_engine, p, d, "attention_desc", str([p.T, p.N, 2]))


@pytest.mark.parametrize("direction,D", [("bidirectional_concat", 1),
                                         ("unidirectional_right2left", 2)])
def test_directions_count_against_direction(cpu_engine, direction, D):
    p = problem("lstm", direction)
    bad = replace(p, direction="bidirectional_concat" if D == 2 else "unidirectional_left2right")
    d = make_descs(bad)  # weights etc. with the other D
    d["dst_layer_desc"] = md([p.T, p.N, p.DLC])
    raises(cpu_engine, p, d, direction, f"D = {3 - D}", f"D = {D}")


@pytest.mark.parametrize("cfg,G", [("lstm", 3), ("gru", 4), ("rnn_tanh", 4), ("lbr_gru", 4)])
def test_wrong_gate_count(cpu_engine, cfg, G):
    p = problem(cfg)
    d = make_descs(p)
    for n in ("weights_layer_desc", "weights_iter_desc"):
        dims = dims_of(p, n)
        dims[3] = G
        d[n] = md(dims)
    raises(cpu_engine, p, d, f"{CONFIGS[cfg].gates} gates", f"G = {G}")


@pytest.mark.parametrize("cfg,Gb", [("lbr_gru", 3), ("gru", 4), ("lstm", 5), ("lbr_augru", 3)])
def test_wrong_bias_gate_count(cpu_engine, cfg, Gb):
    p = problem(cfg)
    d = make_descs(p)
    d["bias_desc"] = md([1, 1, Gb, p.DHC])
    raises(cpu_engine, p, d, "bias_desc", str([1, 1, CONFIGS[cfg].bias_gates, p.DHC]),
           str([1, 1, Gb, p.DHC]))


@pytest.mark.parametrize("what", ["T", "N", "SLC", "DHC", "L", "DIC"])
def test_non_positive_sizes(cpu_engine, what):
    """A desc with a 0 dim needs allow_empty=True even to exist; the pd refuses it."""
    with pytest.raises(dnnl.invalid_arguments, match="allow_empty"):
        dnnl.memory.desc([0, 2, 5], F32, tag.tnc)
    proj = what == "DIC"
    s = dict(T=1 if proj else 3, N=2, SLC=5, DHC=6, L=1, SIC=6)
    if not proj:
        s[what] = 0
    T, N, SLC, DHC, L, SIC = (s[k] for k in ("T", "N", "SLC", "DHC", "L", "SIC"))
    DIC = 0 if proj else DHC  # T = 1 with the projection: SIC != DIC is allowed
    e = dict(allow_empty=True)
    d = {
        "src_layer_desc": md([T, N, SLC], **e),
        "weights_layer_desc": md([L, 1, SLC, 4, DHC], **e),
        "weights_iter_desc": md([L, 1, SIC, 4, DHC], **e),
        "weights_projection_desc": md([L, 1, DHC, DIC], **e) if proj else None,
        "bias_desc": md([L, 1, 4, DHC], **e),
        "dst_layer_desc": md([T, N, DIC], **e),
    }
    p = problem("lstm_projection" if proj else "lstm")
    raises(cpu_engine, p, d, what, "positive", exc=dnnl.invalid_arguments)


@pytest.mark.parametrize("name", ["bias_desc", "src_layer_desc", "weights_layer_desc",
                                  "weights_iter_desc", "dst_layer_desc"])
@pytest.mark.parametrize("zero", [None, "zero_desc"])
def test_required_desc_missing(cpu_engine, name, zero):
    """Bias is required in oneDNN's RNN (so are src_layer, the weights and dst_layer)."""
    p = problem("lbr_gru")
    d = make_descs(p)
    d[name] = None if zero is None else dnnl.memory.desc()
    raises(cpu_engine, p, d, name, "required", exc=dnnl.invalid_arguments)


# --------------------------------------------------------------------------------------------
# data types
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,bad", [("weights_layer_desc", dt.f16),
                                      ("weights_iter_desc", dt.bf16),
                                      ("bias_desc", dt.f16), ("dst_layer_desc", dt.f16),
                                      ("src_iter_c_desc", dt.bf16),
                                      ("weights_peephole_desc", dt.s8)])
def test_data_type_mix_with_f32_src(cpu_engine, name, bad):
    p = problem("lstm_peephole")
    d = make_descs(p)
    d[name] = md(dims_of(p, name), DESCS[name][1], bad)
    raises(cpu_engine, p, d, name, bad.name, "src_layer_desc", "f32")


@pytest.mark.parametrize("bad", [dt.s8, dt.u8, dt.f64, dt.s32])
def test_unsupported_src_data_type(cpu_engine, bad):
    p = problem("gru")
    d = make_descs(p)
    for n in ("src_layer_desc", "weights_layer_desc", "weights_iter_desc", "dst_layer_desc"):
        d[n] = md(dims_of(p, n), DESCS[n][1], bad)
    raises(cpu_engine, p, d, "src_layer_desc", bad.name, exc=dnnl.unimplemented)


def test_bf16_projection_unimplemented(cpu_engine):
    p = problem("lstm_projection")
    d = make_descs(p)
    for n, v in d.items():
        if v is not None and n not in ("bias_desc", "src_iter_c_desc", "dst_iter_c_desc"):
            d[n] = md(dims_of(p, n), DESCS[n][1], dt.bf16)
    raises(cpu_engine, p, d, "projection", "bf16", exc=dnnl.unimplemented)


# --------------------------------------------------------------------------------------------
# cell-specific rules
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cfg", ["augru", "lbr_augru"])
def test_augru_two_layers(cpu_engine, cfg):
    p = problem(cfg, "unidirectional_left2right", 2)
    raises(cpu_engine, p, make_descs(p), CONFIGS[cfg].cell, "L = 2",
           exc=dnnl.invalid_arguments)


@pytest.mark.parametrize("direction", ["unidirectional_right2left", "bidirectional_concat",
                                       "bidirectional_sum"])
def test_augru_direction(cpu_engine, direction):
    p = problem("augru", direction)
    raises(cpu_engine, p, make_descs(p), "unidirectional_left2right", direction,
           exc=dnnl.invalid_arguments)


@pytest.mark.parametrize("mode", ["positional", "keyword"])
@pytest.mark.parametrize("cfg", ["augru", "lbr_augru"])
def test_augru_missing_attention(cpu_engine, cfg, mode):
    p = problem(cfg)
    d = make_descs(p)
    d["attention_desc"] = None
    raises(cpu_engine, p, d, "attention_desc", mode=mode, exc=dnnl.invalid_arguments)


@pytest.mark.parametrize("cfg,name", [
    ("gru", "weights_peephole_desc"), ("lbr_gru", "weights_projection_desc"),
    ("rnn_tanh", "weights_peephole_desc"), ("gru", "src_iter_c_desc"),
    ("rnn_relu", "dst_iter_c_desc"), ("lstm", "attention_desc"),
    ("augru", "weights_peephole_desc")])
def test_descs_a_cell_does_not_take(cpu_engine, cfg, name):
    p = problem(cfg)
    d = make_descs(p)
    ref = problem("lstm_peephole_projection") if name != "attention_desc" else problem("augru")
    d[name] = make_descs(ref)[name]
    raises(cpu_engine, p, d, name, mode="keyword", exc=dnnl.invalid_arguments)


# --------------------------------------------------------------------------------------------
# the head: prop_kind, direction, activation, engine
# --------------------------------------------------------------------------------------------
def _construct(cls, *args, **kw):
    with pytest.raises(dnnl.error) as e:
        cls.primitive_desc(*args, **kw)
    return str(e.value)


def _gru_tail():
    p = problem("gru")
    d = make_descs(p)
    return [d[n] for n in signature(p)]


@pytest.mark.parametrize("prop", [dnnl.prop_kind.backward, dnnl.prop_kind.backward_data,
                                  dnnl.prop_kind.backward_weights, dnnl.prop_kind.undef, 77])
def test_bad_prop_kind(cpu_engine, prop):
    msg = _construct(dnnl.gru_forward, cpu_engine, prop,
                     dnnl.rnn_direction.unidirectional_left2right, *_gru_tail())
    assert "prop_kind" in msg
    assert (prop.name if isinstance(prop, dnnl.prop_kind) else str(prop)) in msg


@pytest.mark.parametrize("direction", [dnnl.rnn_direction.undef, 9, "sideways"])
def test_bad_direction(cpu_engine, direction):
    msg = _construct(dnnl.gru_forward, cpu_engine, dnnl.prop_kind.forward_inference, direction,
                     *_gru_tail())
    assert "direction" in msg


@pytest.mark.parametrize("act", [dnnl.algorithm.eltwise_elu, dnnl.algorithm.vanilla_rnn,
                                 dnnl.algorithm.undef, "relu", 12345])
def test_bad_activation(cpu_engine, act):
    p = problem("rnn_tanh")
    d = make_descs(p)
    msg = _construct(dnnl.vanilla_rnn_forward, cpu_engine, dnnl.prop_kind.forward_inference, act,
                     dnnl.rnn_direction.unidirectional_left2right, *[d[n] for n in signature(p)])
    assert "activation" in msg and "eltwise_relu" in msg


def test_bad_engine_and_attr(cpu_engine):
    msg = _construct(dnnl.gru_forward, "cpu", dnnl.prop_kind.forward_inference,
                     dnnl.rnn_direction.unidirectional_left2right, *_gru_tail())
    assert "engine" in msg
    msg = _construct(dnnl.gru_forward, cpu_engine, dnnl.prop_kind.forward_inference,
                     dnnl.rnn_direction.unidirectional_left2right, *_gru_tail(), attr=3)
    assert "attr" in msg


def test_missing_head_argument(cpu_engine):
    msg = _construct(dnnl.gru_forward, aengine=cpu_engine,
                     aprop_kind=dnnl.prop_kind.forward_inference)
    assert "direction" in msg


def test_desc_of_wrong_type(cpu_engine):
    tail = _gru_tail()
    tail[2] = np.zeros((1, 1, 5, 3, 6), np.float32)
    msg = _construct(dnnl.gru_forward, cpu_engine, dnnl.prop_kind.forward_inference,
                     dnnl.rnn_direction.unidirectional_left2right, *tail)
    assert "weights_layer_desc" in msg and "memory.desc" in msg


# --------------------------------------------------------------------------------------------
# argument binding
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cfg,n", [("gru", 6), ("gru", 8), ("lstm", 8), ("lstm", 12),
                                   ("augru", 7), ("rnn_relu", 9)])
def test_wrong_number_of_positional_descs(cpu_engine, cfg, n):
    p = problem(cfg)
    d = make_descs(p)
    full = [d[k] for k in signature(p)]
    tail = (full + full)[:n]
    args = head(cpu_engine, p, FWD_INF)
    msg = _construct(p.c.prim, *args, *tail)
    assert f"got {n}" in msg and "memory descs" in msg


@pytest.mark.parametrize("cfg", ["gru", "lstm_peephole", "rnn_logistic", "augru"])
def test_desc_both_positional_and_keyword(cpu_engine, cfg):
    p = problem(cfg)
    d = make_descs(p)
    pos = [d[k] for k in signature(p)]
    args = head(cpu_engine, p, FWD_INF)
    extra = {"alpha": 0.0} if p.c.act else {}
    msg = _construct(p.c.prim, *args, *pos, bias_desc=d["bias_desc"], **extra)
    assert "bias_desc" in msg and "twice" in msg
    msg = _construct(p.c.prim, *args, *pos, aengine=cpu_engine, **extra)
    assert "engine" in msg and "twice" in msg


@pytest.mark.parametrize("kw", ["weights_desc", "src_desc", "foo", "dst_desc"])
def test_unknown_keyword(cpu_engine, kw):
    p = problem("lbr_gru")
    d = make_descs(p)
    msg = _construct(p.c.prim, *head(cpu_engine, p, FWD_INF), *[d[k] for k in signature(p)],
                     **{kw: d["bias_desc"]})
    assert kw in msg and "unknown" in msg


# --------------------------------------------------------------------------------------------
# execute-time errors: raised before anything is written
# --------------------------------------------------------------------------------------------
SENTINEL = np.float32(4242.0)
EXEC_P = problem("lstm_peephole_projection", "bidirectional_concat", 1)


@pytest.fixture(scope="module")
def exec_setup(engine):
    """A training LSTMP pd and its primitive (the shapes of the forward tests: cached kernels)."""
    p = EXEC_P
    pd = make_pd(engine, p, "forward_training", make_descs(p))
    return pd, p.c.prim(pd)


def _valid_args(engine, pd):
    args = input_memories(engine, EXEC_P, pd)
    outs = {}
    for name, arg in (("dst_layer_desc", dnnl.ARG_DST_LAYER), ("dst_iter_desc", dnnl.ARG_DST_ITER),
                      ("dst_iter_c_desc", dnnl.ARG_DST_ITER_C)):
        m = dnnl.memory(getattr(pd, name)(), engine)
        m.write(np.full(m.get_desc().get_dims(), SENTINEL, np.float32))
        outs[arg] = args[arg] = m
    ws = dnnl.memory(pd.workspace_desc(), engine)
    args[dnnl.ARG_WORKSPACE] = ws
    return args, outs


def _assert_untouched(stream, outs):
    stream.wait()
    for arg, m in outs.items():
        assert np.all(m.to_numpy() == SENTINEL), f"{dnnl.arg_name(arg)} was written"


def _exec_raises(stream, prim, args, outs, *fragments, s=None):
    with pytest.raises(dnnl.invalid_arguments) as e:
        prim.execute(s or stream, args)
    for f in fragments:
        assert f in str(e.value), f"{f!r} not in {str(e.value)!r}"
    _assert_untouched(stream, outs)


def test_valid_execution_overwrites_sentinel(engine, stream, exec_setup):
    """The control of the tests below: the same arguments, valid, are all written."""
    pd, prim = exec_setup
    args, outs = _valid_args(engine, pd)
    prim.execute(stream, args)
    stream.wait()
    for arg, m in outs.items():
        assert not np.any(m.to_numpy() == SENTINEL), dnnl.arg_name(arg)
        assert np.all(np.isfinite(m.to_numpy()))


@pytest.mark.parametrize("arg", [dnnl.ARG_WORKSPACE, dnnl.ARG_WEIGHTS_LAYER, dnnl.ARG_BIAS,
                                 dnnl.ARG_WEIGHTS_PROJECTION, dnnl.ARG_DST_LAYER,
                                 dnnl.ARG_SRC_ITER_C])
def test_missing_argument(engine, stream, exec_setup, arg):
    pd, prim = exec_setup
    args, outs = _valid_args(engine, pd)
    del args[arg]
    _exec_raises(stream, prim, args, {k: v for k, v in outs.items() if k != arg},
                 "missing", dnnl.arg_name(arg))


@pytest.mark.parametrize("arg,bad", [
    (dnnl.ARG_SRC_LAYER, ("src_layer_desc", "ntc")),
    (dnnl.ARG_WEIGHTS_ITER, ("weights_iter_desc", "ldgoi")),
    (dnnl.ARG_DST_ITER, ("dst_iter_desc", "abdc")),
    (dnnl.ARG_BIAS, None), (dnnl.ARG_WORKSPACE, None)])
def test_memory_with_another_desc(engine, stream, exec_setup, arg, bad):
    pd, prim = exec_setup
    args, outs = _valid_args(engine, pd)
    if bad is not None:  # same dims, another layout
        name, t = bad
        other = dnnl.memory.desc(dims_of(EXEC_P, name), F32, t)
    elif arg == dnnl.ARG_BIAS:  # other dims
        other = dnnl.memory.desc([1, 2, 4, 7], F32, tag.ldgo)
    else:  # a workspace of another size
        other = dnnl.memory.desc([pd.workspace_desc().get_size() // 2], dt.u8, "a")
    args[arg] = dnnl.memory(other, engine)
    _exec_raises(stream, prim, args, {k: v for k, v in outs.items() if k != arg},
                 dnnl.arg_name(arg), "desc")


@pytest.mark.parametrize("arg", [dnnl.ARG_DIFF_SRC_LAYER, dnnl.ARG_AUGRU_ATTENTION, 4242])
def test_unknown_argument(engine, stream, exec_setup, arg):
    pd, prim = exec_setup
    args, outs = _valid_args(engine, pd)
    args[arg] = args[dnnl.ARG_BIAS]
    _exec_raises(stream, prim, args, outs, "unexpected", dnnl.arg_name(arg))


def test_workspace_given_to_inference(engine, stream):
    p = EXEC_P
    pd = make_pd(engine, p, "forward_inference", make_descs(p))
    assert pd.workspace_desc().is_zero()
    args, outs = _valid_args(engine, make_pd(engine, p, "forward_training", make_descs(p)))
    _exec_raises(stream, p.c.prim(pd), args, outs, "unexpected", "ARG_WORKSPACE")


def test_not_a_memory(engine, stream, exec_setup):
    pd, prim = exec_setup
    args, outs = _valid_args(engine, pd)
    args[dnnl.ARG_SRC_LAYER] = np.zeros(dims_of(EXEC_P, "src_layer_desc"), np.float32)
    _exec_raises(stream, prim, args, outs, dnnl.arg_name(dnnl.ARG_SRC_LAYER), "memory")
    with pytest.raises(dnnl.invalid_arguments, match="dict"):
        prim.execute(stream, list(args.items()))
    _assert_untouched(stream, outs)


def _other_engine(engine):
    others = [e for e in all_engines() if e != engine]
    if not others:
        pytest.skip("only one device present: no other engine to take memory from")
    return others[0]


@pytest.mark.parametrize("arg", [dnnl.ARG_WEIGHTS_LAYER, dnnl.ARG_DST_ITER_C, dnnl.ARG_WORKSPACE])
def test_memory_from_another_engine(engine, stream, exec_setup, arg):
    other = _other_engine(engine)
    pd, prim = exec_setup
    args, outs = _valid_args(engine, pd)
    foreign = dnnl.memory(args[arg].get_desc(), other)
    if arg == dnnl.ARG_DST_ITER_C:
        foreign.write(np.full(foreign.get_desc().get_dims(), SENTINEL, np.float32))
        outs[arg] = foreign
    args[arg] = foreign
    _exec_raises(stream, prim, args, outs, dnnl.arg_name(arg), "lives on")


def test_stream_of_another_engine(engine, stream, exec_setup):
    other = _other_engine(engine)
    pd, prim = exec_setup
    args, outs = _valid_args(engine, pd)
    _exec_raises(stream, prim, args, outs, "stream", s=dnnl.stream(other))
