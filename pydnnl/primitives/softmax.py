"""The softmax primitives (in progress)."""
__all__: list[str] = []
