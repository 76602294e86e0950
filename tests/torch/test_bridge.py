"""Tensors cross between PyTorch and pydnnl memories unchanged, shared on a CPU engine."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import pydnnl as dnnl  # noqa: E402
from pydnnl.torch import _bridge as B  # noqa: E402


@pytest.fixture(scope="module")
def eng():
    return dnnl.engine(dnnl.engine.kind.cpu, 0)


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
