"""Tests of the numpy RNN reference's extensions: variable sequence lengths (and the packed
form), per-layer bidirectional stacks, dropout between layers, skip input, no bias and LSTM
cell-state clipping, alone and combined.

Oracles: the same reference run without the feature on inputs that make the feature's effect
explicit (each sequence alone at its own length, chains of one-layer runs, identity input
weights, an unreachable clip range), central finite differences for every gradient, and
PyTorch (packing, and its LSTMP / GRU / RNN over packed sequences, forward and autograd)
where it is importable.
"""
from __future__ import annotations

import zlib

import numpy as np
import pytest

from pydnnl.cells import CELLS, get_cell
from pydnnl.error import invalid_arguments
from pydnnl.reference.rnn import pack_padded, rnn_backward, rnn_forward, unpack_packed

DIRECTIONS = ["unidirectional_left2right", "unidirectional_right2left",
              "bidirectional_concat", "bidirectional_sum"]
CELL_NAMES = list(CELLS)
INPUTS = ("src_layer", "src_iter", "src_iter_c", "weights_layer", "weights_iter", "bias",
          "weights_peephole", "weights_projection", "attention")


def _seed(*parts) -> int:
    """A seed that is stable across processes (str hashes are salted per process)."""
    return zlib.crc32(repr(parts).encode()) % 10000


def make(cell, direction="unidirectional_left2right", L=1, *, T=4, N=2, slc=None, dhc=3,
         dic=None, peephole=False, projection=False, layer_bi=False, skip=False,
         with_iter=True, seed=0, dtype=np.float64):
    """Random arguments of rnn_forward (keyword dict with the cell name under "cell")."""
    spec = get_cell(cell)
    rng = np.random.default_rng(seed)
    D = 2 if direction.startswith("bidirectional") else 1
    dic = dic or (dhc - 1 if projection else dhc)
    if slc is None:
        slc = dhc if skip else ((2 * dic if layer_bi else dic) if L > 1 else 3)

    def rnd(*shape, s=0.6):
        return (rng.standard_normal(shape) * s).astype(dtype)

    kw = dict(
        cell=spec.name, direction=direction,
        src_layer=rnd(T, N, slc, s=1.0),
        src_iter=rnd(L, D, N, dic, s=1.0) if with_iter else None,
        src_iter_c=rnd(L, D, N, dhc, s=1.0) if (with_iter and spec.has_cell_state) else None,
        weights_layer=rnd(L, D, slc, spec.n_gates, dhc),
        weights_iter=rnd(L, D, dic, spec.n_gates, dhc),
        bias=rnd(L, D, spec.n_bias_gates, dhc),
    )
    if peephole:
        kw["weights_peephole"] = rnd(L, D, 3, dhc)
    if projection:
        kw["weights_projection"] = rnd(L, D, dhc, dic)
    if spec.has_attention:
        kw["attention"] = rng.random((T, N, 1)).astype(dtype)
    return kw


def fwd(kw, **ext):
    kw = dict(kw)
    return rnn_forward(kw.pop("cell"), **kw, **ext)


def dims_of(kw):
    L, D, _, _, dhc = kw["weights_iter"].shape
    T, N, _ = kw["src_layer"].shape
    dic = kw["weights_iter"].shape[2]
    return T, N, L, D, dhc, dic


def random_scales(kw, seed, p=0.3):
    """A fixed dropout scale array: 0 or 1 / (1 - p)."""
    T, N, L, D, _, dic = dims_of(kw)
    keep = np.random.default_rng(seed).random((L - 1, D, T, N, dic)) >= p
    return np.where(keep, 1 / (1 - p), 0.0)


def random_diffs(outputs, seed, lengths=None):
    """diff_dst_layer / diff_dst_iter / diff_dst_iter_c; NaN at padded positions of
    diff_dst_layer when lengths are given (they must be ignored)."""
    rng = np.random.default_rng(seed + 777)
    dl, di, dc = outputs[:3]
    r1 = rng.standard_normal(dl.shape)
    if lengths is not None:
        r1[np.arange(dl.shape[0])[:, None] >= np.asarray(lengths)[None, :]] = np.nan
    r2 = rng.standard_normal(di.shape)
    r3 = rng.standard_normal(dc.shape) if dc is not None else None
    return r1, r2, r3


# --------------------------------------------------------------------------------------------
# finite differences
# --------------------------------------------------------------------------------------------
def check_fd(kw, ext=None, seed=0, eps=1e-6, n_directions=2):
    """Directional central differences of sum(dst_layer R1) + sum(dst_iter R2)
    + sum(dst_iter_c R3) for every differentiable input given to rnn_forward with the
    extension arguments ``ext``; missing states are checked as the zeros they stand for.
    Returns the names of the gradients checked."""
    ext = ext or {}
    spec = get_cell(kw["cell"])
    T, N, L, D, dhc, dic = dims_of(kw)
    full = dict(kw)
    if full.get("src_iter") is None:
        full["src_iter"] = np.zeros((L, D, N, dic))
    if spec.has_cell_state and full.get("src_iter_c") is None:
        full["src_iter_c"] = np.zeros((L, D, N, dhc))
    rng = np.random.default_rng(seed + 12345)
    out = fwd(full, **ext)
    r1, r2, r3 = random_diffs(out, seed)
    grads = rnn_backward(spec.name, out[3], r1, r2, r3)

    def loss(k):
        a, b, c, _ = fwd(k, **ext)
        return np.sum(a * r1) + np.sum(b * r2) + (np.sum(c * r3) if c is not None else 0.0)

    checked = []
    for name in INPUTS:
        x, g = full.get(name), grads["diff_" + name]
        if x is None:
            assert g is None, f"diff_{name} should be None"
            continue
        assert g is not None and g.shape == x.shape, \
            f"diff_{name}: {None if g is None else g.shape}"
        for _ in range(n_directions):
            v = rng.standard_normal(x.shape)
            kp, km = dict(full), dict(full)
            kp[name], km[name] = x + eps * v, x - eps * v
            num = (loss(kp) - loss(km)) / (2 * eps)
            an = float(np.sum(g * v))
            assert abs(num - an) <= 1e-6 * (1 + abs(an)), \
                f"diff_{name}: analytic {an}, numeric {num}"
        checked.append("diff_" + name)
    return checked, grads


def clip_away_from_states(kw, ext=None, margin=1e-3):
    """A clip range that clamps some cell states and leaves others inside, with no pre-clamp
    value within ``margin`` of a bound (so that finite differences never cross one)."""
    ext = dict(ext or {})
    free = fwd(kw, **ext)[3]
    c_free = np.concatenate([s["c"].ravel() for steps in free["steps"].values() for s in steps])
    for q in ((0.2, 0.8), (0.25, 0.7), (0.15, 0.85), (0.3, 0.9), (0.1, 0.75), (0.35, 0.65)):
        lo, hi = np.quantile(c_free, q)
        cache = fwd(kw, **ext, clip=(lo, hi))[3]
        pre = np.concatenate([s["c_pre"].ravel() for steps in cache["steps"].values()
                              for s in steps])
        near = np.min(np.minimum(np.abs(pre - lo), np.abs(pre - hi)))
        inside = (pre > lo) & (pre < hi)
        if near > margin and np.any(pre < lo) and np.any(pre > hi) and np.any(inside):
            return float(lo), float(hi)
    raise AssertionError("no clip range away from the cell states; change the seed")


@pytest.mark.parametrize("L", [1, 2], ids=["L1", "L2"])
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("cell", CELL_NAMES)
def test_var_lengths_finite_differences(cell, direction, L):
    kw = make(cell, direction, L, T=4, N=2, seed=_seed("len", cell, direction, L))
    checked, _ = check_fd(kw, {"seq_lengths": [2, 4] if L == 1 else [3, 1]})
    assert "diff_src_layer" in checked


@pytest.mark.parametrize("L", [2, 3], ids=["L2", "L3"])
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("cell", ["vanilla_lstm", "vanilla_gru", "lbr_augru"])
def test_dropout_finite_differences(cell, direction, L):
    kw = make(cell, direction, L, dhc=2, seed=_seed("drop", cell, direction, L))
    check_fd(kw, {"dropout_scales": random_scales(kw, L)})


@pytest.mark.parametrize("L", [1, 2], ids=["L1", "L2"])
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("cell", CELL_NAMES)
def test_skip_input_finite_differences(cell, direction, L):
    kw = make(cell, direction, L, skip=True, seed=_seed("skip", cell, direction, L))
    _, grads = check_fd(kw, {"skip_input": True})
    assert np.all(grads["diff_weights_layer"][0] == 0)


def test_skip_input_without_weights_layer_finite_differences():
    kw = make("vanilla_lstm", "bidirectional_sum", 1, skip=True, seed=4)
    kw["weights_layer"] = None
    checked, grads = check_fd(kw, {"skip_input": True})
    assert grads["diff_weights_layer"] is None and "diff_src_layer" in checked


@pytest.mark.parametrize("L", [2, 3], ids=["L2", "L3"])
@pytest.mark.parametrize("cell", CELL_NAMES)
def test_layer_bidirectional_finite_differences(cell, L):
    kw = make(cell, "bidirectional_concat", L, dhc=2, layer_bi=True, seed=_seed("lbi", cell, L))
    check_fd(kw, {"layer_bidirectional": True})


@pytest.mark.parametrize("variant", ["plain", "peephole", "projection", "peephole_projection"])
@pytest.mark.parametrize("L", [1, 2], ids=["L1", "L2"])
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_clip_finite_differences(direction, L, variant):
    kw = make("vanilla_lstm", direction, L, peephole="peephole" in variant,
              projection="projection" in variant, seed=_seed("clip", direction, L, variant))
    for nan in (False, True):
        check_fd(kw, {"clip": clip_away_from_states(kw), "clip_nan": nan})


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_no_bias_finite_differences(direction):
    kw = make("lbr_gru", direction, 2, seed=_seed("nobias", direction))
    kw["bias"] = None
    _, grads = check_fd(kw, {"no_bias": True})
    assert grads["diff_bias"] is None


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_projection_clip_var_lengths_finite_differences(direction):
    kw = make("vanilla_lstm", direction, 2, T=4, N=2, projection=True, peephole=True,
              seed=_seed("pcl", direction))
    ext = {"seq_lengths": [1, 3]}
    ext["clip"] = clip_away_from_states(kw, ext)
    check_fd(kw, ext)


def test_everything_combined_lstmp_finite_differences():
    """LSTMP with peephole: per-layer bidirectional L = 2 with skip input (SLC = DHC = 2 DIC),
    dropout, var lengths, no bias and clip together."""
    kw = make("vanilla_lstm", "bidirectional_concat", 2, dhc=2, dic=1, projection=True,
              peephole=True, skip=True, layer_bi=True, seed=_seed("all"))
    kw["bias"] = None
    ext = {"seq_lengths": [4, 2], "layer_bidirectional": True, "skip_input": True,
           "no_bias": True, "dropout_scales": random_scales(kw, 1)}
    ext["clip"] = clip_away_from_states(kw, ext)
    _, grads = check_fd(kw, ext)
    assert grads["diff_bias"] is None
    assert np.all(grads["diff_weights_layer"][0] == 0)


@pytest.mark.parametrize("cell", CELL_NAMES)
def test_features_combined_finite_differences(cell):
    """Per-layer bidirectional with dropout, var lengths and no bias; skip input with dropout
    and var lengths. (Without projection, skip input and a per-layer bidirectional stack of
    L > 1 exclude each other: SLC would have to be both DHC and 2 DHC.)"""
    kw = make(cell, "bidirectional_concat", 2, dhc=2, layer_bi=True, seed=_seed("lbi+", cell))
    kw["bias"] = None
    _, grads = check_fd(kw, {"seq_lengths": [1, 3], "layer_bidirectional": True,
                             "no_bias": True, "dropout_scales": random_scales(kw, 2)})
    assert grads["diff_bias"] is None
    kw = make(cell, "bidirectional_sum", 2, skip=True, seed=_seed("skip+", cell))
    check_fd(kw, {"seq_lengths": [3, 4], "skip_input": True,
                  "dropout_scales": random_scales(kw, 3)})


# --------------------------------------------------------------------------------------------
# variable lengths against each sequence run alone
# --------------------------------------------------------------------------------------------
def _sequence(kw, b, n):
    """The problem of sequence b alone, at length n."""
    k = dict(kw)
    k["src_layer"] = kw["src_layer"][:n, b:b + 1]
    for name in ("src_iter", "src_iter_c"):
        if kw.get(name) is not None:
            k[name] = kw[name][:, :, b:b + 1]
    if kw.get("attention") is not None:
        k["attention"] = kw["attention"][:n, b:b + 1]
    return k


@pytest.mark.parametrize("lengths", [[5, 3, 3, 1], [2, 5, 1, 4]], ids=["sorted", "unsorted"])
@pytest.mark.parametrize("L", [1, 2], ids=["L1", "L2"])
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("cell", CELL_NAMES)
def test_var_lengths_equal_per_sequence_runs(cell, direction, L, lengths):
    T, N = 5, 4
    kw = make(cell, direction, L, T=T, N=N, dhc=4, seed=_seed("seq", cell, direction, L))
    # padded positions hold NaN: they must never be read
    pad = np.arange(T)[:, None] >= np.asarray(lengths)[None, :]
    kw["src_layer"][pad] = np.nan
    if "attention" in kw:
        kw["attention"][pad] = np.nan
    out = fwd(kw, seq_lengths=np.asarray(lengths))
    dl, di, dc, cache = out
    r1, r2, r3 = random_diffs(out, 3, lengths)
    g = rnn_backward(cell, cache, r1, r2, r3)

    sums = {k: 0.0 for k in ("diff_weights_layer", "diff_weights_iter", "diff_bias")}
    tol = dict(rtol=1e-12, atol=1e-12)
    for b, n in enumerate(lengths):
        kb = _sequence(kw, b, n)
        dlb, dib, dcb, cb = fwd(kb)
        np.testing.assert_allclose(dl[:n, b], dlb[:, 0], **tol)
        assert np.all(dl[n:, b] == 0)
        np.testing.assert_allclose(di[:, :, b], dib[:, :, 0], **tol)
        if dc is not None:
            np.testing.assert_allclose(dc[:, :, b], dcb[:, :, 0], **tol)
        gb = rnn_backward(cell, cb, r1[:n, b:b + 1], r2[:, :, b:b + 1],
                          None if r3 is None else r3[:, :, b:b + 1])
        np.testing.assert_allclose(g["diff_src_layer"][:n, b], gb["diff_src_layer"][:, 0], **tol)
        assert np.all(g["diff_src_layer"][n:, b] == 0)
        np.testing.assert_allclose(g["diff_src_iter"][:, :, b], gb["diff_src_iter"][:, :, 0], **tol)
        if dc is not None:
            np.testing.assert_allclose(g["diff_src_iter_c"][:, :, b],
                                       gb["diff_src_iter_c"][:, :, 0], **tol)
        if g["diff_attention"] is not None:
            np.testing.assert_allclose(g["diff_attention"][:n, b], gb["diff_attention"][:, 0],
                                       **tol)
            assert np.all(g["diff_attention"][n:, b] == 0)
        for k in sums:
            sums[k] = sums[k] + gb[k]
    for k, v in sums.items():
        np.testing.assert_allclose(g[k], v, rtol=1e-11, atol=1e-11, err_msg=k)


def test_full_lengths_equal_no_lengths():
    kw = make("vanilla_lstm", "bidirectional_concat", 2, T=4, N=3, peephole=True, seed=8)
    a = fwd(kw)
    b = fwd(kw, seq_lengths=[4, 4, 4])
    for x, y in zip(a[:3], b[:3]):
        np.testing.assert_array_equal(x, y)
    r = random_diffs(a, 1)
    ga, gb = rnn_backward("vanilla_lstm", a[3], *r), rnn_backward("vanilla_lstm", b[3], *r)
    for k in ga:
        np.testing.assert_array_equal(ga[k], gb[k], err_msg=k)


# --------------------------------------------------------------------------------------------
# pack / unpack
# --------------------------------------------------------------------------------------------
def test_pack_padded_closed_form():
    x = np.arange(4 * 3, dtype=np.float64).reshape(4, 3, 1)  # x[t, n] = 3 t + n
    data, batch_sizes, order = pack_padded(x, [2, 4, 2])
    np.testing.assert_array_equal(order, [1, 0, 2])  # ties keep their order
    np.testing.assert_array_equal(batch_sizes, [3, 3, 1, 1])
    np.testing.assert_array_equal(data[:, 0], [1, 0, 2, 4, 3, 5, 7, 10])
    back = unpack_packed(data, batch_sizes, order, 4)
    want = x.copy()
    want[2:, [0, 2]] = 0
    np.testing.assert_array_equal(back, want)
    np.testing.assert_array_equal(unpack_packed(data, batch_sizes, order, 5)[:4], want)


@pytest.mark.parametrize("lengths", [[5, 4, 2, 1], [3, 5, 1, 4, 2], [2, 4, 2, 4, 1], [3]])
def test_pack_round_trip(lengths):
    T = max(lengths) + 1
    x = np.random.default_rng(len(lengths)).standard_normal((T, len(lengths), 3))
    data, bs, order = pack_padded(x, lengths)
    assert data.shape == (sum(lengths), 3) and bs.sum() == sum(lengths)
    back = unpack_packed(data, bs, order, T)
    pad = np.arange(T)[:, None] >= np.asarray(lengths)[None, :]
    np.testing.assert_array_equal(back[~pad], x[~pad])
    assert np.all(back[pad] == 0)
    np.testing.assert_array_equal(pack_padded(back, lengths)[0], data)


@pytest.mark.parametrize("lengths", [[3, 5, 1, 4, 2], [2, 4, 2, 4, 1], [5, 5, 5]],
                         ids=["distinct", "ties", "equal"])
def test_pack_matches_torch(lengths):
    torch = pytest.importorskip("torch")
    from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

    T = 6
    x = np.random.default_rng(2).standard_normal((T, len(lengths), 2))
    data, bs, order = pack_padded(x, lengths)
    tp = pack_padded_sequence(torch.from_numpy(x), torch.tensor(lengths), enforce_sorted=False)
    np.testing.assert_array_equal(bs, tp.batch_sizes.numpy())
    if len(set(lengths)) == len(lengths):
        # the order within ties is not part of PyTorch's contract; without ties all is fixed
        np.testing.assert_array_equal(order, tp.sorted_indices.numpy())
        np.testing.assert_array_equal(data, tp.data.numpy())
    # each side reads the other's packing back to the same padded tensor
    np.testing.assert_array_equal(
        unpack_packed(tp.data.numpy(), tp.batch_sizes.numpy(), tp.sorted_indices.numpy(), T),
        unpack_packed(data, bs, order, T))
    ours = PackedSequence(torch.from_numpy(data), torch.from_numpy(bs),
                          torch.from_numpy(order), torch.from_numpy(np.argsort(order)))
    padded, lens = pad_packed_sequence(ours, total_length=T)
    np.testing.assert_array_equal(padded.numpy(), unpack_packed(data, bs, order, T))
    np.testing.assert_array_equal(lens.numpy(), lengths)


# --------------------------------------------------------------------------------------------
# against PyTorch's recurrent layers over packed sequences (forward and autograd)
# --------------------------------------------------------------------------------------------
def _torch_gate_rows(mode, G, H):
    """Rows of PyTorch's stacked gate weights in oneDNN's gate order."""
    if mode == "GRU":  # PyTorch r, z, n; oneDNN u (= z), r, o (= n)
        perm = [1, 0, 2]
    else:  # LSTM i, f, g, o = oneDNN i, f, c~, o; RNN has one gate
        perm = list(range(G))
    return np.concatenate([np.arange(H) + k * H for k in perm])


@pytest.mark.parametrize("mode", ["LSTM", "LSTMP", "GRU", "RNN"])
def test_layer_bidirectional_var_lengths_match_torch(mode):
    """PyTorch's bidirectional stacks are per-layer bidirectional; packed sequences are
    variable lengths. Two layers, so layer 1 reads both directions of layer 0."""
    torch = pytest.importorskip("torch")
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    T, N, H, L, D = 4, 3, 3, 2, 2
    P = 2 if mode == "LSTMP" else H
    lengths = [3, 4, 1]
    cell = {"LSTM": "vanilla_lstm", "LSTMP": "vanilla_lstm", "GRU": "lbr_gru",
            "RNN": "vanilla_rnn"}[mode]
    G = get_cell(cell).n_gates
    torch.manual_seed(0)
    kwargs = dict(input_size=2 * P, hidden_size=H, num_layers=L, bidirectional=True,
                  dtype=torch.float64)
    if mode == "LSTMP":
        kwargs["proj_size"] = P
    net = {"LSTM": torch.nn.LSTM, "LSTMP": torch.nn.LSTM, "GRU": torch.nn.GRU,
           "RNN": torch.nn.RNN}[mode](**kwargs)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((T, N, 2 * P))
    h0 = rng.standard_normal((L, D, N, P))
    c0 = rng.standard_normal((L, D, N, H)) if mode.startswith("LSTM") else None

    # PyTorch
    xt = torch.tensor(x, requires_grad=True)
    h0t = torch.tensor(h0.reshape(L * D, N, P), requires_grad=True)
    c0t = torch.tensor(c0.reshape(L * D, N, H), requires_grad=True) if c0 is not None else None
    packed = pack_padded_sequence(xt, torch.tensor(lengths), enforce_sorted=False)
    y, hn = net(packed, (h0t, c0t) if c0t is not None else h0t)
    y, _ = pad_packed_sequence(y, total_length=T)
    hn, cn = hn if c0t is not None else (hn, None)

    # the same parameters in oneDNN layouts
    rows = _torch_gate_rows("GRU" if mode == "GRU" else "other", G, H)
    prm = dict(net.named_parameters())
    wl = np.zeros((L, D, 2 * P, G, H))
    wi = np.zeros((L, D, P, G, H))
    bias = np.zeros((L, D, get_cell(cell).n_bias_gates, H))
    proj = np.zeros((L, D, H, P)) if mode == "LSTMP" else None
    for l in range(L):
        for d in range(D):
            sfx = f"_l{l}" + ("_reverse" if d else "")
            w_ih = prm["weight_ih" + sfx].detach().numpy()[rows]
            w_hh = prm["weight_hh" + sfx].detach().numpy()[rows]
            b_ih = prm["bias_ih" + sfx].detach().numpy()[rows].reshape(G, H)
            b_hh = prm["bias_hh" + sfx].detach().numpy()[rows].reshape(G, H)
            wl[l, d] = w_ih.reshape(G, H, -1).transpose(2, 0, 1)
            wi[l, d] = w_hh.reshape(G, H, -1).transpose(2, 0, 1)
            if mode == "GRU":  # linear before reset: n's recurrent bias stays inside r * (...)
                bias[l, d, :2] = b_ih[:2] + b_hh[:2]
                bias[l, d, 2], bias[l, d, 3] = b_ih[2], b_hh[2]
            else:
                bias[l, d] = b_ih + b_hh
            if proj is not None:
                proj[l, d] = prm["weight_hr" + sfx].detach().numpy().T
    dl, di, dc, cache = rnn_forward(cell, x, h0, c0, wl, wi, bias, direction="bidirectional_concat",
                                    weights_projection=proj, seq_lengths=lengths,
                                    layer_bidirectional=True)
    np.testing.assert_allclose(dl, y.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(di, hn.detach().numpy().reshape(L, D, N, P), rtol=1e-12, atol=1e-12)
    if cn is not None:
        np.testing.assert_allclose(dc, cn.detach().numpy().reshape(L, D, N, H), rtol=1e-12,
                                   atol=1e-12)

    r1, r2, r3 = random_diffs((dl, di, dc), 9)
    r1 = np.where(np.isnan(r1), 0, r1)
    loss = (y * torch.from_numpy(r1)).sum() + (hn * torch.from_numpy(r2.reshape(L * D, N, P))).sum()
    if cn is not None:
        loss = loss + (cn * torch.from_numpy(r3.reshape(L * D, N, H))).sum()
    loss.backward()
    g = rnn_backward(cell, cache, r1, r2, r3)
    tol = dict(rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(g["diff_src_layer"], xt.grad.numpy(), **tol)
    np.testing.assert_allclose(g["diff_src_iter"], h0t.grad.numpy().reshape(L, D, N, P), **tol)
    if c0t is not None:
        np.testing.assert_allclose(g["diff_src_iter_c"], c0t.grad.numpy().reshape(L, D, N, H),
                                   **tol)
    for l in range(L):
        for d in range(D):
            sfx = f"_l{l}" + ("_reverse" if d else "")
            gw_ih = prm["weight_ih" + sfx].grad.numpy()[rows]
            gw_hh = prm["weight_hh" + sfx].grad.numpy()[rows]
            gb_ih = prm["bias_ih" + sfx].grad.numpy()[rows].reshape(G, H)
            gb_hh = prm["bias_hh" + sfx].grad.numpy()[rows].reshape(G, H)
            np.testing.assert_allclose(g["diff_weights_layer"][l, d],
                                       gw_ih.reshape(G, H, -1).transpose(2, 0, 1), **tol)
            np.testing.assert_allclose(g["diff_weights_iter"][l, d],
                                       gw_hh.reshape(G, H, -1).transpose(2, 0, 1), **tol)
            db = g["diff_bias"][l, d]
            np.testing.assert_allclose(db[:G], gb_ih, **tol)
            if mode == "GRU":
                np.testing.assert_allclose(db[:2], gb_hh[:2], **tol)
                np.testing.assert_allclose(db[3], gb_hh[2], **tol)
            else:
                np.testing.assert_allclose(db, gb_hh, **tol)
            if proj is not None:
                np.testing.assert_allclose(g["diff_weights_projection"][l, d],
                                           prm["weight_hr" + sfx].grad.numpy().T, **tol)


# --------------------------------------------------------------------------------------------
# closed forms and equivalences
# --------------------------------------------------------------------------------------------
def _assert_same(a, b, exact=True):
    for x, y in zip(a, b):
        if x is None:
            assert y is None
        elif exact:
            np.testing.assert_array_equal(x, y)
        else:
            np.testing.assert_allclose(x, y, rtol=1e-13, atol=1e-13)


def _same_backward(cell, cache_a, cache_b, outputs, exact=True, skip=()):
    r = random_diffs(outputs, 4)
    ga, gb = rnn_backward(cell, cache_a, *r), rnn_backward(cell, cache_b, *r)
    for k in ga:
        if k not in skip:
            _assert_same([ga[k]], [gb[k]], exact)
    return ga, gb


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("cell", ["vanilla_lstm", "lbr_gru"])
def test_dropout_all_ones_equals_no_dropout(cell, direction):
    kw = make(cell, direction, 3, seed=6)
    a, b = fwd(kw), fwd(kw, dropout_scales=np.ones_like(random_scales(kw, 0)))
    _assert_same(a[:3], b[:3])
    _same_backward(cell, a[3], b[3], a)


def _chain_one_layer_runs(kw, scales, layer_bi):
    """The stack as one-layer runs chained by hand: each layer's output, times its dropout
    scales, is the next layer's input. Returns (dst_layer, dst_iter, dst_iter_c)."""
    direction = kw["direction"]
    T, N, L, D, _, dic = dims_of(kw)
    per = ["unidirectional_left2right", "unidirectional_right2left"] if D == 2 else [direction]
    his, cis, outs = [], [], [[None] * D for _ in range(L)]
    for l in range(L):
        for d in range(D):
            if l == 0:
                x = kw["src_layer"]
            elif layer_bi:
                x = np.concatenate([outs[l - 1][e] * scales[l - 1, e] for e in range(D)], axis=2)
            else:
                x = outs[l - 1][d] * scales[l - 1, d]
            one = {k: (v[l:l + 1, d:d + 1] if k in ("src_iter", "src_iter_c", "weights_layer",
                                                    "weights_iter", "bias", "weights_peephole",
                                                    "weights_projection") and v is not None
                       else v) for k, v in kw.items()}
            one.update(src_layer=x, direction=per[d])
            y, h, c, _ = fwd(one)
            outs[l][d] = y
            his.append(h[0, 0])
            cis.append(None if c is None else c[0, 0])
    tops = outs[L - 1]
    dl = (np.concatenate(tops, axis=2) if direction == "bidirectional_concat"
          else tops[0] + tops[1] if direction == "bidirectional_sum" else tops[0])
    di = np.stack(his).reshape(L, D, N, dic)
    dc = None if cis[0] is None else np.stack(cis).reshape(L, D, N, -1)
    return dl, di, dc


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("cell", ["vanilla_lstm", "vanilla_augru", "vanilla_rnn"])
def test_dropout_equals_chained_runs(cell, direction):
    kw = make(cell, direction, 3, projection=cell == "vanilla_lstm", seed=_seed("chain", cell))
    scales = random_scales(kw, 2)
    _assert_same(fwd(kw, dropout_scales=scales)[:3], _chain_one_layer_runs(kw, scales, False),
                 exact=False)


@pytest.mark.parametrize("L", [2, 3])
@pytest.mark.parametrize("cell", CELL_NAMES)
def test_layer_bidirectional_equals_chained_runs(cell, L):
    kw = make(cell, "bidirectional_concat", L, layer_bi=True, seed=_seed("lbchain", cell, L))
    scales = random_scales(kw, 3)
    got = fwd(kw, layer_bidirectional=True, dropout_scales=scales)
    _assert_same(got[:3], _chain_one_layer_runs(kw, scales, True), exact=False)


@pytest.mark.parametrize("cell", CELL_NAMES)
def test_layer_bidirectional_one_layer_equals_bidirectional_concat(cell):
    kw = make(cell, "bidirectional_concat", 1, peephole=cell == "vanilla_lstm", seed=2)
    a, b = fwd(kw), fwd(kw, layer_bidirectional=True)
    _assert_same(a[:3], b[:3])
    _same_backward(cell, a[3], b[3], a)


@pytest.mark.parametrize("L", [1, 2], ids=["L1", "L2"])
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("cell", CELL_NAMES)
def test_skip_input_equals_identity_input_weights(cell, direction, L):
    """Skip input is an input matrix of identities, one per gate."""
    kw = make(cell, direction, L, skip=True, seed=_seed("eye", cell, direction, L))
    G, dhc = kw["weights_layer"].shape[3:]
    eye = dict(kw, weights_layer=kw["weights_layer"].copy())
    eye["weights_layer"][0] = np.eye(dhc)[:, None, :]  # [SLC, G, DHC], broadcast over L0's D
    kw["weights_layer"][0] = np.nan  # never read
    a, b = fwd(kw, skip_input=True), fwd(eye)
    _assert_same(a[:3], b[:3], exact=False)
    ga, gb = _same_backward(cell, a[3], b[3], a, exact=False, skip=("diff_weights_layer",))
    assert np.all(ga["diff_weights_layer"][0] == 0) and np.any(gb["diff_weights_layer"][0] != 0)
    _assert_same([ga["diff_weights_layer"][1:]], [gb["diff_weights_layer"][1:]], exact=False)
    if L == 1:
        c = fwd(dict(kw, weights_layer=None), skip_input=True)
        _assert_same(a[:3], c[:3])
        assert rnn_backward(cell, c[3], *random_diffs(c, 4))["diff_weights_layer"] is None


def test_no_bias_equals_zero_bias():
    kw = make("vanilla_augru", "bidirectional_sum", 2, seed=3)
    zero = dict(kw, bias=np.zeros_like(kw["bias"]))
    a, b = fwd(dict(kw, bias=None), no_bias=True), fwd(zero)
    _assert_same(a[:3], b[:3])
    ga, gb = _same_backward("vanilla_augru", a[3], b[3], a, skip=("diff_bias",))
    assert ga["diff_bias"] is None and gb["diff_bias"] is not None
    # bias None without no_bias still stands for zeros, with a gradient
    c = fwd(dict(kw, bias=None))
    assert rnn_backward("vanilla_augru", c[3], *random_diffs(c, 4))["diff_bias"] is not None


@pytest.mark.parametrize("nan", [False, True])
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_clip_with_huge_range_equals_no_clip(direction, nan):
    kw = make("vanilla_lstm", direction, 2, peephole=True, projection=True, seed=7)
    a, b = fwd(kw), fwd(kw, clip=(-1e30, 1e30), clip_nan=nan)
    _assert_same(a[:3], b[:3])
    _same_backward("vanilla_lstm", a[3], b[3], a)


def test_clip_closed_form_one_step():
    """T = 1 from a zero state: c = i c~ of the unclipped cell, then clamped; h = o tanh(c)."""
    kw = make("vanilla_lstm", "unidirectional_left2right", 1, T=1, N=2, with_iter=False, seed=1)
    kw["src_layer"] *= 3  # spread the cell states over the range
    _, _, c_free, cache = fwd(kw)
    lo, hi = np.quantile(c_free, [0.3, 0.7])
    _, h, c, _ = fwd(kw, clip=(lo, hi))
    np.testing.assert_array_equal(c, np.clip(c_free, lo, hi))
    o = cache["steps"][(0, 0)][0]["o"]
    np.testing.assert_allclose(h[0, 0], o * np.tanh(c[0, 0]), rtol=1e-15, atol=1e-15)


def test_clip_nan_handling():
    """A NaN cell state propagates, or becomes min with clip_nan; the other sequence is
    untouched either way."""
    kw = make("vanilla_lstm", "unidirectional_left2right", 1, T=3, N=2, seed=11)
    kw["src_layer"][1, 0, 0] = np.nan
    lo, hi = -0.25, 0.5
    _, _, c_nan, _ = fwd(kw, clip=(lo, hi))
    _, _, c_min, _ = fwd(kw, clip=(lo, hi), clip_nan=True)
    assert np.all(np.isnan(c_nan[0, 0, 0]))
    assert np.all(c_min[0, 0, 0] == lo)
    clean = dict(kw, src_layer=kw["src_layer"][:, 1:], src_iter=kw["src_iter"][:, :, 1:],
                 src_iter_c=kw["src_iter_c"][:, :, 1:])
    want = fwd(clean, clip=(lo, hi))[2][0, 0, 0]
    np.testing.assert_allclose(c_nan[0, 0, 1], want, rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(c_min[0, 0, 1], want, rtol=1e-14, atol=1e-15)
    assert np.all((want >= lo) & (want <= hi))


def test_extensions_keep_float32():
    kw = make("vanilla_lstm", "bidirectional_concat", 2, dhc=2, projection=True, dic=1,
              skip=True, layer_bi=True, dtype=np.float32, seed=5)
    ext = dict(seq_lengths=[4, 2], layer_bidirectional=True, skip_input=True, clip=(-0.5, 0.5),
               dropout_scales=random_scales(kw, 0))
    out = fwd(kw, **ext)
    assert all(x.dtype == np.float32 for x in out[:3])
    g = rnn_backward("vanilla_lstm", out[3], *random_diffs(out, 0, [4, 2]))
    assert all(v.dtype == np.float32 for v in g.values() if v is not None)
    out64 = fwd({k: v.astype(np.float64) if isinstance(v, np.ndarray) else v
                 for k, v in kw.items()}, **ext)
    np.testing.assert_allclose(out[0], out64[0], rtol=1e-4, atol=1e-5)


# --------------------------------------------------------------------------------------------
# bad inputs
# --------------------------------------------------------------------------------------------
_KW = make("vanilla_lstm", "bidirectional_concat", 2, T=4, N=2, seed=0)
_GRU = make("vanilla_gru", "unidirectional_left2right", 1, seed=0)


@pytest.mark.parametrize("kw, ext, match", [
    (_KW, dict(seq_lengths=[1, 2, 3]), r"seq_lengths: expected shape \(2,\)"),
    (_KW, dict(seq_lengths=[0, 2]), r"seq_lengths: expected values in \[1, T = 4\]"),
    (_KW, dict(seq_lengths=[5, 2]), r"seq_lengths: expected values in \[1, T = 4\]"),
    (_KW, dict(seq_lengths=[1.5, 2.0]), "seq_lengths: expected integers"),
    (dict(_KW, direction="bidirectional_sum"), dict(layer_bidirectional=True),
     "layer_bidirectional: needs direction bidirectional_concat"),
    (_KW, dict(layer_bidirectional=True), r"weights_layer: .*layer_bidirectional.*2 \* DIC = 6"),
    (_KW, dict(dropout_scales=np.ones((2, 2, 4, 2, 3))), "dropout_scales: expected shape"),
    (_KW, dict(dropout_scales=-np.ones((1, 2, 4, 2, 3))), "dropout_scales: expected finite"),
    (_KW, dict(dropout_scales=np.full((1, 2, 4, 2, 3), np.nan)), "dropout_scales: expected finite"),
    (dict(_GRU, src_layer=np.ones((4, 2, 5)), weights_layer=None), dict(skip_input=True),
     "skip_input: needs SLC == DHC, got SLC = 5, DHC = 3"),
    (dict(_GRU, weights_layer=None), {}, "weights_layer: required unless skip_input"),
    (dict(_KW, weights_layer=None), dict(skip_input=True), "weights_layer: required unless"),
    (_KW, dict(no_bias=True), "bias: must be None with no_bias"),
    (_GRU, dict(clip=(0.0, 1.0)), "clip: .*vanilla_lstm only, got cell vanilla_gru"),
    (_KW, dict(clip=(1.0, -1.0)), "clip: expected min <= max"),
    (_KW, dict(clip=(0.0, np.nan)), "clip: expected min <= max"),
    (_KW, dict(clip=3.0), r"clip: expected \(min, max\)"),
    (_KW, dict(clip_nan=True), "clip_nan: needs clip"),
], ids=lambda v: v.split(":")[0] if isinstance(v, str) else "")
def test_bad_arguments(kw, ext, match):
    with pytest.raises(invalid_arguments, match=match):
        fwd(kw, **ext)


def test_bad_pack_arguments():
    x = np.zeros((3, 2, 1))
    with pytest.raises(invalid_arguments, match=r"lengths: expected values in \[1, T = 3\]"):
        pack_padded(x, [4, 1])
    with pytest.raises(invalid_arguments, match="lengths: expected shape"):
        pack_padded(x, [1])
    with pytest.raises(invalid_arguments, match="x: expected at least 2 dims"):
        pack_padded(np.zeros(3), [1])
    data, bs, order = pack_padded(x, [3, 1])
    with pytest.raises(invalid_arguments, match="batch_sizes: expected positive non-increasing"):
        unpack_packed(data, bs[::-1], order, 3)
    with pytest.raises(invalid_arguments, match="sorted_indices: expected a permutation"):
        unpack_packed(data, bs, [0, 0], 3)
    with pytest.raises(invalid_arguments, match="T: expected an integer >= len"):
        unpack_packed(data, bs, order, 2)
    with pytest.raises(invalid_arguments, match="data: expected sum"):
        unpack_packed(data[1:], bs, order, 3)
    assert issubclass(invalid_arguments, ValueError)
