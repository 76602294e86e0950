"""ONNX backend: runs ONNX graphs on pydnnl primitives (``onnx`` is needed for this
subpackage only; ``import pydnnl`` never imports it).

    from pydnnl.onnx import PydnnlBackend
    rep = PydnnlBackend.prepare(model, device="CPU")   # primitives created here
    y, = rep.run([x])
"""
from __future__ import annotations

from .backend import (
    PydnnlBackend,
    PydnnlBackendRep,
    prepare,
    run_model,
    run_node,
    supports_device,
)
from .errors import onnx_invalid, onnx_unsupported

__all__ = ["PydnnlBackend", "PydnnlBackendRep", "prepare", "run_model", "run_node",
           "supports_device", "onnx_unsupported", "onnx_invalid"]
