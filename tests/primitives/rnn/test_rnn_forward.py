"""RNN forward primitives against the float64 numpy reference (``rnn_forward``), on every
device present: every cell kind x direction x {1, 3} layers x {with, without} initial states x
{inference, training}; layout negotiation (``any``), explicit non-canonical layouts, keyword
construction, the LSTM overloads and the optional tensors.
"""
from __future__ import annotations

import pathlib
import sys
from dataclasses import replace

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from rnn_helpers import (  # noqa: E402
    ARRAY_OF,
    AUGRU,
    CONFIGS,
    DESCS,
    DIRECTIONS,
    F32,
    INPUTS,
    NON_AUGRU,
    OUTPUTS,
    PROPS,
    arrays,
    check_outputs,
    dims_of,
    execute,
    input_memories,
    make_descs,
    make_pd,
    present,
    problem,
    reference,
    signature,
    tag,
)

import pydnnl as dnnl  # noqa: E402
from pydnnl.reference.rnn import rnn_forward  # noqa: E402


def _check_workspace(pd, prop: str) -> None:
    ws = pd.workspace_desc()
    assert ws == pd.query_md(dnnl.query.workspace_md)
    assert ws == pd.query_md(dnnl.query.exec_arg_md, dnnl.ARG_WORKSPACE)
    if prop == "forward_training":
        assert not ws.is_zero() and ws.get_size() > 0, f"training needs a workspace, got {ws!r}"
    else:
        assert ws.is_zero() and ws.get_size() == 0, f"inference has no workspace, got {ws!r}"


# --------------------------------------------------------------------------------------------
# 1. the whole matrix against the reference
# --------------------------------------------------------------------------------------------
@pytest.mark.sampled(every=3)
@pytest.mark.parametrize("prop", PROPS)
@pytest.mark.parametrize("with_iter", [True, False], ids=["iter", "noiter"])
@pytest.mark.parametrize("L", [1, 3], ids=["L1", "L3"])
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("cfg", NON_AUGRU)
def test_forward_matches_reference(engine, stream, cfg, direction, L, with_iter, prop):
    p = problem(cfg, direction, L, with_iter=with_iter)
    pd = make_pd(engine, p, prop, make_descs(p))
    _check_workspace(pd, prop)
    check_outputs(p, execute(engine, stream, p, pd), what=f"{cfg} {direction} L{L}")


@pytest.mark.parametrize("prop", PROPS)
@pytest.mark.parametrize("with_iter", [True, False], ids=["iter", "noiter"])
@pytest.mark.parametrize("cfg", AUGRU)
def test_augru_matches_reference(engine, stream, cfg, with_iter, prop):
    """oneDNN allows AUGRU only with one layer, left to right."""
    p = problem(cfg, "unidirectional_left2right", 1, with_iter=with_iter)
    pd = make_pd(engine, p, prop, make_descs(p))
    _check_workspace(pd, prop)
    check_outputs(p, execute(engine, stream, p, pd), what=cfg)


@pytest.mark.parametrize("direction,L", [(d, 1) for d in DIRECTIONS[1:]]
                         + [("unidirectional_left2right", 3), ("bidirectional_concat", 3)])
@pytest.mark.parametrize("cfg", AUGRU)
def test_augru_other_combinations_rejected(engine, cfg, direction, L):
    p = problem(cfg, direction, L)
    with pytest.raises(dnnl.invalid_arguments) as e:
        make_pd(engine, p, "forward_inference", make_descs(p))
    msg = str(e.value)
    assert CONFIGS[cfg].cell in msg
    assert (f"L = {L}" in msg) if direction == "unidirectional_left2right" else (direction in msg)


@pytest.mark.parametrize("L", [1, 3], ids=["L1", "L3"])
@pytest.mark.parametrize("cfg", ["rnn_tanh", "lstm", "lstm_peephole_projection"])
def test_single_step_with_sic_different_from_dic(engine, stream, cfg, L):
    """T = 1 lifts oneDNN's SIC = DIC rule (only GRU kinds need SIC = DHC)."""
    p = problem(cfg, "bidirectional_concat", L, T=1, SIC=3)
    pd = make_pd(engine, p, "forward_training", make_descs(p))
    check_outputs(p, execute(engine, stream, p, pd), what=cfg)


def test_re_execution_with_new_data(engine, stream):
    """A primitive executed again on other data gives the new results (bidirectional_sum
    accumulates into dst_layer: nothing from the first call may leak into the second)."""
    p1 = problem("lbr_gru", "bidirectional_sum", 3)
    p2 = replace(p1, seed=1)
    pd = make_pd(engine, p1, "forward_inference", make_descs(p1))
    prim = dnnl.lbr_gru_forward(pd)
    for p in (p1, p2, p1):
        check_outputs(p, execute(engine, stream, p, pd, prim=prim))
    assert not np.allclose(reference(p1)["dst_layer"], reference(p2)["dst_layer"])


def test_pd_queries(engine):
    p = problem("rnn_relu", "bidirectional_sum", 1)
    pd = make_pd(engine, p, "forward_training", make_descs(p))
    assert pd.get_cell_kind() == dnnl.algorithm.vanilla_rnn
    assert pd.get_direction() == dnnl.rnn_direction.bidirectional_sum
    assert pd.get_prop_kind() == dnnl.prop_kind.forward_training
    assert pd.get_activation_kind() == dnnl.algorithm.eltwise_relu
    assert pd.get_alpha() == pytest.approx(0.1)
    assert pd.get_engine() == engine
    p = problem("lbr_gru", "unidirectional_right2left", 1)
    pd = make_pd(engine, p, "forward_inference", make_descs(p))
    assert pd.get_cell_kind() == dnnl.algorithm.lbr_gru
    assert pd.get_direction() == dnnl.rnn_direction.unidirectional_right2left


# --------------------------------------------------------------------------------------------
# 2. layout negotiation
# --------------------------------------------------------------------------------------------
def _reorder_in(engine, stream, src_md, dst_md, values, keep: list) -> dnnl.memory:
    user = dnnl.memory(src_md, engine, values)
    out = dnnl.memory(dst_md, engine)
    dnnl.reorder(user, out).execute(stream, user, out)
    keep.append(user)  # as in oneDNN, a memory must outlive the kernels that use it
    return out


_ANY_CASES = [(c, "bidirectional_concat", 1) for c in NON_AUGRU] + \
             [(c, "unidirectional_left2right", 1) for c in AUGRU] + \
             [("lstm_peephole_projection", "bidirectional_sum", 3),
              ("gru", "unidirectional_right2left", 3)]


@pytest.mark.parametrize("prop", PROPS)
@pytest.mark.parametrize("cfg,direction,L", _ANY_CASES)
def test_any_resolves_and_reordered_weights_work(engine, stream, cfg, direction, L, prop):
    """Every desc passed as ``any`` resolves to a concrete desc of the right dims, reported
    alike by the named query and by ``query_md(exec_arg_md, ARG_*)``; user data in oneDNN's
    plain layouts reordered into them with ``pydnnl.reorder`` gives the reference results."""
    p = problem(cfg, direction, L)
    pd = make_pd(engine, p, prop, make_descs(p, default="any"))
    names = present(p)
    for name, (arg, _) in DESCS.items():
        md = getattr(pd, name)()
        assert md == pd.query_md(dnnl.query.exec_arg_md, arg), name
        if name not in names:
            assert md.is_zero(), f"{name}: not passed, got {md!r}"
            continue
        assert not md.is_zero() and not md.is_any(), f"{name}: {md!r}"
        assert md.get_dims() == dims_of(p, name), name
        assert md.get_data_type() == F32, name
        assert md.get_size() >= 4 * int(np.prod(dims_of(p, name))), name
    _check_workspace(pd, prop)

    user = make_descs(p)  # oneDNN's canonical plain layouts: ldigo weights, tnc, ldnc, ...
    a = arrays(p)
    args, keep = {}, []
    for name in INPUTS:
        if name in names:
            args[DESCS[name][0]] = _reorder_in(engine, stream, user[name], getattr(pd, name)(),
                                               a[ARRAY_OF[name]], keep)
    outs = {}
    for name in OUTPUTS:
        if name in names:
            outs[name] = dnnl.memory(getattr(pd, name)(), engine)
            args[DESCS[name][0]] = outs[name]
    if prop == "forward_training":
        args[dnnl.ARG_WORKSPACE] = dnnl.memory(pd.workspace_desc(), engine)
    p.c.prim(pd).execute(stream, args)
    got = {}
    for name, m in outs.items():  # back into the user's plain layouts
        back = dnnl.memory(user[name], engine)
        dnnl.reorder(m, back).execute(stream, m, back)
        got[ARRAY_OF[name]] = back
    stream.wait()
    check_outputs(p, {k: m.to_numpy() for k, m in got.items()}, what=f"{cfg} any")


def _noncanonical(p) -> dict:
    t = {"src_layer_desc": tag.ntc, "dst_layer_desc": tag.ntc,
         "weights_layer_desc": tag.ldgoi, "weights_iter_desc": tag.ldgoi,
         "weights_projection_desc": tag.ldoi, "attention_desc": tag.ntc}
    for n in ("src_iter_desc", "src_iter_c_desc", "dst_iter_desc", "dst_iter_c_desc"):
        t[n] = "abdc"  # l, d, c, n: channels outside the batch
    return make_descs(p, t)


@pytest.mark.sampled(every=3)
@pytest.mark.parametrize("L,prop", [(1, "forward_inference"), (3, "forward_training")])
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("cfg", NON_AUGRU)
def test_explicit_noncanonical_layouts(engine, stream, cfg, direction, L, prop):
    """src/dst_layer in ntc, weights in ldgoi, projection in ldoi, states in abdc: accepted as
    given (the pd reports the user's descs) and computed correctly."""
    p = problem(cfg, direction, L)
    descs = _noncanonical(p)
    pd = make_pd(engine, p, prop, descs)
    for name, md in descs.items():
        got = getattr(pd, name)()
        assert got == (md if md is not None else dnnl.memory.desc()), name
    check_outputs(p, execute(engine, stream, p, pd), what=f"{cfg} non-canonical")


@pytest.mark.parametrize("cfg", AUGRU)
def test_explicit_noncanonical_layouts_augru(engine, stream, cfg):
    p = problem(cfg)
    descs = _noncanonical(p)
    pd = make_pd(engine, p, "forward_training", descs)
    assert pd.attention_desc() == descs["attention_desc"]
    check_outputs(p, execute(engine, stream, p, pd), what=f"{cfg} non-canonical")


def _strided(dims, pad):
    """Row-major strides with ``pad`` extra elements after each innermost row."""
    strides, acc = [0] * len(dims), 1
    for i in range(len(dims) - 1, -1, -1):
        strides[i] = acc
        acc *= dims[i] + (pad if i == len(dims) - 1 else 0)
    return strides


def _gapped_desc(dims, kind):
    """A plain desc of ``dims`` with unused elements between its rows: padded strides, or a
    region (submemory, offset0 != 0) of a tensor with 3 more innermost elements."""
    if kind == "strided":
        return dnnl.memory.desc(dims, F32, _strided(dims, 3))
    parent = dnnl.memory.desc(dims[:-1] + [dims[-1] + 3], F32, "abcde"[:len(dims)])
    return parent.submemory_desc(dims, [0] * (len(dims) - 1) + [2])


@pytest.mark.parametrize("kind", ["strided", "submemory"])
@pytest.mark.parametrize("cfg,direction", [("lstm_peephole_projection", "bidirectional_concat"),
                                           ("gru", "bidirectional_sum"),
                                           ("lbr_augru", "unidirectional_left2right"),
                                           ("rnn_tanh", "unidirectional_right2left")])
def test_gapped_layouts_leave_gaps_untouched(engine, stream, cfg, direction, kind):
    """Every desc with unused elements between rows (padded strides or a submemory of a
    larger tensor): read and written through the layout; the outputs' gaps keep their bytes."""
    p = problem(cfg, direction, 1)
    descs = make_descs(p, {n: _gapped_desc(dims_of(p, n), kind) for n in present(p)})
    pd = make_pd(engine, p, "forward_training", descs)
    for n in present(p):
        assert getattr(pd, n)() == descs[n], n
    args = input_memories(engine, p, pd)
    sentinel = np.float32(-777.0)
    outs = {}
    for name in OUTPUTS:
        md = getattr(pd, name)()
        if md.is_zero():
            continue
        m = dnnl.memory(md, engine)
        raw = np.full(md.get_size() // 4, sentinel, np.float32)
        import pyopencl as cl
        cl.enqueue_copy(engine.default_queue, m.get_data_handle(), raw, is_blocking=True)
        outs[name] = m
        args[DESCS[name][0]] = m
    args[dnnl.ARG_WORKSPACE] = dnnl.memory(pd.workspace_desc(), engine)
    p.c.prim(pd).execute(stream, args)
    stream.wait()
    check_outputs(p, {ARRAY_OF[n]: m.to_numpy() for n, m in outs.items()}, what=kind)
    for name, m in outs.items():
        raw = m.read_raw()
        inside = np.zeros(raw.size, bool)
        inside[m.get_desc().element_offsets()] = True
        assert (~inside).sum() >= 3, name
        assert np.all(raw[~inside] == sentinel), f"{name}: a gap element was written"


# --------------------------------------------------------------------------------------------
# 3. keyword construction, overloads, optional tensors
# --------------------------------------------------------------------------------------------
_KW_CASES = [(c, "bidirectional_concat") for c in NON_AUGRU] + [(c, "unidirectional_left2right")
                                                                 for c in AUGRU]


@pytest.mark.parametrize("cfg,direction", _KW_CASES)
def test_keyword_construction_equals_positional(engine, stream, cfg, direction):
    p = problem(cfg, direction, 1)
    descs = make_descs(p)
    pd_pos = make_pd(engine, p, "forward_training", descs)
    pd_kw = make_pd(engine, p, "forward_training", descs, mode="keyword")
    # the head by keyword too, under oneDNN's parameter names
    c = p.c
    head = dict(aengine=engine, aprop_kind=dnnl.prop_kind.forward_training,
                direction=getattr(dnnl.rnn_direction, direction))
    if c.act:
        head.update(activation={"relu": dnnl.algorithm.eltwise_relu,
                                "tanh": dnnl.algorithm.eltwise_tanh,
                                "logistic": dnnl.algorithm.eltwise_logistic}[c.act],
                    alpha=c.alpha)
    pd_all_kw = c.prim.primitive_desc(**head, **{k: v for k, v in descs.items() if v is not None})
    outs = [execute(engine, stream, p, pd) for pd in (pd_pos, pd_kw, pd_all_kw)]
    for pd in (pd_kw, pd_all_kw):
        for name in DESCS:
            assert getattr(pd, name)() == getattr(pd_pos, name)(), name
        assert pd.workspace_desc() == pd_pos.workspace_desc()
    check_outputs(p, outs[0], what="positional")
    for o in outs[1:]:
        assert o.keys() == outs[0].keys()
        for k in o:
            np.testing.assert_array_equal(o[k], outs[0][k], err_msg=k)


def _lstm_run(engine, stream, p, positional):
    pd = dnnl.lstm_forward.primitive_desc(
        engine, dnnl.prop_kind.forward_inference, getattr(dnnl.rnn_direction, p.direction),
        *positional)
    return pd, execute(engine, stream, p, pd)


@pytest.mark.parametrize("empty", [None, "zero_desc"])
def test_lstm_positional_overloads(engine, stream, empty):
    """The three oneDNN LSTM overloads (plain; with peephole; with peephole and projection);
    an absent peephole/projection (None or a zero desc) falls back to the plainer cell."""
    z = None if empty is None else dnnl.memory.desc()
    direction = "unidirectional_right2left"
    for cfg in ("lstm", "lstm_peephole", "lstm_projection", "lstm_peephole_projection"):
        p = problem(cfg, direction, 1)
        d = make_descs(p)
        head = [d["src_layer_desc"], d["src_iter_desc"], d["src_iter_c_desc"],
                d["weights_layer_desc"], d["weights_iter_desc"]]
        tail = [d["bias_desc"], d["dst_layer_desc"], d["dst_iter_desc"], d["dst_iter_c_desc"]]
        peep = d["weights_peephole_desc"] if d["weights_peephole_desc"] is not None else z
        proj = d["weights_projection_desc"] if d["weights_projection_desc"] is not None else z
        variants = [head + [peep, proj] + tail]
        if not p.c.projection:
            variants.append(head + [peep] + tail)
            if not p.c.peephole:
                variants.append(head + tail)
        for v in variants:
            pd, out = _lstm_run(engine, stream, p, v)
            assert pd.weights_peephole_desc().is_zero() == (not p.c.peephole)
            assert pd.weights_projection_desc().is_zero() == (not p.c.projection)
            check_outputs(p, out, what=f"{cfg} with {len(v)} positional descs")


@pytest.mark.parametrize("cfg", ["lstm_projection", "gru", "rnn_logistic"])
def test_absent_src_iter_means_zeros(engine, stream, cfg):
    """src_iter / src_iter_c None give the same results as explicit zero states."""
    p0 = problem(cfg, "bidirectional_sum", 3, with_iter=False)
    p1 = replace(p0, with_iter=True)
    pd0 = make_pd(engine, p0, "forward_training", make_descs(p0))
    pd1 = make_pd(engine, p1, "forward_training", make_descs(p1))
    assert pd0.src_iter_desc().is_zero() and pd0.src_iter_c_desc().is_zero()
    out0 = execute(engine, stream, p0, pd0)
    inputs = input_memories(engine, p1, pd1)
    for name in ("src_iter_desc", "src_iter_c_desc"):
        md = getattr(pd1, name)()
        if not md.is_zero():
            inputs[DESCS[name][0]] = dnnl.memory(md, engine, np.zeros(md.get_dims(), np.float32))
    # p1's other inputs equal p0's only when the states are the sole difference: use p0's
    a0 = arrays(p0)
    for name in INPUTS:
        if name not in ("src_iter_desc", "src_iter_c_desc") and not getattr(pd1, name)().is_zero():
            inputs[DESCS[name][0]] = dnnl.memory(getattr(pd1, name)(), engine, a0[ARRAY_OF[name]])
    out1 = execute(engine, stream, p1, pd1, inputs=inputs)
    check_outputs(p0, out0, what="no src_iter")
    for k in out0:
        np.testing.assert_array_equal(out1[k], out0[k], err_msg=k)


@pytest.mark.parametrize("cfg,want_iter,want_iter_c", [
    ("lstm_peephole_projection", False, False), ("lstm_peephole_projection", False, True),
    ("lstm_peephole_projection", True, False), ("lstm", False, True),
    ("lbr_gru", False, False), ("augru", False, False)])
def test_absent_dst_iter_is_not_written(engine, stream, cfg, want_iter, want_iter_c):
    """dst_iter / dst_iter_c None: the pd reports zero descs, takes no such argument, and
    the other outputs are still right."""
    direction = "unidirectional_left2right" if CONFIGS[cfg].augru else "bidirectional_concat"
    p = replace(problem(cfg, direction, 1), want_dst_iter=want_iter, want_dst_iter_c=want_iter_c)
    pd = make_pd(engine, p, "forward_training", make_descs(p))
    for name, want in (("dst_iter_desc", want_iter),
                       ("dst_iter_c_desc", want_iter_c and p.c.has_c)):
        md = getattr(pd, name)()
        assert md.is_zero() != want, name
        assert pd.query_md(dnnl.query.exec_arg_md, DESCS[name][0]).is_zero() != want
    check_outputs(p, execute(engine, stream, p, pd), what="optional outputs")
    # a memory for an output the pd does not write is refused
    extra = "dst_iter_desc" if not want_iter else "dst_iter_c_desc"
    if extra == "dst_iter_c_desc" and not p.c.has_c:
        return
    args = input_memories(engine, p, pd)
    args[dnnl.ARG_DST_LAYER] = dnnl.memory(pd.dst_layer_desc(), engine)
    args[dnnl.ARG_WORKSPACE] = dnnl.memory(pd.workspace_desc(), engine)
    args[DESCS[extra][0]] = dnnl.memory(dnnl.memory.desc(dims_of(p, extra), F32, tag.ldnc), engine)
    with pytest.raises(dnnl.invalid_arguments, match=extra.upper().replace("_DESC", "")):
        p.c.prim(pd).execute(stream, args)


@pytest.mark.parametrize("cfg,direction,L", [("lstm_peephole_projection", "bidirectional_sum", 3),
                                             ("lbr_gru", "bidirectional_concat", 1),
                                             ("augru", "unidirectional_left2right", 1)])
def test_out_of_order_stream(engine, cfg, direction, L):
    """The kernels of one primitive stay ordered on an out-of-order stream (where the device
    honours the flag)."""
    s = dnnl.stream(engine, dnnl.stream.flags.out_of_order)
    p = problem(cfg, direction, L)
    for prop in PROPS:
        pd = make_pd(engine, p, prop, make_descs(p))
        check_outputs(p, execute(engine, s, p, pd), what=f"out-of-order {prop}")


@pytest.mark.parametrize("given", ["src_iter_only", "src_iter_c_only"])
def test_lstm_one_initial_state_only(engine, stream, given):
    """src_iter without src_iter_c (or the reverse): the absent one is zeros."""
    p = problem("lstm_peephole", "bidirectional_concat", 1)
    drop = "src_iter_c_desc" if given == "src_iter_only" else "src_iter_desc"
    descs = make_descs(p)
    descs[drop] = None
    pd = make_pd(engine, p, "forward_training", descs)
    assert getattr(pd, drop)().is_zero()
    a = dict(arrays(p))
    a[ARRAY_OF[drop]] = None
    dl, di, dc, _ = rnn_forward("vanilla_lstm", a["src_layer"], a["src_iter"], a["src_iter_c"],
                                a["weights_layer"], a["weights_iter"], a["bias"],
                                direction=p.direction, weights_peephole=a["weights_peephole"],
                                dtype=np.float64)
    ref = {"dst_layer": dl, "dst_iter": di, "dst_iter_c": dc}
    assert not np.allclose(dl, reference(p)["dst_layer"])  # the dropped state mattered
    check_outputs(p, execute(engine, stream, p, pd), ref, what=given)


def test_relu_alpha_is_the_negative_slope(engine, stream):
    """alpha (keyword, as in oneDNN) is relu's negative slope: 0 and 0.1 give different
    results, each the reference's."""
    p = problem("rnn_relu", "bidirectional_sum", 3)
    d = make_descs(p)
    a = arrays(p)
    refs = []
    for alpha in (0.0, 0.1, 0.5):
        pd = dnnl.vanilla_rnn_forward.primitive_desc(
            engine, dnnl.prop_kind.forward_inference, dnnl.algorithm.eltwise_relu,
            dnnl.rnn_direction.bidirectional_sum, *[d[n] for n in signature(p)], alpha=alpha)
        assert pd.get_alpha() == pytest.approx(alpha)
        dl, di, _, _ = rnn_forward("vanilla_rnn", a["src_layer"], a["src_iter"], None,
                                   a["weights_layer"], a["weights_iter"], a["bias"],
                                   direction=p.direction, activation="relu", alpha=alpha,
                                   dtype=np.float64)
        check_outputs(p, execute(engine, stream, p, pd), {"dst_layer": dl, "dst_iter": di},
                      what=f"alpha {alpha}")
        refs.append(dl)
    assert not np.allclose(refs[0], refs[1]) and not np.allclose(refs[1], refs[2])
