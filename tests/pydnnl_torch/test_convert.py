"""pydnnl.torch.convert on a small CNN: the converted model matches the torch model's forward
and backward (float64 reference), in training and in eval."""
import copy

import pytest

torch = pytest.importorskip("torch")

import pydnnl as dnnl  # noqa: E402
import pydnnl.torch as pt  # noqa: E402

TOL = 1e-5


def rel(a, b):
    a, b = a.detach().double(), b.detach().double()
    assert a.shape == b.shape
    err, scale = (a - b).abs().max().item(), b.abs().max().item()
    return err if scale == 0 else err / scale


def cnn():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        # no conv bias: batch normalization cancels it (its gradient is 0 up to roundoff)
        torch.nn.Conv2d(3, 8, 3, padding=1, bias=False), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(8 * 4 * 4, 10),
        torch.nn.LogSoftmax(dim=1))


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
def test_converted_cnn_matches_torch(eng, train):
    model = cnn().train(train)
    ref = copy.deepcopy(model).double()
    params = list(model.parameters())
    assert pt.convert(model, engine=eng) is model
    kinds = [type(m) for m in model]
    assert kinds == [pt.Conv2d, pt.BatchNorm2d, pt.ReLU, pt.MaxPool2d, torch.nn.Flatten,
                     pt.Linear, pt.LogSoftmax]
    assert list(model.parameters()) == params  # the same Parameter objects: optimizers hold
    assert all(m.engine is eng for m in model if isinstance(m, pt.Linear))
    gen = torch.Generator().manual_seed(1)
    for _ in range(2):  # a second step sees the updated running statistics
        x = torch.randn(4, 3, 8, 8, generator=gen)
        target = torch.randint(0, 10, (4,), generator=gen)
        for m in (model, ref):
            m.zero_grad(set_to_none=True)
        xr = x.double().requires_grad_()
        x.requires_grad_()
        y, yr = model(x), ref(xr)
        assert rel(y, yr) < TOL
        torch.nn.functional.nll_loss(y, target).backward()
        torch.nn.functional.nll_loss(yr, target).backward()
        assert rel(x.grad, xr.grad) < TOL
        for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
            assert rel(p.grad, q.grad) < TOL, name
        for (name, b), (_, c) in zip(model.named_buffers(), ref.named_buffers()):
            assert rel(b, c) < TOL if b.dtype.is_floating_point else torch.equal(b, c), name


def test_convert_leaves_unsupported_modules(eng):
    model = torch.nn.Sequential(torch.nn.MaxPool2d(2, return_indices=True),
                                torch.nn.AvgPool2d(2, divisor_override=3),
                                torch.nn.Linear(2, 2).double(), torch.nn.ConvTranspose1d(1, 1, 1))
    pt.convert(model, engine=eng)
    assert [type(m) for m in model] == [torch.nn.MaxPool2d, torch.nn.AvgPool2d,
                                        torch.nn.Linear, torch.nn.ConvTranspose1d]


def test_convert_a_single_module_and_nested_ones(eng):
    lin = pt.convert(torch.nn.Linear(3, 2), engine=eng)
    assert type(lin) is pt.Linear
    outer = torch.nn.Module()
    outer.inner = torch.nn.Sequential(torch.nn.Tanh(), torch.nn.Sequential(torch.nn.GELU()))
    pt.convert(outer, engine=eng)
    assert type(outer.inner[0]) is pt.Tanh and type(outer.inner[1][0]) is pt.GELU


def test_convert_rejects_a_non_module():
    with pytest.raises(dnnl.invalid_arguments, match="torch.nn.Module.*list"):
        pt.convert([torch.nn.ReLU()])


def test_convert_moves_pydnnl_modules_to_the_given_engine(eng):
    model = torch.nn.Sequential(pt.Linear(3, 2), torch.nn.ReLU())
    with torch.no_grad():
        model(torch.randn(2, 3))
    pt.convert(model, engine=eng)
    assert model[0].engine is eng and not model[0]._pydnnl.prims  # primitives made again
    assert model[1].engine is eng


class _Tagger(torch.nn.Module):
    """An LSTM tagger: embedding-free LSTM, then a per-step Linear head."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.rnn = torch.nn.LSTM(5, 6, num_layers=2, bidirectional=True)
        self.head = torch.nn.Linear(12, 3)

    def forward(self, x):
        return self.head(self.rnn(x)[0])


def test_convert_replaces_recurrent_layers_sharing_their_parameters(eng):
    ref = _Tagger().double()
    model = _Tagger()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    params_before = [id(p) for p in model.parameters()]
    assert pt.convert(model, eng) is model
    assert isinstance(model.rnn, pt.LSTM) and isinstance(model.head, pt.Linear)
    assert [id(p) for p in model.parameters()] == params_before  # the optimizer still holds them
    x = torch.randn(4, 2, 5)
    for _ in range(2):  # an SGD step on each: the updated weights are the ones used next
        for m, inp in ((model, x), (ref, x.double())):
            m.zero_grad()
            m(inp).square().sum().backward()
        assert rel(model(x), ref(x.double())) < TOL
        opt.step()
        with torch.no_grad():
            for p in ref.parameters():
                p -= 0.1 * p.grad
    assert rel(model(x), ref(x.double())) < TOL


def test_convert_refuses_a_bare_recurrent_module(eng):
    with pytest.raises(dnnl.invalid_arguments, match="LSTM.from_torch"):
        pt.convert(torch.nn.LSTM(3, 4), eng)
