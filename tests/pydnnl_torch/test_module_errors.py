"""Bad arguments to pydnnl.torch modules raise pydnnl errors naming the argument, the expected
and the actual value, before anything is computed or updated."""
import pytest

torch = pytest.importorskip("torch")

import pydnnl as dnnl  # noqa: E402
import pydnnl.torch as pt  # noqa: E402

INV, UNIMPL = dnnl.invalid_arguments, dnnl.unimplemented


CONSTRUCTORS = [
    (lambda e: pt.Conv2d(4, 6, 3, groups=4, engine=e), INV,
     r"out_channels=6 must both be divisible by groups=4"),
    (lambda e: pt.Conv2d(4, 6, 3, stride=2, padding="same", engine=e), INV,
     r"padding='same' needs stride 1.*stride=2"),
    (lambda e: pt.Conv2d(4, 6, 3, padding="full", engine=e), INV,
     r"padding: expected an int, a tuple, 'same' or 'valid', got 'full'"),
    (lambda e: pt.Conv1d(4, 6, 3, padding_mode="mirror", engine=e), INV,
     r"padding_mode: expected one of .*got 'mirror'"),
    (lambda e: pt.Conv3d(4, 6, (3, 3), engine=e), INV,
     r"kernel_size: expected an int or a tuple of 3 ints, got \(3, 3\)"),
    (lambda e: pt.Conv2d(4, 6, 3, stride=0, engine=e), INV,
     r"stride: expected values >= 1, got 0"),
    (lambda e: pt.ConvTranspose2d(4, 6, 3, stride=2, output_padding=2, engine=e), INV,
     r"output_padding: expected values smaller than the stride or the dilation.*"
     r"output_padding=2 with stride=2, dilation=1"),
    (lambda e: pt.ConvTranspose2d(4, 6, 3, padding_mode="reflect", engine=e), INV,
     r"padding_mode: expected 'zeros'.*got 'reflect'"),
    (lambda e: pt.MaxPool2d(2, return_indices=True, engine=e), UNIMPL,
     r"return_indices: expected False, got True"),
    (lambda e: pt.AvgPool2d(2, divisor_override=3, engine=e), UNIMPL,
     r"divisor_override: expected None, got 3"),
    (lambda e: pt.MaxPool2d(3, padding=2, engine=e), INV,
     r"padding: expected at most half the kernel size.*padding=2 for kernel_size=3"),
    (lambda e: pt.GELU(approximate="sigmoid", engine=e), INV,
     r"approximate: expected 'none' or 'tanh', got 'sigmoid'"),
    (lambda e: pt.Softplus(beta=0, engine=e), INV, r"beta: expected a finite non-zero"),
    (lambda e: pt.Hardtanh(1.0, -1.0, engine=e), INV,
     r"expected max_val > min_val, got min_val=1.0, max_val=-1.0"),
    (lambda e: pt.LayerNorm((4, 0), engine=e), INV,
     r"normalized_shape: expected a positive int.*got \(4, 0\)"),
    (lambda e: pt.Linear(3, 2, engine="tpu"), INV, r"engine: expected .*got 'tpu'"),
]


@pytest.mark.parametrize("make,kind,match", CONSTRUCTORS)
def test_bad_constructor_arguments(eng, make, kind, match):
    with pytest.raises(kind, match=match):
        make(eng)


CALLS = [
    (lambda e: pt.Linear(5, 3, engine=e), (2, 4), INV,
     r"Linear: input: expected the last dim to be in_features=5, got shape \(2, 4\)"),
    (lambda e: pt.Conv2d(3, 4, 3, engine=e), (1, 2, 5, 5), INV,
     r"Conv2d: input: expected 3 channels.*got shape \(1, 2, 5, 5\)"),
    (lambda e: pt.Conv2d(3, 4, 3, engine=e), (3, 5), INV,
     r"Conv2d: input: expected a tensor of 3 or 4 dims, got 2 \(shape \(3, 5\)\)"),
    (lambda e: pt.Conv2d(3, 4, 5, engine=e), (1, 3, 4, 6), INV,
     r"spatial dim 2 of size 4 .*smaller than the dilated kernel's extent 5"),
    (lambda e: pt.Conv2d(3, 4, 3, padding=4, padding_mode="reflect", engine=e), (1, 3, 4, 6),
     INV, r"padding_mode='reflect' needs padding < the input size.*size 4"),
    (lambda e: pt.BatchNorm2d(3, engine=e), (1, 3, 1, 1), INV,
     r"expected more than 1 value per channel.*got shape \(1, 3, 1, 1\)"),
    (lambda e: pt.BatchNorm2d(3, engine=e), (2, 3, 4), INV,
     r"BatchNorm2d: input: expected a tensor of 4 dims, got 3"),
    (lambda e: pt.BatchNorm2d(3, engine=e), (2, 4, 2, 2), INV,
     r"expected num_features=3 channels in dim 1, got shape \(2, 4, 2, 2\)"),
    (lambda e: pt.LayerNorm((3, 4), engine=e), (2, 4, 3), INV,
     r"expected trailing dims normalized_shape=\(3, 4\), got shape \(2, 4, 3\)"),
    (lambda e: pt.MaxPool2d(4, engine=e), (1, 1, 3, 3), INV,
     r"output size 0 of spatial dim 2 is not positive"),
    (lambda e: pt.Softmax(dim=3, engine=e), (2, 3), INV,
     r"Softmax: dim: expected an int in \[-2, 1\] for an input of 2 dims, got 3"),
]


@pytest.mark.parametrize("make,shape,kind,match", CALLS)
def test_bad_inputs(eng, make, shape, kind, match):
    m = make(eng)
    with pytest.raises(kind, match=match):
        m(torch.randn(shape))
    assert not m._pydnnl.prims  # refused before any primitive was made


def test_bad_output_size(eng):
    m = pt.ConvTranspose2d(2, 3, 3, stride=2, engine=eng)
    with pytest.raises(INV, match=r"output_size: dim 0 must be in \[9, 10\].*got 12"):
        m(torch.randn(1, 2, 4, 4), output_size=[12, 9])


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16])
def test_other_dtypes_are_unimplemented(eng, dtype):
    with pytest.raises(UNIMPL, match=rf"ReLU: input: expected dtype torch.float32, got {dtype}"):
        pt.ReLU(engine=eng)(torch.zeros(3, dtype=dtype))
    m = pt.Linear(3, 2, engine=eng).to(dtype)
    with pytest.raises(UNIMPL, match=rf"Linear: weight: expected dtype torch.float32, got "
                                     rf"{dtype}"):
        m(torch.zeros(2, 3))


def test_batch_norm_error_leaves_the_running_stats(eng):
    m = pt.BatchNorm2d(3, engine=eng)
    with pytest.raises(INV):
        m(torch.randn(1, 3, 1, 1))
    assert int(m.num_batches_tracked) == 0
    assert torch.equal(m.running_mean, torch.zeros(3))
    assert torch.equal(m.running_var, torch.ones(3))


def test_replaced_weight_of_wrong_shape(eng):
    m = pt.Conv2d(3, 4, 3, engine=eng)
    m.weight = torch.nn.Parameter(torch.zeros(4, 3, 2, 2))
    with pytest.raises(INV, match=r"Conv2d: weight: expected shape \(4, 3, 3, 3\), got "
                                  r"\(4, 3, 2, 2\)"):
        m(torch.randn(1, 3, 5, 5))
