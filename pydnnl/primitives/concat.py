"""The concat primitives (in progress)."""
__all__: list[str] = []
