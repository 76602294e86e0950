"""The optimizer-update extension primitives (``sgd_update``, ``adam_update``) on every device:
several steps against the float64 numpy reference, closed forms worked out by hand for a
constant gradient, PyTorch's optimizers when torch is installed; plain, transposed, blocked
(padded), mixed and offset layouts; the step counter advanced on the device; queries, call
forms and errors (outputs untouched after a refused call)."""
from __future__ import annotations

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.reference import optimizer as ref

dt, tag = dnnl.memory.data_type, dnnl.memory.format_tag
DIMS = [10, 37]  # 370 elements: more than one work-group, not a multiple of one
S0, S1, STEP = dnnl.ARG_OPTIMIZER_STATE_0, dnnl.ARG_OPTIMIZER_STATE_1, dnnl.ARG_OPTIMIZER_STEP


def _md(dims, t):
    return dnnl.memory.desc(dims, dt.f32, t)


def _rand(seed, dims=DIMS, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(dims) * scale).astype(np.float32)


def _close(got, want, rtol=2e-6, atol=2e-7):
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=rtol, atol=atol)


class _Run:
    """A primitive with its memories: parameter, gradient, states (zeros), Adam's step."""

    def __init__(self, engine, pd, cls, p0):
        self.pd, self.prim, self.engine = pd, cls(pd), engine
        self.p = dnnl.memory(pd.src_desc(), engine, p0)
        self.g = dnnl.memory(pd.diff_src_desc(), engine)
        self.args = {dnnl.ARG_SRC: self.p, dnnl.ARG_DIFF_SRC: self.g}
        self.states = []
        for i, arg in enumerate((S0, S1)):
            if not pd.state_desc(i).is_zero():
                m = dnnl.memory(pd.state_desc(i), engine, np.zeros(p0.shape, np.float32))
                self.states.append(m)
                self.args[arg] = m
        if isinstance(pd, dnnl.adam_update.primitive_desc):
            self.t = dnnl.memory(pd.step_desc(), engine, np.zeros(1, np.float32))
            self.args[STEP] = self.t

    def step(self, stream, g, t=None):
        self.g.write(g)
        if t is not None:
            self.t.write(np.array([t], np.float32))
        self.prim.execute(stream, self.args)
        stream.wait()
        return self.p.to_numpy()


# ---- against the reference -------------------------------------------------------------------

SGD_CASES = {  # name: (learning_rate, momentum, weight_decay, nesterov)
    "plain": (0.1, 0.0, 0.0, False), "decay": (0.05, 0.0, 0.01, False),
    "momentum": (0.1, 0.9, 0.0, False), "nesterov_decay": (0.02, 0.8, 0.05, True),
}
LAYOUTS = {  # name: (parameter tag, gradient tag); blocked tags pad 10 up to 16
    "plain": ("ab", "ab"), "transposed": ("ba", "ba"), "blocked": ("Ab16a", "Ab16a"),
    "mixed": ("ab", "ba"), "blocked_grad": ("ba", "Ab16a"),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("case", list(SGD_CASES))
def test_sgd_matches_reference(engine, stream, case, layout):
    lr, mu, wd, nesterov = SGD_CASES[case]
    ptag, gtag = LAYOUTS[layout]
    pd = dnnl.sgd_update.primitive_desc(engine, _md(DIMS, ptag), lr, mu, wd, nesterov,
                                        diff_src_desc=_md(DIMS, gtag))
    flat = ptag == gtag and not ptag[0].isupper()
    assert pd.impl_info_str().endswith("flat" if flat else "strided")
    p0 = _rand(1)
    run = _Run(engine, pd, dnnl.sgd_update, p0)
    want, vel = p0, np.zeros(DIMS)
    for k in range(3):
        g = _rand(10 + k)
        got = run.step(stream, g)
        want, vel = ref.sgd_update(want, g, lr, mu, wd, nesterov, vel)
        _close(got, want)
        if mu:
            _close(run.states[0].to_numpy(), vel)


ADAM_CASES = {  # name: (learning_rate, beta1, beta2, eps, weight_decay)
    "defaults": (1e-3, 0.9, 0.999, 1e-8, 0.0), "decay": (1e-2, 0.9, 0.999, 1e-8, 0.1),
    "other_betas": (5e-3, 0.5, 0.9, 1e-3, 0.0),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("case", list(ADAM_CASES))
def test_adam_matches_reference(engine, stream, case, layout):
    lr, b1, b2, eps, wd = ADAM_CASES[case]
    ptag, gtag = LAYOUTS[layout]
    pd = dnnl.adam_update.primitive_desc(engine, _md(DIMS, ptag), lr, b1, b2, eps, wd,
                                         diff_src_desc=_md(DIMS, gtag))
    p0 = _rand(2)
    run = _Run(engine, pd, dnnl.adam_update, p0)
    want, m, v = p0, np.zeros(DIMS), np.zeros(DIMS)
    for t in range(1, 5):
        g = _rand(20 + t, scale=10.0 ** (t - 2))  # gradients from 0.1 to 100
        got = run.step(stream, g, t)
        want, m, v = ref.adam_update(want, g, m, v, t, lr, b1, b2, eps, wd)
        _close(got, want)
        _close(run.states[0].to_numpy(), m, rtol=1e-5, atol=1e-7)
        _close(run.states[1].to_numpy(), v, rtol=1e-5, atol=1e-7)


def test_rnn_weights_layouts(engine, stream):
    """5-D LSTM-like weights: the forward's ldigo parameter, a backward's ldgoi gradient."""
    dims = [2, 1, 3, 4, 5]
    pd = dnnl.adam_update.primitive_desc(engine, _md(dims, "ldigo"), 0.05,
                                         diff_src_desc=_md(dims, "ldgoi"))
    assert pd.impl_info_str().endswith("strided")
    p0 = _rand(19, dims)
    run = _Run(engine, pd, dnnl.adam_update, p0)
    want, m, v = p0, 0.0, 0.0
    for t in (1, 2):
        g = _rand(50 + t, dims)
        got = run.step(stream, g, t)
        want, m, v = ref.adam_update(want, g, m, v, t, 0.05)
        _close(got, want)


def test_adam_late_step_bias_correction(engine, stream):
    """At t = 5000 the corrections 1 - beta^t are near 1 (beta1) and 0.993 (beta2)."""
    pd = dnnl.adam_update.primitive_desc(engine, _md(DIMS, "ab"), 1e-3)
    p0 = _rand(3)
    run = _Run(engine, pd, dnnl.adam_update, p0)
    m0, v0, g = _rand(4, scale=0.1), np.abs(_rand(5, scale=0.01)), _rand(6)
    run.states[0].write(m0)
    run.states[1].write(v0)
    want, _, _ = ref.adam_update(p0, g, m0, v0, 5000)
    _close(run.step(stream, g, 5000), want)


# ---- closed forms, worked out by hand ---------------------------------------------------------
# A constant gradient g from zero state:
# - Adam: m_t = (1 - b1^t) g and v_t = (1 - b2^t) g^2, so m_hat = g, v_hat = g^2 at every step
#   and each step moves the parameter by lr * g / (|g| + eps);
# - SGD with momentum mu: vel_1 = g, vel_2 = (1 + mu) g; two steps move it by lr (2 + mu) g,
#   Nesterov's by lr ((1 + mu) + (1 + mu + mu^2)) g;
# - one SGD step with weight decay wd: p (1 - lr wd) - lr g.

def test_adam_closed_form_constant_gradient(engine, stream):
    lr, eps = 0.01, 1e-8
    pd = dnnl.adam_update.primitive_desc(engine, _md(DIMS, "ab"), lr, 0.9, 0.999, eps)
    p0 = _rand(7)
    g = _rand(8)
    run = _Run(engine, pd, dnnl.adam_update, p0)
    for t in (1, 2, 3):
        got = run.step(stream, g, t)
        _close(got, p0.astype(np.float64) - t * lr * g / (np.abs(g) + eps), rtol=1e-5,
               atol=1e-6)


@pytest.mark.parametrize("nesterov", [False, True])
def test_sgd_momentum_closed_form(engine, stream, nesterov):
    lr, mu = 0.1, 0.9
    pd = dnnl.sgd_update.primitive_desc(engine, _md(DIMS, "ab"), lr, mu, 0.0, nesterov)
    p0, g = _rand(9), _rand(10)
    run = _Run(engine, pd, dnnl.sgd_update, p0)
    run.step(stream, g)
    got = run.step(stream, g)
    factor = (1 + mu) + (1 + mu + mu * mu) if nesterov else 2 + mu
    _close(got, p0.astype(np.float64) - lr * factor * g.astype(np.float64))
    _close(run.states[0].to_numpy(), (1 + mu) * g.astype(np.float64))


def test_sgd_weight_decay_closed_form(engine, stream):
    lr, wd = 0.5, 0.2
    pd = dnnl.sgd_update.primitive_desc(engine, _md(DIMS, "ab"), lr, weight_decay=wd)
    p0, g = _rand(11), _rand(12)
    got = _Run(engine, pd, dnnl.sgd_update, p0).step(stream, g)
    _close(got, p0.astype(np.float64) * (1 - lr * wd) - lr * g)


# ---- PyTorch's optimizers (an implementation nobody here wrote), when installed ------------

def test_matches_torch_optimizers(engine, stream):
    torch = pytest.importorskip("torch")
    p0 = _rand(13)
    grads = [_rand(30 + k) for k in range(4)]
    for cls, make_torch, pd in (
            (dnnl.adam_update,
             lambda w: torch.optim.Adam([w], lr=0.01, betas=(0.8, 0.99), eps=1e-6,
                                        weight_decay=0.1),
             dnnl.adam_update.primitive_desc(engine, _md(DIMS, "ba"), 0.01, 0.8, 0.99, 1e-6,
                                             0.1)),
            (dnnl.sgd_update,
             lambda w: torch.optim.SGD([w], lr=0.05, momentum=0.7, weight_decay=0.01,
                                       nesterov=True),
             dnnl.sgd_update.primitive_desc(engine, _md(DIMS, "Ab16a"), 0.05, 0.7, 0.01,
                                            True))):
        w = torch.tensor(p0.astype(np.float64), requires_grad=True)
        opt = make_torch(w)
        run = _Run(engine, pd, cls, p0)
        for t, g in enumerate(grads, 1):
            w.grad = torch.tensor(g.astype(np.float64))
            opt.step()
            got = run.step(stream, g, t if cls is dnnl.adam_update else None)
            _close(got, w.detach().numpy(), rtol=1e-5, atol=1e-6)


# ---- the step counter on the device, views, in a sequence of primitives ----------------------

def test_step_counter_advanced_on_device(engine, stream):
    """The example's pattern: t += 1 by an in-place eltwise_linear, no host write."""
    pd = dnnl.adam_update.primitive_desc(engine, _md(DIMS, "ab"), 0.02)
    p0 = _rand(14)
    run = _Run(engine, pd, dnnl.adam_update, p0)
    tick = dnnl.eltwise_forward(dnnl.eltwise_forward.primitive_desc(
        engine, dnnl.prop_kind.forward_inference, dnnl.algorithm.eltwise_linear, pd.step_desc(),
        pd.step_desc(), 1.0, 1.0))
    want, m, v = p0, 0.0, 0.0
    for t in range(1, 4):
        g = _rand(40 + t)
        stream.wait()  # writes go through the engine's queue: the last update must be done
        run.g.write(g)
        tick.execute(stream, {dnnl.ARG_SRC: run.t, dnnl.ARG_DST: run.t})
        run.prim.execute(stream, run.args)
        want, m, v = ref.adam_update(want, g, m, v, t, 0.02)
    stream.wait()
    assert run.t.to_numpy()[0] == 3.0
    _close(run.p.to_numpy(), want)


@pytest.mark.parametrize("base", ["ab", "ba"])
def test_offset_views_leave_the_rest_alone(engine, stream, base):
    """Parameter and gradient as sub-memories (offset0 > 0, gaps) of larger buffers."""
    full = _md([6, 40], base)
    view = full.submemory_desc([4, 30], [1, 5])
    big_p, big_g = _rand(15, [6, 40]), _rand(16, [6, 40])
    P, G = dnnl.memory(full, engine, big_p), dnnl.memory(full, engine, big_g)
    pd = dnnl.sgd_update.primitive_desc(engine, view, 0.25)
    dnnl.sgd_update(pd).execute(stream, {dnnl.ARG_SRC: dnnl.memory(view, engine, P.buffer),
                                         dnnl.ARG_DIFF_SRC: dnnl.memory(view, engine, G.buffer)})
    stream.wait()
    want = big_p.astype(np.float64)
    want[1:5, 5:35] -= 0.25 * big_g[1:5, 5:35]
    _close(P.to_numpy(), want)


def test_one_arena_buffer(engine, stream):
    """Parameter and gradient as disjoint views of one buffer run; a state overlapping the
    parameter in that buffer is refused before anything is written."""
    arena_md = _md([2, 4, 5], "abc")
    param_md, grad_md = (arena_md.submemory_desc([1, 4, 5], [k, 0, 0]).reshape([4, 5])
                         for k in (0, 1))
    pd = dnnl.sgd_update.primitive_desc(engine, param_md, 0.5, 0.5, diff_src_desc=grad_md)
    data = _rand(23, [2, 4, 5])
    arena = dnnl.memory(arena_md, engine, data)
    args = {dnnl.ARG_SRC: dnnl.memory(param_md, engine, arena.buffer),
            dnnl.ARG_DIFF_SRC: dnnl.memory(grad_md, engine, arena.buffer)}
    prim = dnnl.sgd_update(pd)
    with pytest.raises(dnnl.invalid_arguments, match="ARG_SRC and ARG_OPTIMIZER_STATE_0 share"):
        prim.execute(stream, {**args, S0: dnnl.memory(pd.state_desc(0), engine, arena.buffer)})
    stream.wait()
    np.testing.assert_array_equal(arena.to_numpy(), data)
    vel = dnnl.memory(pd.state_desc(0), engine, np.zeros([4, 5], np.float32))
    prim.execute(stream, {**args, S0: vel})
    stream.wait()
    want = data.astype(np.float64)
    want[0] -= 0.5 * data[1]
    _close(arena.to_numpy(), want)


def test_hyper_parameters_are_kernel_arguments(engine):
    """Primitives differing only in hyper-parameters run one compiled program."""
    md = _md(DIMS, "ab")
    a = dnnl.adam_update(dnnl.adam_update.primitive_desc(engine, md, 1e-3))
    b = dnnl.adam_update(dnnl.adam_update.primitive_desc(engine, md, 5e-4, 0.8, 0.99, 1e-6))
    assert a._plan.steps[0].kernel is b._plan.steps[0].kernel


# ---- queries and call forms ------------------------------------------------------------------

def test_queries_and_call_forms(engine):
    md = _md(DIMS, "ba")
    pd = dnnl.adam_update.primitive_desc(engine, md)
    assert (pd.get_learning_rate(), pd.get_beta1(), pd.get_beta2(), pd.get_eps(),
            pd.get_weight_decay()) == (1e-3, 0.9, 0.999, 1e-8, 0.0)
    assert pd.src_desc() == md and pd.diff_src_desc() == md
    assert pd.state_desc(0) == md and pd.state_desc(1) == md and pd.state_desc(2).is_zero()
    assert pd.step_desc() == dnnl.memory.desc([1], dt.f32, tag.a)
    assert pd.query_md(dnnl.query.exec_arg_md, STEP) == pd.step_desc()
    kw = dnnl.adam_update.primitive_desc(engine=engine, src_desc=md, beta2=0.9,
                                         learning_rate=0.1)
    assert (kw.get_learning_rate(), kw.get_beta1(), kw.get_beta2()) == (0.1, 0.9, 0.9)
    pos = dnnl.adam_update.primitive_desc(engine, md, 0.1, 0.5, weight_decay=0.2)
    assert (pos.get_beta1(), pos.get_weight_decay()) == (0.5, 0.2)
    # diff_src_desc any: the parameter's layout; state layouts follow the parameter
    anyd = dnnl.memory.desc(DIMS, dt.f32, tag.any)
    assert dnnl.adam_update.primitive_desc(engine, md, diff_src_desc=anyd).diff_src_desc() == md
    blocked = _md(DIMS, "Ab16a")
    assert dnnl.adam_update.primitive_desc(engine, blocked).state_desc(1) == blocked

    s = dnnl.sgd_update.primitive_desc(engine, md, 0.5)
    assert (s.get_learning_rate(), s.get_momentum(), s.get_weight_decay(),
            s.get_nesterov()) == (0.5, 0.0, 0.0, False)
    assert s.state_desc(0).is_zero()            # no momentum: no state
    s = dnnl.sgd_update.primitive_desc(engine, md, 0.5, 0.9, 0.0, True, None)
    assert s.get_nesterov() and s.state_desc(0) == md
    assert dnnl.DNNL_ARG_OPTIMIZER_STEP == STEP
    oneDNN_args = {v for k, v in vars(dnnl).items() if k.startswith("ARG_") and isinstance(v, int)
                   and "OPTIMIZER" not in k}
    assert not {S0, S1, STEP} & oneDNN_args


# ---- errors ----------------------------------------------------------------------------------

def test_bad_descriptors(engine):
    md = _md(DIMS, "ab")
    A, S = dnnl.adam_update.primitive_desc, dnnl.sgd_update.primitive_desc
    bad = [
        (lambda: S(engine, md, -0.1), dnnl.invalid_arguments, "learning_rate .*got -0.1"),
        (lambda: S(engine, md, float("nan")), dnnl.invalid_arguments, "learning_rate"),
        (lambda: S(engine, md, "0.1"), dnnl.invalid_arguments, "learning_rate must be a number"),
        (lambda: S(engine, md, 0.1, -0.5), dnnl.invalid_arguments, "momentum"),
        (lambda: S(engine, md, 0.1, 0.0, 0.0, True), dnnl.invalid_arguments,
         "nesterov needs momentum"),
        (lambda: S(engine, md, 0.1, 0.5, 0.0, "yes"), dnnl.invalid_arguments, "nesterov"),
        (lambda: A(engine, md, 0.1, 1.0), dnnl.invalid_arguments, r"beta1 .*\[0, 1\).*got 1.0"),
        (lambda: A(engine, md, 0.1, 0.9, -0.1), dnnl.invalid_arguments, "beta2"),
        (lambda: A(engine, md, eps=float("inf")), dnnl.invalid_arguments, "eps"),
        (lambda: A(engine, md, weight_decay=-1), dnnl.invalid_arguments, "weight_decay"),
        (lambda: A(engine, dnnl.memory.desc(DIMS, dt.f32, tag.any)), dnnl.invalid_arguments,
         "src_desc .*concrete"),
        (lambda: A(engine, "md"), dnnl.invalid_arguments, "src_desc"),
        (lambda: A(engine, md, diff_src_desc=_md([10, 36], "ab")), dnnl.invalid_arguments,
         r"diff_src_desc dims \[10, 36\] must equal src_desc dims \[10, 37\]"),
        (lambda: A(engine, dnnl.memory.desc(DIMS, dt.bf16, "ab")), dnnl.unimplemented, "bf16"),
        (lambda: A(engine, md, diff_src_desc=dnnl.memory.desc(DIMS, dt.f16, "ab")),
         dnnl.unimplemented, "f16"),
        (lambda: A(engine, md, momentum=0.9), dnnl.invalid_arguments, "momentum"),
    ]
    for make, err, words in bad:
        with pytest.raises(err, match=words):
            make()
    attr = dnnl.primitive_attr()
    ops = dnnl.post_ops()
    ops.append_eltwise(dnnl.algorithm.eltwise_relu, 0.0, 0.0)
    attr.set_post_ops(ops)
    with pytest.raises(dnnl.unimplemented, match="post-ops"):
        S(engine, md, 0.1, attr=attr)


def test_bad_execute_leaves_outputs_untouched(engine, stream):
    md = _md(DIMS, "ab")
    pd = dnnl.adam_update.primitive_desc(engine, md, 0.1)
    p0 = _rand(17)
    run = _Run(engine, pd, dnnl.adam_update, p0)
    run.g.write(_rand(18))
    run.t.write(np.ones(1, np.float32))
    args = run.args

    def refused(bad_args, err, words, prim=run.prim):
        with pytest.raises(err, match=words):
            prim.execute(stream, bad_args)
        stream.wait()
        np.testing.assert_array_equal(run.p.to_numpy(), p0)
        for m in run.states:
            np.testing.assert_array_equal(m.to_numpy(), np.zeros(DIMS))

    refused({k: v for k, v in args.items() if k != S1}, dnnl.invalid_arguments,
            "missing argument ARG_OPTIMIZER_STATE_1")
    refused({k: v for k, v in args.items() if k != STEP}, dnnl.invalid_arguments,
            "missing argument ARG_OPTIMIZER_STEP")
    refused({**args, dnnl.ARG_DIFF_SRC: dnnl.memory(_md(DIMS, "ba"), engine)},
            dnnl.invalid_arguments, "ARG_DIFF_SRC has desc")
    refused({**args, dnnl.ARG_DIFF_SRC: dnnl.memory(md, engine, run.p.buffer)},
            dnnl.invalid_arguments, "ARG_SRC and ARG_DIFF_SRC share storage")
    refused({**args, S1: dnnl.memory(md, engine, run.states[0].buffer)},
            dnnl.invalid_arguments, "ARG_OPTIMIZER_STATE_0 and ARG_OPTIMIZER_STATE_1 share")
    refused({**args, dnnl.ARG_DST: run.p}, dnnl.invalid_arguments, "unexpected argument ARG_DST")
    sgd = dnnl.sgd_update(dnnl.sgd_update.primitive_desc(engine, md, 0.1))
    refused({dnnl.ARG_SRC: run.p, dnnl.ARG_DIFF_SRC: run.g, S0: run.states[0]},
            dnnl.invalid_arguments, "unexpected argument ARG_OPTIMIZER_STATE_0", sgd)
    with pytest.raises(dnnl.invalid_arguments, match="sgd_update: expected"):
        dnnl.sgd_update(pd)
    # the same memories run once the map is right
    run.prim.execute(stream, args)
    stream.wait()
    assert not np.array_equal(run.p.to_numpy(), p0)
