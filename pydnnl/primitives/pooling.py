"""The pooling primitives (in progress)."""
__all__: list[str] = []
