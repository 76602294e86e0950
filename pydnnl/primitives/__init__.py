"""Primitive descriptors and primitives."""
from .base import ArgSpec, primitive, primitive_desc_base
from .conv import (
                   ConvFindResult,
                   convolution_backward_data,
                   convolution_backward_weights,
                   convolution_forward,
                   deconvolution_backward_data,
                   deconvolution_backward_weights,
                   deconvolution_forward,
)
from .inner_product import (
                   inner_product_backward_data,
                   inner_product_backward_weights,
                   inner_product_forward,
)
from .matmul import matmul
from .reorder import reorder
from .rnn import (
                   augru_backward,
                   augru_forward,
                   gru_backward,
                   gru_forward,
                   lbr_augru_backward,
                   lbr_augru_forward,
                   lbr_gru_backward,
                   lbr_gru_forward,
                   lstm_backward,
                   lstm_forward,
                   vanilla_rnn_backward,
                   vanilla_rnn_forward,
)

__all__ = ["ArgSpec", "primitive", "primitive_desc_base", "reorder", "matmul",
           "inner_product_forward", "inner_product_backward_data",
           "inner_product_backward_weights",
           "vanilla_rnn_forward", "lstm_forward", "gru_forward", "lbr_gru_forward",
           "augru_forward", "lbr_augru_forward",
           "vanilla_rnn_backward", "lstm_backward", "gru_backward", "lbr_gru_backward",
           "augru_backward", "lbr_augru_backward", "convolution_forward",
           "convolution_backward_data", "convolution_backward_weights", "deconvolution_forward",
           "deconvolution_backward_data", "deconvolution_backward_weights", "ConvFindResult"]

# the primitive families beyond RNN and convolution: each module lists its public names
from . import (  # noqa: E402
    batch_normalization,
    binary,
    concat,
    eltwise,
    layer_normalization,
    optimizer,
    pooling,
    reduction,
    softmax,
)
from . import sum as _sum_module  # noqa: E402  (the module; the name `sum` is the primitive)

_FAMILIES = (eltwise, softmax, binary, _sum_module, concat, reduction, pooling,
             batch_normalization, layer_normalization, optimizer)
for _m in _FAMILIES:
    globals().update({_n: getattr(_m, _n) for _n in _m.__all__})
    __all__ += list(_m.__all__)
del _m

