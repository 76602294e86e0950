"""Primitives run one after the other as one unit, their arguments bound at each run: the
translation layers (MIOpen's and MXNet's RNN surfaces) express a peer's call as such a
sequence, so that all their compute goes through primitives. Built on the runtime's plan,
which binds each step once and takes one execution at a time."""
from __future__ import annotations

from ..runtime.plan import Bind, Plan

__all__ = ["Bind", "PrimitiveSequence"]


class PrimitiveSequence:
    """``add(prim, args)`` in order, then ``run(stream, bound)``: ``args`` values are
    memories or :class:`Bind` placeholders, which ``bound`` (key -> memory or buffer) fills
    at each run."""

    def __init__(self, engine, name: str = ""):
        self._plan = Plan(engine, name)

    def add(self, prim, args: dict) -> None:
        self._plan.primitive(prim, args)

    def run(self, stream, bound: dict) -> list:
        """Enqueue every primitive; returns the launches' events."""
        return self._plan.run(stream, bound)
