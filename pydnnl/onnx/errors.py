"""Errors of the ONNX backend: ``pydnnl.error`` subclasses whose messages name the node."""
from __future__ import annotations

from ..error import invalid_arguments, unimplemented


class onnx_unsupported(unimplemented):
    """An ONNX node, attribute or data type the backend cannot map onto pydnnl primitives."""


class onnx_invalid(invalid_arguments):
    """A malformed model or input: wrong input count, shape or type."""


def node_label(node) -> str:
    """``Conv node 'conv1'`` (the first output names a node without a name)."""
    name = node.name or (node.output[0] if len(node.output) else "?")
    return f"{node.op_type} node '{name}'"


def unsupported(node, why: str) -> onnx_unsupported:
    return onnx_unsupported(f"{node_label(node)}: {why}")


def invalid(node, why: str) -> onnx_invalid:
    return onnx_invalid(f"{node_label(node)}: {why}")
