"""``pydnnl.torch``: ``torch.nn`` modules that run on pydnnl primitives, with autograd.

Optional: needs PyTorch (``pip install "pydnnl[torch]"``); the core never imports it. Tensors
live where PyTorch keeps them; each call moves them to the module's pydnnl engine (no copy on a
CPU engine where the memory can be shared, one copy otherwise) and returns PyTorch tensors.
"""
from __future__ import annotations

try:
    import torch as _torch  # noqa: F401
except ImportError as e:  # pragma: no cover - exercised only without torch
    raise ImportError(
        "pydnnl.torch needs PyTorch: pip install \"pydnnl[torch]\"") from e

from ._bridge import default_engine, set_default_engine  # noqa: E402,F401
from .activation import (  # noqa: E402,F401
    ELU,
    GELU,
    Hardsigmoid,
    Hardswish,
    Hardtanh,
    LeakyReLU,
    LogSoftmax,
    Mish,
    ReLU,
    ReLU6,
    Sigmoid,
    SiLU,
    Softmax,
    Softplus,
    Tanh,
)
from .conv import Conv1d, Conv2d, Conv3d, ConvTranspose2d  # noqa: E402,F401
from .convert import convert  # noqa: E402,F401
from .linear import Linear  # noqa: E402,F401
from .norm import BatchNorm1d, BatchNorm2d, BatchNorm3d, LayerNorm  # noqa: E402,F401
from .pool import AvgPool2d, MaxPool2d  # noqa: E402,F401
from .rnn import GRU, LSTM, RNN  # noqa: E402,F401
