"""Tensors cross between PyTorch and pydnnl memories unchanged, shared on a CPU engine."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import pydnnl as dnnl  # noqa: E402
from pydnnl.torch import _bridge as B  # noqa: E402


@pytest.fixture(scope="module")
def eng(cpu_engine):
    """The CPU engine: the one whose memories share a tensor's storage."""
    return cpu_engine


def test_round_trip_through_a_kernel_shares_the_result_tensor(eng):
    x = torch.randn(64, 33, generator=torch.Generator().manual_seed(0))
    src = B.to_memory(x, eng)
    dst, out = B.empty_memory((64, 33), eng)
    pd = dnnl.eltwise_forward.primitive_desc(
        eng, dnnl.prop_kind.forward_inference, dnnl.algorithm.eltwise_relu,
        src.get_desc(), dst.get_desc(), 0.0, 0.0)
    dnnl.eltwise_forward(pd).execute(B.stream_of(eng), {dnnl.ARG_SRC: src, dnnl.ARG_DST: dst})
    r = B.to_torch(dst, out)
    assert r is out
    np.testing.assert_array_equal(r.numpy(), np.maximum(x.numpy(), 0))


@pytest.mark.parametrize("make", [
    lambda: torch.arange(999, dtype=torch.float32)[1:],        # storage offset, not aligned
    lambda: torch.arange(12, dtype=torch.float32).view(3, 4).t(),  # not contiguous
    lambda: torch.arange(12, dtype=torch.float64).view(3, 4),      # another dtype
])
def test_tensors_that_cannot_be_shared_are_copied(eng, make):
    t = make()
    m = B.to_memory(t, eng)
    np.testing.assert_array_equal(m.to_numpy(), t.numpy().astype(np.float32))


def test_shape_mismatch_names_both(eng):
    with pytest.raises(dnnl.invalid_arguments, match=r"\(2, 3\).*\(3, 2\)"):
        B.to_memory(torch.zeros(2, 3), eng, dnnl.memory.desc([3, 2], dnnl.memory.data_type.f32,
                                                              "ab"))


def test_engine_choices():
    assert B.resolve_engine(None) is B.default_engine()
    with pytest.raises(dnnl.invalid_arguments, match="'tpu'"):
        B.resolve_engine("tpu")


@pytest.mark.parametrize("writes_through", [True, False])
def test_results_hold_their_values_with_or_without_the_map(eng, monkeypatch, writes_through):
    # False: the path of runtimes that keep a device copy of host-pointer buffers
    monkeypatch.setitem(B._writes_through, eng, writes_through)
    x = torch.randn(5, 7, generator=torch.Generator().manual_seed(1))
    dst, out = B.empty_memory((5, 7), eng)
    pd = dnnl.eltwise_forward.primitive_desc(
        eng, dnnl.prop_kind.forward_inference, dnnl.algorithm.eltwise_linear,
        dst.get_desc(), dst.get_desc(), 2.0, 1.0)
    dnnl.eltwise_forward(pd).execute(B.stream_of(eng), {dnnl.ARG_SRC: B.to_memory(x, eng),
                                                        dnnl.ARG_DST: dst})
    assert B.to_torch(dst, out) is out
    np.testing.assert_allclose(out.numpy(), 2 * x.double().numpy() + 1, rtol=1e-6)


def test_an_input_changed_in_place_between_calls_is_seen():
    from pydnnl.torch import Linear
    m = Linear(6, 3)
    ref = torch.nn.Linear(6, 3).double()
    ref.load_state_dict(m.state_dict())
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(2))
    for _ in range(3):
        y = m(x)
        torch.testing.assert_close(y.double(), ref(x.double()), rtol=1e-5, atol=1e-5)
        x.mul_(-2).add_(1)
        with torch.no_grad():
            m.weight.add_(0.5)
            ref.weight.add_(0.5)
