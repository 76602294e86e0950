"""The binary primitives (in progress)."""
__all__: list[str] = []
