"""Primitive descriptors and primitives."""
from .base import ArgSpec, primitive, primitive_desc_base
from .reorder import reorder

__all__ = ["ArgSpec", "primitive", "primitive_desc_base", "reorder"]
