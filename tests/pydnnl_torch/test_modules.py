"""pydnnl.torch modules against torch.nn itself, computed in float64: forward outputs, the
input gradient and every parameter gradient within 1e-5 relative (max |a-b| / max |b|)."""
import pytest

torch = pytest.importorskip("torch")

import pydnnl as dnnl  # noqa: E402
import pydnnl.torch as pt  # noqa: E402

TOL = 1e-5


def rel(a, b):
    """max |a - b| / max |b|, with ``b`` the float64 reference."""
    a, b = a.detach().double(), b.detach().double()
    assert a.shape == b.shape
    scale = b.abs().max().item()
    err = (a - b).abs().max().item()
    return err if scale == 0 else err / scale


def compare(ours, ref, x, steps=1, seed=0):
    """Run ``ours`` (float32) and ``ref`` (its torch.nn twin, float64, same weights) on ``x``
    for ``steps`` forward/backward passes; check outputs, gradients and float buffers."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in ours.parameters():  # away from the default 1/0 of norm layers
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5 + 1)
    ref = ref.double()
    ref.load_state_dict(ours.state_dict())
    ref.train(ours.training)
    for step in range(steps):
        xi = (x + step).requires_grad_()
        xr = xi.detach().double().requires_grad_()
        for m in (ours, ref):
            m.zero_grad(set_to_none=True)
        y, yr = ours(xi), ref(xr)
        assert y.dtype == torch.float32
        assert rel(y, yr) < TOL, "forward"
        g = torch.randn(y.shape, generator=gen)
        y.backward(g)
        yr.backward(g.double())
        assert rel(xi.grad, xr.grad) < TOL, "input gradient"
        for (name, p), (_, q) in zip(ours.named_parameters(), ref.named_parameters()):
            if p.requires_grad:
                assert rel(p.grad, q.grad) < TOL, f"gradient of {name}"
        for (name, b), (_, c) in zip(ours.named_buffers(), ref.named_buffers()):
            if b.dtype.is_floating_point:
                assert rel(b, c) < TOL, name
            else:
                assert torch.equal(b, c.to(b.dtype)), name


def inputs(*shape, seed=1, scale=1.0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * scale


# -- Linear ----------------------------------------------------------------------------------

@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(4, 6), (2, 3, 6)])
def test_linear(eng, bias, shape):
    torch.manual_seed(0)
    compare(pt.Linear(6, 5, bias=bias, engine=eng), torch.nn.Linear(6, 5, bias=bias),
            inputs(*shape))


# -- convolutions ----------------------------------------------------------------------------

def kw_id(kw):
    return ",".join(f"{k}={v}" for k, v in kw.items()) or "default"


def kernel_and_rest(kw):
    """``(kernel_size, the other arguments)`` of a case, seeding the module's init."""
    torch.manual_seed(0)
    kw = dict(kw)
    return kw.pop("kernel_size", 3), kw


CONV2D = [
    dict(),
    dict(stride=2, padding=1, groups=2),
    dict(stride=(2, 1), padding=(0, 2), dilation=(1, 2), bias=False),
    dict(padding="same", dilation=2),
    dict(padding="valid"),
    dict(padding=1, padding_mode="reflect"),
    dict(padding=(2, 1), padding_mode="replicate", stride=2),
    dict(padding=1, padding_mode="circular", groups=4),
    dict(kernel_size=(2, 4), padding="same", padding_mode="reflect"),
]


@pytest.mark.parametrize("kw", CONV2D, ids=kw_id)
def test_conv2d(eng, kw):
    k, kw = kernel_and_rest(kw)
    compare(pt.Conv2d(4, 8, k, engine=eng, **kw), torch.nn.Conv2d(4, 8, k, **kw),
            inputs(2, 4, 7, 6))


@pytest.mark.parametrize("kw", [dict(stride=2, padding=1), dict(padding="same", dilation=2,
                                                                 padding_mode="circular")])
def test_conv1d(eng, kw):
    torch.manual_seed(0)
    compare(pt.Conv1d(3, 4, 3, engine=eng, **kw), torch.nn.Conv1d(3, 4, 3, **kw),
            inputs(2, 3, 9))


@pytest.mark.parametrize("kw", [dict(stride=(1, 2, 1), padding=1, groups=2),
                                dict(padding=(1, 0, 1), padding_mode="replicate", bias=False)])
def test_conv3d(eng, kw):
    torch.manual_seed(0)
    compare(pt.Conv3d(2, 4, 2, engine=eng, **kw), torch.nn.Conv3d(2, 4, 2, **kw),
            inputs(2, 2, 3, 4, 3))


def test_conv2d_unbatched_input(eng):
    torch.manual_seed(0)
    compare(pt.Conv2d(3, 2, 3, padding=1, engine=eng), torch.nn.Conv2d(3, 2, 3, padding=1),
            inputs(3, 5, 5))


DECONV = [
    dict(),
    dict(stride=2, padding=1, output_padding=1, groups=2),
    dict(kernel_size=(2, 3), stride=(2, 1), dilation=2, bias=False),
    dict(stride=3, padding=(1, 2), output_padding=(2, 0), dilation=(1, 2)),
]


@pytest.mark.parametrize("kw", DECONV, ids=kw_id)
def test_conv_transpose2d(eng, kw):
    k, kw = kernel_and_rest(kw)
    compare(pt.ConvTranspose2d(4, 6, k, engine=eng, **kw),
            torch.nn.ConvTranspose2d(4, 6, k, **kw), inputs(2, 4, 4, 5))


def test_conv_transpose2d_output_size(eng):
    torch.manual_seed(0)
    ours = pt.ConvTranspose2d(2, 3, 3, stride=2, padding=1, engine=eng)
    ref = torch.nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1).double()
    ref.load_state_dict(ours.state_dict())
    x = inputs(1, 2, 4, 4)
    y = ours(x, output_size=[8, 8])
    assert y.shape == (1, 3, 8, 8)
    assert rel(y, ref(x.double(), output_size=[8, 8])) < TOL


# -- normalization ---------------------------------------------------------------------------

@pytest.mark.parametrize("kw", [dict(), dict(momentum=None), dict(momentum=0.3, eps=1e-3),
                                dict(affine=False)],
                         ids=["default", "cumulative", "momentum-eps", "no-affine"])
def test_batch_norm2d_training_updates_running_stats(eng, kw):
    # three steps on shifted inputs: the running statistics (and num_batches_tracked) follow
    compare(pt.BatchNorm2d(3, engine=eng, **kw), torch.nn.BatchNorm2d(3, **kw),
            inputs(2, 3, 4, 5, scale=2.0), steps=3)


def test_batch_norm2d_eval_uses_running_stats(eng):
    ours = pt.BatchNorm2d(3, engine=eng)
    with torch.no_grad():
        ours.running_mean.copy_(torch.tensor([0.5, -1.0, 2.0]))
        ours.running_var.copy_(torch.tensor([1.5, 0.25, 3.0]))
    compare(ours.eval(), torch.nn.BatchNorm2d(3), inputs(2, 3, 4, 5))


def test_batch_norm2d_without_running_stats(eng):
    # track_running_stats=False: batch statistics in eval too, nothing to update
    for train in (True, False):
        compare(pt.BatchNorm2d(3, track_running_stats=False, engine=eng).train(train),
                torch.nn.BatchNorm2d(3, track_running_stats=False), inputs(2, 3, 3, 3))


@pytest.mark.parametrize("cls,shape", [("BatchNorm1d", (6, 3)), ("BatchNorm1d", (2, 3, 5)),
                                       ("BatchNorm3d", (2, 3, 2, 2, 3))])
def test_batch_norm_1d_3d(eng, cls, shape):
    compare(getattr(pt, cls)(3, engine=eng), getattr(torch.nn, cls)(3), inputs(*shape),
            steps=2)


def test_batch_norm_inference_without_grad_uses_forward_inference(eng):
    m = pt.BatchNorm2d(3, engine=eng).eval()
    with torch.no_grad():
        m(inputs(2, 3, 4, 4))
    (p,) = m._pydnnl.prims.values()
    assert p.fwd_pd.get_prop_kind() == dnnl.prop_kind.forward_inference


@pytest.mark.parametrize("kw,shape", [
    (dict(normalized_shape=6), (4, 6)),
    (dict(normalized_shape=(3, 4)), (2, 5, 3, 4)),
    (dict(normalized_shape=[4], eps=1e-3, bias=False), (2, 3, 4)),
    (dict(normalized_shape=5, elementwise_affine=False), (3, 5)),
], ids=["int", "tuple", "no-bias", "no-affine"])
def test_layer_norm(eng, kw, shape):
    compare(pt.LayerNorm(engine=eng, **kw), torch.nn.LayerNorm(**kw), inputs(*shape, scale=3))


# -- pooling ---------------------------------------------------------------------------------

MAXPOOL = [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=(2, 3), stride=(2, 1), dilation=(2, 1), ceil_mode=True),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
    dict(kernel_size=2, stride=3, ceil_mode=True),
]


@pytest.mark.parametrize("kw", MAXPOOL, ids=lambda kw: ",".join(f"{k}={v}" for k, v in
                                                               kw.items()))
def test_max_pool2d(eng, kw):
    compare(pt.MaxPool2d(engine=eng, **kw), torch.nn.MaxPool2d(**kw), inputs(2, 3, 8, 7))


AVGPOOL = [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=3, stride=2, padding=1, count_include_pad=False),
    # ceil_mode windows reaching past the right padding: PyTorch's divisors
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
    dict(kernel_size=(3, 2), stride=2, padding=(1, 0), ceil_mode=True,
         count_include_pad=False),
    dict(kernel_size=2, stride=2, ceil_mode=True),
]


@pytest.mark.parametrize("kw", AVGPOOL, ids=lambda kw: ",".join(f"{k}={v}" for k, v in
                                                               kw.items()))
def test_avg_pool2d(eng, kw):
    compare(pt.AvgPool2d(engine=eng, **kw), torch.nn.AvgPool2d(**kw), inputs(2, 3, 8, 7))


def test_pool_unbatched_input(eng):
    compare(pt.MaxPool2d(2, engine=eng), torch.nn.MaxPool2d(2), inputs(3, 5, 4))


# -- activations -----------------------------------------------------------------------------

ACTIVATIONS = [
    ("ReLU", {}), ("LeakyReLU", dict(negative_slope=0.2)), ("ELU", dict(alpha=0.7)),
    ("Tanh", {}), ("Sigmoid", {}), ("GELU", {}), ("GELU", dict(approximate="tanh")),
    ("SiLU", {}), ("Mish", {}), ("Hardswish", {}), ("Hardsigmoid", {}), ("Softplus", {}),
    ("Softplus", dict(beta=2.0, threshold=1.5)), ("ReLU6", {}),
    ("Hardtanh", dict(min_val=-2.0, max_val=3.0)), ("Softmax", dict(dim=1)),
    ("Softmax", dict(dim=0)), ("LogSoftmax", dict(dim=-1)), ("LogSoftmax", dict(dim=2)),
]


@pytest.mark.parametrize("name,kw", ACTIVATIONS,
                         ids=[n + "".join(f",{k}={v}" for k, v in kw.items())
                              for n, kw in ACTIVATIONS])
def test_activation(eng, name, kw):
    # inputs over [-12, 12]: every branch of the piecewise functions is taken
    compare(getattr(pt, name)(engine=eng, **kw), getattr(torch.nn, name)(**kw),
            inputs(3, 4, 5, scale=4.0))


def test_softmax_implicit_dim_follows_torch(eng):
    with pytest.warns(UserWarning, match="Implicit dimension"):
        y = pt.Softmax(engine=eng)(inputs(2, 3, 4))
    with pytest.warns(UserWarning):
        want = torch.nn.Softmax()(inputs(2, 3, 4).double())
    assert rel(y, want) < TOL


# -- caching and state -----------------------------------------------------------------------

def test_primitives_cached_per_shape(eng):
    m = pt.Linear(4, 3, engine=eng)
    with torch.no_grad():
        m(inputs(2, 4))
        m(inputs(2, 4, seed=2))
        assert len(m._pydnnl.prims) == 1
        m(inputs(5, 4))
    assert len(m._pydnnl.prims) == 2
    (p, _) = m._pydnnl.prims.values()
    assert p.fwd_pd.get_prop_kind() == dnnl.prop_kind.forward_inference


@pytest.mark.parametrize("make", [
    lambda e: (pt.Conv2d(3, 4, 3, groups=1, engine=e), torch.nn.Conv2d(3, 4, 3)),
    lambda e: (pt.ConvTranspose2d(4, 2, 2, engine=e), torch.nn.ConvTranspose2d(4, 2, 2)),
    lambda e: (pt.BatchNorm2d(3, engine=e), torch.nn.BatchNorm2d(3)),
    lambda e: (pt.LayerNorm((2, 3), bias=False, engine=e),
               torch.nn.LayerNorm((2, 3), bias=False)),
    lambda e: (pt.Linear(3, 2, engine=e), torch.nn.Linear(3, 2)),
])
def test_state_dict_is_torch_nn_s(eng, make):
    ours, ref = make(eng)
    sd, rsd = ours.state_dict(), ref.state_dict()
    assert list(sd) == list(rsd)
    assert all(sd[k].shape == rsd[k].shape and sd[k].dtype == rsd[k].dtype for k in sd)
    with torch.no_grad():
        for v in rsd.values():
            if v.dtype.is_floating_point:
                v.uniform_(0.5, 1.5)
    ours.load_state_dict(rsd)
    assert all(torch.equal(ours.state_dict()[k], rsd[k]) for k in rsd)
    assert isinstance(ours, type(ref))


def test_deepcopy_keeps_engine_and_drops_primitives(eng):
    import copy
    m = pt.Linear(3, 2, engine=eng)
    with torch.no_grad():
        m(inputs(2, 3))
    c = copy.deepcopy(m)
    assert c.engine is m.engine and not c._pydnnl.prims
    assert torch.equal(c(inputs(2, 3)), m(inputs(2, 3)))


@pytest.mark.parametrize("make", [
    lambda e: (pt.Conv2d(3, 4, 3, engine=e), torch.nn.Conv2d(3, 4, 3)),
    lambda e: (pt.Linear(5, 3, engine=e), torch.nn.Linear(5, 3)),
    lambda e: (pt.BatchNorm2d(3, engine=e), torch.nn.BatchNorm2d(3)),
    lambda e: (pt.LayerNorm(5, engine=e), torch.nn.LayerNorm(5)),
], ids=["conv", "linear", "batchnorm", "layernorm"])
@pytest.mark.parametrize("frozen", ["params", "input"])
def test_only_the_needed_gradients(eng, make, frozen):
    """Frozen parameters get no gradient (the data gradient is still right); an input that
    needs none gets none (the parameters' still are)."""
    ours, ref = make(eng)
    ref = ref.double()
    ref.load_state_dict(ours.state_dict())
    x = inputs(2, 3, 5, 5)
    xr = x.double()
    if frozen == "params":
        for m in (ours, ref):
            m.requires_grad_(False)
        x.requires_grad_()
        xr.requires_grad_()
    g = torch.randn(ref(xr).shape, generator=torch.Generator().manual_seed(3))
    ours(x).backward(g)
    ref(xr).backward(g.double())
    if frozen == "params":
        assert all(p.grad is None for p in ours.parameters())
        assert rel(x.grad, xr.grad) < TOL
    else:
        assert x.grad is None
        for p, q in zip(ours.parameters(), ref.parameters()):
            assert rel(p.grad, q.grad) < TOL


def test_double_backward_is_refused(eng):
    x = inputs(2, 3).requires_grad_()
    y = pt.Tanh(engine=eng)(x)
    (g,) = torch.autograd.grad((y * y).sum(), x, create_graph=True)  # dy depends on x
    with pytest.raises(RuntimeError, match="once_differentiable|double backward"):
        g.sum().backward()


@pytest.mark.parametrize("transposed", [False, True], ids=["conv", "deconv"])
def test_non_contiguous_weights(eng, transposed):
    # a weight replaced by a permuted (non-contiguous) tensor is read by its values
    cls = "ConvTranspose2d" if transposed else "Conv2d"
    ours = getattr(pt, cls)(4, 6, 3, groups=2, engine=eng)
    w = torch.randn(tuple(reversed(ours.weight.shape)),
                    generator=torch.Generator().manual_seed(4)).permute(3, 2, 1, 0)
    assert w.shape == ours.weight.shape and not w.is_contiguous()
    ours.weight = torch.nn.Parameter(w)
    x = inputs(1, 4, 5, 5)
    ref = getattr(torch.nn, cls)(4, 6, 3, groups=2).double()
    ref.load_state_dict(ours.state_dict())
    y, yr = ours(x), ref(x.double())
    assert rel(y, yr) < TOL
    y.backward(torch.ones_like(y))
    yr.backward(torch.ones_like(yr))
    assert rel(ours.weight.grad, ref.weight.grad) < TOL


def test_pickle_round_trip_runs_on_the_default_engine(eng):
    import pickle
    m = pt.Conv2d(2, 3, 3, engine=eng)
    x = inputs(1, 2, 5, 5)
    with torch.no_grad():
        y = m(x)
        c = pickle.loads(pickle.dumps(m))
        assert c.engine is pt.default_engine() and torch.equal(c(x), y)


@pytest.mark.parametrize("cls", ["Conv2d", "BatchNorm2d", "MaxPool2d"])
def test_channels_last_inputs(eng, cls):
    # not row-major: the values are copied to the engine, the results come back row-major
    x = inputs(2, 4, 6, 6).contiguous(memory_format=torch.channels_last)
    args = {"Conv2d": (4, 4, 3), "BatchNorm2d": (4,), "MaxPool2d": (2,)}[cls]
    compare(getattr(pt, cls)(*args, engine=eng), getattr(torch.nn, cls)(*args), x)
