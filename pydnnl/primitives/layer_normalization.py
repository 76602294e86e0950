"""The layer_normalization primitives (in progress)."""
__all__: list[str] = []
