"""Op mappings: one module per group of ONNX operators. Each handler ``f(b, node, attrs)``
reads the node's inputs through the :class:`~pydnnl.onnx.graph.Builder` ``b``, creates its
primitives and sets its outputs."""
from __future__ import annotations

from typing import Callable

HANDLERS: dict[str, Callable] = {}


def op(*op_types: str):
    """Register a handler for ``op_types``."""
    def deco(fn):
        for t in op_types:
            HANDLERS[t] = fn
        return fn
    return deco


def axis_of(b, axis: int, rank: int, what: str = "axis") -> int:
    """A possibly negative ONNX axis as a dim index, checked against ``rank``."""
    from ..errors import invalid

    if not -rank <= axis < max(rank, 1):
        raise invalid(b.node, f"{what} {axis} is out of range for a tensor of rank {rank}")
    return axis % rank if rank else 0


from . import elementwise, host, linalg, nn, reduce, rnn, shape  # noqa: E402,F401
