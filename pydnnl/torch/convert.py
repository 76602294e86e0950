"""``convert(model)``: run a PyTorch model's supported layers on pydnnl, in place."""
from __future__ import annotations

import torch

from ..error import invalid_arguments
from . import _bridge as B
from ._function import PydnnlModule
from .activation import (
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
from .conv import Conv1d, Conv2d, Conv3d, ConvTranspose2d
from .linear import Linear
from .norm import BatchNorm1d, BatchNorm2d, BatchNorm3d, LayerNorm
from .pool import AvgPool2d, MaxPool2d
from .rnn import GRU, LSTM, RNN

_nn = torch.nn
# exact torch.nn classes only: a user's subclass may compute something else in forward
MODULES = {
    _nn.Linear: Linear, _nn.Conv1d: Conv1d, _nn.Conv2d: Conv2d, _nn.Conv3d: Conv3d,
    _nn.ConvTranspose2d: ConvTranspose2d, _nn.BatchNorm1d: BatchNorm1d,
    _nn.BatchNorm2d: BatchNorm2d, _nn.BatchNorm3d: BatchNorm3d, _nn.LayerNorm: LayerNorm,
    _nn.MaxPool2d: MaxPool2d, _nn.AvgPool2d: AvgPool2d, _nn.ReLU: ReLU,
    _nn.LeakyReLU: LeakyReLU, _nn.ELU: ELU, _nn.Tanh: Tanh, _nn.Sigmoid: Sigmoid,
    _nn.GELU: GELU, _nn.SiLU: SiLU, _nn.Mish: Mish, _nn.Hardswish: Hardswish,
    _nn.Hardsigmoid: Hardsigmoid, _nn.Softplus: Softplus, _nn.ReLU6: ReLU6,
    _nn.Hardtanh: Hardtanh, _nn.Softmax: Softmax, _nn.LogSoftmax: LogSoftmax,
}


# recurrent layers are modules of their own (not a class swap): convert replaces them in their
# parent, handing the new module the torch module's Parameter objects
RNN_MODULES = {_nn.LSTM: LSTM, _nn.GRU: GRU, _nn.RNN: RNN}


def _rnn_counterpart(m: torch.nn.Module, eng) -> torch.nn.Module:
    ours = RNN_MODULES[type(m)].from_torch(m, eng)
    for name, p in m.named_parameters(recurse=False):
        setattr(ours, name, p)  # the same tensors: optimizers made before keep working
    return ours


def _supported(m: torch.nn.Module) -> bool:
    """Whether pydnnl implements this instance's options (else it stays a torch module)."""
    if any(t.dtype != torch.float32 for t in m.parameters(recurse=False)):
        return False
    if isinstance(m, _nn.MaxPool2d) and m.return_indices:
        return False
    if isinstance(m, _nn.AvgPool2d) and m.divisor_override is not None:
        return False
    if isinstance(m, _nn.GELU) and m.approximate not in ("none", "tanh"):
        return False
    return True


def convert(model: torch.nn.Module, engine=None) -> torch.nn.Module:
    """Make every supported layer of ``model`` (itself included) its ``pydnnl.torch``
    counterpart, in place, and return ``model``.

    The modules keep their identity, parameters, buffers, hooks and training mode (only their
    class changes), so optimizers created before still hold the right parameters. Supported:
    the exact ``torch.nn`` classes of ``MODULES`` with float32 parameters, and ``LSTM``,
    ``GRU``, ``RNN`` (replaced in their parent by a ``pydnnl.torch`` module holding the same
    Parameter objects; ``model`` itself may not be one); instances with
    options pydnnl does not implement (``MaxPool2d(return_indices=True)``,
    ``AvgPool2d(divisor_override=...)``) and subclasses stay as they are. ``engine``: a
    pydnnl engine, ``"cpu"``/``"gpu"``, or None for the default engine; ``pydnnl.torch``
    modules already in ``model`` move to ``engine`` when it is given.
    """
    if not isinstance(model, torch.nn.Module):
        raise invalid_arguments(
            f"convert: model: expected a torch.nn.Module, got {type(model).__name__}")
    eng = B.resolve_engine(engine)
    if type(model) in RNN_MODULES:
        raise invalid_arguments(
            f"convert: model is a torch.nn.{type(model).__name__}, which cannot change class in "
            f"place; use pydnnl.torch.{type(model).__name__}.from_torch(model)")
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) in RNN_MODULES and _supported(child):
                setattr(parent, name, _rnn_counterpart(child, eng))
    for m in model.modules():
        ours = MODULES.get(type(m))
        if ours is not None and _supported(m):
            # our classes add no state to torch's but the engine and the primitive cache
            m.__class__ = ours
            m._pydnnl_init(eng)
        elif isinstance(m, PydnnlModule) and engine is not None:
            m.engine = eng
    return model
