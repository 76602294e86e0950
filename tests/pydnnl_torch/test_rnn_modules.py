"""pydnnl.torch.LSTM / GRU / RNN against torch.nn's modules (float64, loaded with the same
state_dict): outputs, final states and the gradients of the input, the initial states and
every parameter."""
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence  # noqa: E402

import pydnnl as dnnl  # noqa: E402
from pydnnl.reference.philox import dropout_keep  # noqa: E402
from pydnnl.torch import rnn as prnn  # noqa: E402

RTOL = 1e-5
T, N = 5, 3


def rel_err(a, b) -> float:
    a, b = a.detach().double(), b.detach().double()
    assert a.shape == b.shape, (a.shape, b.shape)
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def make_pair(kind, eng, **kw):
    """A pydnnl module and a float64 torch.nn module with its state_dict."""
    ours = getattr(prnn, kind)(**kw, engine=eng)
    ref = getattr(torch.nn, kind)(**kw).double()
    ref.load_state_dict(ours.state_dict())
    return ours, ref


def make_input(kw, layout, gen):
    """(input for our module, input for the reference, leaf tensor of the gradient)."""
    I = kw["input_size"]
    if layout == "unbatched":
        leaf = torch.randn(T, I, generator=gen)
        return leaf, leaf.double(), leaf
    if layout in ("sorted", "unsorted"):
        lengths = [5, 4, 2] if layout == "sorted" else [2, 5, 3]
        leaf = torch.randn(T, N, I, generator=gen)
        for n, ln in enumerate(lengths):  # padding must not matter
            leaf[ln:, n] = 7.0
        sort = layout == "sorted"

        def pack(x):
            return pack_padded_sequence(x, lengths, enforce_sorted=sort)
        return pack, pack, leaf
    shape = (N, T, I) if kw.get("batch_first") else (T, N, I)
    leaf = torch.randn(*shape, generator=gen)
    return leaf, leaf.double(), leaf


def run(module, x, hx, leaf, weights):
    """Forward, a loss mixing every output with fixed weights, backward; returns the outputs
    (padded if packed) and the gradients of the leaf, the states and the parameters."""
    xin = x(leaf) if callable(x) else leaf
    out, h = module(xin, hx)
    if isinstance(out, torch.nn.utils.rnn.PackedSequence):
        out, _ = pad_packed_sequence(out, batch_first=False)
    states = h if isinstance(h, tuple) else (h,)
    loss = (out * weights[0][:out.shape[0]].to(out.dtype)).sum()
    for s, w in zip(states, weights[1:]):
        loss = loss + (s * w.to(s.dtype)).sum()
    loss.backward()
    return [out, *states]


CASES = [
    # kind, constructor arguments, input layout, initial states given
    ("LSTM", dict(input_size=3, hidden_size=4), "padded", False),
    ("LSTM", dict(input_size=3, hidden_size=4, num_layers=2, bidirectional=True,
                  batch_first=True), "padded", True),
    ("LSTM", dict(input_size=3, hidden_size=5, num_layers=2, proj_size=2), "padded", True),
    ("LSTM", dict(input_size=4, hidden_size=5, num_layers=2, bidirectional=True,
                  proj_size=2), "sorted", True),
    ("LSTM", dict(input_size=3, hidden_size=4, bidirectional=True, bias=False), "unsorted",
     True),
    ("LSTM", dict(input_size=3, hidden_size=4, num_layers=2, proj_size=3), "unsorted", False),
    ("LSTM", dict(input_size=8, hidden_size=4, num_layers=2, bidirectional=True), "unbatched",
     True),
    ("LSTM", dict(input_size=4, hidden_size=4, num_layers=2, bias=False, batch_first=True),
     "unbatched", False),
    ("GRU", dict(input_size=3, hidden_size=4), "padded", True),
    ("GRU", dict(input_size=3, hidden_size=4, num_layers=2, bidirectional=True), "padded",
     False),
    ("GRU", dict(input_size=8, hidden_size=4, num_layers=2, bidirectional=True,
                 batch_first=True, bias=False), "padded", True),
    ("GRU", dict(input_size=3, hidden_size=4, num_layers=2), "sorted", True),
    ("GRU", dict(input_size=3, hidden_size=4, num_layers=2, bidirectional=True), "unsorted",
     True),
    ("GRU", dict(input_size=3, hidden_size=4, bias=False), "unbatched", True),
    ("RNN", dict(input_size=3, hidden_size=4), "padded", False),
    ("RNN", dict(input_size=3, hidden_size=4, num_layers=2, bidirectional=True,
                 nonlinearity="relu"), "padded", True),
    ("RNN", dict(input_size=3, hidden_size=4, num_layers=2, batch_first=True, bias=False),
     "padded", True),
    ("RNN", dict(input_size=4, hidden_size=4, num_layers=2, nonlinearity="relu"), "sorted",
     False),
    ("RNN", dict(input_size=3, hidden_size=4, bidirectional=True), "unsorted", True),
    ("RNN", dict(input_size=3, hidden_size=4, num_layers=2, bidirectional=True,
                 nonlinearity="relu", bias=False), "unsorted", True),
    ("RNN", dict(input_size=3, hidden_size=4, nonlinearity="relu"), "unbatched", True),
    # three layers: layer 0 alone, then a group of two
    ("GRU", dict(input_size=3, hidden_size=4, num_layers=3, bidirectional=True), "unsorted",
     True),
    ("LSTM", dict(input_size=3, hidden_size=4, num_layers=3, bidirectional=True, proj_size=2),
     "padded", True),
]


def _case_id(case):
    kind, kw, layout, h0 = case
    opts = [f"{k}={v}" for k, v in kw.items() if k not in ("input_size", "hidden_size")]
    return "-".join([kind, f"i{kw['input_size']}h{kw['hidden_size']}", *opts, layout,
                     "h0" if h0 else "noh0"])


@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
def test_matches_torch_nn(eng, case):
    kind, kw, layout, with_h0 = case
    gen = torch.Generator().manual_seed(len(CASES) + CASES.index(case))
    torch.manual_seed(CASES.index(case))
    ours, ref = make_pair(kind, eng, **kw)
    x_ours, x_ref, leaf = make_input(kw, layout, gen)
    D = 2 if kw.get("bidirectional") else 1
    L, H = kw.get("num_layers", 1), kw["hidden_size"]
    R = kw.get("proj_size", 0) or H
    batch = () if layout == "unbatched" else (N,)
    hx = hx_ref = None
    state_leaves = []
    if with_h0:
        h0 = torch.randn(L * D, *batch, R, generator=gen)
        state_leaves.append(h0)
        if kind == "LSTM":
            state_leaves.append(torch.randn(L * D, *batch, H, generator=gen))
    # loss weights: y's first dim covers T (time-major) or N (batch_first) rows
    y_shape = {"unbatched": (T, D * R)}.get(layout, (N, T, D * R) if kw.get("batch_first")
                                             else (T, N, D * R))
    weights = [torch.randn(*y_shape, generator=gen),
               torch.randn(L * D, *batch, R, generator=gen)]
    if kind == "LSTM":
        weights.append(torch.randn(L * D, *batch, H, generator=gen))

    leaf_o = leaf.clone().requires_grad_()
    leaf_r = leaf.double().clone().requires_grad_()
    so = [s.clone().requires_grad_() for s in state_leaves]
    sr = [s.double().clone().requires_grad_() for s in state_leaves]
    if with_h0:
        hx, hx_ref = (tuple(so), tuple(sr)) if kind == "LSTM" else (so[0], sr[0])
    got = run(ours, x_ours, hx, leaf_o, weights)
    want = run(ref, x_ref, hx_ref, leaf_r, weights)
    for name, a, b in zip(("output", "h_n", "c_n"), got, want):
        assert rel_err(a, b) <= RTOL, name
    assert rel_err(leaf_o.grad, leaf_r.grad) <= RTOL, "input gradient"
    for i, (a, b) in enumerate(zip(so, sr)):
        assert rel_err(a.grad, b.grad) <= RTOL, ("h_0", "c_0")[i] + " gradient"
    ref_params = dict(ref.named_parameters())
    names = [n for n, _ in ours.named_parameters()]
    assert names == list(ref_params)
    for n, p in ours.named_parameters():
        assert rel_err(p.grad, ref_params[n].grad) <= RTOL, n + " gradient"

    # inference (no autograd) gives the same outputs
    with torch.no_grad():
        xin = x_ours(leaf) if callable(x_ours) else leaf
        out, _ = ours(xin, hx)
    if not isinstance(out, torch.Tensor):
        out, _ = pad_packed_sequence(out)
    assert rel_err(out, got[0]) <= RTOL


@pytest.mark.parametrize("kind,kw", [
    ("LSTM", dict(input_size=3, hidden_size=4, num_layers=2, bidirectional=True, proj_size=2)),
    ("GRU", dict(input_size=3, hidden_size=4, num_layers=2, bias=False)),
    ("RNN", dict(input_size=3, hidden_size=4, num_layers=2, nonlinearity="relu")),
])
def test_parameters_init_and_state_dict_are_torch_nn(kind, kw):
    torch.manual_seed(5)
    ours = getattr(prnn, kind)(**kw)
    torch.manual_seed(5)
    ref = getattr(torch.nn, kind)(**kw)
    a, b = ours.state_dict(), ref.state_dict()
    assert list(a) == list(b)
    for k in a:
        assert torch.equal(a[k], b[k]), k
    assert ours.extra_repr() == ref.extra_repr()
    ours.load_state_dict(b)  # strict: names and shapes agree


def test_weights_updated_by_an_optimizer_are_used(eng):
    torch.manual_seed(1)
    ours, ref = make_pair("GRU", eng, input_size=3, hidden_size=4, num_layers=2)
    ref = ref.float()
    x = torch.randn(T, N, 3)
    opts = [torch.optim.SGD(m.parameters(), lr=0.5) for m in (ours, ref)]
    for _ in range(3):
        for m, opt in zip((ours, ref), opts):
            opt.zero_grad()
            y, h = m(x)
            (y.square().mean() + h.sum()).backward()
            opt.step()
    with torch.no_grad():
        assert rel_err(ours(x)[0], ref(x)[0]) <= 1e-5


def test_dropout_is_ignored_in_eval(eng):
    torch.manual_seed(2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours, ref = make_pair("LSTM", eng, input_size=3, hidden_size=4, num_layers=3,
                              dropout=0.5)
    ours.eval()
    ref.eval()
    x = torch.randn(T, N, 3)
    y, (h, c) = ours(x)
    yr, (hr, cr) = ref(x.double())
    assert rel_err(y, yr) <= RTOL and rel_err(h, hr) <= RTOL and rel_err(c, cr) <= RTOL


def _dropout_reference(ref_layers, x, masks, p):
    """A stack of one-layer float64 torch modules with the given masks between layers."""
    scale = float(np.float32(1.0 / (1.0 - p)))
    y, hs = x, []
    for l, layer in enumerate(ref_layers):
        y, h = layer(y)
        hs.append(h[0] if isinstance(h, tuple) else h)
        if l < len(ref_layers) - 1:
            y = y * masks[l] * scale
    return y, torch.cat(hs)


@pytest.mark.parametrize("kind,kw,groups", [
    # layer 0 alone (input 3 != 4), then layers 1-2: the first group drops its output too
    ("LSTM", dict(input_size=3, hidden_size=4, num_layers=3), [(0, 1), (1, 3)]),
    # one group of both layers, per-layer bidirectional
    ("GRU", dict(input_size=8, hidden_size=4, num_layers=2, bidirectional=True), [(0, 2)]),
])
def test_training_dropout_matches_a_reference_with_the_same_masks(eng, kind, kw, groups):
    p = 0.4
    torch.manual_seed(3)
    ours, _ = make_pair(kind, eng, **kw, dropout=p)
    ours.train()
    D = 2 if kw.get("bidirectional") else 1
    H, L = kw["hidden_size"], kw["num_layers"]
    # the masks pydnnl draws: group i keyed by seed i, counter block k*M + l*D + d
    torch.manual_seed(11)
    k = prnn.draw_dropout_offset()
    masks = []
    for gi, (lo, hi) in enumerate(groups):
        last = gi == len(groups) - 1
        M = (hi - lo - (1 if last else 0)) * D
        for l in range(hi - lo - (1 if last else 0)):
            per_dir = [torch.from_numpy(dropout_keep(gi, k * M + l * D + d, T * N * H, p)
                                        .reshape(T, N, H).astype(np.float64)) for d in range(D)]
            masks.append(torch.cat(per_dir, dim=2))
    kept = torch.cat([m.flatten() for m in masks]).mean().item()
    assert abs(kept - (1 - p)) < 0.15  # a plausible fraction is kept

    ref_layers = []
    sd = ours.state_dict()
    for l in range(L):
        m = getattr(torch.nn, kind)(kw["input_size"] if l == 0 else D * H, H,
                                    bidirectional=D == 2).double()
        m.load_state_dict({n.replace(f"_l{l}", "_l0"): v for n, v in sd.items()
                           if f"_l{l}" in n})
        ref_layers.append(m)
    x = torch.randn(T, N, kw["input_size"])
    xo, xr = x.clone().requires_grad_(), x.double().requires_grad_()
    torch.manual_seed(11)  # the module draws the same k
    y, h = ours(xo)
    h = h[0] if isinstance(h, tuple) else h
    yr, hr = _dropout_reference(ref_layers, xr, masks, p)
    assert rel_err(y, yr) <= RTOL and rel_err(h, hr) <= RTOL
    w = torch.randn(y.shape)
    (y * w).sum().backward()
    (yr * w.double()).sum().backward()
    assert rel_err(xo.grad, xr.grad) <= RTOL
    for n, prm in ours.named_parameters():
        l = int(n.split("_l")[1].split("_")[0])
        rp = dict(ref_layers[l].named_parameters())[n.replace(f"_l{l}", "_l0")]
        assert rel_err(prm.grad, rp.grad) <= RTOL, n
    # a new call draws new masks; the same seed replays them
    with torch.no_grad():
        torch.manual_seed(11)
        again = ours(x)[0]
        other = ours(x)[0]
    assert torch.equal(again, y.detach()) and not torch.equal(other, again)


def test_training_dropout_on_packed_sequences_matches_a_finite_difference(eng):
    """Masks follow the primitives' sorted order there; the gradient is checked along a random
    direction of the input and every parameter, the masks replayed by reseeding."""
    torch.manual_seed(6)
    m = prnn.GRU(3, 4, num_layers=2, bidirectional=True, dropout=0.3, engine=eng).train()
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(T, N, 3, generator=gen)
    lengths = [3, 5, 2]
    wy = torch.randn(T, N, 8, generator=gen)
    wh = torch.randn(4, N, 4, generator=gen)
    leaves = [x] + list(m.parameters())
    dirs = [torch.randn(t.shape, generator=gen) for t in leaves]

    def loss(shift):
        with torch.no_grad():
            for t, v in zip(leaves, dirs):
                t.add_(v, alpha=shift)
        torch.manual_seed(8)  # the same dropout masks every call
        out, h = m(pack_padded_sequence(x, lengths, enforce_sorted=False))
        y, _ = pad_packed_sequence(out, total_length=T)
        value = (y * wy).sum() + (h * wh).sum()
        with torch.no_grad():
            for t, v in zip(leaves, dirs):
                t.sub_(v, alpha=shift)
        return value

    x.requires_grad_()
    loss(0.0).backward()
    analytic = sum(float((t.grad * v).sum()) for t, v in zip(leaves, dirs))
    eps = 5e-3
    with torch.no_grad():
        numeric = (float(loss(eps)) - float(loss(-eps))) / (2 * eps)
    # central difference: O(eps^2) truncation and float32 rounding / eps
    assert abs(analytic - numeric) <= 5e-4 * abs(analytic), (analytic, numeric)
    with torch.no_grad():  # and the masks really drop: eval differs
        torch.manual_seed(8)
        train_out = m(pack_padded_sequence(x, lengths, enforce_sorted=False))[0].data
        eval_out = m.eval()(pack_padded_sequence(x, lengths, enforce_sorted=False))[0].data
    assert not torch.allclose(train_out, eval_out)


@pytest.mark.parametrize("make,match", [
    (lambda e: prnn.LSTM(3, 4, proj_size=4, engine=e), r"proj_size.*smaller.*\(4\).*got 4"),
    (lambda e: prnn.RNN(3, 4, nonlinearity="gelu", engine=e), r"nonlinearity.*'gelu'"),
    (lambda e: prnn.GRU(0, 4, engine=e), r"input_size.*>= 1.*got 0"),
    (lambda e: prnn.GRU(3, 4, num_layers=2.0, engine=e), r"num_layers.*got 2\.0"),
    (lambda e: prnn.LSTM(3, 4, dropout=1.5, engine=e), r"dropout.*\[0, 1\].*1\.5"),
    (lambda e: prnn.LSTM(3, 4, engine="tpu"), r"engine.*'tpu'"),
])
def test_bad_constructor_arguments_raise(eng, make, match):
    with pytest.raises(dnnl.invalid_arguments, match=match):
        make(eng)


def test_unsupported_dtype_raises(eng):
    with pytest.raises(dnnl.unimplemented, match=r"dtype.*float32.*float64"):
        prnn.LSTM(3, 4, dtype=torch.float64, engine=eng)


@pytest.mark.parametrize("call,match", [
    (lambda m: m(torch.randn(T, N, 5)), r"input_size \(3\), got 5"),
    (lambda m: m(torch.randn(1, T, N, 3)), r"2-D.*3-D.*got 4-D"),
    (lambda m: m(torch.randn(T, N, 3), torch.zeros(2, N, 4)), r"hx must be a tuple"),
    (lambda m: m(torch.randn(T, N, 3), (torch.zeros(2, N, 4), torch.zeros(2, N, 4))),
     r"h_0 must have shape \[2, 3, 2\], got \[2, 3, 4\]"),
    (lambda m: m(torch.randn(T, N, 3), (torch.zeros(2, N, 2), torch.zeros(1, N, 4))),
     r"c_0 must have shape \[2, 3, 4\], got \[1, 3, 4\]"),
    (lambda m: m(torch.randn(T, 3), (torch.zeros(2, N, 2), torch.zeros(2, N, 4))),
     r"h_0 must have shape \[2, 2\], got \[2, 3, 2\]"),
    (lambda m: m(torch.zeros(T, N, 3, dtype=torch.int64)), r"input.*float32.*torch.int64"),
    (lambda m: m(torch.zeros(T, N, 3, dtype=torch.float64)), r"input.*float32.*torch.float64"),
    (lambda m: m(torch.randn(T, N, 3), (torch.zeros(2, N, 2, dtype=torch.float64),
                                        torch.zeros(2, N, 4))), r"h_0.*float32.*float64"),
])
def test_bad_forward_arguments_raise(eng, call, match):
    m = prnn.LSTM(3, 4, num_layers=2, proj_size=2, engine=eng)
    with pytest.raises(dnnl.invalid_arguments, match=match):
        call(m)


def test_double_parameters_are_unimplemented(eng):
    m = prnn.GRU(3, 4, engine=eng).double()
    with pytest.raises(dnnl.unimplemented, match=r"float32.*torch.float64 for weight_ih_l0"):
        m(torch.randn(T, N, 3))


def test_a_second_backward_through_one_forward_raises(eng):
    m = prnn.RNN(3, 4, engine=eng)
    y, h = m(torch.randn(T, N, 3))
    y.sum().backward(retain_graph=True)
    with pytest.raises(dnnl.unimplemented, match=r"second backward.*forward again"):
        y.sum().backward()


@pytest.mark.parametrize("ref", [
    lambda: torch.nn.LSTM(3, 4, num_layers=2, proj_size=2, batch_first=True),
    lambda: torch.nn.RNN(3, 4, nonlinearity="relu", bias=False).eval(),
])
def test_from_torch_copies_configuration_and_weights(eng, ref):
    torch.manual_seed(4)
    ref = ref()
    ours = getattr(prnn, type(ref).__name__).from_torch(ref, engine=eng)
    assert ours.extra_repr() == ref.extra_repr() and ours.training == ref.training
    x = torch.randn(N, T, 3) if ref.batch_first else torch.randn(T, N, 3)
    with torch.no_grad():
        assert rel_err(ours(x)[0], ref(x)[0]) <= RTOL
    with pytest.raises(dnnl.invalid_arguments, match=r"torch.nn.GRU, got LSTM"):
        prnn.GRU.from_torch(ref if isinstance(ref, torch.nn.LSTM) else torch.nn.LSTM(3, 4))


def test_an_input_changed_in_place_before_backward_is_caught(eng):
    m = prnn.LSTM(3, 4, engine=eng)
    x = torch.randn(T, N, 3, requires_grad=True)
    x2 = x * 1.0
    y, _ = m(x2)
    x2.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_deepcopy_shares_the_engine_and_pickling_names_the_state_dict(eng):
    import copy
    import io

    m = prnn.LSTM(3, 4, engine=eng)
    c = copy.deepcopy(m)
    assert c.engine is eng and c.weight_ih_l0 is not m.weight_ih_l0
    assert torch.equal(c.weight_ih_l0, m.weight_ih_l0)
    x = torch.randn(T, N, 3)
    with torch.no_grad():
        assert torch.equal(c(x)[0], m(x)[0])
    with pytest.raises(dnnl.unimplemented, match=r"state_dict"):
        torch.save(m, io.BytesIO())
