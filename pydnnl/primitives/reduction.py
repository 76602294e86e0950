"""The reduction primitives (in progress)."""
__all__: list[str] = []
