"""Bad arguments to the RNN backward primitives: every one raises a ``pydnnl.error`` subclass
whose message names the problem, at pd creation or at execute before anything is written."""
from __future__ import annotations

import pathlib
import sys
from dataclasses import replace

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from rnn_bwd_helpers import (  # noqa: E402
    CELLS,
    DIFF,
    FWD,
    OVERWRITE,
    SENTINEL,
    arrays,
    bwd_pd,
    diff_descs,
    diff_memories,
    dims_of,
    fwd_descs,
    fwd_pd,
    md,
    problem,
    run_forward,
)

import pydnnl as dnnl  # noqa: E402

dt = dnnl.memory.data_type
BASE = {
    "lstm": problem("lstm_peephole_projection", "bidirectional_concat", 2),
    "gru": problem("gru", "unidirectional_right2left", 2),
    "rnn": problem("rnn_relu", "bidirectional_sum", 1),
    "augru": problem("augru"),
}


def _raises(fn, *words, kind=dnnl.error):
    """fn() raises ``kind`` (a pydnnl.error subclass) whose message contains every word."""
    with pytest.raises(dnnl.error) as e:
        fn()
    assert isinstance(e.value, kind), f"{type(e.value).__name__} is not a {kind.__name__}"
    assert isinstance(e.value, (ValueError, NotImplementedError, RuntimeError))
    msg = str(e.value)
    for w in words:
        assert w in msg, f"{w!r} not in message {msg!r}"
    return msg


# --------------------------------------------------------------------------------------------
# pd creation: descs
# --------------------------------------------------------------------------------------------
def _with(p, *, f=None, d=None):
    """The problem's forward and diff descs with some replaced (name -> desc or None)."""
    fd, dd = fwd_descs(p), diff_descs(p)
    fd.update(f or {})
    dd.update(d or {})
    return fd, dd


def _bad_desc_cases():
    L, G, R, A = BASE["lstm"], BASE["gru"], BASE["rnn"], BASE["augru"]

    def diff(p, name, dims, t, *words):
        """(problem, forward replacements, diff replacements, words of the message)."""
        return p, {}, {name: None if dims is None else md(dims, t)}, [name, *words]

    def fwd(p, name, dims, t, *words):
        return p, {name: md(dims, t)}, {}, [name, *words]

    wl_dims = str(dims_of(L, "weights_layer_desc"))
    return {
        # wrong ranks
        "src_layer_rank": fwd(L, "src_layer_desc", [3, 2 * 3], "ab", "3 dims"),
        "diff_src_layer_rank": diff(L, "diff_src_layer_desc", [1, 3, 2, 3], "abcd"),
        "diff_weights_iter_rank": diff(G, "diff_weights_iter_desc", [2, 1, 4, 12], "abcd"),
        "diff_dst_iter_rank": diff(R, "diff_dst_iter_desc", [2, 2, 4], "abc"),
        # dims of a diff differ from its forward desc
        "diff_weights_layer_dims": diff(L, "diff_weights_layer_desc", [2, 2, 4, 4, 4], "ldigo",
                                        wl_dims),
        "diff_bias_gates": diff(G, "diff_bias_desc", [2, 1, 4, 4], "ldgo"),
        "diff_dst_layer_T": diff(L, "diff_dst_layer_desc", [4, 2, 6], "tnc"),
        "diff_dst_layer_concat_width": diff(L, "diff_dst_layer_desc", [3, 2, 3], "tnc"),
        "diff_dst_iter_N": diff(G, "diff_dst_iter_desc", [2, 1, 3, 4], "ldnc"),
        "diff_src_iter_c_dhc": diff(L, "diff_src_iter_c_desc", [2, 2, 2, 3], "ldnc"),
        "diff_src_iter_sic": diff(R, "diff_src_iter_desc", [1, 2, 2, 5], "ldnc"),
        "diff_peephole_dims": diff(L, "diff_weights_peephole_desc", [2, 2, 4, 4], "ldgo"),
        "diff_projection_dims": diff(L, "diff_weights_projection_desc", [2, 2, 3, 4], "ldio"),
        "diff_attention_dims": diff(A, "diff_attention_desc", [3, 2, 2], "tnc"),
        # required diffs missing
        "no_diff_src_layer": diff(G, "diff_src_layer_desc", None, None, "required"),
        "no_diff_weights_layer": diff(L, "diff_weights_layer_desc", None, None, "required"),
        "no_diff_weights_iter": diff(R, "diff_weights_iter_desc", None, None, "required"),
        "no_diff_bias": diff(G, "diff_bias_desc", None, None, "required"),
        "no_diff_dst_layer": diff(L, "diff_dst_layer_desc", None, None, "required"),
        "no_diff_peephole": diff(L, "diff_weights_peephole_desc", None, None, "required"),
        "no_diff_projection": diff(L, "diff_weights_projection_desc", None, None, "required"),
        "no_diff_attention": diff(A, "diff_attention_desc", None, None, "required"),
        # forward descs themselves inconsistent (the forward's checks apply)
        "weights_iter_dhc": fwd(G, "weights_iter_desc", [2, 1, 4, 3, 5], "ldigo"),
        "bias_gates": fwd(R, "bias_desc", [1, 2, 2, 4], "ldgo"),
    }


BAD_DESCS = _bad_desc_cases()


@pytest.mark.sampled(every=3)
@pytest.mark.parametrize("case", list(BAD_DESCS))
def test_bad_descs_rejected(engine, case):
    p, f, d, words = BAD_DESCS[case]
    hint = fwd_pd(engine, p)
    fd, dd = _with(p, f=f, d=d)
    _raises(lambda: bwd_pd(engine, p, hint, fd, dd, mode="keyword"), *words,
            kind=dnnl.invalid_arguments)


@pytest.mark.parametrize("name,bad_dt", [("diff_dst_layer_desc", dt.bf16),
                                         ("diff_weights_layer_desc", dt.f16),
                                         ("diff_bias_desc", dt.bf16),
                                         ("diff_src_iter_desc", dt.s8),
                                         ("diff_dst_iter_c_desc", dt.f16)])
def test_non_f32_diff_rejected(engine, name, bad_dt):
    p = BASE["lstm"]
    hint = fwd_pd(engine, p)
    dd = diff_descs(p)
    dd[name] = md(dims_of(p, name), FWD[name[5:]][1], bad_dt)
    _raises(lambda: bwd_pd(engine, p, hint, ddescs=dd), name, "f32", bad_dt.name)


def test_diff_for_absent_forward_tensor_rejected(engine):
    """diff_weights_peephole for an LSTM without peephole weights."""
    p = problem("lstm", "unidirectional_left2right", 1)
    hint = fwd_pd(engine, p)
    dd = diff_descs(p)
    dd["diff_weights_peephole_desc"] = md([1, 1, 3, 4], "ldgo")
    _raises(lambda: bwd_pd(engine, p, hint, ddescs=dd, mode="keyword"),
            "diff_weights_peephole_desc", "weights_peephole_desc", kind=dnnl.invalid_arguments)


def test_forward_desc_differs_from_hint(engine):
    """The backward's own forward descs describe another problem than hint_fwd_pd's."""
    p = BASE["gru"]
    hint = fwd_pd(engine, p)
    q = replace(p, N=3)
    _raises(lambda: bwd_pd(engine, q, hint), "hint_fwd_pd", kind=dnnl.invalid_arguments)


# --------------------------------------------------------------------------------------------
# pd creation: prop_kind and hint_fwd_pd
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("prop", ["forward_training", "forward_inference", "backward_data",
                                  "backward_weights"])
@pytest.mark.parametrize("base", ["lstm", "rnn"])
def test_prop_kind_other_than_backward(engine, base, prop):
    p = BASE[base]
    hint = fwd_pd(engine, p)
    _raises(lambda: bwd_pd(engine, p, hint, prop=getattr(dnnl.prop_kind, prop)),
            "prop_kind", "backward", prop, kind=dnnl.invalid_arguments)


@pytest.mark.parametrize("base", list(BASE))
def test_hint_from_forward_inference(engine, base):
    p = BASE[base]
    hint = fwd_pd(engine, p, prop=dnnl.prop_kind.forward_inference)
    _raises(lambda: bwd_pd(engine, p, hint), "hint_fwd_pd", "forward_inference",
            "forward_training", kind=dnnl.invalid_arguments)


def _other_problems():
    L, G, R = BASE["lstm"], BASE["gru"], BASE["rnn"]
    return {
        "T": (L, replace(L, T=4)),
        "N": (G, replace(G, N=3)),
        "DHC": (G, problem("gru", G.direction, 2, DHC=5)),
        "SLC": (R, replace(R, SLC=4)),
        "direction": (G, replace(G, direction="unidirectional_left2right")),
        "direction_concat_sum": (L, problem("lstm_peephole_projection", "bidirectional_sum", 2)),
        "layers": (R, problem("rnn_relu", R.direction, 2)),
        "peephole": (L, problem("lstm_projection", L.direction, 2)),
        "activation": (R, replace(R, cfg="rnn_tanh")),
        "alpha": (R, None),
        "no_dst_iter": (G, replace(G, with_iter=False)),
    }


OTHER = _other_problems()


@pytest.mark.parametrize("what", list(OTHER))
def test_hint_of_another_problem(engine, what):
    """hint_fwd_pd describes a different problem than the backward's descs."""
    p, other = OTHER[what]
    if what == "alpha":
        hint = CELLS[p.cfg].fwd_cls.primitive_desc(
            engine, dnnl.prop_kind.forward_training, dnnl.algorithm.eltwise_relu,
            getattr(dnnl.rnn_direction, p.direction),
            *[fwd_descs(p)[n] for n in ("src_layer_desc", "src_iter_desc", "weights_layer_desc",
                                        "weights_iter_desc", "bias_desc", "dst_layer_desc",
                                        "dst_iter_desc")], alpha=0.3)
    else:
        hint = fwd_pd(engine, other)
    _raises(lambda: bwd_pd(engine, p, hint), "hint_fwd_pd", kind=dnnl.invalid_arguments)


@pytest.mark.parametrize("bwd,fwd_base", [("gru_backward", "lbr_gru"),
                                          ("lbr_gru_backward", "gru"),
                                          ("lstm_backward", "gru"),
                                          ("augru_backward", "gru"),
                                          ("vanilla_rnn_backward", "lstm")])
def test_hint_of_another_cell_class(engine, bwd, fwd_base):
    """The hint must be the matching forward class (e.g. gru_backward takes a gru_forward pd)."""
    p = problem(fwd_base) if fwd_base != "lstm" else problem("lstm")
    hint = fwd_pd(engine, p)
    # the backward's own descs as the backward class would take them (same shapes)
    target = {"gru_backward": "gru", "lbr_gru_backward": "lbr_gru", "lstm_backward": "lstm",
              "augru_backward": "augru", "vanilla_rnn_backward": "rnn_tanh"}[bwd]
    q = problem(target)
    assert CELLS[q.cfg].bwd == bwd
    msg = _raises(lambda: bwd_pd(engine, q, hint), "hint_fwd_pd", kind=dnnl.invalid_arguments)
    assert CELLS[q.cfg].fwd in msg


def test_hint_missing(engine):
    p = BASE["lstm"]
    c = p.c
    fd, dd = fwd_descs(p), diff_descs(p)
    alld = {**fd, **dd}
    from rnn_bwd_helpers import bwd_signature
    h = (engine, dnnl.prop_kind.backward, dnnl.rnn_direction.bidirectional_concat)
    pos = [alld[n] for n in bwd_signature(c)]
    kw = {n: v for n, v in alld.items() if v is not None}
    for make in (lambda: c.bwd_cls.primitive_desc(*h, *pos),
                 lambda: c.bwd_cls.primitive_desc(*h, **kw),
                 lambda: c.bwd_cls.primitive_desc(*h, **kw, hint_fwd_pd=None),
                 lambda: c.bwd_cls.primitive_desc(*h, *pos, None, None)):
        _raises(make, "hint_fwd_pd", kind=dnnl.invalid_arguments)


def test_hint_not_a_pd(engine):
    p = BASE["gru"]
    hint = fwd_pd(engine, p)
    _raises(lambda: bwd_pd(engine, p, p.c.fwd_cls(hint), mode="keyword"), "hint_fwd_pd",
            kind=dnnl.invalid_arguments)


def test_backward_primitive_from_forward_pd(engine):
    p = BASE["gru"]
    _raises(lambda: p.c.bwd_cls(fwd_pd(engine, p)), "gru_backward", kind=dnnl.invalid_arguments)


# --------------------------------------------------------------------------------------------
# execute: nothing is written when the arguments are wrong
# --------------------------------------------------------------------------------------------
class _Setup:
    """A valid forward + backward setup whose argument map the tests break."""

    def __init__(self, engine, stream, p, flags=OVERWRITE):
        self.engine, self.stream, self.p = engine, stream, p
        self.fpd = fwd_pd(engine, p)
        self.bpd = bwd_pd(engine, p, self.fpd, flags=flags)
        self.prim = p.c.bwd_cls(self.bpd)
        self.fargs = run_forward(engine, stream, p, self.fpd)
        stream.wait()
        self.ins, self.outs = diff_memories(engine, p, self.bpd)

    def args(self) -> dict:
        a = {k: v for k, v in self.fargs.items()}
        a.update(self.ins)
        for n, m in self.outs.items():
            a[DIFF[n][0]] = m
        return a

    def check_untouched(self) -> None:
        self.stream.wait()
        for n, m in self.outs.items():
            got = m.to_numpy()
            assert np.all(got == np.float32(SENTINEL)), f"{n} was written"


def _execute_cases():
    def missing(arg):
        return lambda s, a: a.pop(arg)

    def other_ws(s, a):
        q = replace(s.p, T=s.p.T + 1)
        a[dnnl.ARG_WORKSPACE] = dnnl.memory(fwd_pd(s.engine, q).workspace_desc(), s.engine)

    def ws_other_direction_count(s, a):
        q = problem(s.p.cfg, "unidirectional_left2right", s.p.L)
        a[dnnl.ARG_WORKSPACE] = dnnl.memory(fwd_pd(s.engine, q).workspace_desc(), s.engine)

    def wrong_layout(s, a):
        d = s.bpd.diff_weights_layer_desc()
        a[dnnl.ARG_DIFF_WEIGHTS_LAYER] = dnnl.memory(md(d.get_dims(), "ldgoi"), s.engine)

    def wrong_dims(s, a):
        d = s.bpd.diff_dst_layer_desc().get_dims()
        a[dnnl.ARG_DIFF_DST_LAYER] = dnnl.memory(md([d[0] + 1] + d[1:], "tnc"), s.engine)

    def wrong_dtype(s, a):
        d = s.bpd.diff_bias_desc().get_dims()
        a[dnnl.ARG_DIFF_BIAS] = dnnl.memory(md(d, "ldgo", dt.bf16), s.engine)

    def not_memory(s, a):
        a[dnnl.ARG_DIFF_DST_LAYER] = arrays(s.p)["diff_dst_layer"]

    # the argument each case breaks, and a word of the message besides its name
    return {
        "missing_workspace": (missing(dnnl.ARG_WORKSPACE), dnnl.ARG_WORKSPACE, "missing"),
        "workspace_of_other_T": (other_ws, dnnl.ARG_WORKSPACE, "desc"),
        "workspace_of_other_direction": (ws_other_direction_count, dnnl.ARG_WORKSPACE, "desc"),
        "missing_diff_dst_layer": (missing(dnnl.ARG_DIFF_DST_LAYER), dnnl.ARG_DIFF_DST_LAYER,
                                   "missing"),
        "missing_diff_weights_iter": (missing(dnnl.ARG_DIFF_WEIGHTS_ITER),
                                      dnnl.ARG_DIFF_WEIGHTS_ITER, "missing"),
        "missing_weights_layer": (missing(dnnl.ARG_WEIGHTS_LAYER), dnnl.ARG_WEIGHTS_LAYER,
                                  "missing"),
        "missing_src_layer": (missing(dnnl.ARG_SRC_LAYER), dnnl.ARG_SRC_LAYER, "missing"),
        "diff_weights_other_layout": (wrong_layout, dnnl.ARG_DIFF_WEIGHTS_LAYER, "ldgoi"),
        "diff_dst_other_dims": (wrong_dims, dnnl.ARG_DIFF_DST_LAYER, "desc"),
        "diff_bias_bf16": (wrong_dtype, dnnl.ARG_DIFF_BIAS, "bf16"),
        "not_a_memory": (not_memory, dnnl.ARG_DIFF_DST_LAYER, "memory"),
    }


_RNN_NAMES = {dnnl.ARG_WORKSPACE: "ARG_WORKSPACE", dnnl.ARG_SRC_LAYER: "ARG_SRC_LAYER",
              dnnl.ARG_WEIGHTS_LAYER: "ARG_WEIGHTS_LAYER",
              dnnl.ARG_DIFF_DST_LAYER: "ARG_DIFF_DST_LAYER",
              dnnl.ARG_DIFF_WEIGHTS_LAYER: "ARG_DIFF_WEIGHTS_LAYER",
              dnnl.ARG_DIFF_WEIGHTS_ITER: "ARG_DIFF_WEIGHTS_ITER",
              dnnl.ARG_DIFF_BIAS: "ARG_DIFF_BIAS"}


def _arg_words(arg: int) -> list[str]:
    """The message names the argument by its RNN mnemonic (ARG_SRC_LAYER, not the generic
    ARG_SRC that shares its number)."""
    return [_RNN_NAMES[arg]]


EXEC_CASES = _execute_cases()


@pytest.mark.sampled(every=2)
@pytest.mark.parametrize("case", list(EXEC_CASES))
@pytest.mark.parametrize("base", ["lstm", "rnn"])
def test_execute_rejects_bad_args_before_writing(engine, stream, base, case):
    s = _Setup(engine, stream, BASE[base])
    breaker, arg, word = EXEC_CASES[case]
    a = s.args()
    breaker(s, a)
    _raises(lambda: s.prim.execute(stream, a), *_arg_words(arg), word,
            kind=dnnl.invalid_arguments)
    s.check_untouched()
    # the same setup with the right arguments works (the failure was the argument)
    s.prim.execute(stream, s.args())
    stream.wait()
    assert not np.any(s.outs["diff_src_layer_desc"].to_numpy() == np.float32(SENTINEL))


def test_execute_in_accumulate_mode_leaves_old_values(engine, stream):
    """Without the overwrite flag a rejected execute must not touch the accumulators either."""
    s = _Setup(engine, stream, BASE["lstm"], flags=None)
    a = s.args()
    a.pop(dnnl.ARG_WORKSPACE)
    _raises(lambda: s.prim.execute(stream, a), "WORKSPACE", "missing")
    s.check_untouched()


def test_execute_on_stream_of_other_engine(engine, stream):
    others = [dnnl.engine(k, i) for k in (dnnl.engine.kind.cpu, dnnl.engine.kind.gpu)
              for i in range(dnnl.engine.get_count(k))]
    others = [e for e in others if e != engine]
    if not others:
        pytest.skip("only one device present")
    s = _Setup(engine, stream, BASE["gru"])
    _raises(lambda: s.prim.execute(dnnl.stream(others[0]), s.args()), "stream",
            kind=dnnl.invalid_arguments)
    s.check_untouched()
