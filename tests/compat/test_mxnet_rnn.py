"""pydnnl.compat.mxnet.rnn: MXNet's functional RNN on pydnnl primitives.

Oracles: MXNet's ``GetRnnParamSize`` formula and a per-tensor count of the packing (both written
here); the numpy reference of the oneDNN cells fed with weights unpacked here from the flat
vector; torch.nn.LSTM / GRU / RNN, which share MXNet's gate orders and per-layer bidirectional
semantics, when torch is importable.
"""
from __future__ import annotations

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.compat import mxnet as mx
from pydnnl.reference.rnn import rnn_forward

GATES = {"rnn_relu": 1, "rnn_tanh": 1, "lstm": 4, "gru": 3}
dt, tag = dnnl.memory.data_type, dnnl.memory.format_tag


# -------------------------------------------------------------------------------------------------
# parameter size
# -------------------------------------------------------------------------------------------------
def get_rnn_param_size(mode, I, H, L, bi, P):
    """MXNet's GetRnnParamSize, as its source writes it."""
    D = 2 if bi else 1
    size = H * D * GATES[mode]
    size1 = (I + H + 2) * size
    size2 = (H * D + H + 2) * size
    if P is not None:
        size1 = (I + P + 2) * size
        size2 = (P * D + P + 2) * size
    total = size1 + (L - 1) * size2
    if P is not None:
        total += P * H * L * D
    return total


def count_tensors(mode, I, H, L, bi, P):
    """The same size counted tensor by tensor, as the gluon layer lists its parameters."""
    D, G, R = 2 if bi else 1, GATES[mode], P or H
    n = 0
    for l in range(L):
        for _ in range(D):
            n += G * H * (I if l == 0 else D * R) + G * H * R + (P * H if P else 0) + 2 * G * H
    return n


SIZE_CASES = [(m, L, bi, P) for m in GATES for L in (1, 2, 3) for bi in (False, True)
              for P in ((None, 2, 5) if m == "lstm" else (None,))]


@pytest.mark.parametrize("mode,L,bi,P", SIZE_CASES)
def test_param_size(mode, L, bi, P):
    I, H = 7, 5
    want = get_rnn_param_size(mode, I, H, L, bi, P)
    assert want == count_tensors(mode, I, H, L, bi, P)
    assert mx.rnn_param_size(mode, I, H, L, bi, P) == want


def test_param_size_arguments_checked():
    with pytest.raises(dnnl.invalid_arguments, match="projection_size"):
        mx.rnn_param_size("gru", 4, 4, 1, projection_size=2)
    with pytest.raises(dnnl.invalid_arguments, match="projection_size must be <= state_size"):
        mx.rnn_param_size("lstm", 4, 4, 1, projection_size=5)
    with pytest.raises(dnnl.invalid_arguments, match="mode"):
        mx.rnn_param_size("vanilla", 4, 4, 1)
    with pytest.raises(dnnl.invalid_arguments, match="num_layers"):
        mx.rnn_param_size("lstm", 4, 4, 0)


# -------------------------------------------------------------------------------------------------
# unpacking, written from MXNet's documented packing (a cursor walking the vector)
# -------------------------------------------------------------------------------------------------
def unpack(flat, mode, I, H, L, bi, P):
    """{(l, d): {"wx", "wh", "wr", "bx", "bh"}} in MXNet's (= PyTorch's) shapes."""
    D, G, R = 2 if bi else 1, GATES[mode], P or H
    flat = np.asarray(flat, np.float64)
    pos = 0

    def take(*shape):
        nonlocal pos
        n = int(np.prod(shape))
        out = flat[pos:pos + n].reshape(shape)
        pos += n
        return out

    w = {}
    for l in range(L):
        for d in range(D):
            e = w[(l, d)] = {"wx": take(G * H, I if l == 0 else D * R), "wh": take(G * H, R)}
            if P:
                e["wr"] = take(P, H)
    for l in range(L):
        for d in range(D):
            w[(l, d)]["bx"] = take(G * H)
            w[(l, d)]["bh"] = take(G * H)
    assert pos == flat.size
    return w


def mxnet_reference(mode, x, flat, h0, c0, H, L, bi, P, masks=None):
    """MXNet semantics from the numpy reference: one oneDNN layer at a time, both directions
    of layer l reading the concatenated output of layer l - 1."""
    D, G = 2 if bi else 1, GATES[mode]
    w = unpack(flat, mode, x.shape[2], H, L, bi, P)
    perm = [1, 0, 2] if mode == "gru" else list(range(G))   # oneDNN gate j <- MXNet block perm[j]
    cell = {"lstm": "vanilla_lstm", "gru": "lbr_gru"}.get(mode, "vanilla_rnn")

    def ldigo(m):  # [G*H, in] -> [in, G, H] in oneDNN's gate order
        return m.reshape(G, H, -1)[perm].transpose(2, 0, 1)

    def bias(e):
        bx, bh = e["bx"].reshape(G, H), e["bh"].reshape(G, H)
        if mode == "gru":  # u, r, o, u'
            return np.stack([bx[1] + bh[1], bx[0] + bh[0], bx[2], bh[2]])
        return bx + bh

    inp, hy, cy = np.asarray(x, np.float64), [], []
    for l in range(L):
        es = [w[(l, d)] for d in range(D)]
        kw = dict(direction="bidirectional_concat" if bi else "unidirectional_left2right",
                  activation="relu" if mode == "rnn_relu" else "tanh", dtype=np.float64)
        if P:
            kw["weights_projection"] = np.stack([e["wr"].T for e in es])[None]
        out, hl, cl, _ = rnn_forward(
            cell, inp, h0[l * D:(l + 1) * D][None],
            None if c0 is None else c0[l * D:(l + 1) * D][None],
            np.stack([ldigo(e["wx"]) for e in es])[None],
            np.stack([ldigo(e["wh"]) for e in es])[None],
            np.stack([bias(e) for e in es])[None], **kw)
        hy.append(hl[0])
        if cl is not None:
            cy.append(cl[0])
        inp = out * masks[l] if masks and l in masks else out
    return [inp, np.concatenate(hy)] + ([np.concatenate(cy)] if cy else [])


def torch_reference(mode, x, flat, h0, c0, H, L, bi, P):
    torch = pytest.importorskip("torch")
    I = x.shape[2]
    cls = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}.get(mode, torch.nn.RNN)
    kw = {"proj_size": P} if P else {}
    if mode.startswith("rnn_"):
        kw["nonlinearity"] = mode[4:]
    net = cls(I, H, num_layers=L, bidirectional=bi, **kw).double()
    w = unpack(flat, mode, I, H, L, bi, P)
    with torch.no_grad():
        for (l, d), e in w.items():
            sfx = f"l{l}" + ("_reverse" if d else "")
            for ours, theirs in (("wx", "weight_ih"), ("wh", "weight_hh"), ("bx", "bias_ih"),
                                 ("bh", "bias_hh"), ("wr", "weight_hr")):
                if ours in e:
                    getattr(net, f"{theirs}_{sfx}").copy_(torch.from_numpy(e[ours]))
        t = lambda a: torch.from_numpy(np.asarray(a, np.float64))  # noqa: E731
        if mode == "lstm":
            out, (hy, cy) = net(t(x), (t(h0), t(c0)))
            return [out.numpy(), hy.numpy(), cy.numpy()]
        out, hy = net(t(x), t(h0))
        return [out.numpy(), hy.numpy()]


def assert_close(got, want, what=""):
    """The f32 criterion of the RNN tests: 1e-5 relative to the tensor's magnitude."""
    want = np.asarray(want)
    assert np.shape(got) == want.shape, f"{what}: shape {np.shape(got)} != {want.shape}"
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * scale, err_msg=what)


# -------------------------------------------------------------------------------------------------
# outputs
# -------------------------------------------------------------------------------------------------
T, N, H = 4, 3, 6
# (mode, input size, layers, bidirectional, projection)
# (unidirectional layer 0 shares a primitive with the layers above when I = R)
CASES = [("lstm", 5, 1, False, None), ("lstm", 5, 2, True, None), ("lstm", 5, 2, True, 3),
         ("lstm", 6, 3, True, 3), ("lstm", 3, 3, False, 3), ("gru", 5, 2, True, None),
         ("gru", 12, 3, True, None), ("gru", 6, 3, False, None), ("rnn_tanh", 5, 3, True, None),
         ("rnn_relu", 5, 2, False, None)]
CASE_IDS = [f"{m}-I{i}-L{l}-{'bi' if b else 'uni'}" + (f"-P{p}" if p else "")
            for m, i, l, b, p in CASES]


def make_inputs(case, seed=0):
    mode, I, L, bi, P = case
    D = 2 if bi else 1
    rng = np.random.default_rng(seed)
    f = lambda *s: rng.uniform(-0.5, 0.5, s).astype(np.float32)  # noqa: E731
    n = get_rnn_param_size(mode, I, H, L, bi, P)
    return dict(x=f(T, N, I), params=f(n), h0=f(L * D, N, P or H),
                c0=f(L * D, N, H) if mode == "lstm" else None)


def run(case, inp, **kw):
    mode, I, L, bi, P = case
    return mx.rnn(inp["x"], inp["params"], inp["h0"], inp["c0"], mode=mode, state_size=H,
                  num_layers=L, bidirectional=bi, projection_size=P, **kw)


_RESULTS: dict = {}


def results(engine, case):
    key = (engine, case)
    if key not in _RESULTS:
        inp = make_inputs(case)
        _RESULTS[key] = (inp, run(case, inp, state_outputs=True, engine=engine))
    return _RESULTS[key]


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_matches_reference(engine, case):
    mode, I, L, bi, P = case
    inp, got = results(engine, case)
    want = mxnet_reference(mode, inp["x"], inp["params"], inp["h0"], inp["c0"], H, L, bi, P)
    assert len(got) == len(want) == (3 if mode == "lstm" else 2)
    for g, w, name in zip(got, want, ("out", "hy", "cy")):
        assert isinstance(g, np.ndarray) and g.dtype == np.float32
        assert_close(g, w, name)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_matches_torch(engine, case):
    mode, I, L, bi, P = case
    inp, got = results(engine, case)
    want = torch_reference(mode, inp["x"], inp["params"], inp["h0"], inp["c0"], H, L, bi, P)
    for g, w, name in zip(got, want, ("out", "hy", "cy")):
        assert_close(g, w, name)


def test_layers_grouped_into_primitives():
    """Layers of equal input size share one primitive (oneDNN's stack is MXNet's there for
    unidirectional layers; bidirectional ones use the per-layer bidirectional extension)."""
    def groups(*args):
        out = mx._rnn.group_layers(mx.RnnPacking.make(*args))
        assert all(ext.layer_bidirectional == (len(args) > 4 and args[4]) for _, ext in out)
        return [list(g) for g, _ in out]

    assert groups("gru", 6, 6, 3) == [[0, 1, 2]]
    assert groups("gru", 5, 6, 3) == [[0], [1, 2]]
    assert groups("lstm", 3, 6, 3, False, 3) == [[0, 1, 2]]
    assert groups("lstm", 5, 6, 3, True) == [[0], [1, 2]]
    assert groups("lstm", 6, 6, 3, True, 3) == [[0, 1, 2]]


def test_state_outputs_forms(engine):
    for case in (CASES[1], CASES[5]):
        inp, full = results(engine, case)
        out = run(case, inp, engine=engine)
        assert isinstance(out, np.ndarray)
        assert_close(out, full[0], "out")
        both = run(case, inp, state_outputs=True, engine=engine)
        assert isinstance(both, list) and len(both) == len(full)


def test_memory_in_memory_out(engine):
    case = CASES[2]                                  # LSTMP, bidirectional, 2 layers
    inp, want = results(engine, case)
    mode, I, L, bi, P = case
    s = dnnl.stream(engine)

    def mem(a, t=tag.abc):
        return dnnl.memory(dnnl.memory.desc(list(a.shape), dt.f32, t), engine, a)

    # parameters as a view 5 elements into a larger buffer; data in ntc layout
    n = inp["params"].size
    big = mem(np.concatenate([np.full(5, 7.0, np.float32), inp["params"]]), tag.a)
    params = dnnl.memory(big.get_desc().submemory_desc([n], [5]), engine, big.get_data_handle())
    x = mem(inp["x"], tag.ntc)
    got = mx.rnn(x, params, mem(inp["h0"]), mem(inp["c0"]), mode=mode, state_size=H,
                 num_layers=L, bidirectional=bi, projection_size=P, state_outputs=True,
                 stream=s)
    s.wait()
    assert all(isinstance(g, dnnl.memory) for g in got)
    for g, w, name in zip(got, want, ("out", "hy", "cy")):
        assert_close(g.to_numpy(), w, name)
    # a mix: memory data, numpy parameters and states
    out = mx.rnn(x, inp["params"], inp["h0"], inp["c0"], mode=mode, state_size=H, num_layers=L,
                 bidirectional=bi, projection_size=P)
    assert isinstance(out, dnnl.memory)
    assert_close(out.to_numpy(), want[0], "out")


def test_primitives_created_once(engine, monkeypatch):
    """A loop of calls of one problem builds the primitives at the first call only; new
    parameter values are taken at every call (weights are not cached)."""
    created = []
    orig = dnnl.primitive.__init__

    def counting_init(self, pd):
        created.append(type(self).__name__)
        orig(self, pd)

    monkeypatch.setattr(dnnl.primitive, "__init__", counting_init)
    mx.rnn_cache_clear()
    case = CASES[5]                                  # GRU, bidirectional, 2 layers
    mode, I, L, bi, P = case
    counts = []
    for seed in (1, 2, 3):
        inp = make_inputs(case, seed)
        out, hy = run(case, inp, state_outputs=True, engine=engine)
        want = mxnet_reference(mode, inp["x"], inp["params"], inp["h0"], inp["c0"], H, L, bi, P)
        assert_close(out, want[0], f"out, call with seed {seed}")
        assert_close(hy, want[1], f"hy, call with seed {seed}")
        counts.append(len(created))
    assert counts[0] > 0 and counts[0] == counts[1] == counts[2], counts
    assert created.count("lbr_gru_forward") == L
    assert mx.rnn_cache_info() == {"problems": 1, "primitives": counts[0]}


def numpy_lstm(x, flat, h0, c0, H, L, bi, P, clip=None, nan_to_min=False):
    """MXNet's LSTM(P) equations as its documentation writes them, in float64, with the
    cell state clamped into ``clip`` at every step (a NaN made ``clip[0]`` with
    ``nan_to_min``); returns [out, hy, cy]."""
    D, T = 2 if bi else 1, x.shape[0]
    w = unpack(flat, "lstm", x.shape[2], H, L, bi, P)
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    inp, hy, cy = np.asarray(x, np.float64), [], []
    for l in range(L):
        outs = []
        for d in range(D):
            e = w[(l, d)]
            h, c = np.asarray(h0[l * D + d], np.float64), np.asarray(c0[l * D + d], np.float64)
            y = np.zeros((T, x.shape[1], P or H))
            for t in (range(T) if d == 0 else range(T - 1, -1, -1)):
                i, f, g, o = np.split(inp[t] @ e["wx"].T + e["bx"] + h @ e["wh"].T + e["bh"], 4, 1)
                c = sig(f) * c + sig(i) * np.tanh(g)
                if clip is not None:
                    c = np.where(np.isnan(c) & nan_to_min, clip[0], np.clip(c, *clip))
                h = sig(o) * np.tanh(c)
                if P:
                    h = h @ e["wr"].T
                y[t] = h
            outs.append(y)
            hy.append(h)
            cy.append(c)
        inp = np.concatenate(outs, axis=2)
    return [inp, np.stack(hy), np.stack(cy)]


def test_lstm_state_clip(engine):
    case = ("lstm", 6, 2, True, 3)
    mode, I, L, bi, P = case
    inp = make_inputs(case, seed=4)
    inp["params"] = inp["params"] * 4               # large gates, so that the clip bites
    lo, hi = -0.3, 0.4
    plain = run(case, inp, state_outputs=True, engine=engine)
    assert_close(plain[0],
                 numpy_lstm(inp["x"], inp["params"], inp["h0"], inp["c0"], H, L, bi, P)[0],
                 "out without clip")
    got = run(case, inp, state_outputs=True, engine=engine, lstm_state_clip_min=lo,
              lstm_state_clip_max=hi)
    want = numpy_lstm(inp["x"], inp["params"], inp["h0"], inp["c0"], H, L, bi, P, (lo, hi))
    assert np.abs(plain[2]).max() > hi and np.abs(got[0] - plain[0]).max() > 1e-2
    for g, w, name in zip(got, want, ("out", "hy", "cy")):
        assert_close(g, w, name)
    assert got[2].min() >= lo and got[2].max() <= hi

    # a NaN in the initial cell state: propagates, or is clipped to the minimum with clip_nan
    c0 = inp["c0"].copy()
    c0[0, 1, 2] = np.nan
    nan_in = dict(inp, c0=c0)
    for nan_to_min in (False, True):
        got = run(case, nan_in, state_outputs=True, engine=engine, lstm_state_clip_min=lo,
                  lstm_state_clip_max=hi, lstm_state_clip_nan=nan_to_min)
        want = numpy_lstm(inp["x"], inp["params"], inp["h0"], c0, H, L, bi, P, (lo, hi), nan_to_min)
        assert np.isnan(want[0]).any() != nan_to_min
        for g, w, name in zip(got, want, ("out", "hy", "cy")):
            assert_close(g, w, f"{name}, clip_nan={nan_to_min}")


def test_dropout_ignored_in_inference(engine):
    case = CASES[1]
    inp, full = results(engine, case)
    assert_close(run(case, inp, p=0.5, training=False, engine=engine), full[0], "out")


# -------------------------------------------------------------------------------------------------
# errors
# -------------------------------------------------------------------------------------------------
def test_wrong_parameter_length_names_both_lengths(engine):
    case = CASES[1]
    inp = make_inputs(case)
    n = inp["params"].size
    bad = dict(inp, params=inp["params"][:-1])
    with pytest.raises(dnnl.error, match=rf"{n} elements.*got {n - 1}\b"):
        run(case, bad, engine=engine)
    bad = dict(inp, params=np.zeros(n + 3, np.float32))
    with pytest.raises(dnnl.invalid_arguments, match=rf"{n} elements.*got {n + 3}\b"):
        run(case, bad, engine=engine)


def test_bad_arguments(engine):
    case = CASES[1]
    inp = make_inputs(case)
    with pytest.raises(dnnl.invalid_arguments, match="state_cell"):
        run(case, dict(inp, c0=None), engine=engine)
    with pytest.raises(dnnl.invalid_arguments,
                       match=r"state must have shape .*\[4, 3, 6\], got \[4, 2, 6\]"):
        run(case, dict(inp, h0=inp["h0"][:, :2]), engine=engine)
    gru = CASES[5]
    with pytest.raises(dnnl.invalid_arguments, match="state_cell is for mode 'lstm' only"):
        run(gru, dict(make_inputs(gru), c0=inp["c0"]), engine=engine)
    with pytest.raises(dnnl.invalid_arguments, match="p must be in"):
        run(case, inp, p=1.5, engine=engine)
    with pytest.raises(dnnl.invalid_arguments, match="must be given together"):
        run(case, inp, lstm_state_clip_min=-1.0, engine=engine)
    with pytest.raises(dnnl.invalid_arguments,
                       match=r"must be <= lstm_state_clip_max, got 1.0 > -1.0"):
        run(case, inp, lstm_state_clip_min=1.0, lstm_state_clip_max=-1.0, engine=engine)
    with pytest.raises(dnnl.invalid_arguments, match="mode 'lstm' only"):
        run(gru, make_inputs(gru), lstm_state_clip_min=-1.0, lstm_state_clip_max=1.0,
            engine=engine)


@pytest.mark.parametrize("case", [CASES[2], CASES[6]], ids=[CASE_IDS[2], CASE_IDS[6]])
def test_sequence_length_matches_each_sequence_alone(engine, case):
    """cuDNN padded IO: zeros after each sequence's end, hy/cy at its last step; the oracle is
    the numpy reference run on each sequence alone at its own length."""
    mode, I, L, bi, P = case
    inp = make_inputs(case, seed=4)
    lens = np.array([3, T, 1][:N] + [2] * max(0, N - 3), np.int32)[:N]
    got = run(case, inp, state_outputs=True, engine=engine, use_sequence_length=True,
              sequence_length=lens)
    for n, ln in enumerate(lens):
        one = mxnet_reference(mode, inp["x"][:ln, n:n + 1], inp["params"], inp["h0"][:, n:n + 1],
                              None if inp["c0"] is None else inp["c0"][:, n:n + 1], H, L, bi, P)
        assert_close(got[0][:ln, n:n + 1], one[0], f"out of sequence {n}")
        assert np.all(got[0][ln:, n] == 0), f"out after the end of sequence {n}"
        for g, w, name in zip(got[1:], one[1:], ("hy", "cy")):
            assert_close(g[:, n:n + 1], w, f"{name} of sequence {n}")


def test_sequence_length_checked(engine):
    case = CASES[1]
    with pytest.raises(dnnl.invalid_arguments, match="sequence_length values must be in"):
        run(case, make_inputs(case), engine=engine, use_sequence_length=True,
            sequence_length=np.array([0] + [T] * (N - 1), np.int32))


def _dropout_masks(case, p):
    """The masks the plan's primitives document (pydnnl.rnn_extensions): per group of layers,
    Philox keyed by the group's dropout_seed, counter block (l - l0) * D + d on the first call."""
    from pydnnl.compat.mxnet._packing import RnnPacking
    from pydnnl.compat.mxnet._rnn import group_layers
    from pydnnl.reference.philox import dropout_scales

    mode, I, L, bi, P = case
    D, R = (2 if bi else 1), (P or H)
    pk = RnnPacking(mode, I, H, L, D, P)
    masks = {}
    for layers, ext in group_layers(pk, dropout=p):
        for l in layers:
            if l == L - 1:
                continue
            masks[l] = np.concatenate(
                [dropout_scales(ext.dropout_seed, (l - layers.start) * D + d, T * N * R, p)
                 .reshape(T, N, R) for d in range(D)], axis=2)
    return masks


@pytest.mark.parametrize("case", [CASES[1], CASES[3], CASES[7]],
                         ids=[CASE_IDS[1], CASE_IDS[3], CASE_IDS[7]])
def test_dropout_in_training_matches_reference_with_documented_masks(engine, case):
    mode, I, L, bi, P = case
    inp = make_inputs(case, seed=6)
    p = 0.4
    got = run(case, inp, state_outputs=True, engine=engine, p=p, training=True)
    want = mxnet_reference(mode, inp["x"], inp["params"], inp["h0"], inp["c0"], H, L, bi, P,
                           masks=_dropout_masks(case, p))
    for g, w, name in zip(got, want, ("out", "hy", "cy")):
        assert_close(g, w, name)
    plain = run(case, inp, engine=engine)
    assert not np.allclose(got[0], plain), "dropout changed nothing"


def test_dropout_draws_new_masks_each_call_and_none_after_the_last_layer(engine):
    case = CASES[1]
    inp = make_inputs(case, seed=7)
    a = run(case, inp, engine=engine, p=0.5, training=True)
    b = run(case, inp, engine=engine, p=0.5, training=True)
    assert not np.array_equal(a, b)
    one = CASES[0]  # one layer: MXNet drops nothing
    inp1 = make_inputs(one, seed=7)
    np.testing.assert_array_equal(run(one, inp1, engine=engine, p=0.5, training=True),
                                  run(one, inp1, engine=engine))
