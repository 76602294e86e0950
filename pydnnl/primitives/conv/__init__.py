"""Convolution and deconvolution primitives (forward, backward data, backward weights) and
their solvers."""
from .find import ConvFindResult
from .pd import (
                 convolution_backward_data,
                 convolution_backward_weights,
                 convolution_forward,
                 deconvolution_backward_data,
                 deconvolution_backward_weights,
                 deconvolution_forward,
)

__all__ = ["convolution_forward", "convolution_backward_data", "convolution_backward_weights",
           "deconvolution_forward", "deconvolution_backward_data",
           "deconvolution_backward_weights", "ConvFindResult"]
